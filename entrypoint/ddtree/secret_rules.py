"""What counts as a secret in a profile, a unit or a command line: one home for the rules.

A target profile is baked into the image (`COPY env/`, and the Dockerfile's ENV from its environment), so
it must hold no secret; `ddtree-build import` strips them from a package's unit and render refuses a
profile that carries one (ddtree.targets checks every profile it loads). SGLang's argparse takes any unique
prefix of an option, so a flag counts as secret when it abbreviates one of SGLang's secret options.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# SGLang 0.5.13.post1's options whose values are secrets.
SERVER_SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password")
# Its options that are proper prefixes of a secret one: argparse reads them as themselves
# (tests/unit/test_serve_secrets.py checks this list against the real parser).
FULL_PREFIX_FLAGS = frozenset({"--ssl-keyfile"})
# A variable is secret when its name ends in one of these words (HF_TOKEN, SGLANG_API_KEY) or has one of
# SECRET_WORDS anywhere (AWS_SECRET_ACCESS_KEY_FILE); SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS or
# SGLANG_ROUTING_KEY_POLICY_DEBUG_LOG (SGLang's own knobs) are not.
SECRET_LAST_WORDS = frozenset({"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "APIKEY"})
SECRET_WORDS = frozenset({"SECRET", "PASSWORD", "PASSWD"})
# Token shapes masked wherever they appear (Hugging Face, OpenAI-style keys).
SECRET_PATTERN = re.compile(r"(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,})")
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    """True for an environment variable whose name says it holds a secret."""
    words = name.upper().split("_")
    return words[-1] in SECRET_LAST_WORDS or any(word in SECRET_WORDS for word in words)


def secret_flag(token: str) -> str | None:
    """The SGLang secret option `token` sets (`--api-key`, `--api-ke=V`, ...), as argparse would read it."""
    flag = token.partition("=")[0]
    if not flag.startswith("--") or len(flag) <= 2 or flag in FULL_PREFIX_FLAGS:
        return None
    return next((s for s in SERVER_SECRET_FLAGS if s.startswith(flag)), None)


def strip_secret_args(argv: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """(argv without secret options and their values, the options removed, the values removed)."""
    kept: list[str] = []
    flags: list[str] = []
    values: list[str] = []
    i = 0
    while i < len(argv):
        flag = secret_flag(argv[i])
        if flag is None:
            kept.append(argv[i])
            i += 1
            continue
        flags.append(flag)
        _, eq, inline = argv[i].partition("=")
        i += 1
        if eq:
            values.append(inline)
        while not eq and i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
    return kept, flags, values


def profile_secrets(data: Mapping[str, Any]) -> list[str]:
    """Where a profile holds a secret: `environment.NAME`, `server_args.FLAG`, `extra_args (FLAG)`."""
    found = [f"environment.{n}" for n in data.get("environment") or {} if is_secret_name(str(n))]
    found += [f"server_args.{flag}" for flag in data.get("server_args") or {} if secret_flag(f"--{flag}")]
    extra = data.get("extra_args") or []
    if isinstance(extra, list):
        found += [f"extra_args ({secret_flag(str(t))})" for t in extra if secret_flag(str(t))]
    return found


def redact(text: str, values: Iterable[str]) -> str:
    """`text` with each value (longest first) and every token-shaped string replaced by <redacted>."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return SECRET_PATTERN.sub(REDACTED, text)
