"""`ddtree bench compare`: speedups per cell between two runs, and a verdict against env/reference.

Reference figures (env/reference/results.yaml, read by ddtree.receipts.reference) name an algorithm, a
concurrency and a context; they are mapped onto a run's cells like this:
- algorithm `none` applies to baseline runs, `DDTREE` to DDTree runs (the run's mode comes from the
  server's speculative settings, or from `ddtree bench --label`);
- context `short` or null -> the run's smallest context; an integer -> that context;
- concurrency null -> the run's highest concurrency; an integer -> that concurrency.
A figure passes when the measured value lies in [min * (1 - tol), max * (1 + tol)].
When a baseline and a DDTree run are compared, the reference's speedup (DDTree range over baseline
range at the same cell) is checked too: it transfers across GPUs better than absolute tok/s.
With --relative only GPU-independent checks count (acceptance length, speedups), for other hardware.
Verdict: PASS (every check passed), FAIL (one failed; exit 3), INCOMPLETE (a figure had no
measurement; exit 4).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ddtree.bench.report import accept_value, cell_median
from ddtree.errors import UserError
from ddtree.jsontext import load_file
from ddtree.receipts.reference import Range, Reference, default_reference_path, load_reference

EXIT_FAIL = 3
EXIT_INCOMPLETE = 4
FIGURE_TO_METRIC = {
    "output_tokens_per_s": "per_request_tok_s",
    "aggregate_output_tokens_per_s": "aggregate_tok_s",
    "acceptance_length": "accept_length",
}
ALGORITHM_TO_MODE = {"none": "baseline", "baseline": "baseline", "ddtree": "ddtree", "dflash": "dflash"}
METRICS = ("per_request_tok_s", "aggregate_tok_s", "ttft_s", "accept_length")


@dataclass
class Run:
    """A sweep's results.json, indexed by (context, concurrency)."""

    path: Path
    label: str
    mode: str
    cells: dict[tuple[int, int], dict[str, Any]]

    def value(self, cell: tuple[int, int], metric: str) -> float | None:
        data = self.cells.get(cell) or {}
        return accept_value(data) if metric == "accept_length" else cell_median(data, metric)

    @property
    def contexts(self) -> list[int]:
        return sorted({c for c, _ in self.cells})

    @property
    def concurrencies(self) -> list[int]:
        return sorted({k for _, k in self.cells})


def load_json(path: Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        for name in ("results.json", "humaneval.json"):
            if (path / name).is_file():
                path = path / name
                break
    data = load_file(
        path,
        "give a results.json written by `ddtree bench`",
        "not found; give a results.json written by `ddtree bench`",
    )
    data = _unwrap_receipt(data, path)
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("ddtree-bench/"):
        raise UserError(f"{path}: not a `ddtree bench` result (no schema ddtree-bench/1)")
    data["_path"] = str(path)
    return data


def _unwrap_receipt(data: Any, path: Path) -> Any:
    """A bench receipt's results, once its digest proves it unedited (the image is `receipt verify`'s job)."""
    from ddtree.receipts import receipt

    if not receipt.is_receipt(data):
        return data
    edited = [p for p in receipt.problems(data) if p.startswith("edited")]
    if edited:
        raise UserError(f"{path}: receipt {edited[0]}; measure again rather than edit a receipt")
    if data.get("kind") != "bench" or not isinstance(data.get("results"), dict):
        raise UserError(f"{path}: a {data.get('kind')} receipt; compare takes `ddtree bench` receipts")
    return data["results"]


def run_from(data: dict[str, Any], mode: str | None = None) -> Run:
    if data.get("kind") != "sweep":
        raise UserError(f"{data['_path']}: a {data.get('kind')} result, not a sweep")
    cells = {(int(c["context"]), int(c["concurrency"])): c for c in data.get("cells", [])}
    detected = (data.get("server") or {}).get("mode") or "unknown"
    label = str(data.get("label") or detected)
    return Run(Path(data["_path"]), label, mode or _mode_of_label(label, detected), cells)


def _mode_of_label(label: str, detected: str) -> str:
    lowered = label.lower()
    for key in ("ddtree", "baseline", "dflash"):
        if key in lowered:
            return key
    return detected


@dataclass
class Check:
    """One reference figure checked on one cell."""

    name: str
    metric: str
    cell: tuple[int, int] | None
    expected: tuple[float, float]
    allowed: tuple[float, float]
    measured: float | None
    status: str  # pass | fail | missing


def resolve_cell(
    run: Run, context: Any, concurrency: Any, reference: Reference | None = None
) -> tuple[int, int] | None:
    """The cell a reference figure talks about, or None when the run did not measure it."""
    if not run.cells:
        return None
    if context in (None, "short"):
        axis = (
            reference.sweep_context_tokens if reference and reference.sweep_context_tokens else run.contexts
        )
        ctx = min(axis)
    elif isinstance(context, int):
        ctx = context
    else:
        return None
    if concurrency is None:
        axis = reference.sweep_concurrency if reference and reference.sweep_concurrency else run.concurrencies
        conc = max(axis)
    else:
        conc = int(concurrency)
    return (ctx, conc) if (ctx, conc) in run.cells else None


def _check(name: str, metric: str, cell, expected: Range, measured: float | None, tolerance: float) -> Check:
    allowed = (expected.min * (1 - tolerance), expected.max * (1 + tolerance))
    inside = measured is not None and allowed[0] <= measured <= allowed[1]
    status = "missing" if measured is None else ("pass" if inside else "fail")
    return Check(name, metric, cell, (expected.min, expected.max), allowed, measured, status)


def check_against_reference(
    run: Run, reference: Reference, tolerance: float, relative: bool = False
) -> list[Check]:
    """Every reference figure whose algorithm matches the run's mode, on its resolved cell.

    relative=True keeps only what does not depend on the GPU (acceptance length): for runs on other
    hardware, where the speedup checks carry the verdict."""
    checks = []
    for result in reference.results.values():
        if ALGORITHM_TO_MODE.get(result.algorithm.lower(), result.algorithm.lower()) != run.mode:
            continue
        cell = resolve_cell(run, result.context, result.concurrency, reference)
        for figure, expected in result.figures.items():
            metric = FIGURE_TO_METRIC.get(figure)
            if metric is None or (relative and metric != "accept_length"):
                continue
            measured = run.value(cell, metric) if cell else None
            checks.append(_check(f"{run.label}: {result.id}", metric, cell, expected, measured, tolerance))
    return checks


def check_speedup(baseline: Run, ddtree: Run, reference: Reference, tolerance: float) -> list[Check]:
    """Reference speedup (DDTree tok/s range / baseline tok/s range) at the cells both name alike."""
    checks = []
    base = [r for r in reference.results.values() if r.algorithm.lower() == "none"]
    tree = [r for r in reference.results.values() if r.algorithm.lower() == "ddtree"]
    for b in base:
        for t in tree:
            if (b.context, b.concurrency) != (t.context, t.concurrency):
                continue
            for figure in ("output_tokens_per_s", "aggregate_output_tokens_per_s"):
                if figure not in b.figures or figure not in t.figures:
                    continue
                expected = Range(
                    t.figures[figure].min / b.figures[figure].max,
                    t.figures[figure].max / b.figures[figure].min,
                )
                metric = FIGURE_TO_METRIC[figure]
                cell_b = resolve_cell(baseline, b.context, b.concurrency, reference)
                cell_t = resolve_cell(ddtree, t.context, t.concurrency, reference)
                measured = None
                if cell_b and cell_t and cell_b == cell_t:
                    vb, vt = baseline.value(cell_b, metric), ddtree.value(cell_t, metric)
                    measured = vt / vb if vb and vt is not None else None
                name = f"speedup {t.id} / {b.id}"
                checks.append(_check(name, f"speedup {metric}", cell_t, expected, measured, tolerance))
    return checks


def speedup_rows(a: Run, b: Run) -> list[dict[str, Any]]:
    """Per common cell: both values and B's speedup over A (TTFT: A / B, so > 1 is better for B too)."""
    rows = []
    for cell in sorted(set(a.cells) & set(b.cells)):
        row: dict[str, Any] = {"context": cell[0], "concurrency": cell[1]}
        for metric in METRICS:
            va, vb = a.value(cell, metric), b.value(cell, metric)
            row[metric] = {"a": va, "b": vb}
            if metric != "accept_length" and va and vb:
                row[metric]["speedup"] = va / vb if metric == "ttft_s" else vb / va
        rows.append(row)
    return rows


def verdict(checks: list[Check]) -> str:
    if any(c.status == "fail" for c in checks):
        return "FAIL"
    if not checks or any(c.status == "missing" for c in checks):
        return "INCOMPLETE"
    return "PASS"


def compare_humaneval(a: dict[str, Any], b: dict[str, Any], max_drop: float) -> dict[str, Any]:
    """Greedy speculative decoding is lossless: pass@1 should not move by more than `max_drop`."""
    pa, pb = a.get("pass@1"), b.get("pass@1")
    status = "missing" if pa is None or pb is None else ("pass" if pb >= pa - max_drop else "fail")
    return {
        "pass@1": {"a": pa, "b": pb, "delta": (pb - pa) if status != "missing" else None},
        "allowed_drop": max_drop,
        "status": status,
        "verdict": {"pass": "PASS", "fail": "FAIL"}.get(status, "INCOMPLETE"),
    }


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(
    a: Run | None, b: Run | None, rows: list[dict[str, Any]], checks: list[Check], tolerance: float
) -> str:
    out = []
    if a and b:
        out += [
            f"## {b.label} vs {a.label}",
            "",
            f"A = {a.path} ({a.mode}), B = {b.path} ({b.mode}); medians; speedup = B / A (TTFT: A / B)",
            "",
            "| context | conc | tok/s A | tok/s B | speedup | aggregate A | aggregate B | speedup "
            "| TTFT ms A | TTFT ms B | accept A | accept B |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            per, agg, ttft, acc = (row[m] for m in METRICS)
            out.append(
                f"| {row['context']} | {row['concurrency']} | {_fmt(per['a'])} | {_fmt(per['b'])} | "
                f"{_fmt(per.get('speedup'), 2)}x | {_fmt(agg['a'])} | {_fmt(agg['b'])} | "
                f"{_fmt(agg.get('speedup'), 2)}x | {_fmt(ttft['a'] and ttft['a'] * 1000)} | "
                f"{_fmt(ttft['b'] and ttft['b'] * 1000)} | {_fmt(acc['a'], 2)} | {_fmt(acc['b'], 2)} |"
            )
        out.append("")
    if checks:
        out += [
            f"## Against the reference (tolerance {tolerance:.0%})",
            "",
            "| check | metric | cell (ctx, conc) | reference | allowed | measured | status |",
            "|---|---|---|---|---|---:|---|",
        ]
        for c in checks:
            cell = f"{c.cell[0]}, {c.cell[1]}" if c.cell else "-"
            ref = (
                f"{c.expected[0]:g}"
                if c.expected[0] == c.expected[1]
                else f"{c.expected[0]:g}-{c.expected[1]:g}"
            )
            allowed = f"{c.allowed[0]:.3g}-{c.allowed[1]:.3g}"
            out.append(
                f"| {c.name} | {c.metric} | {cell} | {ref} | {allowed} | {_fmt(c.measured, 2)} | "
                f"{c.status.upper()} |"
            )
        out.append("")
    out.append(f"Verdict: {verdict(checks) if checks else 'no reference checks'}")
    return "\n".join(out) + "\n"


def compare(
    paths: list[Path],
    reference_path: Path | None,
    tolerance: float,
    use_reference: bool = True,
    modes: tuple[str | None, str | None] = (None, None),
    humaneval_drop: float = 0.02,
    relative: bool = False,
) -> tuple[str, dict[str, Any], int]:
    """Everything `ddtree bench compare` prints and writes: (markdown, JSON document, exit code)."""
    if not 1 <= len(paths) <= 2:
        raise UserError(
            "compare takes one or two results (A.json [B.json]); a .yaml second path is a reference"
        )
    if len(paths) == 2 and str(paths[1]).endswith((".yaml", ".yml")):
        reference_path, paths = paths[1], paths[:1]
    docs = [load_json(p) for p in paths]
    if all(d.get("kind") == "humaneval" for d in docs) and len(docs) == 2:
        result = compare_humaneval(docs[0], docs[1], humaneval_drop)
        text = (
            f"pass@1: A {_fmt(result['pass@1']['a'], 3)}, B {_fmt(result['pass@1']['b'], 3)} "
            f"(allowed drop {humaneval_drop})\nVerdict: {result['verdict']}\n"
        )
        return text, {"kind": "humaneval-compare", **result}, _exit(result["verdict"])
    runs = [run_from(d, modes[i]) for i, d in enumerate(docs)]
    reference = None
    if use_reference:
        reference_path = reference_path or default_reference_path()
        if not Path(reference_path).is_file():
            raise UserError(f"{reference_path}: not found; pass --reference FILE or --no-reference")
        reference = load_reference(reference_path)
    checks: list[Check] = []
    if reference:
        for run in runs:
            checks += check_against_reference(run, reference, tolerance, relative)
        by_mode = {r.mode: r for r in runs}
        if "baseline" in by_mode and "ddtree" in by_mode:
            checks += check_speedup(by_mode["baseline"], by_mode["ddtree"], reference, tolerance)
    a, b = runs[0], (runs[1] if len(runs) == 2 else None)
    rows = speedup_rows(a, b) if a and b else []
    text = markdown(a, b, rows, checks, tolerance)
    for run in runs:
        if reference and run.mode not in ("baseline", "ddtree"):
            text += (
                f"Note: {run.path} is mode {run.mode!r}, which no reference figure names; "
                "pass --mode-a/--mode-b baseline|ddtree if the server hid its settings\n"
            )
    if b is None:
        text = f"Run {a.path} ({a.mode})\n\n" + text
    final = verdict(checks) if reference else "NONE"
    document = {
        "kind": "compare",
        "a": str(a.path),
        "b": str(b.path) if b else None,
        "reference": str(reference.path) if reference else None,
        "tolerance": tolerance,
        "relative": relative,
        "rows": rows,
        "checks": [asdict(c) for c in checks],
        "verdict": final,
    }
    return text, document, _exit(final)


def _exit(final: str) -> int:
    return {"FAIL": EXIT_FAIL, "INCOMPLETE": EXIT_INCOMPLETE}.get(final, 0)
