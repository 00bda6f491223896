"""SGLang's Triton extend attention with a DDTree tree mask, on CPU in Triton's interpreter.

Runs the patched sglang 0.5.13.post1 `extend_attention_fwd` (TRITON_INTERPRET=1; the Triton backend's
target-verify attention) on a tiny batch: prefix K/V through kv_indices, the tree tokens as the extend part,
the uint8 custom mask from ddtree_utils.flatten_verify_mask. Checks the output against masked softmax
attention (grouped-query shapes, and the MLA target's: one 576-wide latent head, V its first 512 columns),
and that Triton raises no "tl.where with a non-boolean condition" deprecation warning (patch
ddtree-triton-mask-bool; pristine 0.5.13.post1 warns here). The device counterpart is
tests/gpu/test_ddtree_triton_mask.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401  (fixture)

CHECK = r"""
import json, warnings, torch
from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd
from sglang.srt.speculative.ddtree_utils import build_ddtree, flatten_verify_mask


def tree_mask_case(heads, kv_heads, dim, v_dim, budget, seq_lens, skip_prefix_values):
    size, bs, total = budget + 1, len(seq_lens), sum(seq_lens)
    gen = torch.Generator().manual_seed(0)
    tree = build_ddtree(torch.randn(bs, 3, 20, generator=gen).log_softmax(-1), budget, 2)
    k_buffer = torch.randn(total + bs * size, kv_heads, dim, generator=gen)
    # MLA (v_dim < dim): one latent head, V is the first v_dim columns of the same row, as MLATokenToKVPool
    v_buffer = k_buffer[..., :v_dim] if v_dim < dim else torch.randn(k_buffer.shape, generator=gen)
    q = torch.randn(bs * size, heads, dim, generator=gen)
    k_extend, v_extend = k_buffer[total:].clone(), v_buffer[total:].clone()
    lens = torch.tensor(seq_lens)
    qo_indptr = (torch.arange(bs + 1) * size).int()
    kv_indptr = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)]).int()
    mask = flatten_verify_mask(tree.mask, lens, total).to(torch.uint8)
    mask_indptr = torch.cat([torch.zeros(1, dtype=torch.long), (size * (lens + size)).cumsum(0)])

    expected, start = [], 0
    for b, prefix in enumerate(seq_lens):
        rows = slice(b * size, (b + 1) * size)
        group = heads // kv_heads
        ks = torch.cat([k_buffer[start:start + prefix], k_extend[rows]]).repeat_interleave(group, 1)
        vs = torch.cat([v_buffer[start:start + prefix], v_extend[rows]]).repeat_interleave(group, 1)
        start += prefix
        allow = torch.ones(size, prefix + size, dtype=torch.bool)
        allow[:, prefix:] = tree.mask[b]
        scores = torch.einsum("qhd,khd->hqk", q[rows], ks) / dim**0.5
        weights = scores.masked_fill(~allow, float("-inf")).softmax(-1)
        expected.append(torch.einsum("hqk,khd->qhd", weights, vs))
    expected = torch.cat(expected)

    result = {"tree_has_branches": bool((tree.parents[:, 1:] < tree.parents[:, :-1] + 1).any())}
    for skip_prefix in skip_prefix_values:
        out = q.new_empty(bs * size, heads, v_dim)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            extend_attention_fwd(q, k_extend, v_extend, out, k_buffer, v_buffer, qo_indptr, kv_indptr,
                                 torch.arange(total), mask, True, mask_indptr, size, 1.0, 1.0,
                                 skip_prefix_custom_mask=skip_prefix)
        result[f"skip_prefix_{skip_prefix}"] = {
            "close": bool(torch.allclose(out, expected, atol=1e-4)),
            "non_boolean_where": sum("non-boolean condition" in str(w.message) for w in caught),
        }
    return result


result = tree_mask_case(2, 1, 16, 16, 4, [3, 5], (True, False))
# the MLA target's absorbed verify (smoke --arch mla, Kimi K2.6): 8 heads on one 512 + 64 latent head
result["mla"] = tree_mask_case(8, 1, 576, 512, 4, [3, 5], (True,))
print("MASK-CHECK " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def mask_results(sglang_cpu_path: str) -> dict:  # noqa: F811
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": sglang_cpu_path}
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=900)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("MASK-CHECK ")]
    assert lines, f"mask check printed nothing (rc {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("MASK-CHECK "))


@pytest.mark.parametrize("skip_prefix", [True, False])
def test_tree_mask_attention_equals_masked_softmax_without_non_boolean_where(
    mask_results: dict, skip_prefix: bool
) -> None:
    got = mask_results[f"skip_prefix_{skip_prefix}"]
    assert got["close"], "extend attention with the tree mask differs from masked softmax attention"
    assert got["non_boolean_where"] == 0, "Triton warned: tl.where with a non-boolean (uint8) condition"


def test_the_tree_is_not_a_chain(mask_results: dict) -> None:
    assert mask_results["tree_has_branches"]


def test_tree_mask_attention_on_mla_shapes_equals_masked_softmax(mask_results: dict) -> None:
    """The shapes DeepSeek-V3 / Kimi K2.6's absorbed MLA hands the kernel in a verify pass: q and K 576 wide
    (kv_lora_rank 512 + rope 64) on one KV head, V the latent's first 512 columns."""
    got = mask_results["mla"]
    assert got["tree_has_branches"]
    assert got["skip_prefix_True"]["close"], "MLA-shaped extend attention with the tree mask differs"
    assert got["skip_prefix_True"]["non_boolean_where"] == 0
