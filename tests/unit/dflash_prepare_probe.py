"""Run inside the CPU SGLang environment (patched 0.5.13.post1): what patch dflash-overlap-prepare-trim
changes in the graph replays' host preparation, checked against the code it replaced. Prints one line
`DFLASH-PREPARE-PROBE {json}`.

- step_graphs.InputCopier (BatchGraphs.replay's input copies) against a slice and a copy_ per input, for the
  v2 DDTREE step's four stages (block, tree, commit, append; mixed dtypes, a strided argument, fewer rows than
  the buffer): the same buffer bytes, the aten ops it dispatches, its host time.
- CudaGraphBufferRegistry.fill_from with the batch filling its captured size (the padding walk skipped) and
  padded (the walk runs): the same buffers as the per-slot reset would leave, and reset_padding's calls.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
import types


def _time_us(fn, repeat: int = 2000) -> float:
    for _ in range(50):
        fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return 1e6 * (time.perf_counter() - start) / repeat


def _count_ops(fn) -> dict:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: dict[str, int] = {}

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            name = func._schema.name.split("::")[-1]
            self.ops[name] = self.ops.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    with Count() as counter:
        fn()
    return counter.ops


def _stage_inputs(torch, bs: int, n: int, block: int, hidden: int) -> dict:
    """The v2 DDTREE step's stage inputs at batch size `bs` (shapes and dtypes as the worker passes them)."""
    g = torch.Generator().manual_seed(0)
    i64 = lambda *s: torch.randint(0, 1000, s, generator=g)  # noqa: E731
    tokens = i64(bs, block)
    return {
        "block": [i64(bs), i64(bs), i64(bs)],
        "tree": [torch.randn(bs * (block - 1), hidden, generator=g).to(torch.bfloat16), tokens[:, 0],
                 i64(bs)],
        "commit": [i64(bs), i64(bs, n - 1), i64(bs), i64(bs, n), i64(bs), i64(bs)],
        # an argument of another dtype than its buffer (an int32 length into int64): the per-input fallback
        "mixed": [i64(bs), i64(bs).to(torch.int32)],
        "append": [torch.randn(bs * n, hidden, generator=g).to(torch.bfloat16), i64(bs), i64(bs), i64(bs),
                   i64(bs, block)],
    }  # fmt: skip


def copies(torch) -> dict:
    from sglang.srt.speculative.step_graphs import InputCopier

    out: dict = {"stages": {}}
    for bs in (1, 4):
        stages = _stage_inputs(torch, bs, n=9, block=8, hidden=64)
        for name, args in stages.items():
            # buffers sized for 8 requests; "mixed": int64 buffers for an int32 argument
            buffers = [
                torch.zeros((8 * (a.shape[0] // bs), *a.shape[1:]), dtype=torch.int64 if name == "mixed" else
                            a.dtype) for k, a in enumerate(args)
            ]  # fmt: skip
            old = [b.clone() for b in buffers]

            def per_input(bufs=old, args=args) -> None:
                for buf, arg in zip(bufs, args, strict=True):
                    buf[: arg.shape[0]].copy_(arg)

            copier = InputCopier(buffers)

            def grouped(copier=copier, args=args) -> None:
                copier(args)

            per_input()
            grouped()
            same = all(torch.equal(a, b) for a, b in zip(old, buffers, strict=True))
            out["stages"][f"{name}_bs{bs}"] = {
                "same": same,
                "ops_per_input": _count_ops(per_input),
                "ops_grouped": _count_ops(grouped),
                "us_per_input": round(_time_us(per_input), 2),
                "us_grouped": round(_time_us(grouped), 2),
            }
    # one copier across batch sizes (its kept views are per row count): 4 rows, then 1, then 3
    buffers = [torch.zeros(8, dtype=torch.int64) for _ in range(3)]
    old = [b.clone() for b in buffers]
    copier = InputCopier(buffers)
    for rows in (4, 1, 3):
        args = [torch.arange(rows) + 10 * rows + k for k in range(3)]
        copier(args)
        for buf, arg in zip(old, args, strict=True):
            buf[: arg.shape[0]].copy_(arg)
    out["across_batch_sizes_same"] = all(torch.equal(a, b) for a, b in zip(old, buffers, strict=True))
    return out


def fill(torch) -> dict:
    from sglang.srt.model_executor import cuda_graph_buffer_registry as reg

    registry = reg.CudaGraphBufferRegistry(device=torch.device("cpu"), max_bs=4, max_num_tokens=16)
    slots = [
        reg.GraphSlot("input_ids", lambda b, t: (t,), torch.int64, axis="tokens"),
        reg.GraphSlot("positions", lambda b, t: (t,), torch.int64, axis="tokens"),
        reg.GraphSlot("seq_lens", lambda b, t: (b,), torch.int32, axis="bs",
                      padding_policy=reg.PaddingPolicy.FILL_SENTINEL, pad_value=1),
        reg.GraphSlot("req_pool_indices", lambda b, t: (b,), torch.int64, axis="bs",
                      padding_policy=reg.PaddingPolicy.FILL_SENTINEL, pad_value=0),
        reg.GraphSlot("out_cache_loc", lambda b, t: (t,), torch.int64, axis="tokens",
                      padding_policy=reg.PaddingPolicy.FILL_SENTINEL, pad_value=0),
    ]  # fmt: skip
    for slot in slots:
        registry.register_slot(slot)
    calls = []
    original = reg.GraphSlot.reset_padding

    def counted(self, raw_n, padded_n):
        calls.append((self.name, raw_n, padded_n))
        return original(self, raw_n, padded_n)

    reg.GraphSlot.reset_padding = counted
    result: dict = {}
    try:
        for raw_bs, padded_bs in ((4, 4), (2, 4)):
            for slot in slots:  # stale values from an earlier, larger batch
                slot.buffer.fill_(77)
            fb = types.SimpleNamespace(
                input_ids=torch.arange(raw_bs * 4) + 10,
                positions=torch.arange(raw_bs * 4) + 20,
                seq_lens=torch.arange(raw_bs, dtype=torch.int32) + 5,
                req_pool_indices=torch.arange(raw_bs) + 1,
                out_cache_loc=torch.arange(raw_bs * 4) + 100,
            )
            calls.clear()
            registry.fill_from(fb, raw_bs=raw_bs, padded_bs=padded_bs, raw_num_tokens=raw_bs * 4,
                               padded_num_tokens=padded_bs * 4)  # fmt: skip
            expected = {}
            for slot in slots:
                n = raw_bs * 4 if slot.axis == "tokens" else raw_bs
                full = padded_bs * 4 if slot.axis == "tokens" else padded_bs
                want = slot.buffer.clone()
                want[:n] = getattr(fb, slot.name)
                if slot.padding_policy == reg.PaddingPolicy.FILL_SENTINEL:
                    want[n:full] = slot.pad_value
                else:
                    want[n:full] = 77
                expected[slot.name] = torch.equal(want, slot.buffer)
            result[f"raw{raw_bs}_padded{padded_bs}"] = {
                "buffers_as_expected": expected,
                "reset_calls": len(calls),
            }
        fb = types.SimpleNamespace(**{s.name: getattr(fb, s.name)[: 2 * 4 if s.axis == "tokens" else 2]
                                      for s in slots})  # fmt: skip
        reg.GraphSlot.reset_padding = original
        result["us_fill_unpadded"] = round(
            _time_us(
                lambda: registry.fill_from(fb, raw_bs=2, padded_bs=2, raw_num_tokens=8, padded_num_tokens=8)
            ),
            2,
        )
    finally:
        reg.GraphSlot.reset_padding = original
    return result


def main() -> None:
    try:
        import torch

        torch.set_num_threads(1)
        out = {"copies": copies(torch), "fill": fill(torch)}
    except Exception:
        out = {"probe_error": traceback.format_exc()}
    print("DFLASH-PREPARE-PROBE " + json.dumps(out), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
