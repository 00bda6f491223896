"""The packages' import structure: no import circle (lazy imports inside functions included), and no arrow
(lazy imports included) from a lower layer to a higher one. Read with ast from the source, so nothing is
imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"ddtree": REPO / "entrypoint", "ddtree_build": REPO / "build"}

# Lowest first; a module may import from its own layer or lower ones (the longest matching prefix decides).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ddtree", "ddtree.errors", "ddtree.fsutil", "ddtree.numbers", "ddtree.jsontext", "ddtree.jsonshape",
     "ddtree.yamlfile", "ddtree.os_release", "ddtree.secret_rules", "ddtree.lockfile", "ddtree.gpu",
     "ddtree.targets", "ddtree.patchset"),
    ("ddtree.weights",),
    ("ddtree.receipts", "ddtree.image_identity"),
    ("ddtree.serve",),
    ("ddtree.bench",),
    ("ddtree.router", "ddtree.smoke"),
    ("ddtree.selfcheck",),
    ("ddtree.cli",),
    ("ddtree_build", "ddtree_build.errors", "ddtree_build.paths", "ddtree_build.host"),
    ("ddtree_build.docker_build", "ddtree_build.resolver", "ddtree_build.sbom", "ddtree_build.patching",
     "ddtree_build.compose", "ddtree_build.engine", "ddtree_build.freeze", "ddtree_build.lock"),
    ("ddtree_build.base_image", "ddtree_build.render", "ddtree_build.image", "ddtree_build.reproduction"),
    ("ddtree_build.cli",),
)  # fmt: skip


def modules() -> dict[str, Path]:
    found = {}
    for package, root in ROOTS.items():
        for path in sorted((root / package).rglob("*.py")):
            found[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path], top_level_only: bool) -> set[str]:
    """The package modules `name` imports (`from pkg import mod` counts as mod)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom) and not node.level:
            targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module or ""]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a parent runs first anyway
                found.add(target)
    return found


def layer(name: str) -> int:
    best = max(
        ((len(prefix), index) for index, prefixes in enumerate(LAYERS) for prefix in prefixes
         if name == prefix or name.startswith(prefix + ".")),
        default=None,
    )  # fmt: skip
    assert best is not None, f"{name} is in no layer: add it to LAYERS"
    return best[1]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("top_level_only", [True, False], ids=["module-level", "lazy-included"])
def test_no_import_circle(top_level_only: bool) -> None:
    known = modules()
    graph = {name: imports(name, path, known, top_level_only=top_level_only) for name, path in known.items()}
    assert circles(graph) == []


def test_no_arrow_from_a_lower_layer_to_a_higher_one() -> None:
    known = modules()
    upward = sorted(
        f"{name} -> {target}"
        for name, path in known.items()
        for target in imports(name, path, known, top_level_only=False)
        if layer(target) > layer(name)
    )
    assert upward == []


def test_the_checks_can_fail() -> None:
    """A circle and an upward arrow are found when there is one."""
    assert circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert layer("ddtree.errors") < layer("ddtree.serve.launch") < layer("ddtree.selfcheck.cmd")


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_folders_and_modules_stay_small(package: str) -> None:
    """About 15 modules per folder and 450 lines per module (issue 31): past that a folder or module holds
    more than one idea."""
    wide = {}
    long = {}
    for folder in [ROOTS[package] / package, *(ROOTS[package] / package).rglob("*/")]:
        count = len(list(folder.glob("*.py")))
        if count > 16:
            wide[str(folder.relative_to(REPO))] = count
    for path in (ROOTS[package] / package).rglob("*.py"):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > 470:
            long[str(path.relative_to(REPO))] = lines
    assert wide == {} and long == {}
