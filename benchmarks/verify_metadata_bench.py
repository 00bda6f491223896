"""Host time of the triton backend's CUDA-graph target-verify metadata: upstream's torch ops against 0013.

    python benchmarks/verify_metadata_bench.py --sglang ROOT [--bs 1 8 32 64] [--contexts 256 4096]
        [--num-draft 17] [--iters 300] [--device cuda] [--json FILE]

ROOT holds a patched `sglang/` (the series applied: /tmp/site after tests/gpu/device_ddtree.sh, or
.work/patches/ddtree-verify-metadata/tree). Nothing of SGLang is imported: the two Triton kernel files
(triton_ops/kv_indices.py, triton_ops/verify_metadata.py) are loaded by path, and the replay methods of
TritonAttnBackend (_update_target_verify_buffers, its _fast twin, _fill_kv_indptr_and_indices,
use_fast_verify_metadata) are compiled from triton_backend.py's own source onto a small stand-in holding the
buffers the graph runner's replay passes (so the bench runs on a GPU machine with only torch and Triton).
One DDTREE target verify per call: bs requests of --contexts prefix tokens (each request's length drawn
around it, the first one 0), N = --num-draft tokens each, with a tree mask to copy. Columns, per call:
  host_old / host_new   microseconds of host time (Python and launches, no sync), over --iters calls, with
                        SGLANG_DDTREE_FAST_METADATA off / on
  wall_old / wall_new   microseconds per call including the GPU's work (synchronised at the end of the loop)
  launches_old / _new   kernels launched per call (torch profiler, CUDA only)
  same                  the four buffers (and the mask copy) equal between the two paths
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

import torch

ATTENTION = Path("sglang/srt/layers/attention")
METHODS = (
    "_update_target_verify_buffers",
    "_update_target_verify_buffers_fast",
    "_fill_kv_indptr_and_indices",
    "use_fast_verify_metadata",
)
COLUMNS = ("bs", "context", "host_old", "host_new", "wall_old", "wall_new", "launches_old", "launches_new")
COLUMNS += ("same",)
BUFFERS = ("qo_indptr", "kv_indptr", "mask_indptr", "cuda_graph_kv_indices", "cuda_graph_custom_mask")
GARBAGE = -977


def load_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def backend_class(root: Path) -> type:
    """TritonAttnBackend's replay methods, compiled from the patched source onto a bare class."""
    attention = root / ATTENTION
    source_path = attention / "triton_backend.py"
    if not source_path.is_file():
        raise SystemExit(f"{source_path}: missing; --sglang must hold a patched sglang/ (see tests/gpu)")
    kv_indices = load_file(attention / "triton_ops" / "kv_indices.py", "bench_kv_indices")
    metadata = load_file(attention / "triton_ops" / "verify_metadata.py", "bench_verify_metadata")
    tree = ast.parse(source_path.read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonAttnBackend"]
    found = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in METHODS}
    missing = sorted(set(METHODS) - set(found))
    if missing:
        raise SystemExit(f"{source_path}: no {', '.join(missing)}: is patch ddtree-verify-metadata applied?")
    bench_cls = ast.ClassDef(
        name="ReplayMetadata", bases=[], keywords=[], body=[found[m] for m in METHODS], decorator_list=[]
    )
    future = ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0)
    module = ast.fix_missing_locations(ast.Module(body=[future, bench_cls], type_ignores=[]))
    namespace = {
        "torch": torch,
        "create_flashinfer_kv_indices_triton": kv_indices.create_flashinfer_kv_indices_triton,
        "fill_target_verify_metadata": metadata.fill_target_verify_metadata,
    }
    exec(compile(module, str(source_path), "exec"), namespace)  # SGLang's own methods, from its file
    return namespace["ReplayMetadata"]


def make_case(cls: type, bs: int, context: int, num_draft: int, device: str, fast: bool, seed: int):
    """A stand-in backend with graph-sized buffers (garbage outside what a fill writes) and one batch."""
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(max(context // 2, 1), context + context // 2 + 1, (bs,), generator=gen)
    lens[0] = 0
    pool, width = bs + 8, int(lens.max()) + 16
    req_to_token = torch.randperm(pool * width, generator=gen).to(torch.int32).view(pool, width)
    rows = torch.randperm(pool, generator=gen)[:bs]
    total = int(lens.sum())
    mask = torch.randint(0, 2, (num_draft * (total + num_draft * bs),), generator=gen, dtype=torch.uint8)
    backend = cls()
    kv_indptr = torch.full((bs + 9,), GARBAGE, dtype=torch.int32)
    mask_indptr = torch.full((bs + 9,), GARBAGE, dtype=torch.int64)
    kv_indptr[0] = mask_indptr[0] = 0
    buffers = dict(
        qo_indptr=torch.full((bs + 9,), GARBAGE, dtype=torch.int64),
        kv_indptr=kv_indptr,
        mask_indptr=mask_indptr,
        cuda_graph_kv_indices=torch.full((total + 64,), GARBAGE, dtype=torch.int64),
        cuda_graph_custom_mask=torch.zeros(mask.shape[0] + 64, dtype=torch.uint8),
        req_to_token=req_to_token,
    )
    backend.__dict__.update({name: t.to(device) for name, t in buffers.items()})
    backend.__dict__.update(
        fast_verify_metadata=fast, sliding_window_size=None, window_kv_indptr=None,
        num_draft_tokens=num_draft, device=torch.device(device),
    )  # fmt: skip
    batch = SimpleNamespace(
        seq_lens=lens.to(torch.int32).to(device),  # the graph runner's seq_lens buffer is int32
        rows=rows.to(torch.int64).to(device),
        spec_info=SimpleNamespace(custom_mask=mask.to(device)),
    )
    return backend, batch


def call(backend, batch) -> None:
    backend._update_target_verify_buffers(batch.rows.shape[0], batch.seq_lens, batch.rows, batch.spec_info)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def launches(backend, batch, device: str) -> int | None:
    if not device.startswith("cuda"):
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call(backend, batch)
        sync(device)
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def measure(cls: type, bs: int, context: int, args) -> dict:
    row: dict = {"bs": bs, "context": context}
    filled = {}
    for label, fast in (("old", False), ("new", True)):
        seed = bs * 7919 + context
        backend, batch = make_case(cls, bs, context, args.num_draft, args.device, fast, seed)
        for _ in range(args.warmup):
            call(backend, batch)
        sync(args.device)
        start = time.perf_counter()
        for _ in range(args.iters):
            call(backend, batch)
        host = time.perf_counter() - start
        sync(args.device)
        wall = time.perf_counter() - start
        row[f"host_{label}"] = round(host / args.iters * 1e6, 1)
        row[f"wall_{label}"] = round(wall / args.iters * 1e6, 1)
        row[f"launches_{label}"] = launches(backend, batch, args.device)
        filled[label] = {name: getattr(backend, name).cpu() for name in BUFFERS}
    row["same"] = all(torch.equal(filled["old"][n], filled["new"][n]) for n in filled["old"])
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sglang", type=Path, required=True, help="folder holding the patched sglang/")
    parser.add_argument("--bs", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--num-draft", type=int, default=17)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("verify_metadata_bench: no CUDA device (--device cpu with TRITON_INTERPRET=1)", file=sys.stderr)
        return 2
    cls = backend_class(args.sglang)
    rows = []
    print(" ".join(f"{c:>12}" for c in COLUMNS), flush=True)
    for context in args.contexts:
        for bs in args.bs:
            row = measure(cls, bs, context, args)
            rows.append(row)
            print(" ".join(f"{row[c]!s:>12}" for c in COLUMNS), flush=True)
    if args.json:
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps({"num_draft": args.num_draft, "iters": args.iters, "rows": rows}, indent=1))
        tmp.replace(args.json)
    return 0 if all(row["same"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
