"""`ddtree`: the image's entrypoint and tools; one subcommand per module with `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys

from ddtree import __version__
from ddtree.errors import run_cli

# Each entry is a module under ddtree with a `register(subparsers)` function.
COMMAND_MODULES: tuple[str, ...] = (
    "selfcheck",
    "serve",
    "router_cmd",
    "bench_cmd",
    "weights_cmd",
    "receipt",
    "profiles",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddtree", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ddtree {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"ddtree.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_cli("ddtree", build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
