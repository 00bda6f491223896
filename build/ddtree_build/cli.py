"""`ddtree-build`: one subcommand per module; each module exposes `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys

from ddtree.errors import run_cli

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
    "patches_cmd",
    "capture",
    "import_package",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddtree-build", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ddtree-build {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"ddtree_build.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_cli("ddtree-build", build_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
