"""`python -m ddtree.patchset apply|verify`: the entry used by the Docker build step."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ddtree.errors import run_cli
from ddtree.patchset.verify import verify as verify_tree


def add_arguments(parser: argparse.ArgumentParser, series_required: bool) -> None:
    parser.add_argument("--root", type=Path, required=True, help="folder holding sglang/ (site-packages)")
    default = os.environ.get("DDTREE_SERIES")
    parser.add_argument(
        "--series",
        type=Path,
        default=Path(default) if default else None,
        required=series_required and not default,
        help="patches/series.yaml (default: $DDTREE_SERIES"
        + ("" if series_required else "; without it, verify against the tree's manifest.json")
        + ")",
    )
    parser.add_argument(
        "--manifest-dir", type=Path, help="where the manifests live (default ROOT/.ddtree-patchset)"
    )


def run_apply(args: argparse.Namespace) -> int:
    from ddtree.patchset import engine, series

    result = engine.apply(args.root, series.load(args.series), args.manifest_dir)
    print(result.summary())
    return 0


def run_verify(args: argparse.Namespace) -> int:
    result = verify_tree(args.root, args.series, args.manifest_dir)
    result.raise_if_failed()
    print(result.summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ddtree.patchset", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    apply_parser = sub.add_parser("apply", help="apply the series strictly (no-op when already applied)")
    add_arguments(apply_parser, series_required=True)
    apply_parser.set_defaults(func=run_apply)
    verify_parser = sub.add_parser(
        "verify", help="verify a patched tree (hashes, parse, signatures, manifests)"
    )
    add_arguments(verify_parser, series_required=False)
    verify_parser.set_defaults(func=run_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_cli("ddtree.patchset", build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
