"""Secrets off the server's command line: DDTREE_API_KEY(_FILE) read, SGLang's secret options moved into
an in-memory --config YAML (a memfd passed across exec), abbreviations refused, and what is printed masked.
Why: a process's argv is public on the host (/proc/PID/cmdline); see ddtree.serve.cmd's "Secrets"."""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.fsutil import read_text
from ddtree.secret_rules import FULL_PREFIX_FLAGS, SECRET_PATTERN, SERVER_SECRET_FLAGS
from ddtree.serve.argv import (
    CONFIG_FLAG,
    EXIT_CANNOT_RUN,
    WHERE_SET,
    group_options,
)

# Flags whose value is a secret, and token shapes masked wherever they appear.
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--ssl-keyfile-password", "--hf-token", "--token"})


# SGLang's secret flags (ddtree.secret_rules): moved off the command line into the in-memory --config YAML.
# Consumed here, not inherited: the server loads local folders (fetching is `ddtree weights fetch`'s job),
# so the Hub token has no use in it either.
SECRET_ENV = ("DDTREE_API_KEY", "DDTREE_API_KEY_FILE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


CONFIG_NAME = "server-config.yaml"


# SGLang's argparse takes any unique prefix of an option (allow_abbrev): these must be spelt in full.
GUARDED_FLAGS = (*SERVER_SECRET_FLAGS, CONFIG_FLAG)


SECRET_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


MASK = "****"


def api_key_from(environ: Mapping[str, str]) -> str | None:
    """DDTREE_API_KEY, else the first line of DDTREE_API_KEY_FILE (a Docker/compose secret); None if unset."""
    if environ.get("DDTREE_API_KEY"):
        return environ["DDTREE_API_KEY"]
    path = environ.get("DDTREE_API_KEY_FILE")
    if not path:
        return None
    try:
        text = read_text(Path(path), "not found; DDTREE_API_KEY_FILE names the file holding the API key")
    except UserError as exc:
        raise UserError(str(exc), exit_code=EXIT_CANNOT_RUN) from exc
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise UserError(
            f"{path}: empty; DDTREE_API_KEY_FILE must hold the API key", exit_code=EXIT_CANNOT_RUN
        )
    return key


def split_secrets(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(argv without SGLang's secret flags, {config key: last value}): both spellings, every occurrence."""
    kept: list[str] = []
    secrets: dict[str, str] = {}
    i = 0
    while i < len(argv):
        flag, eq, inline = argv[i].partition("=")
        if flag in SERVER_SECRET_FLAGS:
            if eq:
                secrets[flag[2:]] = inline
                i += 1
                continue
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                raise UserError(f"{flag} needs a value: give it with {WHERE_SET}", exit_code=EXIT_CANNOT_RUN)
            secrets[flag[2:]] = argv[i + 1]
            i += 2
            continue
        kept.append(argv[i])
        i += 1
    return kept, secrets


def spell_guarded_flags(argv: Sequence[str]) -> list[str]:
    """argv with `--config=PATH` as `--config PATH` (SGLang merges a config file only for the separate
    token: with `=` it would drop the whole file); an abbreviation of a secret option or of --config is
    refused, naming the option only, since SGLang's argparse would take it and our filter would not."""
    out: list[str] = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if flag == CONFIG_FLAG and eq:
            out += [CONFIG_FLAG, value]
            continue
        if flag.startswith("--") and len(flag) > 2 and flag not in GUARDED_FLAGS:
            meant = [g for g in GUARDED_FLAGS if g.startswith(flag)]
            if meant and flag not in FULL_PREFIX_FLAGS:
                raise UserError(
                    f"{flag} abbreviates {' or '.join(meant)}: write the option in full (set by {WHERE_SET})",
                    exit_code=EXIT_CANNOT_RUN,
                )
        out.append(arg)
    return out


def write_server_config(user_config: Mapping[str, Any], secrets: Mapping[str, str]) -> str | None:
    """The --config path SGLang will read: the user's config plus the secrets, held in a memfd that exec
    keeps open (no copy on any disk), linked as server-config.yaml in a private (0700) temporary folder.
    The link names /proc/<our pid>/fd/N: the server keeps our PID, so it resolves for the server only;
    the patch secret-args-repr closes the memfd and removes the link once SGLang has read it."""
    if not secrets:
        return None
    import yaml

    data = {**user_config, **secrets}
    fd = os.memfd_create(CONFIG_NAME, 0)  # no MFD_CLOEXEC: it must survive exec
    os.write(fd, yaml.safe_dump(data, sort_keys=False).encode())
    folder = Path(tempfile.mkdtemp(prefix="ddtree-serve-"))
    link = folder / CONFIG_NAME
    os.symlink(f"/proc/{os.getpid()}/fd/{fd}", link)
    return str(link)


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A copy safe to print: values of secret flags and token-shaped strings replaced by ****."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(SECRET_PATTERN.sub(MASK, arg))
    return out


def mask_env_value(name: str, value: str) -> str:
    if any(word in name.upper() for word in SECRET_ENV_WORDS):
        return MASK
    return SECRET_PATTERN.sub(MASK, value)


def render_command(command: Sequence[str], environment: Mapping[str, str]) -> str:
    """The launch as people read it and shells accept: the environment, then one option per line."""
    lines = [
        f"{name}={shlex.quote(mask_env_value(name, value))} \\" for name, value in sorted(environment.items())
    ]
    masked = mask_argv(command)

    def quote(arg: str) -> str:
        # Quote around the mask, not the mask itself: `--api-key=****` stays readable.
        return shlex.quote(arg.replace(MASK, "MASKPLACEHOLDER")).replace("MASKPLACEHOLDER", MASK)

    head, rest = masked[:3], masked[3:]
    lines.append(" ".join(quote(a) for a in head) + (" \\" if rest else ""))
    groups = group_options(rest)
    for i, group in enumerate(groups):
        lines.append("    " + " ".join(quote(a) for a in group) + (" \\" if i < len(groups) - 1 else ""))
    return "\n".join(lines)
