"""Probe for patch spec-v1-step-indices, run in the patched CPU SGLang environment
(tests.unit.test_ddtree_sglang.run_probe): the verify's keep/free slot indices
(dflash_step_host.prefix_step_indices for DFLASH's chain, path_step_indices for DDTREE's path), built with
numpy, against the per-request loop they replace (written out below as the reference), on random batches;
and both timed, interleaved.

    python tests/unit/step_indices_probe.py check SEED N     -> STEP-INDICES-CHECK {json}
    python tests/unit/step_indices_probe.py bench REPEATS    -> STEP-INDICES-BENCH {json}
"""

from __future__ import annotations

import functools
import json
import random
import statistics
import sys
import time
import traceback

import torch


def reference_prefix(commit_lens: list[int], width: int) -> tuple[list[int], list[int]]:
    """The loop of patch ddtree-fast-step (0008): request b keeps its first commit_lens[b] slots."""
    kept: list[int] = []
    freed: list[int] = []
    for row, count in enumerate(commit_lens):
        base = row * width
        kept.extend(range(base, base + count))
        freed.extend(range(base + count, base + width))
    return kept, freed


def reference_path(commit_lens: list[int], nodes: list[list[int]], width: int) -> tuple[list[int], list[int]]:
    """The loop of patch ddtree-fast-step (0008): the root (slot 0), then the accepted nodes' slots (node i in
    slot i + 1) in path order, the first commit_lens[b] of them; every other slot freed, ascending."""
    kept: list[int] = []
    freed: list[int] = []
    for row, (count, path_nodes) in enumerate(zip(commit_lens, nodes, strict=True)):
        base = row * width
        path = [0, *(int(node) + 1 for node in path_nodes)][:count]
        kept.extend(base + slot for slot in path)
        keep = set(path)
        freed.extend(base + slot for slot in range(width) if slot not in keep)
    return kept, freed


def random_batch(rng: random.Random, bs: int, width: int) -> tuple[list[int], list[list[int]]]:
    """A verify batch as the walk reports it: per request its accepted nodes (distinct node ids below
    width - 1, in path order, not sorted) and a commit count that may cut the path (a stop inside it) or
    be 0."""
    nodes, counts = [], []
    for _ in range(bs):
        depth = rng.randint(0, width - 1)
        path = rng.sample(range(width - 1), depth)
        nodes.append(path)
        counts.append(rng.choice([0, depth + 1, depth + 1, rng.randint(0, depth + 1)]))
    return counts, nodes


def check(seed: int, n: int) -> dict:
    from sglang.srt.speculative import dflash_step_host as host
    from sglang.srt.speculative.dflash_step_host import path_step_indices, prefix_step_indices

    rng = random.Random(seed)
    cpu = torch.device("cpu")
    tallies = {"cases": 0, "differ": 0, "first": [], "dtypes": set(), "largest_bs": 0, "path_numpy": 0,
               "prefix_numpy": 0}  # fmt: skip
    for case in range(n):
        bs, width = rng.choice([0, 1, 2, 5, 7, 8, 15, 16, 32, 33]), rng.choice([1, 2, 9, 17, 33])
        tallies["path_numpy"] += bs >= host.PATH_NUMPY_MIN_BS
        tallies["prefix_numpy"] += bs >= host.PREFIX_NUMPY_MIN_BS
        counts, nodes = random_batch(rng, bs, width)
        chain_counts = [min(c, width) for c in counts]
        got = {
            "prefix": prefix_step_indices(chain_counts, width, cpu),
            "path": path_step_indices(counts, nodes, width, cpu),
        }
        want = {"prefix": reference_prefix(chain_counts, width), "path": reference_path(counts, nodes, width)}
        for kind in ("prefix", "path"):
            step = got[kind]
            tallies["dtypes"].update({str(step.kept.dtype), str(step.freed.dtype)})
            if (step.kept.tolist(), step.freed.tolist()) != want[kind]:
                tallies["differ"] += 1
                if len(tallies["first"]) < 3:
                    tallies["first"].append(
                        {"case": case, "kind": kind, "counts": counts, "nodes": nodes, "width": width}
                    )
        tallies["cases"] += 1
        tallies["largest_bs"] = max(tallies["largest_bs"], bs)
    tallies["dtypes"] = sorted(tallies["dtypes"])
    return tallies


def old_path(counts: list[int], nodes: list[list[int]], width: int) -> None:
    """The replaced path: the loop, then the one host tensor, its copy and the two views, as before."""
    from sglang.srt.speculative.dflash_step_host import StepIndices, host_ints_to_device

    kept, freed = reference_path(counts, nodes, width)
    both = host_ints_to_device(kept + freed, torch.int64, torch.device("cpu"))
    StepIndices(both[: len(kept)], both[len(kept) :])


def old_prefix(counts: list[int], width: int) -> None:
    from sglang.srt.speculative.dflash_step_host import StepIndices, host_ints_to_device

    kept, freed = reference_prefix(counts, width)
    both = host_ints_to_device(kept + freed, torch.int64, torch.device("cpu"))
    StepIndices(both[: len(kept)], both[len(kept) :])


def bench(repeats: int) -> dict:
    from sglang.srt.speculative import dflash_step_host as host

    rng = random.Random(7)
    cpu = torch.device("cpu")
    rows = []
    for width in (9, 17):
        for bs in (1, 8, 32):
            counts, nodes = random_batch(rng, bs, width)
            counts = [max(1, min(c, 4)) for c in counts]  # two or three drafts accepted, as served
            chain = [min(c, width) for c in counts]

            pairs = {
                "path": (
                    functools.partial(old_path, counts, nodes, width),
                    functools.partial(host.path_step_indices, counts, nodes, width, cpu),
                ),
                "prefix": (
                    functools.partial(old_prefix, chain, width),
                    functools.partial(host.prefix_step_indices, chain, width, cpu),
                ),
            }
            for kind, (old, new) in pairs.items():
                times = {"old": [], "new": []}
                for _ in range(repeats):
                    for name, fn in (("old", old), ("new", new)):
                        start = time.perf_counter()
                        for _ in range(20):
                            fn()
                        times[name].append((time.perf_counter() - start) / 20 * 1e6)
                rows.append({"kind": kind, "width": width, "bs": bs,
                             "old_us": round(statistics.median(times["old"]), 1),
                             "new_us": round(statistics.median(times["new"]), 1)})  # fmt: skip
    return {"repeats": repeats, "rows": rows}


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "bench"
    marker = "STEP-INDICES-BENCH" if mode == "bench" else "STEP-INDICES-CHECK"
    try:
        if mode == "bench":
            out = bench(int(sys.argv[2]) if len(sys.argv) > 2 else 100)
        elif mode == "check":
            out = check(int(sys.argv[2]), int(sys.argv[3]))
        else:
            raise SystemExit(f"unknown mode {mode!r}: bench [REPEATS] | check SEED N")
    except Exception:
        out = {"probe_error": traceback.format_exc()}
    print(f"{marker} " + json.dumps(out))
