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


def test_v2_reservation_bounds_go_in_one_pinned_copy(sglang_cpu_path: str) -> None:  # noqa: F811
    """Patch 0033: DFlashDraftInputV2.prepare_for_decode (SGLANG_DFLASH_OVERLAP=1) sends the reservation's
    start and end through host_ints_to_device(pinned=PINNED_RESERVE, default on) once; no
    `torch.tensor(...).to(...)` from pageable memory, whose copy may wait for the schedule stream."""
    source = "sglang/srt/speculative/dflash_info_v2.py"
    method = _method(
        ast.parse((_patched_root(sglang_cpu_path) / source).read_text()),
        "DFlashDraftInputV2.prepare_for_decode",
    )
    pageable = [
        ast.unparse(n)
        for n in ast.walk(method)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "to"
        and isinstance(n.func.value, ast.Call)
        and ast.unparse(n.func.value.func) == "torch.tensor"
    ]
    assert pageable == [], f"{source}: copies from pageable memory in prepare_for_decode: {pageable}"
    calls = [n for n in ast.walk(method) if isinstance(n, ast.Call) and ast.unparse(n.func) == HELPER]
    assert len(calls) == 1
    assert any(k.arg == "pinned" and ast.unparse(k.value) == "PINNED_RESERVE" for k in calls[0].keywords)


def _switch_statements(root_path: str) -> list[ast.stmt]:
    """The module-level statements of dflash_info_v2 that read SGLANG_DFLASH_PINNED_RESERVE (run alone below:
    importing the module takes SGLang's whole import, about 30 s on this CPU)."""
    source = "sglang/srt/speculative/dflash_info_v2.py"
    module = ast.parse((_patched_root(root_path) / source).read_text())
    found = [
        node
        for node in module.body
        if "PINNED_RESERVE" in ast.unparse(node) and not isinstance(node, ast.ClassDef)
    ]
    assert len(found) == 3, [ast.unparse(node) for node in found]  # the name, the refusal, the flag
    return found


@pytest.mark.parametrize(("value", "pinned"), [("0", False), ("1", True), (None, True), ("yes", None)])
def test_pinned_reserve_switch_reads_0_or_1_and_refuses_the_rest(
    sglang_cpu_path: str,  # noqa: F811
    value: str | None,
    pinned: bool | None,
) -> None:
    """SGLANG_DFLASH_PINNED_RESERVE (patch 0033's switch, for a paired run of both copies): unset or 1 pinned,
    0 pageable, anything else refused at import with a line naming the variable and what to use."""
    import types

    environ = {} if value is None else {"SGLANG_DFLASH_PINNED_RESERVE": value}
    scope = {"os": types.SimpleNamespace(environ=environ)}
    code = compile(
        ast.Module(body=_switch_statements(sglang_cpu_path), type_ignores=[]), "dflash_info_v2", "exec"
    )
    if pinned is None:
        with pytest.raises(ValueError, match=r"SGLANG_DFLASH_PINNED_RESERVE='yes': use 1 .* or 0"):
            exec(code, scope)
    else:
        exec(code, scope)
        assert scope["PINNED_RESERVE"] is pinned
