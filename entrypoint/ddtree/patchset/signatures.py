"""Is a patched file really what the patch says? Parse, byte-compile, and find its signatures.

What "a signature is present" means (decided here, documented in patches/README.md):
- A plain identifier (`build_ddtree`): in a .py file it must occur in the syntax tree as a name that code
  defines or uses: a def/class name, an assigned or loaded name, an attribute (`x.build_ddtree`), a function
  parameter, a keyword argument, or an imported name. Comments and string literals do not count, so a
  commented-out fix or a docstring mentioning it cannot satisfy the check.
- A dotted name (`CudaGraphRunner.capture`): a definition with that qualified name (method `capture` in
  class `CudaGraphRunner`), an attribute chain ending in it (`self.runner.capture` matches
  `runner.capture`), or an import of that dotted module path.
- Anything else (`--speculative-ddtree-budget`, `"DDTREE"`): must be inside a string literal in the code.
- Non-Python files: a word-boundary match on lines that are not comments (#, //).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


@dataclass
class _Index:
    names: set[str] = field(default_factory=set)
    dotted: set[str] = field(default_factory=set)  # qualified definitions, attribute chains, module paths
    strings: list[str] = field(default_factory=list)


class _Indexer(ast.NodeVisitor):
    def __init__(self) -> None:
        self.index = _Index()
        self._scope: list[str] = []

    def _define(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.index.names.add(node.name)
        self._scope.append(node.name)
        self.index.dotted.add(".".join(self._scope))
        self.generic_visit(node)
        self._scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _define

    def visit_Name(self, node: ast.Name) -> None:
        self.index.names.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.index.names.add(node.attr)
        chain = _attribute_chain(node)
        if chain:
            self.index.dotted.add(chain)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self.index.names.add(node.arg)
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg:
            self.index.names.add(node.arg)
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        self.index.names.update(node.name.split("."))
        self.index.dotted.add(node.name)
        if node.asname:
            self.index.names.add(node.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module:
            self.index.names.update(node.module.split("."))
            self.index.dotted.add(node.module)
            for alias in node.names:
                self.index.dotted.add(f"{node.module}.{alias.name}")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.index.names.update(node.names)

    visit_Nonlocal = visit_Global

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.index.strings.append(node.value)


def _attribute_chain(node: ast.Attribute) -> str | None:
    parts = [node.attr]
    value = node.value
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    if not isinstance(value, ast.Name):
        return None
    parts.append(value.id)
    return ".".join(reversed(parts))


def compile_python(source: bytes, filename: str) -> tuple[ast.Module | None, str | None]:
    """Parse and byte-compile; returns (tree, None) or (None, one-line reason)."""
    try:
        tree = ast.parse(source, filename=filename)
        compile(tree, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return None, f"{filename} does not parse: line {exc.lineno}: {exc.msg}"
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"{filename} does not compile: {exc}"
    return tree, None


def missing_in_python(tree: ast.Module, signatures: list[str]) -> list[str]:
    indexer = _Indexer()
    indexer.visit(tree)
    index = indexer.index
    missing = []
    for sig in signatures:
        if _IDENT_RE.match(sig):
            found = sig in index.names
        elif _DOTTED_RE.match(sig):
            found = any(d == sig or d.endswith("." + sig) for d in index.dotted)
        else:
            found = any(sig in text for text in index.strings)
        if not found:
            missing.append(sig)
    return missing


def missing_in_text(data: bytes, signatures: list[str]) -> list[str]:
    text = data.decode("utf-8", "replace")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("#", "//")))
    return [sig for sig in signatures if not re.search(rf"(?<![\w]){re.escape(sig)}(?![\w])", code)]


def check_file(path: str, data: bytes, signatures: list[str]) -> list[str]:
    """Problems with one post-image: parse/compile failure, or the signatures not found."""
    if path.endswith(".py"):
        tree, error = compile_python(data, path)
        if error:
            return [error]
        assert tree is not None
        missing = missing_in_python(tree, signatures)
    else:
        missing = missing_in_text(data, signatures)
    if missing:
        return [f"{path}: signature(s) not found in the code: {', '.join(missing)}"]
    return []
