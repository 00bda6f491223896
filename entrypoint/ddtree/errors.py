"""One exception for problems the user can fix: printed as one line, no traceback; and the frame both
CLIs (`ddtree`, `ddtree-build`) run in, so they build, start and fail alike."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # argparse only for the annotation: importing errors stays free
    import argparse
    from collections.abc import Callable, Sequence


class UserError(Exception):
    """A bad input or environment. The message names the file or value and what to do."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def command_parser(
    prog: str, description: str | None, version: str, package: str, modules: Sequence[str]
) -> argparse.ArgumentParser:
    """A CLI's top parser: --version, and one subcommand per module of `package` in `modules` (each has
    `register(subparsers)`; importing them is most of a CLI's start-up)."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"{prog} {version}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in modules:
        importlib.import_module(f"{package}.{name}").register(subparsers)
    return parser


def run_command(prog: str, args: argparse.Namespace) -> int:
    """Run the parsed subcommand's `func` the way every CLI here does: a UserError is one line on stderr
    and its exit code, Ctrl-C is one line and 130, anything else is a bug and keeps its traceback."""
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"{prog}: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return interrupted(prog)


def run_cli(prog: str, build_parser: Callable[[], argparse.ArgumentParser], argv: list[str] | None) -> int:
    """A CLI's whole life, start-up included: building the parser imports every command module (most of
    the start-up time), so Ctrl-C there is the same one line and 130 as Ctrl-C in the command."""
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        return interrupted(prog)
    return run_command(prog, args)


def one_line(message: str) -> str:
    """`message` with control characters escaped (`\\n`): a value quoted into it (a path or an environment
    value with a newline) cannot split the one line an error is. NEL, U+2028 and U+2029 too: str.splitlines
    breaks lines there."""
    return "".join(ch if ch >= " " and ch not in "\x7f\x85\u2028\u2029" else repr(ch)[1:-1] for ch in message)


def interrupted(prog: str) -> int:
    print(f"{prog}: interrupted", file=sys.stderr)
    return 130
