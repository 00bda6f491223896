"""DDTREE in the real, patched sglang 0.5.13.post1 on CPU: flags, validation, imports, CUDA-graph sizing,
request and model refusals, and the sampling verify's filter order against plain decoding's sampler.

The environment is the pinned sglang wheel (PyPI, hash-checked) with the project's whole patch series applied
by the real patch engine, plus the import-time dependencies in requirements/sglang-cpu-test.txt, all under
.cache/sglang-cpu/ (built once: about 2 minutes on a fresh machine, then reused; the patched copy is rebuilt
whenever the series changes). torch is .venv's CPU build. One probe process (ddtree_sglang_probe.py)
imports SGLang once and reports every fact as JSON.

Stand-ins, where the real part cannot run without a GPU (each named in the probe):
- torchvision is a stub package (PyPI's wheels link the CUDA torch libraries; sglang only imports names);
- CudaGraphRunner gets a model-runner stub carrying the real ServerArgs and the real DDTREE spec object, and
  an attention backend that stops the constructor where it sizes its buffers (no GPU allocation);
- verify() runs on a batch stub with a torch version of the Triton req_to_token kernel;
- the TP top-k merge runs on two gloo processes with a torch.distributed stand-in for SGLang's TP group (its
  all_gather_into_tensor is a CUDA-only custom op);
- the sliding-window check gets a model-runner stub holding real RadixAttention layers, and DDTreeWorker's
  constructor a target-worker stub (it refuses before DFlashWorker.__init__ builds anything);
- DFlash's decode step runs on a worker made without __init__ and a batch stub that stops it right after its
  sampling-fallback warning check, with sgl_kernel's sampling verify reported missing;
- the filter-order test's Markov target is a logit table (no model), and flashinfer's sampler is its
  documented semantics in plain Python (flashinfer needs a GPU); the pytorch rule is checked against SGLang's
  own torch sampler on CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree.fsutil import sha256_bytes
from ddtree_build.paths import CACHE_DIR, PATCHES_DIR, REPO_ROOT

REQUIREMENTS = REPO_ROOT / "requirements" / "sglang-cpu-test.txt"
PROBE = Path(__file__).with_name("ddtree_sglang_probe.py")
ENV_ROOT = CACHE_DIR / "sglang-cpu"
KEEP_PATCHED_TREES = 4  # patched trees of other series digests kept beside the current one
TORCHVISION_STUB = '''"""CPU test stub of torchvision (see tests/unit/test_ddtree_sglang.py).

PyPI's torchvision wheels link the CUDA torch libraries; sglang and transformers only touch torchvision names
at import time, so every torchvision.* module here is a placeholder whose names are inert placeholders.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+cpustub"


class _PlaceholderMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return f"{cls.__name__}.{name}"


class _Placeholder(metaclass=_PlaceholderMeta):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("torchvision is a stub in the CPU test environment")


def _module_getattr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (_Placeholder,), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr
        return module

    def exec_module(self, module):
        return None


sys.meta_path.insert(0, _StubFinder())
__getattr__ = _module_getattr
'''
TINY_TARGET = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 512,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
}


def write_tiny_pair(root: Path) -> tuple[str, str]:
    """root/target (TINY_TARGET) and root/drafter (a 2-layer DFlash drafter on it, block 8): config-only
    folders the probes load with dummy weights; (target, drafter) paths."""
    (root / "target").mkdir()
    (root / "drafter").mkdir()
    (root / "target" / "config.json").write_text(json.dumps(TINY_TARGET))
    drafter = {
        **TINY_TARGET,
        "architectures": ["DFlashDraftModel"],
        "num_hidden_layers": 2,
        "block_size": 8,
        "dflash_config": {
            "block_size": 8,
            "target_layer_ids": [1, 4],
            "mask_token_id": 511,
            "num_target_layers": 6,
        },
    }
    (root / "drafter" / "config.json").write_text(json.dumps(drafter))
    return str(root / "target"), str(root / "drafter")


def _series_digest() -> str:
    parts = [(PATCHES_DIR / "series.yaml").read_bytes()]
    parts += [p.read_bytes() for p in sorted(PATCHES_DIR.glob("*.diff"))]
    return sha256_bytes(b"\0".join(parts))[:16]


def _build_deps(folder: Path) -> None:
    """pip --no-deps --require-hashes into a scratch folder, then rename: a broken install is never reused."""
    scratch = folder.with_name(folder.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    done = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--require-hashes", "--no-compile",
            "--disable-pip-version-check", "--target", str(scratch), "-r", str(REQUIREMENTS),
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"installing {REQUIREMENTS.name} failed:\n{done.stderr[-3000:]}")
    (scratch / "torchvision").mkdir()
    (scratch / "torchvision" / "__init__.py").write_text(TORCHVISION_STUB)
    os.replace(scratch, folder)


def _build_patched(deps: Path, folder: Path) -> None:
    """A copy of the pristine sglang from `deps` with the project's series applied by the patch engine."""
    scratch = folder.with_name(folder.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    shutil.copytree(deps / "sglang", scratch / "sglang")
    for info in deps.glob("sglang-*.dist-info"):
        shutil.copytree(info, scratch / info.name)
    done = subprocess.run(
        [sys.executable, "-m", "ddtree.patchset", "apply", "--root", str(scratch), "--series",
         str(PATCHES_DIR / "series.yaml")],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"applying the patch series to the CPU sglang failed:\n{done.stdout}\n{done.stderr}")
    os.replace(scratch, folder)
    # Keep a few recent trees besides this one: checkouts of other branches (worktrees sharing .cache) may be
    # using theirs right now; older ones go.
    others = [p for p in folder.parent.glob("patched-*") if p != folder and not p.name.endswith(".partial")]
    for old in sorted(others, key=lambda p: p.stat().st_mtime, reverse=True)[KEEP_PATCHED_TREES:]:
        shutil.rmtree(old, ignore_errors=True)


@pytest.fixture(scope="module")
def sglang_cpu_path() -> str:
    """PYTHONPATH of the patched CPU sglang environment (built on first use, cached under .cache/)."""
    deps = ENV_ROOT / f"deps-{sha256_bytes(REQUIREMENTS.read_bytes())[:16]}"
    if not deps.is_dir():
        ENV_ROOT.mkdir(parents=True, exist_ok=True)
        _build_deps(deps)
    patched = ENV_ROOT / f"patched-{_series_digest()}"
    if not patched.is_dir():
        _build_patched(deps, patched)
    return os.pathsep.join([str(patched), str(deps)])


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    target, drafter = write_tiny_pair(tmp_path_factory.mktemp("tiny-models"))
    return run_probe(PROBE, "DDTREE-PROBE", sglang_cpu_path, target, drafter)


def run_probe(
    probe: Path, marker: str, sglang_path: str, *args: str, timeout: float = 900, env: dict | None = None
) -> dict:
    """Run a probe script in the CPU SGLang environment and return the JSON it printed after `marker`
    (a probe reports its own failure as `probe_error`). `env` adds variables; a None value removes one."""
    run_env = {**os.environ, "PYTHONPATH": sglang_path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for name, value in (env or {}).items():
        if value is None:
            run_env.pop(name, None)
        else:
            run_env[name] = value
    done = subprocess.run(
        [sys.executable, str(probe), *args], capture_output=True, text=True, env=run_env, timeout=timeout
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(f"{marker} ")]
    assert lines, f"{probe.name} printed no result (rc {done.returncode}):\n{done.stderr[-4000:]}"
    result = json.loads(lines[-1].removeprefix(f"{marker} "))
    assert "probe_error" not in result, result["probe_error"]
    return result


def test_ddtree_flags_default_to_budget_8_topk_4_and_verify_budget_plus_one(facts: dict) -> None:
    a = facts["args_defaults"]
    assert (a["algorithm"], a["budget"], a["topk"]) == ("DDTREE", 8, 4)
    assert a["num_draft_tokens"] == 9, "the target verifies budget + 1 tokens per request"
    assert a["block_size"] == 8, "the DFlash block size, read from the drafter config, keeps its own field"
    assert a["page_size"] == 1 and a["attention_backend"] == "triton"
    assert a["overlap_disabled"] is True and a["eagle_topk"] == 1
    assert a["max_spec_tokens"] == 9
    assert facts["args_lowercase"]["algorithm"] == "DDTREE"


def test_explicit_flags_and_block_size_up_to_the_verify_count(facts: dict) -> None:
    e = facts["args_explicit"]
    assert (e["budget"], e["topk"], e["num_draft_tokens"], e["block_size"]) == (7, 3, 8, 8)
    assert e["max_spec_tokens"] == 8
    w = facts["args_window"]
    assert (w["window"], w["block_size"], w["num_draft_tokens"]) == (64, 8, 9)


def test_block_size_above_budget_plus_one_is_refused_naming_both(facts: dict) -> None:
    """B > N: the drafter would allocate B KV slots per request where the scheduler reserves N."""
    for case, block, verify in (("block_over_verify", 8, 3), ("block4", 4, 3)):
        got = facts[f"args_{case}"]
        assert got.get("error") == "ValueError", got
        message = got["message"]
        assert f"the DFlash block size {block} exceeds the {verify} verify tokens per request" in message
        assert "\n" not in message.strip() and message.startswith("DDTREE: ")


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("budget0", "--speculative-ddtree-budget must be an integer >= 1, got 0"),
        ("topk0", "--speculative-ddtree-topk must be an integer >= 1, got 0"),
        ("budget_too_big", "gives 65 verify tokens per request"),
        ("pp2", "pipeline parallelism is not supported (got --pp-size 2)"),
        ("page16", "--page-size 16 is not supported"),
        ("flashinfer", "resolves to 'flashinfer'"),
        ("flashinfer_page64", "resolves to 'flashinfer'"),  # the backend is the fix, not the page size
        ("window_too_small", "--speculative-draft-window-size must be >="),
    ],
)
def test_bad_values_are_rejected_with_a_clear_message(facts: dict, case: str, needle: str) -> None:
    got = facts[f"args_{case}"]
    assert got.get("error") == "ValueError", got
    assert needle in got["message"], got["message"]


def test_non_integer_budget_is_an_argparse_error(facts: dict) -> None:
    got = facts["args_budget_not_int"]
    assert got["error"] == "SystemExit" and got["code"] == 2
    assert "--speculative-ddtree-budget: invalid int value" in got["message"][0]


def test_algorithm_registered_as_a_dflash_variant_with_its_worker(facts: dict) -> None:
    assert facts["algo"] == {
        "type": "DDTreeSpecAlgo",
        "is_dflash": True,
        "is_ddtree": True,
        "target_verify_for_draft": True,
        "spec_v2": False,
        "worker": "DDTreeWorker",
        "worker_is_dflash": True,
        "verify_is_dflash": True,
        "missing_methods": [],
    }


def test_cuda_graph_runner_captures_budget_plus_one_for_the_target_and_b_for_the_drafter(facts: dict) -> None:
    cg = facts["cuda_graph"]  # server args with --speculative-ddtree-budget 6, block size 4
    assert cg["target"]["per_request"] == 7
    assert cg["target"]["max_num_token"] == cg["target"]["max_bs"] * 7
    assert cg["drafter"]["per_request"] == 4
    for backend in ("triton", "flashinfer"):
        capture = cg[f"capture_{backend}"]
        assert capture["draft_token_num"] == 7
        assert capture["mask_bound"] is True, f"tree mask not bound at capture with a {backend}-named backend"


def test_verify_keeps_only_the_accepted_chain(facts: dict) -> None:
    v = facts["verify"]
    rows = v["rows"]
    # request 0: accepts 3 -> 6, bonus 11; request 1 accepts 4 then finishes (max_new 1)
    assert v["output_ids"] == [[3, 6, 11], [4]]
    assert v["commit_lens"] == [3, 1] and v["correct"] == [2, 0]
    assert v["bonus"] == [11, 4]
    size = 6
    assert v["kept_slots"] == [100, 100 + rows["r3"], 100 + rows["r6"], 100 + size]
    assert v["next_hidden_rows"] == [0.0, float(rows["r3"]), float(rows["r6"]), float(size)]
    assert sorted(v["freed"] + v["kept_slots"]) == list(range(100, 100 + 2 * size))
    assert v["req_to_token_0"][:3] == v["kept_slots"][:3]
    assert v["req_to_token_1"][0] == v["kept_slots"][3]
    assert v["seq_lens"] == [7, 7] and v["seq_lens_sum"] == 14 and v["kv_committed"] == [3, 1]


def test_verify_keeps_the_same_chain_by_host_indices_and_by_device_masks(facts: dict) -> None:
    """Patch 0008's host-built keep/free indices (the default) and the device-mask path it replaces
    (SGLANG_DFLASH_FAST_STEP=0) give the same KV, hidden rows and lengths."""
    assert facts["verify"] == facts["verify_device_masks"]


def test_prepare_for_verify_allocates_n_slots_and_the_tree_mask(facts: dict) -> None:
    """Real token allocator (CPU); request 0 sits in req_to_token row 1 and request 1 in row 0."""
    p = facts["prepare"]
    size = 6
    assert p["input_ids_are_draft"] is True
    assert p["slots"] == list(range(1, 1 + 2 * size)) and p["available_after"] == 64 - 2 * size
    assert p["req_to_token_1"] == p["slots"][:size] and p["req_to_token_0"] == p["slots"][size:]
    assert p["untouched"] == 0, "the cached prefix rows must not be rewritten"
    assert p["mask_is_tree"] and p["mask_equal"], "flat mask: per request N rows x (prefix + N), prefix True"
    assert p["mask_len"] == size * (4 + 6) + 2 * size * size


def test_sampling_verify_targets_each_request_and_keeps_greedy_requests_greedy(facts: dict) -> None:
    """Mixed batch (greedy, top-k at T 0.7, top-p + min-p at T 1.3): each row's target distribution follows
    the request's settings, and the greedy request walks its tree exactly like a greedy batch."""
    got = facts["sampling"]
    assert got["max_abs_err"] < 1e-5
    assert got["greedy_rows_one_hot"] is True
    assert got["greedy_request_walk"] == got["greedy_reference_walk"]
    assert got["greedy_request_walk"][0] >= 1, "the planted path must be accepted"


def test_vocab_parallel_topk_matches_full_log_softmax(facts: dict) -> None:
    assert facts["topk"]["ids_equal"] is True
    assert facts["topk"]["max_abs_err"] < 1e-4
    # TP 1, every row in one chunk (the served case): the same values and ids as chunk by chunk
    assert facts["topk"]["one_chunk_equals_chunked"] is True
    assert facts["topk"]["one_chunk_dtypes"] == ["torch.float32", "torch.int64"]


def test_tree_stage_equals_the_reference_and_routes_through_its_graphs(facts: dict) -> None:
    """Patch ddtree-step-graph on CPU: the stage it captures is the reference tree path, the worker replays
    the graphs object for it (a stand-in capture here: no CUDA graphs on CPU;
    tests/gpu/test_tree_stage_graph_gpu.py replays real ones), and each case that must stay eager says why."""
    t = facts["tree_stage"]
    for name in ("tokens_equal", "parents_equal", "mask_equal", "ids_are_root_then_nodes"):
        assert t[name] is True, name
    assert t["positions_are_seq_len_plus_depth"] is True
    assert t["uncaptured_replay"] is None
    assert t["verify_input_through_graphs_equal"] is True
    assert t["calls_through_graphs"] == ["replay"]
    r = t["refusals"]
    assert "cpu" in r["cpu"] and "tensor parallel size 2" in r["tp2"]
    assert "SGLANG_DFLASH_STEP_GRAPHS_TP=1" in r["tp2"] and r["tp2_opted_in"] is None
    assert r["tp1_context"] is None and r["tp2_context"] == "graph_capture"
    assert "disabled" in r["no_graphs"]
    assert r["switched_off"] == "SGLANG_DFLASH_STEP_GRAPHS=0 (switched off)"
    assert r["unset"] is None  # on by default
    assert r["cuda_tp1"] is None


def test_vocab_parallel_topk_merges_across_two_tp_ranks(facts: dict) -> None:
    """Two CPU processes (gloo) each holding half the LM head: both build the same full-vocab top-k."""
    tp = facts["topk_tp2"]
    assert tp["ranks"] == [0, 1]
    assert tp["all_equal_reference"] and tp["same_on_all_ranks"], tp
    assert tp["max_abs_err"] < 1e-4


def test_sampling_verify_applies_rank_0s_walk_on_every_tp_rank(facts: dict) -> None:
    """Two gloo ranks drawing different coins: verify applies rank 0's walk (accept length, path, bonus)."""
    tp = facts["topk_tp2"]
    assert tp["ranks_drew_differently"], "the ranks' own walks must differ, or the broadcast is not exercised"
    assert tp["walk_same_on_all_ranks"] and tp["walk_is_rank0s"], tp


def test_drafter_path_is_required(facts: dict) -> None:
    got = facts["args_no_drafter"]
    assert got.get("error") == "ValueError" and "--speculative-draft-model-path" in got["message"], got


def test_only_custom_logit_processors_are_refused_under_ddtree_and_dflash(facts: dict) -> None:
    """Penalties, min_new_tokens, logit bias and stops are served per tree row (patch ddtree-request-options);
    a custom logit processor is a one-line 400 from the scheduler's check, under DDTREE and DFLASH alike."""
    r = facts["requests"]
    for case in (
        "plain",
        "greedy_logit_bias",
        "frequency",
        "presence",
        "repetition",
        "min_new_tokens",
        "several",
    ):
        assert r[case] is None, (case, r[case])
    for case, mode in (("custom_logit_processor", "DDTREE"), ("dflash_custom_logit_processor", "DFLASH")):
        message = r[case]
        assert message and message.startswith(f"{mode} speculative decoding does not support"), (
            case,
            message,
        )
        assert "custom_logit_processor" in message and "\n" not in message, message
    assert r["dflash_penalties"] is None
    front = r["refusal"]
    assert front["ddtree"] and front["ddtree"].startswith("DDTREE speculative decoding does not support"), (
        front
    )
    assert front["dflash_batch"] and front["dflash_batch"].startswith("DFLASH"), front
    assert front["batch_without"] is None and front["plain"] is None and front["eagle"] is None, front
    assert r["dflash_has_no_extra_check"], "the scheduler hook must leave plain DFLASH's enum unchanged"


def test_verify_batch_with_a_custom_logit_processor_is_an_invariant_error(facts: dict) -> None:
    b = facts["batch_invariant"]
    assert b["clean"] is None and b["none"] is None
    assert b["penalties"] is None and b["custom"] == "a custom logit processor"


def test_sliding_window_targets_are_refused_at_start(facts: dict) -> None:
    w = facts["sliding_window"]
    assert (w["full"], w["runner_window"], w["layer_window"]) == (None, 4096, 512)
    assert w["worker_error"] and "sliding-window attention (window 4096)" in w["worker_error"], w


def test_no_greedy_fallback_warning_for_ddtree(facts: dict) -> None:
    """Control: DFLASH itself still warns when sgl_kernel's chain sampling kernel is missing."""
    got = facts["fallback_warning"]
    assert len(got["dflash"]) == 1, got
    assert got["ddtree"] == [], got


def test_a_kernel_failing_at_warm_up_is_a_warning_not_a_failed_start(facts: dict) -> None:
    got = facts["warm_up"]
    assert got["warmed"] == [], got
    assert len(got["warnings"]) == 1 and "PassManager::run failed (stub)" in got["warnings"][0], got


def test_triton_sampling_kernels_serve_unless_switched_off(facts: dict) -> None:
    """The served sampling verify takes the Triton kernels by default (they import here, as the greedy ones
    do); SGLANG_DDTREE_TRITON_SAMPLING=0 sends it to the torch reference."""
    got = facts["warm_up"]
    assert got["greedy_kernels_importable"], got
    assert got["sampling_kernels_by_default"] is True, got
    assert got["sampling_kernels_switched_off"] is False, got


@pytest.mark.parametrize("backend", ["pytorch", "flashinfer"])
def test_sampling_verify_filters_in_plain_decodings_order(facts: dict, backend: str) -> None:
    """Chi-square (p = 0.001) of the first two emitted tokens over 20000 sampled verify steps against the
    distribution plain decoding samples with the same backend (flashinfer with min-p in the batch: top-p on
    the top-k-renormalised mass; pytorch: on the whole mass); the other order must be rejected."""
    got = facts["filter_order"][backend]
    assert got["second_from_tree_row"] > 5000, "the token after the first must often come from a tree row"
    assert got["stat"] < got["critical"], got
    assert got["wrong_order_stat"] > 10 * got["wrong_order_critical"], got


def test_filter_order_reference_matches_sglangs_torch_sampler(facts: dict) -> None:
    """Control: the test's joint reference agrees with SGLang's own torch sampler, sampled on CPU."""
    got = facts["filter_order"]["torch_sampler_control"]
    assert got["stat"] < got["critical"], got
