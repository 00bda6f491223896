"""The server command line as SGLang will read it: through SGLang's own argument parser.

SGLang 0.5.13.post1 builds its parser from `ServerArgs.add_cli_args` and reads `sglang.launch_server`'s
argv with `parse_args`: the last value of a repeated option wins, aliases share one destination
(`--tp-size`, `--tensor-parallel-size`), any unique prefix of an option is that option (`--po 31000` is
`--port 31000`, `--tp 8` is `--tp-size 8`), and values are converted by the option's type. Checking tokens
by spelling misses all of that; checking the parsed namespace cannot: what is checked is what SGLang uses.

In the image SGLang is importable and `parse` answers {destination: value}. Where it is not (a dry run on a
host without SGLang), `parse` answers None and the callers fall back to reading tokens, with the aliases
below and abbreviations of the checked options refused, so a spelling they cannot resolve is never passed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from ddtree.errors import UserError

EXIT_CANNOT_RUN = 2
# Aliases SGLang 0.5.13.post1 declares for the options the checks read (server_args.py), for the fallback.
ALIASES = {
    "--model": "--model-path",
    "--tp": "--tp-size",
    "--tensor-parallel-size": "--tp-size",
    "--speculative-draft-model": "--speculative-draft-model-path",
    "--speculative-dflash-draft-window-size": "--speculative-draft-window-size",
}


class _RaisingParser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting: the message becomes one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(
            f"SGLang's argument parser refuses the server command line: {message}; fix it where it is set "
            "(the profile, DDTREE_EXTRA_ARGS, an argument after -- or the --config file)",
            exit_code=EXIT_CANNOT_RUN,
        )

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        self.error((message or f"exit {status}").strip())


@functools.lru_cache(maxsize=1)
def sglang_parser() -> argparse.ArgumentParser | None:
    """SGLang's own server parser, or None where SGLang cannot be imported here."""
    try:
        quiet = io.StringIO()  # SGLang's import warns about the platform (no GPU here, no Triton, ...)
        with warnings.catch_warnings(), contextlib.redirect_stderr(quiet), contextlib.redirect_stdout(quiet):
            warnings.simplefilter("ignore")
            from sglang.srt.server_args import ServerArgs
    except Exception:  # not installed, or its imports fail without a GPU stack: the token fallback
        return None
    parser = _RaisingParser(prog="sglang.launch_server", add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def parse(argv: Sequence[str], parser: argparse.ArgumentParser | None = None) -> dict[str, Any] | None:
    """{destination: value} as SGLang parses `argv` (config tokens first, as its config merger puts
    them); None without SGLang. A command line SGLang refuses is one UserError (exit 2)."""
    parser = parser or sglang_parser()
    if parser is None:
        return None
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return vars(parser.parse_args(list(argv)))


def _action(flag: str) -> argparse.Action | None:
    """SGLang's option `flag` (or the option its alias names); None without SGLang or such an option."""
    parser = sglang_parser()
    return parser._option_string_actions.get(canonical(flag)) if parser else None  # argparse: no public API


def value(parsed: dict[str, Any], flag: str) -> str | None:
    """`flag`'s value in SGLang's reading, as text; None when unset or when this SGLang has no such option."""
    action = _action(flag)
    found = parsed.get(action.dest) if action is not None else None
    return None if found is None else str(found)


def spellings(flag: str) -> str:
    """`--tp-size` with its aliases as SGLang declares them: `--tensor-parallel-size/--tp-size`."""
    action = _action(flag)
    return "/".join(action.option_strings) if action is not None else flag


def canonical(flag: str) -> str:
    """The fallback's name for a flag: its alias target, else itself."""
    return ALIASES.get(flag, flag)


def refuse_abbreviations(argv: Sequence[str], checked: Iterable[str]) -> None:
    """Fallback only: a token that is a strict prefix of a checked option (and not an option itself)
    would be that option to SGLang; without its parser here the value cannot be checked, so refuse it."""
    known = set(checked) | set(ALIASES)
    for arg in argv:
        flag = arg.partition("=")[0]
        if not flag.startswith("--") or len(flag) < 3 or flag in known:
            continue
        meant = sorted(k for k in known if k.startswith(flag))
        if meant:
            raise UserError(
                f"{flag} abbreviates {' or '.join(meant)}: write the option in full (SGLang would take the "
                "abbreviation; its value must be checked)",
                exit_code=EXIT_CANNOT_RUN,
            )


def available() -> bool:
    return sglang_parser() is not None


if __name__ == "__main__":  # `python -m ddtree.serve.server_flags ARGS...`: what SGLang would read
    print(parse(sys.argv[1:]))
