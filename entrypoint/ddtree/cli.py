"""`ddtree`: the image's entrypoint and tools; one subcommand per module with `register(subparsers)`."""

from __future__ import annotations

import argparse
import sys

from ddtree import __version__
from ddtree.errors import command_parser, run_cli

# Each entry is a module under ddtree with a `register(subparsers)` function.
COMMAND_MODULES: tuple[str, ...] = (
    "selfcheck.cmd",
    "serve.cmd",
    "router.cmd",
    "bench.cmd",
    "weights.cmd",
    "receipts.receipt",
    "serve.profiles",
)


def build_parser() -> argparse.ArgumentParser:
    return command_parser("ddtree", __doc__, __version__, "ddtree", COMMAND_MODULES)


def main(argv: list[str] | None = None) -> int:
    return run_cli("ddtree", build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
