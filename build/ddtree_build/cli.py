"""`ddtree-build`: one subcommand per module; each module exposes `register(subparsers)`."""

from __future__ import annotations

import argparse
import sys

from ddtree.errors import command_parser, run_cli

from ddtree_build import __version__

# Each entry is a module under ddtree_build with a `register(subparsers)` function.
# Adding a command = adding its module name here.
COMMAND_MODULES: tuple[str, ...] = (
    "engine",
    "base_image",
    "freeze",
    "lock",
    "render",
    "image",
    "patching.cmd",
    "reproduction.capture",
    "reproduction.import_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    return command_parser("ddtree-build", __doc__, __version__, "ddtree_build", COMMAND_MODULES)


def main(argv: list[str] | None = None) -> int:
    return run_cli("ddtree-build", build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
