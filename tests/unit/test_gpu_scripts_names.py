"""The device scripts (tests/gpu/*.py) use only names that the ddtree package really defines.

They run only on the GPU host, so a name that moved (start_ddtree_server went from the smoke check to
ddtree.smoke.server in the smoke split) used to show there first, as an AttributeError after the device
sitting had started. Here every `from ddtree[.pkg] import m` / `import ddtree.m as x` in those scripts is read
with ast and each `m.name` they use is looked up on the real module.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

GPU_SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "gpu").glob("*.py"))


def ddtree_uses(source: str) -> set[tuple[str, str]]:
    """(module, attribute) for each `alias.attribute` where alias names a module of the ddtree package."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ddtree":
            for name in node.names:
                aliases[name.asname or name.name] = f"{node.module}.{name.name}"
        elif isinstance(node, ast.Import):
            for name in node.names:
                if name.name.startswith("ddtree.") and name.asname:
                    aliases[name.asname] = name.name
    uses = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            uses.add((aliases[node.value.id], node.attr))
    return uses


def test_the_reader_finds_a_missing_name() -> None:
    """The check can fail: the pre-fix step-checks line names a function ddtree.smoke.check does not have."""
    uses = ddtree_uses("from ddtree.smoke import check as smoke\nserver = smoke.start_ddtree_server(1, 2)\n")
    assert uses == {("ddtree.smoke.check", "start_ddtree_server")}
    assert not hasattr(importlib.import_module("ddtree.smoke.check"), "start_ddtree_server")


@pytest.mark.parametrize("script", GPU_SCRIPTS, ids=lambda p: p.name)
def test_gpu_script_uses_only_defined_ddtree_names(script: Path) -> None:
    missing = []
    for module_name, attribute in sorted(ddtree_uses(script.read_text(encoding="utf-8"))):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue  # `from ddtree.x import name` of a non-module name: Python checks that at import
        if not hasattr(module, attribute):
            missing.append(f"{module_name}.{attribute}")
    assert not missing, f"{script.name} uses names its modules do not define: {missing}"


def ddtree_imports(source: str) -> set[tuple[str, str]]:
    """(module, name) for every `from ddtree[.pkg] import name`, at any depth: a function's own import runs
    only when the function does, so a name that moved breaks it on the device, not at the script's import."""
    return {
        (node.module, name.name)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ddtree"
        for name in node.names
    }


def test_the_import_reader_finds_a_name_imported_inside_a_function() -> None:
    """The check can fail: the secrets script's helper imported a private name renamed on 2026-12-01."""
    source = "def port():\n    from ddtree.smoke.server import _free_port as free\n    return free()\n"
    assert ddtree_imports(source) == {("ddtree.smoke.server", "_free_port")}
    assert not hasattr(importlib.import_module("ddtree.smoke.server"), "_free_port")


BENCHMARK_SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").rglob("*.py"))


@pytest.mark.parametrize("script", GPU_SCRIPTS + BENCHMARK_SCRIPTS, ids=lambda p: p.name)
def test_every_ddtree_name_a_device_script_imports_exists(script: Path) -> None:
    missing = []
    for module_name, name in sorted(ddtree_imports(script.read_text(encoding="utf-8"))):
        module = importlib.import_module(module_name)
        package = hasattr(module, "__path__")
        if not hasattr(module, name) and not (package and importlib.util.find_spec(f"{module_name}.{name}")):
            missing.append(f"from {module_name} import {name}")
    assert not missing, f"{script.name} imports names its modules do not define: {missing}"
