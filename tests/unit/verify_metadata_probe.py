"""Run inside the CPU SGLang environment with TRITON_INTERPRET=1 (tests/unit/test_verify_metadata_cpu.py):
the one-launch target-verify metadata of patch ddtree-verify-metadata against upstream's torch ops in the
same patched tree (the backend's replay method with SGLANG_DDTREE_FAST_METADATA off), and against a plain
torch statement of what the buffers mean. Prints one line `VERIFY-METADATA-PROBE {json}`.

Stand-in: TritonAttnBackend is made without __init__ (its constructor needs a ModelRunner with a GPU
model) and given the attributes the replay path reads; the methods compared are the patched ones.
"""

from __future__ import annotations

import json
import os
import traceback
from types import SimpleNamespace

import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

GARBAGE = -977  # what every buffer holds before a fill (index 0 of kv_indptr/mask_indptr: 0, as allocated)


def make_batch(seed: int, lens: list[int], num_draft: int, lens_dtype, pool_dtype, with_mask: bool) -> dict:
    """req_to_token with distinct entries, a permutation of pool rows, and the graph runner's buffers."""
    gen = torch.Generator().manual_seed(seed)
    bs = len(lens)
    pool = bs + 3
    context = max([*lens, 1]) + 7
    req_to_token = torch.randperm(pool * context, generator=gen).to(torch.int32).view(pool, context)
    rows = torch.randperm(pool, generator=gen)[:bs].to(pool_dtype)
    seq_lens = torch.tensor(lens, dtype=lens_dtype)
    mask_len = sum(num_draft * (n + num_draft) for n in lens)
    mask = torch.randint(0, 2, (mask_len,), generator=gen, dtype=torch.uint8) if with_mask else None
    return dict(req_to_token=req_to_token, rows=rows, seq_lens=seq_lens, num_draft=num_draft, mask=mask)


def make_backend(batch: dict, fast: bool, window=None):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    bs = batch["rows"].shape[0]
    max_bs = bs + 4
    total = int(batch["seq_lens"].sum())
    mask_len = batch["num_draft"] * (total + batch["num_draft"] * bs)
    backend = object.__new__(TritonAttnBackend)
    kv_indptr = torch.full((max_bs + 1,), GARBAGE, dtype=torch.int32)
    kv_indptr[0] = 0
    mask_indptr = torch.full((max_bs + 1,), GARBAGE, dtype=torch.int64)
    mask_indptr[0] = 0
    backend.__dict__.update(
        fast_verify_metadata=fast,
        sliding_window_size=window,
        window_kv_indptr=None,
        use_sliding_window_kv_pool=False,
        num_draft_tokens=batch["num_draft"],
        device=torch.device("cpu"),
        req_to_token=batch["req_to_token"],
        qo_indptr=torch.full((max_bs + 1,), GARBAGE, dtype=torch.int64),
        kv_indptr=kv_indptr,
        mask_indptr=mask_indptr,
        cuda_graph_kv_indices=torch.full((total + 64,), GARBAGE, dtype=torch.int64),
        cuda_graph_custom_mask=torch.full((mask_len + 64,), 201, dtype=torch.uint8),
        forward_metadata=None,
    )
    return backend


def replay(batch: dict, fast: bool) -> tuple[dict, object]:
    """The graph runner's replay entry (init_forward_metadata_out_graph) on a padded-buffer view."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend = make_backend(batch, fast)
    spec_info = SimpleNamespace(custom_mask=batch["mask"])
    view = SimpleNamespace(
        batch_size=batch["rows"].shape[0],
        forward_mode=ForwardMode.TARGET_VERIFY,
        req_pool_indices=batch["rows"],
        seq_lens=batch["seq_lens"],
        spec_info=spec_info,
        encoder_lens=None,
        out_cache_loc=None,
    )
    backend.init_forward_metadata_out_graph(view)
    returned = backend._update_target_verify_buffers(
        view.batch_size, view.seq_lens, view.req_pool_indices, spec_info
    )
    names = ("qo_indptr", "kv_indptr", "mask_indptr", "cuda_graph_kv_indices", "cuda_graph_custom_mask")
    buffers = {name: getattr(backend, name) for name in names}
    return buffers, returned


def meaning(batch: dict) -> dict:
    """What the four buffers must hold, stated in plain torch (no SGLang code)."""
    lens = batch["seq_lens"].to(torch.int64)
    n = batch["num_draft"]
    bs = lens.shape[0]
    zero = torch.zeros(1, dtype=torch.int64)
    table = batch["req_to_token"]
    rows = [table[int(r), : int(k)].to(torch.int64) for r, k in zip(batch["rows"], lens, strict=True)]
    return {
        "qo_indptr": torch.arange(bs + 1, dtype=torch.int64) * n,
        "kv_indptr": torch.cat([zero, lens.cumsum(0)]),
        "kv_indices": torch.cat(rows) if rows else zero[:0],
        "mask_indptr": torch.cat([zero, (n * (lens + n)).cumsum(0)]),
    }


def compare(batch: dict) -> list[str]:
    """What differs between the fast and upstream's replay, and between the fast buffers and their meaning."""
    problems = []
    slow, slow_returned = replay(batch, fast=False)
    quick, quick_returned = replay(batch, fast=True)
    for name in slow:
        if not torch.equal(slow[name], quick[name]):
            problems.append(f"buffer {name} differs from upstream's")
    for i, (a, b) in enumerate(zip(slow_returned, quick_returned, strict=True)):
        same = (a is None and b is None) or (
            isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
        )
        if not same:
            problems.append(f"returned item {i} differs from upstream's")
    bs = batch["rows"].shape[0]
    want = meaning(batch)
    total = int(want["kv_indptr"][-1])
    got = {
        "qo_indptr": quick["qo_indptr"][: bs + 1],
        "kv_indptr": quick["kv_indptr"][: bs + 1].to(torch.int64),
        "kv_indices": quick["cuda_graph_kv_indices"][:total],
        "mask_indptr": quick["mask_indptr"][: bs + 1],
    }
    for name, value in want.items():
        if not torch.equal(got[name], value):
            problems.append(f"{name} is not its meaning")
    if not bool((quick["cuda_graph_kv_indices"][total:] == GARBAGE).all()):
        problems.append("kv_indices written past the last request")
    if not bool((quick["qo_indptr"][bs + 1 :] == GARBAGE).all()):
        problems.append("qo_indptr written past bs + 1")
    return problems


LENS = st.lists(st.one_of(st.just(0), st.integers(1, 40), st.integers(500, 1300)), min_size=1, max_size=24)
CHECKED: list[int] = []
FOUND: list[str] = []


@settings(max_examples=int(os.environ.get("VERIFY_METADATA_EXAMPLES", "40")), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(
    seed=st.integers(0, 2**31 - 1),
    lens=LENS,
    num_draft=st.sampled_from([1, 2, 9, 17]),
    lens_dtype=st.sampled_from([torch.int32, torch.int64]),
    pool_dtype=st.sampled_from([torch.int64, torch.int32]),
    with_mask=st.booleans(),
)
# more than PREFIX_BLOCK requests (the prefix loop runs twice), one over several gather blocks, all empty
@example(seed=1, lens=[0] + [3] * 299 + [1100], num_draft=9, lens_dtype=torch.int32, pool_dtype=torch.int64,
         with_mask=True)  # fmt: skip
@example(seed=2, lens=[5000, 0, 1], num_draft=17, lens_dtype=torch.int64, pool_dtype=torch.int64,
         with_mask=False)  # fmt: skip
@example(seed=3, lens=[0, 0], num_draft=2, lens_dtype=torch.int32, pool_dtype=torch.int64, with_mask=True)
def check_random_batches(seed, lens, num_draft, lens_dtype, pool_dtype, with_mask) -> None:
    batch = make_batch(seed, lens, num_draft, lens_dtype, pool_dtype, with_mask)
    CHECKED.append(len(lens))
    problems = compare(batch)
    assert not problems, f"bs {len(lens)} N {num_draft}: {problems}"


def routing() -> dict:
    """Which path _update_target_verify_buffers takes: the switch, and a sliding window keeps upstream."""
    batch = make_batch(0, [4], 2, torch.int32, torch.int64, False)
    return {
        "on": make_backend(batch, True).use_fast_verify_metadata(),
        "off": make_backend(batch, False).use_fast_verify_metadata(),
        "on_window": make_backend(batch, True, window=128).use_fast_verify_metadata(),
        "on_window_off": make_backend(batch, True, window=-1).use_fast_verify_metadata(),
    }


def env_switch() -> dict:
    from sglang.srt.layers.attention import triton_backend

    seen = {}
    saved = os.environ.pop(triton_backend.FAST_METADATA_ENV, None)
    try:
        seen["unset"] = triton_backend.fast_verify_metadata_enabled()
        for value in ("0", "1", "false", "true"):
            os.environ[triton_backend.FAST_METADATA_ENV] = value
            seen[value] = triton_backend.fast_verify_metadata_enabled()
    finally:
        os.environ.pop(triton_backend.FAST_METADATA_ENV, None)
        if saved is not None:
            os.environ[triton_backend.FAST_METADATA_ENV] = saved
    seen["name"] = triton_backend.FAST_METADATA_ENV
    return seen


def main() -> None:
    result: dict = {}
    try:
        try:
            check_random_batches()
        except Exception as error:  # an assertion, or hypothesis' group of them
            for one in getattr(error, "exceptions", [error]):
                FOUND.append(f"{type(one).__name__}: {one}".splitlines()[0][:500])
        largest = max(CHECKED, default=0)
        result["random"] = {"examples": len(CHECKED), "largest_bs": largest, "failures": FOUND}
        result["routing"] = routing()
        result["env"] = env_switch()
    except Exception:  # the test prints the probe's own failure
        result["probe_error"] = traceback.format_exc()[-4000:]
    print("VERIFY-METADATA-PROBE " + json.dumps(result))


if __name__ == "__main__":
    main()
