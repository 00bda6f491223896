"""Parse pip-freeze and hash-locked requirement files into exact pins.

One parser serves the host (freeze -> lock, lock --check, import) and the image (self-check:
"installed versus lock"), so both sides agree on what a pin is. It uses `packaging` only,
never regexes over requirement syntax, and refuses anything that is not an exact, reproducible pin.

Public API (stable; the self-check calls these):
    parse_pins(text, source) -> list[Pin]          every pin of a freeze or lock text
    read_pins(path) -> list[Pin]                    the same, from a file
    read_lock(path, environment=None) -> dict[str, str]
                                                    {normalized name: version} for the pins whose
                                                    marker holds (the running interpreter by default);
                                                    every entry must carry a --hash
    installed_versions() -> dict[str, str]          {normalized name: version} of this interpreter
    diff_installed(expected, installed=None) -> list[str]
                                                    one line per missing/extra/different distribution
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddtree.errors import UserError
from ddtree.fsutil import read_text

if TYPE_CHECKING:
    from packaging.requirements import Requirement

# packaging is imported where it is used: its markers, requirements, specifiers and utils (which pulls in
# tags, logging and platform) cost ~60 ms, and every `ddtree-build` start (--help, --version) imports this.

# pip's comment rule: '#' at the start of a line or after whitespace (a URL fragment is not a comment).
_COMMENT = re.compile(r"(^|\s+)#.*$")
_VCS_SCHEMES = ("git+", "hg+", "svn+", "bzr+")
_COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_HASH_ALGORITHMS = ("sha256", "sha384", "sha512")
_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class Pin:
    """One exact pin: `name[extras]==version ; marker` or `name @ vcs-url@commit`, plus its hashes."""

    name: str  # PEP 503 normalized
    version: str | None  # None only for a direct URL pinned by commit
    extras: tuple[str, ...] = ()
    marker: str | None = None
    url: str | None = None
    hashes: tuple[str, ...] = ()
    lineno: int = 0
    source: str = ""
    text: str = field(default="", compare=False)

    def requirement_line(self) -> str:
        """The pin as one requirement line without hashes (extras and marker kept)."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        core = f"{self.name}{extras} @ {self.url}" if self.url else f"{self.name}{extras}=={self.version}"
        return f"{core} ; {self.marker}" if self.marker else core

    def applies(self, environment: Mapping[str, str] | None = None) -> bool:
        """Whether the marker holds in `environment` (the running interpreter when None)."""
        if self.marker is None:
            return True
        from packaging.markers import Marker

        return Marker(self.marker).evaluate(dict(environment) if environment else None)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations, drop comments and blank lines; keep the first line number."""
    out: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        # A lock is ~4000 lines of hashes: the comment regex only where a comment can be.
        line = (_COMMENT.sub("", raw) if "#" in raw else raw).rstrip()
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        if buffer.strip():
            out.append((start, buffer.strip()))
        buffer = ""
    if buffer.strip():
        out.append((start, buffer.strip()))
    return out


def _split_hashes(where: str, line: str) -> tuple[str, tuple[str, ...]]:
    """Separate trailing `--hash=algo:hex` options from the requirement text."""
    words, hashes = line.split(), []
    keep: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--hash" and index + 1 < len(words):
            word, index = f"--hash={words[index + 1]}", index + 1
        if word.startswith("--hash="):
            value = word.split("=", 1)[1]
            algorithm, _, digest = value.partition(":")
            if algorithm not in _HASH_ALGORITHMS or not _HEX.fullmatch(digest):
                raise UserError(f"{where}: malformed hash {value!r}; expected sha256:<hex>")
            hashes.append(value)
        else:
            keep.append(word)
        index += 1
    return " ".join(keep), tuple(hashes)


# `name[extras] @ URL`: a direct reference; its URL is judged by _check_url, never called a path.
_DIRECT_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*@")


def _looks_like_path(text: str) -> bool:
    """A bare path or archive name given where a requirement belongs (`./x.whl`, `/tmp/x.tar.gz`)."""
    head = text.split(";", 1)[0].strip()
    if _DIRECT_REFERENCE.match(head):
        return False
    return (
        head.startswith((".", "/", "~", "file:"))
        or head.endswith((".whl", ".tar.gz", ".zip"))
        or ("/" in head and "://" not in head)
    )


def _check_url(where: str, line: str, url: str) -> None:
    if url.startswith("file:") or "://" not in url:
        raise UserError(
            f"{where}: local path {url!r} in {line!r}; install it from an index and pin ==VERSION"
        )
    if url.startswith(_VCS_SCHEMES):
        path = url.split("://", 1)[-1].split("#", 1)[0]
        tail = path.rsplit("/", 1)[-1]
        ref = tail.rsplit("@", 1)[1] if "@" in tail else ""
        if not _COMMIT.match(ref):
            raise UserError(
                f"{where}: VCS URL without a commit in {line!r}; append @<full 40-hex commit> to the URL"
            )
        return
    if "#sha256=" not in url:
        raise UserError(f"{where}: direct URL without a hash in {line!r}; pin ==VERSION from an index")


def _parse_line(where: str, line: str) -> tuple[Requirement, tuple[str, ...]]:
    if line.startswith(("-e ", "-e\t", "--editable")) or line == "-e":
        raise UserError(f"{where}: editable install {line!r}; install the released version and pin ==VERSION")
    body, hashes = _split_hashes(where, line)
    if body.startswith("-"):
        raise UserError(
            f"{where}: option line {line!r} is not a pin; remove it (indexes are set by the tool)"
        )
    if _looks_like_path(body):
        raise UserError(f"{where}: local path {body!r}; install it from an index and pin ==VERSION")
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(body)
    except InvalidRequirement as exc:
        detail = str(exc).splitlines()[0]
        raise UserError(
            f"{where}: malformed requirement {body!r} ({detail}); expected NAME==VERSION"
        ) from exc
    return requirement, hashes


def _exact_version(where: str, line: str, requirement: Requirement) -> str | None:
    if requirement.url:
        _check_url(where, line, requirement.url)
        return None
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
        raise UserError(f"{where}: unpinned requirement {line!r}; pin one exact version with ==VERSION")
    return specs[0].version


def parse_pins(text: str, source: str = "<text>") -> list[Pin]:
    """All pins of a freeze or lock text, names normalized; raises UserError on the first bad line."""
    from packaging.utils import canonicalize_name

    pins: list[Pin] = []
    seen: dict[tuple[str, str | None], Pin] = {}
    for lineno, line in _logical_lines(text):
        where = f"{source}:{lineno}"
        requirement, hashes = _parse_line(where, line)
        version = _exact_version(where, line, requirement)
        pin = Pin(
            name=canonicalize_name(requirement.name),
            version=version,
            extras=tuple(sorted(canonicalize_name(e) for e in requirement.extras)),
            marker=str(requirement.marker) if requirement.marker else None,
            url=requirement.url or None,
            hashes=hashes,
            lineno=lineno,
            source=source,
            text=line,
        )
        _check_duplicate(where, pin, pins)
        key = (pin.name, pin.marker)
        if key in seen:  # the same pin twice: keep one, merge its hashes
            first = seen[key]
            merged = Pin(**{**first.__dict__, "hashes": tuple(dict.fromkeys(first.hashes + pin.hashes))})
            pins[pins.index(first)] = merged
            seen[key] = merged
            continue
        seen[key] = pin
        pins.append(pin)
    return pins


def _check_duplicate(where: str, pin: Pin, pins: list[Pin]) -> None:
    """Two pins of one name must agree, unless both carry different markers (e.g. per Python version)."""
    for other in pins:
        if other.name != pin.name:
            continue
        same = (other.version, other.url) == (pin.version, pin.url)
        split_by_marker = other.marker and pin.marker and other.marker != pin.marker
        if not same and not split_by_marker:
            raise UserError(
                f"{where}: duplicate {pin.name!r} with a different version: {pin.text!r} versus "
                f"{other.text!r} (line {other.lineno}); keep one version"
            )


def read_pins(path: Path) -> list[Pin]:
    """Pins of a file; a missing file is a UserError naming it."""
    path = Path(path)
    return parse_pins(read_text(path), str(path))


def read_lock(path: Path, environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """{name: version} of a hash-locked file for the pins whose marker holds; unhashed entries are errors."""
    result: dict[str, str] = {}
    for pin in read_pins(path):
        if not pin.hashes:
            raise UserError(
                f"{pin.source}:{pin.lineno}: {pin.name} has no --hash; re-run `ddtree-build lock`"
            )
        if pin.applies(environment):
            result[pin.name] = pin.version or pin.url or ""
    return result


def installed_versions() -> dict[str, str]:
    """{normalized name: version} of the distributions the running interpreter sees."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def _same_version(pinned: str, installed: str) -> bool:
    """PEP 440 `==pinned`: 0.5.13-post1 equals 0.5.13.post1, and a local tag (2.11.0+cu130) matches 2.11.0."""
    from packaging.specifiers import InvalidSpecifier, Specifier
    from packaging.version import InvalidVersion

    try:
        return Specifier(f"=={pinned}").contains(installed, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return pinned == installed


def diff_installed(expected: Mapping[str, str], installed: Mapping[str, str] | None = None) -> list[str]:
    """Lines describing each distribution that is missing or at another version (extras are not errors)."""
    have = installed_versions() if installed is None else dict(installed)
    problems = []
    for name, version in sorted(expected.items()):
        if name not in have:
            problems.append(f"{name}: missing (lock pins {version})")
        elif not _same_version(version, have[name]):
            problems.append(f"{name}: installed {have[name]}, lock pins {version}")
    return problems
