"""Is a patched file really what the patch says? Byte-compile it and find its signatures.

What "a signature is present" means (decided here, documented in patches/README.md). The file is compiled
by the running interpreter (proving it parses and byte-compiles), and the compiled code objects are read:
- A plain identifier (`build_ddtree`) must be a name the code defines or uses: a def/class name, a global,
  local, argument, attribute or imported name, or a keyword-argument name in a call. Comments, docstrings
  and other string literals do not count, so a commented-out fix cannot satisfy the check. (Keyword names
  are read from the call's name tuple, so a literal tuple of identifier strings counts as well.)
- A dotted name (`CudaGraphRunner.capture`): a definition with that qualified name (method `capture` of class
  `CudaGraphRunner`), an imported dotted module path, or an attribute chain in the code that ends with it
  (`self.runner.capture` matches `runner.capture`).
- Anything else (`--speculative-ddtree-budget`, `DDTREE: on`): must be inside a string literal in the code.
- Non-Python files: a whole-word match on lines that are not comments (#, //).

Why compiled code instead of `ast`: building Python AST objects for a 360 KB module (server_args.py) costs
several times more than compiling it, and `verify` has a one-second budget.
"""

from __future__ import annotations

import dis
import importlib.util
import marshal
import re
from collections.abc import Iterator
from pathlib import Path
from types import CodeType

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def compile_python(source: bytes, filename: str) -> tuple[CodeType | None, str | None]:
    """Parse and byte-compile; returns (code, None) or (None, one-line reason)."""
    try:
        return compile(source, filename, "exec", dont_inherit=True), None
    except SyntaxError as exc:
        return None, f"{filename} does not parse: line {exc.lineno}: {exc.msg}"
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"{filename} does not compile: {exc}"


def cached_code(path: Path, source: bytes) -> CodeType | None:
    """The code in path's hash-based .pyc (as `apply` writes them) when that .pyc belongs to this
    interpreter and was compiled from exactly `source`; else None. Loading it is ~50x faster than
    compiling, and it is the code the interpreter will run."""
    try:
        data = Path(importlib.util.cache_from_source(str(path))).read_bytes()
    except (OSError, NotImplementedError, ValueError):
        return None
    flags = int.from_bytes(data[4:8], "little") if len(data) >= 16 else 0
    if data[:4] != importlib.util.MAGIC_NUMBER or not flags & 0b1:
        return None  # not this interpreter's, or timestamp-based (does not bind the source bytes)
    if data[8:16] != importlib.util.source_hash(source):
        return None
    try:
        code = marshal.loads(data[16:])
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None


def _code_objects(code: CodeType, path: tuple[str, ...] = ()) -> Iterator[tuple[CodeType, tuple[str, ...]]]:
    """Every code object with its qualified path (module level is the empty path)."""
    yield code, path
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _code_objects(const, (*path, const.co_name))


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (tuple, frozenset)):
        for item in value:
            yield from _strings(item)


def _attribute_chains(code: CodeType) -> Iterator[str]:
    """name.attr.attr... chains as the bytecode loads them (only read for dotted signatures)."""
    chain: list[str] = []
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_NAME", "LOAD_GLOBAL", "LOAD_FAST", "LOAD_DEREF", "LOAD_FAST_CHECK"):
            if len(chain) > 1:
                yield ".".join(chain)
            chain = [str(ins.argval)]
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "LOAD_SUPER_ATTR") and chain:
            chain.append(str(ins.argval))
        else:
            if len(chain) > 1:
                yield ".".join(chain)
            chain = []
    if len(chain) > 1:
        yield ".".join(chain)


def missing_in_python(code: CodeType, signatures: list[str]) -> list[str]:
    names: set[str] = set()
    qualnames: set[str] = set()
    strings: list[str] = []
    objects = list(_code_objects(code))
    for obj, path in objects:
        names.update(obj.co_names, obj.co_varnames, obj.co_cellvars, obj.co_freevars)
        if path:
            names.add(obj.co_name)
            qualnames.add(".".join(path))
        for const in obj.co_consts:
            if (
                isinstance(const, tuple)
                and const
                and all(isinstance(c, str) and c.isidentifier() for c in const)
            ):
                names.update(const)  # keyword-argument names of a call
            strings.extend(_strings(const))
    dotted_names = {n for n in names if "." in n}  # `import a.b` keeps the dotted path
    missing = []
    for sig in signatures:
        if _IDENT_RE.match(sig):
            found = sig in names
        elif _DOTTED_RE.match(sig):
            found = any(q == sig or q.endswith("." + sig) for q in qualnames | dotted_names) or any(
                c == sig or c.endswith("." + sig) for obj, _ in objects for c in _attribute_chains(obj)
            )
        else:
            found = any(sig in text for text in strings)
        if not found:
            missing.append(sig)
    return missing


def missing_in_text(data: bytes, signatures: list[str]) -> list[str]:
    text = data.decode("utf-8", "replace")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("#", "//")))
    return [sig for sig in signatures if not re.search(rf"(?<![\w]){re.escape(sig)}(?![\w])", code)]


def check_file(path: str, data: bytes, signatures: list[str], code: CodeType | None = None) -> list[str]:
    """Problems with one post-image: parse/compile failure, or the signatures not found. `code`: the file's
    code when already at hand (see cached_code); otherwise the file is compiled here."""
    if path.endswith(".py"):
        if code is None:
            code, error = compile_python(data, path)
            if error:
                return [error]
        assert code is not None
        missing = missing_in_python(code, signatures)
    else:
        missing = missing_in_text(data, signatures)
    if missing:
        return [f"{path}: signature(s) not found in the code: {', '.join(missing)}"]
    return []
