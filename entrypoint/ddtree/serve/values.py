"""Value checks: every number the checks or SGLang's sizing read from the final command line, range-checked
wherever it was set (profile, DDTREE_*, DDTREE_EXTRA_ARGS, after `--`, a --config file), through SGLang's
own parser when it is here (ddtree.serve.server_flags), else token by token."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddtree import numbers
from ddtree.errors import UserError
from ddtree.secret_rules import SERVER_SECRET_FLAGS
from ddtree.serve import server_flags
from ddtree.serve.argv import (
    CONFIG_FLAG,
    EXIT_CANNOT_RUN,
    WHERE_SET,
    config_argv,
    without_config,
)

# Values the checks (or SGLang's sizing) read from the final command line: flag -> (bounds, how to set it).
CHECKED_NUMBERS: dict[str, tuple[numbers.Bounds, str]] = {
    "--port": (numbers.Bounds(int, 1, 65535), "set DDTREE_PORT to 1..65535"),
    "--tp": (numbers.Bounds(int, 1, 64), "set DDTREE_TP to the number of GPUs to use (8 as measured)"),
    "--tp-size": (numbers.Bounds(int, 1, 64), "set DDTREE_TP to the number of GPUs to use (8 as measured)"),
    "--speculative-num-draft-tokens": (numbers.BLOCK_SIZE, "the drafter's block size (8 as measured)"),
    "--speculative-dflash-block-size": (numbers.BLOCK_SIZE, "the drafter's block size (8 as measured)"),
    "--speculative-ddtree-block-size": (numbers.BLOCK_SIZE, "the drafter's block size (8 as measured)"),
    "--speculative-ddtree-budget": (
        numbers.Bounds(int, 1, 63),
        "tree nodes; budget + 1 <= 64 (8 as measured)",
    ),
    "--speculative-ddtree-topk": (numbers.Bounds(int, 1, 64), "tokens per depth (4 as measured)"),
    "--speculative-draft-window-size": (numbers.Bounds(int, 1, 1 << 24), "drafter tokens kept (2048)"),
    "--mem-fraction-static": (numbers.Bounds(float, 0, 1, low_open=True), "a fraction of GPU memory"),
    "--context-length": (numbers.Bounds(int, 1, 1 << 24), "tokens"),
    "--cuda-graph-max-bs": (numbers.Bounds(int, 1, 4096), "requests per CUDA graph"),
    "--max-running-requests": (numbers.Bounds(int, 1, 1 << 20), "requests"),
}


# Flags the checks read whose value must be there (a following --flag is not a value).
VALUE_FLAGS = ("--model-path", "--speculative-draft-model-path", "--host", CONFIG_FLAG, *SERVER_SECRET_FLAGS)


SHM_GIB = numbers.Bounds(float, 0, 4096, low_open=True)


# What the token fallback reads and so must not meet abbreviated (the secret options and --config are
# spell_guarded_flags' own).
FALLBACK_CHECKED = (*CHECKED_NUMBERS, "--model-path", "--speculative-draft-model-path", "--host")


def validate_values(argv: Sequence[str]) -> None:
    """Every checked flag with a value and, where SGLang's parser is not here to convert them (see
    read_server_flags), every checked number in range: each occurrence and each spelling SGLang declares
    for it (server_flags.ALIASES), one line."""
    for i, arg in enumerate(argv):
        given, eq, inline = arg.partition("=")
        flag = given if given in CHECKED_NUMBERS else server_flags.canonical(given)
        if flag not in CHECKED_NUMBERS and flag not in VALUE_FLAGS:
            continue
        value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        if value is None or (not eq and value.startswith("--")) or (flag in VALUE_FLAGS and not value):
            raise UserError(f"{given} needs a value: give it with {WHERE_SET}", exit_code=EXIT_CANNOT_RUN)
        if flag in CHECKED_NUMBERS and not server_flags.available():  # else: SGLang's `32k` is 32768
            bounds, fix = CHECKED_NUMBERS[flag]
            numbers.parse(value, given, bounds, fix)


def read_server_flags(argv: Sequence[str], user_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The final command line through SGLang's own parser (ddtree.serve.server_flags), config tokens first as
    SGLang merges them; every checked number is range-checked on the value SGLang will use, whatever the
    spelling (alias, abbreviation, `=`, repeated). Without SGLang: None, after refusing abbreviations of
    the checked options (the token checks cannot resolve them)."""
    tokens = config_argv(user_config) + without_config(argv)
    parsed = server_flags.parse(tokens)
    if parsed is None:
        server_flags.refuse_abbreviations(tokens, FALLBACK_CHECKED)
        return None
    for flag, (bounds, fix) in CHECKED_NUMBERS.items():
        value = server_flags.value(parsed, flag)
        if value is not None:
            numbers.parse(value, server_flags.spellings(flag), bounds, fix)
    return parsed
