"""env/freeze.txt: the reference environment in pip-freeze form, and `ddtree-build freeze` that resolves it.

The freeze is the truth the locks are made from. It comes from one of three places, recorded in its
header as `# source:` -- `resolved` (this command, from the top-level pins in env/freeze.in with a real
resolver as of a date), `captured` (`ddtree-build capture` on the original host) or `imported`
(`ddtree-build import` of a hand-made reproduction package). It is never edited by hand.

Header lines are `# key: value` comments above the first pin; read_header() returns them.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, read_text
from ddtree.lockfile import Pin, parse_pins

from ddtree_build import paths, resolver

FREEZE_NAME = "freeze.txt"
FREEZE_IN_NAME = "freeze.in"
_HEADER = re.compile(r"^#\s*([a-z][a-z0-9-]*):\s*(.*?)\s*$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Freeze:
    """Parsed freeze: its pins (in file order) and its header."""

    path: Path
    pins: list[Pin]
    header: dict[str, str]

    def versions(self) -> dict[str, str]:
        return {pin.name: pin.version or pin.url or "" for pin in self.pins}


def read_header(text: str) -> dict[str, str]:
    """`# key: value` lines before the first non-comment line (continuations of a key are joined)."""
    header: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith("#"):
            break
        match = _HEADER.match(line)
        if match:
            last = match.group(1)
            header[last] = match.group(2)
        elif last and line.startswith("#   "):
            header[last] += " " + line[1:].strip()
    return header


def read_freeze(path: Path | None = None) -> Freeze:
    """Parse a freeze file with the strict pin rules of ddtree.lockfile."""
    path = Path(path or paths.ENV_DIR / FREEZE_NAME)
    text = read_text(path, "not found; run `ddtree-build freeze` or `ddtree-build import`")
    pins = parse_pins(text, str(path))
    if not pins:
        raise UserError(f"{path}: no pins; a freeze lists one NAME==VERSION a line")
    return Freeze(path=path, pins=pins, header=read_header(text))


def render_freeze(pins: list[Pin], header: dict[str, str], title: str) -> str:
    """A freeze text: a title comment, `# key: value` header lines, then one pin a line sorted by name."""
    lines = [f"# {title}"]
    lines += [f"# {key}: {value}" for key, value in header.items()]
    lines += [pin.requirement_line() for pin in sorted(pins, key=lambda p: (p.name, p.marker or ""))]
    return "\n".join(lines) + "\n"


def resolve_freeze(freeze_in: Path) -> str:
    """Resolve env/freeze.in's top-level pins with uv as of its `exclude-newer` date; return the text."""
    source = Path(freeze_in)
    text = source.read_text(encoding="utf-8") if source.is_file() else None
    if text is None:
        raise UserError(f"{source}: not found; it lists the top-level pins to resolve")
    header = read_header(text)
    for key in ("python", "platform", "exclude-newer", "why-this-date"):
        if not header.get(key):
            raise UserError(f"{source}: header line '# {key}: ...' is missing; add it above the pins")
    if not _DATE.match(header["exclude-newer"]):
        raise UserError(f"{source}: exclude-newer {header['exclude-newer']!r} is not a date; use YYYY-MM-DD")
    top = parse_pins(text, str(source))
    resolved, argv = resolver.compile_requirements(
        "\n".join(pin.requirement_line() for pin in top) + "\n",
        python=header["python"],
        platform=header["platform"],
        exclude_newer=header["exclude-newer"],
    )
    pins = parse_pins(resolved, "uv output")
    out_header = {
        "source": "resolved (no capture from the original host yet; `ddtree-build capture` replaces it)",
        "python": header["python"],
        "platform": header["platform"],
        "exclude-newer": header["exclude-newer"],
        "why-this-date": header["why-this-date"],
        "resolved-from": f"{source.name}: " + " ".join(pin.requirement_line() for pin in top),
        "resolved-by": f"ddtree-build freeze with {resolver.uv_version()}: {' '.join(argv)}",
        "distributions": str(len(pins)),
    }
    return render_freeze(pins, out_header, "Reference environment (pip-freeze form). Written by a tool.")


def _cmd_freeze(args: argparse.Namespace) -> int:
    text = resolve_freeze(Path(args.source))
    atomic_write(Path(args.out), text, mode=0o644)
    count = read_header(text).get("distributions")
    print(f"wrote {args.out}: {count} distributions")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "freeze", help="resolve env/freeze.in's top-level pins into env/freeze.txt (uv, as of a date)"
    )
    parser.add_argument("--from", dest="source", default=str(paths.ENV_DIR / FREEZE_IN_NAME))
    parser.add_argument("--out", default=str(paths.ENV_DIR / FREEZE_NAME))
    parser.set_defaults(func=_cmd_freeze)
