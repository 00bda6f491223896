"""Unified diffs: parse, apply strictly (exact context, no fuzz, no offset) and write.

Why our own code: the image must not depend on `git` or GNU `patch`, and neither tool can be told to refuse
an offset outright (git silently applies at an offset; GNU patch only prints a message). Here a hunk applies
at the line its header names, with every context line equal, or not at all. When it does not apply, the
error says what would have been needed (an offset, fuzz, or the hunk is already applied) so the maintainer
knows whether the diff is stale or the file is not the expected one.

Content is handled as bytes split after each b"\\n", so line endings and a missing final newline survive.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ddtree.errors import UserError

DEV_NULL = "/dev/null"
_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = b"\\ No newline at end of file"
_UNSUPPORTED_GIT_HEADERS = (
    b"deleted file mode",
    b"rename from",
    b"rename to",
    b"copy from",
    b"copy to",
    b"similarity index",
    b"dissimilarity index",
    b"GIT binary patch",
    b"Binary files ",
)


@dataclass
class Hunk:
    """One `@@` block. `lines` holds (tag, content) with tag in b" ", b"-", b"+"; content keeps its b"\\n"."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    header_line: int  # 1-based line of the `@@` header inside the diff file, for messages
    lines: list[tuple[bytes, bytes]] = field(default_factory=list)

    def old_lines(self) -> list[bytes]:
        return [text for tag, text in self.lines if tag in (b" ", b"-")]

    def new_lines(self) -> list[bytes]:
        return [text for tag, text in self.lines if tag in (b" ", b"+")]


@dataclass
class FilePatch:
    """All hunks for one file. `path` is relative to the tree root (the a/ or b/ prefix removed)."""

    path: str
    is_new: bool
    hunks: list[Hunk] = field(default_factory=list)


class DiffError(UserError):
    """A diff file that cannot be read as a unified diff."""


class HunkError(UserError):
    """A hunk that does not apply exactly. `kind` is one of: offset, fuzz, applied, mismatch, missing."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def split_lines(data: bytes) -> list[bytes]:
    """Split after every b"\\n"; the last element lacks it when the data does not end with a newline."""
    if not data:
        return []
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _strip_prefix(raw: str, prefix: str, where: str) -> str:
    name = raw.split("\t", 1)[0].strip()
    if name == DEV_NULL:
        return DEV_NULL
    if not name.startswith(prefix):
        raise DiffError(
            f"{where}: path {name!r} must start with {prefix!r} (write diffs with a/ and b/ prefixes)"
        )
    path = name[len(prefix) :]
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts:
        raise DiffError(f"{where}: path {name!r} must be relative to the tree and stay inside it")
    return path


def parse(data: bytes, origin: str) -> list[FilePatch]:
    """Parse a unified diff. `origin` names the diff file in messages. Text outside file sections is ignored,
    but a stray +/-/space line right after a complete hunk means the counts are wrong: that is corruption."""
    lines = split_lines(data)
    patches: list[FilePatch] = []
    current: FilePatch | None = None
    i = 0
    n = len(lines)
    just_closed_hunk = False
    while i < n:
        raw = lines[i]
        line = raw.rstrip(b"\n")
        where = f"{origin} line {i + 1}"
        if line.startswith(b"--- "):
            if i + 1 >= n or not lines[i + 1].startswith(b"+++ "):
                raise DiffError(f"corrupted diff: {where}: '---' header without a '+++' line after it")
            old = _strip_prefix(line[4:].decode("utf-8", "surrogateescape"), "a/", where)
            new_raw = lines[i + 1].rstrip(b"\n")[4:].decode("utf-8", "surrogateescape")
            new = _strip_prefix(new_raw, "b/", f"{origin} line {i + 2}")
            if new == DEV_NULL:
                raise DiffError(f"{where}: deleting {old} is not supported by the series format")
            if old not in (DEV_NULL, new):
                raise DiffError(f"{where}: renames ({old} -> {new}) are not supported; diff the new path")
            if any(p.path == new for p in patches):
                raise DiffError(f"corrupted diff: {where}: {new} appears twice in one diff")
            current = FilePatch(path=new, is_new=old == DEV_NULL)
            patches.append(current)
            i += 2
            just_closed_hunk = False
            continue
        if line.startswith(b"@@"):
            if current is None:
                raise DiffError(f"corrupted diff: {where}: hunk before any '---'/'+++' file header")
            hunk, i = _parse_hunk(lines, i, origin)
            if current.hunks and hunk.old_start <= current.hunks[-1].old_start:
                raise DiffError(f"corrupted diff: {where}: hunks of {current.path} are out of order")
            current.hunks.append(hunk)
            just_closed_hunk = True
            continue
        if line.startswith(_UNSUPPORTED_GIT_HEADERS):
            raise DiffError(f"{where}: {line.decode(errors='replace')!r} is not supported (text diffs only)")
        if just_closed_hunk and line[:1] in (b" ", b"+", b"-"):
            raise DiffError(
                f"corrupted diff: {where}: line after the hunk ending there; the hunk's line counts do not "
                "match its body (diff edited by hand? regenerate it with `ddtree-build patches refresh`)"
            )
        just_closed_hunk = False
        i += 1
    if not patches:
        raise DiffError(f"corrupted diff: {origin}: no '---'/'+++' file section found")
    for patch in patches:
        if not patch.hunks:
            raise DiffError(f"corrupted diff: {origin}: {patch.path} has a header but no hunk")
        if patch.is_new and (len(patch.hunks) != 1 or patch.hunks[0].old_len != 0):
            raise DiffError(f"corrupted diff: {origin}: new file {patch.path} must be one hunk from -0,0")
    return patches


def _parse_hunk(lines: list[bytes], i: int, origin: str) -> tuple[Hunk, int]:
    header = lines[i].rstrip(b"\n")
    match = _HUNK_RE.match(header)
    if not match:
        raise DiffError(f"corrupted diff: {origin} line {i + 1}: bad hunk header {header[:60]!r}")
    old_start, old_len, new_start, new_len = (
        int(match.group(1)),
        int(match.group(2) if match.group(2) is not None else 1),
        int(match.group(3)),
        int(match.group(4) if match.group(4) is not None else 1),
    )
    hunk = Hunk(old_start, old_len, new_start, new_len, header_line=i + 1)
    old_seen = new_seen = 0
    i += 1
    while old_seen < old_len or new_seen < new_len:
        if i >= len(lines):
            raise DiffError(
                f"corrupted diff: {origin} line {hunk.header_line}: hunk ends early "
                f"(header says -{old_len} +{new_len}, body has -{old_seen} +{new_seen}); truncated file?"
            )
        raw = lines[i]
        tag = raw[:1]
        if raw in (b"\n", b"\r\n"):
            # Some editors strip the single space of an empty context line; that is a changed diff.
            raise DiffError(
                f"corrupted diff: {origin} line {i + 1}: empty line inside a hunk (a context line lost its "
                "leading space; an editor stripped trailing whitespace?)"
            )
        if tag not in (b" ", b"-", b"+") and not raw.startswith(b"\\"):
            raise DiffError(
                f"corrupted diff: {origin} line {i + 1}: unexpected line inside hunk "
                f"(header at line {hunk.header_line} says -{old_len} +{new_len}, body has "
                f"-{old_seen} +{new_seen} so far)"
            )
        if raw.startswith(b"\\"):
            _drop_newline(hunk, origin, i)
            i += 1
            continue
        text = raw[1:]
        if not text.endswith(b"\n"):
            raise DiffError(f"corrupted diff: {origin} line {i + 1}: last line lacks a newline")
        hunk.lines.append((tag, text))
        if tag in (b" ", b"-"):
            old_seen += 1
        if tag in (b" ", b"+"):
            new_seen += 1
        if old_seen > old_len or new_seen > new_len:
            raise DiffError(
                f"corrupted diff: {origin} line {i + 1}: hunk at line {hunk.header_line} has more lines "
                f"than its header (-{old_len} +{new_len}) says"
            )
        i += 1
    if i < len(lines) and lines[i].startswith(b"\\"):
        _drop_newline(hunk, origin, i)
        i += 1
    return hunk, i


def _drop_newline(hunk: Hunk, origin: str, i: int) -> None:
    if not hunk.lines:
        raise DiffError(f"corrupted diff: {origin} line {i + 1}: '\\' marker before any hunk line")
    tag, text = hunk.lines[-1]
    hunk.lines[-1] = (tag, text[:-1] if text.endswith(b"\n") else text)


def apply_file(old: bytes | None, patch: FilePatch, origin: str, allow_offset: bool = False) -> bytes:
    """Apply `patch` to `old` (None = the file does not exist) exactly, or raise HunkError.

    allow_offset is only for `refresh` rebasing a later patch after an earlier one changed line counts:
    each hunk's full context must still match exactly, at the nearest place after the previous hunk."""
    if patch.is_new:
        if old is not None:
            raise HunkError(f"{patch.path} already exists but {origin} creates it", kind="applied")
        return b"".join(patch.hunks[0].new_lines())
    if old is None:
        raise HunkError(f"{patch.path} does not exist but {origin} modifies it", kind="missing")
    src = split_lines(old)
    out: list[bytes] = []
    pos = 0  # index in src up to which lines were copied
    for number, hunk in enumerate(patch.hunks, 1):
        want = hunk.old_lines()
        start = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        if start < pos or src[start : start + len(want)] != want:
            found = [s for s in _find(src, want) if s >= pos] if allow_offset else []
            if not found:
                raise _explain_miss(src, hunk, number, patch.path, origin)
            start = min(found, key=lambda s: abs(s - start))
        out.extend(src[pos:start])
        out.extend(hunk.new_lines())
        pos = start + len(want)
    out.extend(src[pos:])
    return b"".join(out)


def _find(src: list[bytes], want: list[bytes]) -> list[int]:
    if not want:
        return []
    first = want[0]
    return [i for i in range(len(src) - len(want) + 1) if src[i] == first and src[i : i + len(want)] == want]


def _explain_miss(src: list[bytes], hunk: Hunk, number: int, path: str, origin: str) -> HunkError:
    """Say why a hunk does not apply at its line: stale line numbers, stale context, or already applied."""
    at = f"{origin}: hunk {number} of {path} (diff line {hunk.header_line}, file line {hunk.old_start})"
    want = hunk.old_lines()
    starts = _find(src, want)
    if starts:
        offset = starts[0] + 1 - hunk.old_start
        return HunkError(
            f"{at} matches only at an offset of {offset:+d} lines (file line {starts[0] + 1}); strict apply "
            "allows no offset: regenerate the diff against the right pre-image with `patches refresh`",
            kind="offset",
        )
    new = hunk.new_lines()
    if new and new != want and _find(src, new):
        return HunkError(
            f"{at} is already applied (its result is in the file): partially patched?", "applied"
        )
    # Fuzz as GNU patch means it: drop up to 2 leading and trailing context lines and look again.
    for fuzz in (1, 2):
        trimmed = _trim_context(hunk, fuzz)
        if trimmed and trimmed != want and _find(src, trimmed):
            return HunkError(
                f"{at} would need fuzz {fuzz} (its outer context lines differ from the file); strict apply "
                "allows no fuzz: regenerate the diff with `patches refresh`",
                kind="fuzz",
            )
    start = hunk.old_start - 1 if hunk.old_len else hunk.old_start
    for k, expected in enumerate(want):
        got = src[start + k] if start + k < len(src) else b"<end of file>"
        if got != expected:
            return HunkError(
                f"{at} does not match: file line {start + k + 1} is {_show(got)}, the diff expects "
                f"{_show(expected)}",
                kind="mismatch",
            )
    return HunkError(f"{at} does not match the file", kind="mismatch")


def _trim_context(hunk: Hunk, fuzz: int) -> list[bytes]:
    tags = [tag for tag, _ in hunk.lines]
    lead = 0
    while lead < fuzz and lead < len(tags) and tags[lead] == b" ":
        lead += 1
    trail = 0
    while trail < fuzz and trail < len(tags) - lead and tags[len(tags) - 1 - trail] == b" ":
        trail += 1
    kept = hunk.lines[lead : len(hunk.lines) - trail]
    return [text for tag, text in kept if tag in (b" ", b"-")]


def _show(line: bytes, width: int = 70) -> str:
    text = line.rstrip(b"\n").decode("utf-8", "replace")
    return repr(text if len(text) <= width else text[:width] + "...")


def make_file_diff(path: str, old: bytes | None, new: bytes, context: int = 3) -> bytes:
    """A unified diff of one file with a/ b/ prefixes; `old` None means a new file (--- /dev/null)."""
    a = split_lines(old or b"")
    b = split_lines(new)
    out = [
        (f"--- {DEV_NULL}\n" if old is None else f"--- a/{path}\n").encode(),
        f"+++ b/{path}\n".encode(),
    ]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    groups = [[("insert", 0, 0, 0, len(b))]] if old is None else matcher.get_grouped_opcodes(context)
    for group in groups:
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n".encode())
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out.extend(_emit(b" ", a[a1:a2]))
                continue
            if tag in ("replace", "delete"):
                out.extend(_emit(b"-", a[a1:a2]))
            if tag in ("replace", "insert"):
                out.extend(_emit(b"+", b[b1:b2]))
    return b"".join(out)


def _range(start: int, length: int) -> str:
    # Unified-diff convention: an empty range names the line before it.
    return f"{start if length == 0 else start + 1},{length}"


def _emit(tag: bytes, lines: list[bytes]) -> list[bytes]:
    out = []
    for line in lines:
        if line.endswith(b"\n"):
            out.append(tag + line)
        else:
            out.append(tag + line + b"\n" + _NO_NEWLINE + b"\n")
    return out
