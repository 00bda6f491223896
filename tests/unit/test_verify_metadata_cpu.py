"""One-launch target-verify metadata (patch ddtree-verify-metadata) on CPU, in the real patched sglang.

In Triton's interpreter (TRITON_INTERPRET=1, tests/unit/verify_metadata_probe.py): on hypothesis-drawn
batches (bs 1-24 plus a 300-request one, lengths 0, short and over one gather block, pool rows permuted,
int32/int64 lengths and pool indices, N 1-17, with and without a custom mask) the triton backend's CUDA-graph
replay entry gives the same qo_indptr, kv_indptr, kv_indices, mask_indptr and custom-mask buffers (and the
same returned metadata) with SGLANG_DDTREE_FAST_METADATA on as upstream's torch ops give with it off, and
they hold what they mean (plain torch). The backend is made without __init__ (it needs a GPU ModelRunner).
Also: the switch and the sliding-window rule, and `_target_verify_metadata_kernel` compiled by Triton's
real compiler (LLVM + bundled ptxas, no GPU) for every target arch. Timing needs the H200: the device
profile of issue 25 (`device_pair.sh profile`, the server with and without the switch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_ddtree_kernels import target_archs
from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("verify_metadata_probe.py")


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    env = {"TRITON_INTERPRET": "1", "SGLANG_DDTREE_FAST_METADATA": None, "VERIFY_METADATA_EXAMPLES": "40"}
    return run_probe(PROBE, "VERIFY-METADATA-PROBE", sglang_cpu_path, timeout=900, env=env)


def test_fast_metadata_equals_upstreams_on_random_batches(facts: dict) -> None:
    random = facts["random"]
    assert random["failures"] == []
    assert random["examples"] >= 40, random
    assert random["largest_bs"] > 256, "a batch over PREFIX_BLOCK requests must be among the examples"


def test_the_switch_and_a_sliding_window_choose_the_path(facts: dict) -> None:
    assert facts["routing"] == {"on": True, "off": False, "on_window": False, "on_window_off": True}


def test_the_switch_is_on_unless_set_off(facts: dict) -> None:
    """On by default (the smoke and the stress passed with it on the H200); "0" or "false": upstream's ops."""
    env = facts["env"]
    assert env.pop("name") == "SGLANG_DDTREE_FAST_METADATA"
    assert env == {"unset": True, "0": False, "1": True, "false": False, "true": True}


COMPILE = r"""
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from sglang.srt.layers.attention.triton_ops import verify_metadata as vm

fn = vm._target_verify_metadata_kernel
result = {}
for arch in sys.argv[1:]:
    # seq_lens and req_pool_indices come as int32 or int64 (graph buffers: int32 lengths, int64 rows)
    for lens in ("i32", "i64"):
        for rows in ("i64", "i32"):
            sig = {"req_to_token_ptr": "*i32", "req_pool_indices_ptr": "*" + rows, "seq_lens_ptr": "*" + lens,
                   "qo_indptr_ptr": "*i64", "kv_indptr_ptr": "*i32", "kv_indices_ptr": "*i64",
                   "mask_indptr_ptr": "*i64"}
            constexprs = dict(req_to_token_stride=262144, NUM_DRAFT=17, PREFIX_BLOCK=vm.PREFIX_BLOCK,
                              GATHER_BLOCK=vm.GATHER_BLOCK)
            sig.update({name: "constexpr" for name in constexprs})
            source = ASTSource(fn=fn, signature=sig, constexprs=constexprs)
            kernel = triton.compile(source, target=GPUTarget("cuda", int(arch), 32), options={"num_warps": 4})
            result[f"{arch}:{lens}:{rows}"] = len(kernel.asm["cubin"])
print("VERIFY-METADATA-COMPILE " + json.dumps(result))
"""


def test_kernel_compiles_for_every_target_arch(sglang_cpu_path: str) -> None:  # noqa: F811
    env = {**os.environ, "PYTHONPATH": sglang_cpu_path}
    env.pop("TRITON_INTERPRET", None)
    archs = target_archs()
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, *archs], capture_output=True, text=True, env=env, timeout=900
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("VERIFY-METADATA-COMPILE ")]
    assert lines, f"compile check printed nothing (rc {done.returncode}):\n{done.stderr[-3000:]}"
    compiled = json.loads(lines[-1].removeprefix("VERIFY-METADATA-COMPILE "))
    for arch in archs:
        for variant in ("i32:i64", "i64:i64", "i32:i32", "i64:i32"):
            assert compiled.get(f"{arch}:{variant}", 0) > 1000, f"no sm_{arch} cubin for lens:rows {variant}"


def test_the_device_bench_runs_both_paths_and_finds_them_equal(sglang_cpu_path: str, tmp_path: Path) -> None:  # noqa: F811
    """benchmarks/verify_metadata_bench.py in the interpreter at toy sizes: its loader finds the patched
    methods and the two paths fill equal buffers (the GPU figures come from the same script on the device)."""
    patched = sglang_cpu_path.split(os.pathsep)[0]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": sglang_cpu_path}
    out = tmp_path / "bench.json"
    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "verify_metadata_bench.py"
    args = ["--sglang", patched, "--device", "cpu", "--bs", "1", "4", "--contexts", "40", "--iters", "2"]
    done = subprocess.run(
        [sys.executable, str(bench), *args, "--warmup", "1", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["bs"], r["context"], r["same"]) for r in rows] == [(1, 40, True), (4, 40, True)]
    assert all(r["host_old"] > 0 and r["host_new"] > 0 for r in rows)
