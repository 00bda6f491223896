"""Target profiles, reference results and system facts: the committed data loads, bad data fails clearly."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ddtree.errors import UserError
from ddtree.receipts.reference import load_reference, validate_reference
from ddtree.targets import load_target, merge_server_args, server_argv, validate_target


def _data(repo_root: Path, name: str) -> dict:
    return yaml.safe_load((repo_root / "env" / "targets" / f"{name}.yaml").read_text())


def test_pro6000_profile(repo_root: Path) -> None:
    target = load_target("pro6000", repo_root / "env" / "targets")
    assert (target.gpu.compute_capability, target.arch, target.gpu.count) == ("12.0", "sm_120", 8)
    assert target.interconnect == "pcie" and target.tensor_parallel == 8
    assert target.environment["NCCL_P2P_DISABLE"] == "1"
    assert target.environment["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"
    argv = target.server_argv()
    text = " ".join(argv)
    for expected in (
        "--model-path /models/target",
        "--speculative-draft-model-path /models/drafter",
        "--trust-remote-code --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 --tp 8",
        "--speculative-algorithm DDTREE --speculative-num-draft-tokens 8",
        "--speculative-ddtree-budget 8 --speculative-ddtree-topk 4 --speculative-draft-window-size 2048",
        "--attention-backend triton --disable-custom-all-reduce",
        "--host 0.0.0.0 --port 30000",
    ):
        assert expected in text
    assert "--mem-fraction-static" in argv


def test_b300_profile(repo_root: Path) -> None:
    target = load_target(repo_root / "env" / "targets" / "b300.yaml")
    assert (target.compute_capability, target.arch, target.interconnect) == ("10.3", "sm_103", "nvlink")
    assert "NCCL_P2P_DISABLE" not in target.environment
    assert "--disable-custom-all-reduce" not in target.server_argv()


def test_argv_value_rules_and_overrides() -> None:
    args = {"a": True, "b": False, "c": None, "d": 0.5, "e": [1, 2], "f": "x"}
    assert server_argv(args) == ["--a", "--d", "0.5", "--e", "1", "2", "--f", "x"]
    merged = merge_server_args({"port": 30000, "x": True}, {"--port": 31000, "x": False, "new": "v"})
    assert merged == {"port": 31000, "new": "v"}


def test_unknown_name_lists_known(repo_root: Path) -> None:
    with pytest.raises(UserError, match=r"unknown target 'h100' .*known: b300, pro6000"):
        load_target("h100", repo_root / "env" / "targets")


def test_name_must_match_file(repo_root: Path, tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text((repo_root / "env" / "targets" / "pro6000.yaml").read_text())
    with pytest.raises(UserError, match=r"other.yaml: name: 'pro6000' differs from the file name 'other'"):
        load_target(path)


def _set(data: dict, dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data[part]
    if value is KeyError:
        del data[last]
    else:
        data[last] = value


@pytest.mark.parametrize(
    ("dotted", "value", "message"),
    [
        ("schema", 2, "t.yaml: schema: must be 1"),
        ("colour", "red", "t.yaml: colour: unknown key"),
        (
            "gpu.compute_capability",
            12.0,
            't.yaml: gpu.compute_capability: must be a quoted string like "12.0"',
        ),
        ("gpu.count", 0, "t.yaml: gpu.count: must be a positive integer"),
        ("gpu.memory_gb", float("inf"), "t.yaml: gpu.memory_gb: must be a positive, finite number of GB"),
        ("gpu.memory_gb", float("nan"), "t.yaml: gpu.memory_gb: must be a positive, finite number of GB"),
        ("gpu.vram", 1, "t.yaml: gpu.vram: unknown key"),
        ("interconnect", "infiniband", "t.yaml: interconnect: must be one of pcie, nvlink"),
        ("environment.NCCL_P2P_DISABLE", 1, "t.yaml: environment.NCCL_P2P_DISABLE: must be a quoted string"),
        ("environment.bad-name", "1", "t.yaml: environment.bad-name: not a valid variable name"),
        ("server_args.--port", 1, "t.yaml: server_args.--port: flag names are lower-case-with-dashes"),
        ("server_args.model-path", KeyError, "t.yaml: server_args.model-path: is required"),
        (
            "server_args.extra",
            {"a": 1},
            "t.yaml: server_args.extra: must be a string, number, boolean or list",
        ),
        ("server_args.tp", 4, "t.yaml: server_args.tp: is 4 but tensor_parallel is 8"),
        ("server_args.disable-custom-all-reduce", False, "must be true on a PCIe-only host"),
        ("environment.SGLANG_ENABLE_JIT_DEEPGEMM", "1", 'SGLANG_ENABLE_JIT_DEEPGEMM: must be "0" on sm_12x'),
        ("server_args.attention-backend", "flashmla", "attention-backend: flashmla has no sm_12x kernels"),
    ],
)
def test_schema_errors_name_file_and_key(repo_root: Path, dotted: str, value: object, message: str) -> None:
    data = copy.deepcopy(_data(repo_root, "pro6000"))
    _set(data, dotted, value)
    with pytest.raises(UserError) as info:
        validate_target(data, "t.yaml")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_invalid_yaml_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("schema: [1\n")
    with pytest.raises(UserError, match=r"x.yaml: not valid YAML") as info:
        load_target(path)
    assert "\n" not in str(info.value)


def test_reference_results(repo_root: Path) -> None:
    ref = load_reference(repo_root / "env" / "reference" / "results.yaml")
    assert ref.results["baseline-cuda-graph"].figures["output_tokens_per_s"].contains(98)
    single = ref.results["ddtree-single"].figures
    assert (single["output_tokens_per_s"].min, single["output_tokens_per_s"].max) == (150, 170)
    assert single["acceptance_length"].contains(3.5) and single["acceptance_length"].contains(4.1)
    assert ref.results["ddtree-aggregate"].figures["aggregate_output_tokens_per_s"].min == 897
    assert ref.sweep_context_tokens == (60, 1024, 4096, 8192)
    assert ref.sweep_concurrency == (1, 8, 32, 64)


def test_reference_errors() -> None:
    base = {"schema": 1, "results": [{"id": "a", "output_tokens_per_s": {"min": 5, "max": 1}}]}
    with pytest.raises(
        UserError, match=r"r.yaml: results\[0\].output_tokens_per_s: expected a finite number"
    ):
        validate_reference(base, "r.yaml")
    for bad in (float("inf"), float("nan"), -1, {"min": 1, "max": float("inf")}):
        data = {"schema": 1, "results": [{"id": "a", "acceptance_length": bad}]}
        with pytest.raises(UserError, match=r"results\[0\].acceptance_length: expected a finite number >= 0"):
            validate_reference(data, "r.yaml")
    with pytest.raises(UserError, match=r"r.yaml: results\[0\]: no figure"):
        validate_reference({"schema": 1, "results": [{"id": "a"}]}, "r.yaml")


def test_system_facts(repo_root: Path) -> None:
    system = yaml.safe_load((repo_root / "env" / "system.yaml").read_text())
    assert system["cuda"]["nvcc"] == "13.0.88" and system["host"]["os"]["version_id"] == "24.04"
    for base in system["bases"].values():
        assert {"image", "tag", "digest", "python", "lock"} <= set(base)
        assert (repo_root / "env" / base["lock"]).is_file()
