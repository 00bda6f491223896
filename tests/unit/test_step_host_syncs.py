"""Patch 0014 (ddtree-step-syncs): a DFLASH or DDTREE verify step copies host lists to the device without a
host sync. `torch.tensor(values, device=cuda)` copies synchronously; CUDA's sync debug mode flagged two such
calls in every DDTREE step on the H200 (2026-12-02, `steps` job). Read from the real patched sources (the
device's `steps` job is the runtime check); the values themselves are checked by the DFLASH verify probe
(tests/unit/test_dflash_step_host.py), which runs the patched verify on CPU."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401  (fixture)

HELPER = "host_ints_to_device"
VERIFY_METHODS = {
    "sglang/srt/speculative/ddtree_info.py": "DDTreeVerifyInput.verify",
    "sglang/srt/speculative/dflash_info.py": "DFlashVerifyInput.verify",
}


def _method(tree: ast.Module, qualified: str) -> ast.FunctionDef:
    class_name, method_name = qualified.split(".")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method_name:
                    return item
    raise AssertionError(f"{qualified} not found")


def _synchronous_copies(function: ast.FunctionDef) -> list[str]:
    """Every `torch.tensor(...)` call in `function` given a `device=` keyword: a synchronous copy."""
    found = []
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "tensor"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "torch"
            and any(keyword.arg == "device" for keyword in node.keywords)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _patched_root(path: str) -> Path:
    return Path(path.split(":")[0])


@pytest.mark.parametrize("source", sorted(VERIFY_METHODS))
def test_verify_copies_host_lists_without_a_sync(sglang_cpu_path: str, source: str) -> None:  # noqa: F811
    tree = ast.parse((_patched_root(sglang_cpu_path) / source).read_text())
    method = _method(tree, VERIFY_METHODS[source])
    assert _synchronous_copies(method) == [], f"{source}: synchronous host-to-device copies in verify"
    calls = [n for n in ast.walk(method) if isinstance(n, ast.Call) and ast.unparse(n.func) == HELPER]
    assert len(calls) == 2, "commit_lens and the bonus tokens go through host_ints_to_device"


def test_the_check_sees_a_synchronous_copy() -> None:
    """The AST check itself: upstream's spelling is found, the asynchronous helper is not."""
    upstream = ast.parse(
        "class V:\n"
        "    def verify(self, xs, device):\n"
        "        a = torch.tensor(xs, dtype=torch.int32, device=device)\n"
        "        b = host_ints_to_device(xs, torch.int64, device)\n"
        "        c = torch.tensor(xs, dtype=torch.int32)\n"
    )
    found = _synchronous_copies(_method(upstream, "V.verify"))
    assert found == ["line 3: torch.tensor(xs, dtype=torch.int32, device=device)"]
