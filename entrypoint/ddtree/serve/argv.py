"""The server command line as tokens: a flag's last value (any spelling), the --config file's tokens,
the block size, options grouped for printing. Every serve module reads argv through these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.serve import server_flags
from ddtree.yamlfile import load_yaml

EXIT_CANNOT_RUN = 2


CONFIG_FLAG = "--config"


WHERE_SET = "the profile, DDTREE_EXTRA_ARGS, an argument after -- or the --config file"


# Where the block size lives, most specific first (DDTree keeps B apart from num-draft-tokens = N).
BLOCK_SIZE_FLAGS = (
    "--speculative-dflash-block-size",
    "--speculative-ddtree-block-size",
    "--speculative-num-draft-tokens",
)


def argv_value(argv: Sequence[str], flag: str) -> str | None:
    """The last value given to `flag` (`--flag v` or `--flag=v`), as SGLang's argparse would see it."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def argv_value_any(argv: Sequence[str], flag: str) -> str | None:
    """The last value given to `flag` under any of its spellings (server_flags.ALIASES), token by token."""
    wanted = server_flags.canonical(flag)
    value = None
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        if server_flags.canonical(name) != wanted:
            continue
        if eq:
            value = inline
        elif i + 1 < len(argv):
            value = argv[i + 1]
    return value


def replace_value(argv: list[str], flag: str, value: str) -> bool:
    """Set the value of the last `flag` in argv (both `--flag v` and `--flag=v`); False if it is not there."""
    for i in range(len(argv) - 1, -1, -1):
        if argv[i] == flag and i + 1 < len(argv):
            argv[i + 1] = value
            return True
        if argv[i].startswith(flag + "="):
            argv[i] = f"{flag}={value}"
            return True
    return False


def config_argv(config: Mapping[str, Any]) -> list[str]:
    """A --config YAML as the tokens SGLang's ConfigArgumentMerger puts before the command line's."""
    argv: list[str] = []
    for key, value in config.items():
        if value is True:
            argv.append(f"--{key}")
        elif value is False or value is None or value == []:
            continue
        elif isinstance(value, list):
            argv += [f"--{key}", *(str(v) for v in value)]
        else:
            argv += [f"--{key}", str(value)]
    return argv


def read_user_config(argv: Sequence[str]) -> tuple[Path | None, dict[str, Any]]:
    """The --config file given on the command line, read as SGLang will (one, a .yaml mapping)."""
    given = [i for i, arg in enumerate(argv) if arg == CONFIG_FLAG or arg.startswith(CONFIG_FLAG + "=")]
    if not given:
        return None, {}
    if len(given) > 1:
        raise UserError("--config is given twice; SGLang reads one config file", exit_code=EXIT_CANNOT_RUN)
    path = Path(argv_value(argv, CONFIG_FLAG) or "")
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise UserError(
            f"--config {path}: SGLang reads only .yaml/.yml config files", exit_code=EXIT_CANNOT_RUN
        )
    try:
        data = load_yaml(path, "not found; --config names SGLang's YAML config file")
    except UserError as exc:
        raise UserError(str(exc), exit_code=EXIT_CANNOT_RUN) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise UserError(f"--config {path}: expected a mapping of option: value", exit_code=EXIT_CANNOT_RUN)
    return path, data


def without_config(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == CONFIG_FLAG:
            skip = True
        elif not arg.startswith(CONFIG_FLAG + "="):
            out.append(arg)
    return out


def group_options(argv: Sequence[str]) -> list[list[str]]:
    """Split argv into [option, values...] groups (a value is anything not starting with `--`)."""
    groups: list[list[str]] = []
    for arg in argv:
        if arg.startswith("--") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def block_size_of(argv: Sequence[str]) -> int | None:
    for flag in BLOCK_SIZE_FLAGS:
        value = argv_value(argv, flag)
        if value is not None:
            try:
                return int(value)
            except ValueError as exc:
                raise UserError(f"{flag} {value!r} is not an integer", exit_code=EXIT_CANNOT_RUN) from exc
    return None
