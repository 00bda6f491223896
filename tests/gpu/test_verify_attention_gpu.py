"""Split-KV target-verify attention (patch ddtree-splitkv-verify) on the GPU, against the original kernel.

verify_attention_fwd and SGLang 0.5.13.post1's extend_attention_fwd get the same cases
(tests/verify_attention_cases.py: KV pool slots scattered, prefix through kv_indices, the draft tokens'
K/V as the extend part, the flat uint8 custom mask) in bf16 with the trained pair's target shapes
(benchmarks/pair: 4 query heads, 2 KV heads, head dim 64): DDTREE-16's trees (N 17) and DFLASH's causal
block (N 8) at contexts 256, 4096 and 8192, both checked against a float64 torch reference; a Kimi K2.6
MLA layer at TP 8 (8 heads, 576/512); no host sync (torch's sync debug mode set to error); CUDA-graph
capture replayed on new lengths and a new mask. Then the timing table
(benchmarks/verify_attention_bench.py): old vs new kernel beside decode and the roofline, CUDA-graphed,
at bs 1 (also 32768) and 32 over the contexts (printed: run pytest with -s; outputs compared at every
row). Needs a CUDA GPU and the patched sglang on the path (tests/gpu/README.md: /tmp/site).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
extend_attention = pytest.importorskip("sglang.srt.layers.attention.triton_ops.extend_attention")
verify_attention = pytest.importorskip("sglang.srt.layers.attention.triton_ops.verify_attention")

from benchmarks import verify_attention_bench  # noqa: E402
from benchmarks.gpu_timing import capture_without_sync  # noqa: E402
from tests.verify_attention_cases import VerifyCase, make_case, reference  # noqa: E402

PAIR = dict(heads=4, kv_heads=2, head_dim=64)  # benchmarks/pair: the Qwen3-like target's attention
KIMI_TP8 = dict(heads=8, kv_heads=1, head_dim=576, v_head_dim=512, mla=True)  # 64 heads / TP 8, MLA latent
CONTEXTS = (256, 4096, 8192)
TIMING = [(1, c) for c in (*CONTEXTS, 32768)] + [(32, c) for c in CONTEXTS]
SM_COUNT = torch.cuda.get_device_properties(0).multi_processor_count
BF16_TOL = 2e-2  # bf16 inputs and probabilities; the original kernel's error is the yardstick


def _run(kernel, case: VerifyCase, **extra) -> torch.Tensor:
    args = list(case.kernel_args())
    args[3] = torch.empty(
        case.q.shape[0], case.q.shape[1], case.v_extend.shape[-1], dtype=case.q.dtype, device="cuda"
    )
    kernel(*args, 1.0, 1.0, case.sm_scale, case.logit_cap, **extra)
    return args[3]


def _new(case: VerifyCase, **extra) -> torch.Tensor:
    return _run(verify_attention.verify_attention_fwd, case, sm_count=SM_COUNT, **extra)


def _old(case: VerifyCase) -> torch.Tensor:
    return _run(extend_attention.extend_attention_fwd, case)


def _lens(context: int, bs: int) -> list[int]:
    """Requests of different lengths up to `context`, none a multiple of the key tile."""
    return [max(1, context - 37 * i - (i > 0)) for i in range(bs)]


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("block, size", [("tree", 17), ("causal", 8), ("causal_mask", 8)])
def test_matches_reference_and_original(context: int, block: str, size: int) -> None:
    case = make_case(
        _lens(context, 3), block=block, num_draft_tokens=size, dtype=torch.bfloat16, device="cuda", **PAIR
    )
    want = reference(case)
    new_error = (_new(case).double() - want).abs().max().item()
    old_error = (_old(case).double() - want).abs().max().item()
    assert new_error < BF16_TOL, f"split-KV verify vs float64 reference: {new_error} (original: {old_error})"
    assert new_error <= 2 * old_error + 1e-3, f"split-KV {new_error} vs original {old_error}"


def test_empty_prefix_and_mla() -> None:
    case = make_case(
        [0, 4096, 129], block="tree", num_draft_tokens=17, dtype=torch.bfloat16, device="cuda", **PAIR
    )
    assert (_new(case).double() - reference(case)).abs().max().item() < BF16_TOL
    mla = make_case(
        [4096, 300], block="tree", num_draft_tokens=17, dtype=torch.bfloat16, device="cuda", **KIMI_TP8
    )
    want = reference(mla)
    new_error = (_new(mla).double() - want).abs().max().item()
    old_error = (_old(mla).double() - want).abs().max().item()
    assert new_error < BF16_TOL and new_error <= 2 * old_error + 1e-3, (new_error, old_error)


def test_no_host_sync_and_cuda_graph_replay() -> None:
    """Captured once at the maxima; replayed after the lengths, slots and tree changed in place."""
    first = make_case(
        [4000, 100], block="tree", num_draft_tokens=17, dtype=torch.bfloat16, device="cuda", **PAIR
    )
    second = make_case(
        [37, 4063], block="tree", num_draft_tokens=17, dtype=torch.bfloat16, device="cuda", seed=9, **PAIR
    )
    out = torch.empty_like(first.q)
    args = list(first.kernel_args())
    args[3] = out

    def call() -> None:
        verify_attention.verify_attention_fwd(*args, 1.0, 1.0, first.sm_scale, sm_count=SM_COUNT)

    graph, _ = capture_without_sync(call)  # a .item() or a host copy in call would raise
    for name in (
        "q",
        "k_extend",
        "v_extend",
        "k_buffer",
        "v_buffer",
        "kv_indptr",
        "kv_indices",
        "custom_mask",
    ):
        getattr(first, name).copy_(getattr(second, name))  # same sizes: same total prefix and pool
    first.mask_indptr.copy_(second.mask_indptr)
    graph.replay()
    torch.cuda.synchronize()
    assert (out.double() - reference(second)).abs().max().item() < BF16_TOL


def test_timing_old_vs_new() -> None:
    """The table the issue asks for (pair shapes, DDTREE-16 trees, beside decode and the roofline);
    measure_row compares old and new outputs at every row and raises on a difference."""
    rows = [verify_attention_bench.measure_row(bs, context, "pair", 17, 4800.0) for bs, context in TIMING]
    print("\n" + verify_attention_bench.format_table(rows, "pair", 17))
    assert all(row["max_difference"] < BF16_TOL for row in rows)
