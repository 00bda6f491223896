"""The GPUs in a captured nvidia-smi output, whatever form the person who captured it chose.

A reproduction package's env/nvidia-smi.txt is written by `ddtree-build capture` (a `query:` line, then
`--format=csv,noheader` rows) or by hand, and by hand it is any of nvidia-smi's common forms:

    the default table      `| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0 |`,
                           then one `|   0  NVIDIA RTX PRO 6000 Blac...   On  | ...` row per GPU
    -L                     `GPU 0: NVIDIA B300 (UUID: GPU-...)`
    -q                     `Driver Version : 580.95.05`, `Product Name : ...`, `Compute Capability`?
    --format=csv           a header row (`index, name, driver_version, compute_cap [units]`), with or
                           without the index column; or noheader rows after capture's `query:` line;
                           or bare noheader rows, read by what each cell looks like

Each form gives what it holds (model, count, driver, compute capability); what it lacks is None.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

DRIVER = re.compile(r"^\d{3,}\.\d+(\.\d+)?$")
CAPABILITY = re.compile(r"^\d{1,2}\.\d$")
TABLE_DRIVER = re.compile(r"Driver Version:\s*([\d.]+)")
TABLE_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|")
LIST_ROW = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?\s*$")
QUERY_FIELD = re.compile(
    r"^\s*(Product Name|Driver Version|Compute Capability|Attached GPUs)\s*:\s*(.+?)\s*$"
)


@dataclass(frozen=True)
class SmiFacts:
    """What the capture says about the GPUs; None where its form does not say."""

    model: str | None = None
    count: int = 0
    driver: str | None = None
    compute_capability: str | None = None


def parse(text: str) -> SmiFacts:
    """The facts of a capture in any of the forms in the module docstring (empty facts when none fits)."""
    for reader in (_from_table, _from_list, _from_query, _from_csv):
        facts = reader(text)
        if facts is not None and facts.count:
            return facts
    return SmiFacts()


def _from_table(text: str) -> SmiFacts | None:
    driver = TABLE_DRIVER.search(text)
    rows = [m.group(2).strip() for line in text.splitlines() if (m := TABLE_ROW.match(line))]
    if not driver or not rows:
        return None
    return SmiFacts(model=rows[0], count=len(rows), driver=driver.group(1))


def _from_list(text: str) -> SmiFacts | None:
    rows = [m.group(2) for line in text.splitlines() if (m := LIST_ROW.match(line.strip()))]
    return SmiFacts(model=rows[0], count=len(rows)) if rows else None


def _from_query(text: str) -> SmiFacts | None:
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        if match := QUERY_FIELD.match(line):
            values.setdefault(match.group(1), []).append(match.group(2))
    names = values.get("Product Name") or []
    if not names:
        return None
    attached = (values.get("Attached GPUs") or [""])[0]
    capability = (values.get("Compute Capability") or [None])[0]
    return SmiFacts(
        model=names[0],
        count=int(attached) if attached.isdigit() else len(names),
        driver=(values.get("Driver Version") or [None])[0],
        compute_capability=capability if capability and CAPABILITY.match(capability) else None,
    )


def _column(header: str) -> str:
    """`memory.total [MiB]` -> `memory.total`; `compute_cap` stays."""
    return header.split("[")[0].strip().lower()


def _from_csv(text: str) -> SmiFacts | None:
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    header: list[str] | None = None
    if lines and lines[0].startswith("query:"):
        header = [_column(c) for c in lines.pop(0).removeprefix("query:").split(",")]
    elif lines and "name" in [_column(c) for c in lines[0].split(",")]:
        header = [_column(c) for c in lines.pop(0).split(",")]
    rows = [[cell.strip() for cell in row] for row in csv.reader(lines) if len(row) > 1]
    if header:
        rows = [row for row in rows if len(row) == len(header)]
        named = [dict(zip(header, row, strict=True)) for row in rows]
        if not named:
            return None
        first = named[0]
        capability = first.get("compute_cap")
        return SmiFacts(
            model=first.get("name"),
            count=len(named),
            driver=first.get("driver_version"),
            compute_capability=capability if capability and CAPABILITY.match(capability) else None,
        )
    gpu_rows = [row for row in rows if any(DRIVER.match(c) for c in row) or any(_is_name(c) for c in row)]
    if not gpu_rows:
        return None
    first = gpu_rows[0]
    return SmiFacts(
        model=next((c for c in first if _is_name(c)), None),
        count=len(gpu_rows),
        driver=next((c for c in first if DRIVER.match(c)), None),
        compute_capability=next((c for c in first if CAPABILITY.match(c)), None),
    )


def _is_name(cell: str) -> bool:
    """A GPU model name: words with letters, not a bus id, a size or a flag."""
    return bool(re.search(r"[A-Za-z]{2,}", cell)) and " " in cell and "MiB" not in cell
