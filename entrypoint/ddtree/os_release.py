"""/etc/os-release read one way: `KEY=value` lines into a dict (quotes dropped), for the self-check,
the host capture and the import of a reproduction package's env/os-release.txt."""

from __future__ import annotations

from pathlib import Path

OS_RELEASE = Path("/etc/os-release")


def parse_os_release(text: str) -> dict[str, str]:
    """{KEY: value} of os-release text; lines without '=' are ignored, surrounding quotes dropped."""
    facts: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            facts[key.strip()] = value.strip().strip('"')
    return facts


def read_os_release(path: Path = OS_RELEASE) -> dict[str, str]:
    """The facts of `path`; an absent or unreadable file gives none (the caller says "unknown")."""
    try:
        return parse_os_release(path.read_text(encoding="utf-8"))
    except OSError:
        return {}
