"""`ddtree weights`: the fast checks by hand, the full hash and manifest writer (capture runs it on the source
host), and the lock and fetch actions of capture.py and fetch.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.weights.folders import check_drafter, check_target, require_folder
from ddtree.weights.hashes import (
    describe_hash_failure,
    full_hash,
    manifest_text,
    require_writable,
    write_manifest,
)


def _cmd_check(args: Any) -> int:
    summary = check_target(Path(args.target), args.model_type or None)
    print(
        f"ok   weights  {summary.path}: {summary.model_type}, {summary.num_hidden_layers} layers, "
        f"{len(summary.shards)} shards, {summary.total_bytes / 1e9:.1f} GB"
    )
    if args.drafter:
        drafter = check_drafter(
            Path(args.drafter), args.block_size, summary.num_hidden_layers, target=summary, tp=args.tp
        )
        print(f"ok   drafter  {drafter.path}: block size {drafter.block_size}")
    return 0


def _cmd_hash(args: Any) -> int:
    folder = Path(args.folder)
    require_folder(folder, "weights", "the folder argument")
    manifest = Path(args.manifest) if args.manifest else None
    if args.write:
        require_writable(Path(args.write), "--write")
    report = full_hash(folder, manifest=manifest, workers=args.workers)
    if args.write:
        write_manifest(report.digests, Path(args.write))
        print(f"wrote {args.write}: {len(report.digests)} shards ({report.seconds:.1f} s)")
    else:
        sys.stdout.write(manifest_text(report.digests))
    if manifest is not None and not report.ok:
        raise UserError(describe_hash_failure(report, folder, manifest))
    if manifest is not None:
        print(f"ok   {len(report.digests)} shards match {manifest}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    import argparse

    from ddtree.numbers import BLOCK_SIZE, TP_SIZE, WORKERS, arg_type

    parser = subparsers.add_parser(
        "weights", help="check a weights folder, hash it (manifest), or fetch the locked revision"
    )
    sub = parser.add_subparsers(dest="weights_command", required=True, metavar="ACTION")
    chk = sub.add_parser(
        "check", help="the fast check: config, model type, index, every shard header and size"
    )
    chk.add_argument("target", help="the target model folder")
    chk.add_argument("--model-type", default="kimi_k25", help="expected config.json model_type ('' for any)")
    chk.add_argument("--drafter", help="the DFlash drafter folder")
    chk.add_argument(
        "--block-size",
        type=arg_type(BLOCK_SIZE),
        default=8,
        help="the configured block size (num-draft-tokens)",
    )
    chk.add_argument(
        "--tp", type=arg_type(TP_SIZE), help="the tensor-parallel size the drafter's heads must divide by"
    )
    chk.set_defaults(func=_cmd_check)
    hsh = sub.add_parser(
        "hash",
        help="sha256 of every shard in parallel (progress on stderr)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    hsh.add_argument("folder")
    hsh.add_argument("--write", metavar="FILE", help="write the `sha256  path` manifest here (else stdout)")
    hsh.add_argument("--manifest", metavar="FILE", help="compare with this manifest; exit 1 on a difference")
    hsh.add_argument("--workers", type=arg_type(WORKERS), default=os.cpu_count() or 1, help="threads")
    hsh.set_defaults(func=_cmd_hash)
    from ddtree.weights import capture as weights_capture
    from ddtree.weights import fetch as weights_fetch

    weights_fetch.register(sub)
    weights_capture.register(sub)
