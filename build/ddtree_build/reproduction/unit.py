"""A reproduction package's systemd unit -> a target profile's server arguments (ddtree-build import).

ExecStart is split with shlex, known flags mapped to the target schema (host weight paths become the
container's /models/... mounts), unknown flags kept verbatim (extra_args), Environment= merged.
Secrets are stripped and named (a profile is baked into the image): Environment= variables whose names say
they hold one (HF_TOKEN, SGLANG_API_KEY) and SGLang's secret options (--api-key, --admin-api-key,
--ssl-keyfile-password, in any spelling argparse expands); see ddtree.secret_rules.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.secret_rules import is_secret_name, redact, strip_secret_args
from ddtree.targets import validate_target
from ddtree.yamlfile import load_yaml

# SGLang flags the target schema knows, with their value type. Aliases map to the canonical name.
KNOWN_FLAGS: dict[str, type] = {
    "model-path": str,
    "speculative-draft-model-path": str,
    "trust-remote-code": bool,
    "tool-call-parser": str,
    "reasoning-parser": str,
    "tp": int,
    "speculative-algorithm": str,
    "speculative-num-draft-tokens": int,
    "speculative-ddtree-budget": int,
    "speculative-ddtree-topk": int,
    "speculative-draft-window-size": int,
    "attention-backend": str,
    "disable-custom-all-reduce": bool,
    "mem-fraction-static": float,
    "cuda-graph-max-bs": int,
    "context-length": int,
    "disable-cuda-graph": bool,
    "host": str,
    "port": int,
}
FLAG_ALIASES = {
    "tp-size": "tp",
    "tensor-parallel-size": "tp",
    "model": "model-path",
    "speculative-dflash-block-size": "speculative-num-draft-tokens",
    "speculative-dflash-draft-window-size": "speculative-draft-window-size",
}
# Host paths of the weights become the container's mount points.
CONTAINER_PATHS = {"model-path": "/models/target", "speculative-draft-model-path": "/models/drafter"}


def _unit_lines(text: str) -> list[str]:
    """Logical lines of a unit file (backslash continuations joined, comments dropped)."""
    out, buffer = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not buffer and line.lstrip().startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        out.append((buffer + line).strip())
        buffer = ""
    if buffer:
        out.append(buffer.strip())
    return out


def read_unit(text: str, source: str) -> tuple[list[str], dict[str, str]]:
    """(ExecStart argv, Environment= variables) of a unit's [Service] section."""
    section, exec_start, environment = "", None, {}
    for line in _unit_lines(text):
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if not sep or section != "Service":
            continue
        key = key.strip()
        if key == "ExecStart" and value.strip():
            exec_start = value.strip().lstrip("-@+!:")
        elif key == "Environment":
            for item in _split(value, source, "an Environment= line"):
                name, eq, val = item.partition("=")
                if not eq:
                    raise UserError(f"{source}: Environment entry {redact(item, ())!r} is not NAME=VALUE")
                environment[name] = val
    if exec_start is None:
        raise UserError(f"{source}: no ExecStart= in [Service]; the unit must launch sglang")
    return _split(exec_start, source, "ExecStart="), environment


def _split(value: str, source: str, what: str) -> list[str]:
    """The line's words; a quoting error names the line, not its text (it may hold a key or token)."""
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise UserError(f"{source}: cannot split {what} ({exc}); fix its quoting") from exc


def _convert(flag: str, values: list[str], source: str) -> Any:
    kind = KNOWN_FLAGS[flag]
    if kind is bool:
        if values:
            raise UserError(f"{source}: --{flag} takes no value, got {' '.join(values)!r}")
        return True
    if len(values) != 1:
        raise UserError(f"{source}: --{flag} needs one value, got {len(values)}")
    try:
        return kind(values[0])
    except ValueError as exc:
        raise UserError(f"{source}: --{flag} {values[0]!r} is not a {kind.__name__}") from exc


def map_exec_start(
    argv: list[str], source: str
) -> tuple[list[str], dict[str, Any], list[str], dict[str, str]]:
    """(launcher, server_args, extra_args, host paths) from ExecStart's argv."""
    first = next((i for i, tok in enumerate(argv) if tok.startswith("--")), len(argv))
    launcher = argv[:first]
    if not any("sglang" in tok or "launch_server" in tok for tok in launcher):
        raise UserError(f"{source}: ExecStart does not launch sglang ({' '.join(launcher)[:80]!r})")
    args: dict[str, Any] = {}
    extra: list[str] = []
    host_paths: dict[str, str] = {}
    i = first
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise UserError(f"{source}: stray argument {token!r} in ExecStart; expected a --flag")
        name, eq, inline = token[2:].partition("=")
        values = [inline] if eq else []
        j = i + 1
        while not eq and j < len(argv) and not argv[j].startswith("--"):
            values.append(argv[j])
            j += 1
        flag = FLAG_ALIASES.get(name, name)
        if flag in KNOWN_FLAGS:
            value = _convert(flag, values, source)
            if flag in CONTAINER_PATHS:
                host_paths[flag] = value
                value = CONTAINER_PATHS[flag]
            args[flag] = value
        else:
            extra.extend(argv[i:j])
        i = j
    return launcher, args, extra, host_paths


def unit_secrets(text: str, source: str) -> tuple[list[str], list[str]]:
    """(where: `Environment NAME` / `--flag`, the secret values) of a unit, for stripping and redacting."""
    argv, environment = read_unit(text, source)
    where = [f"Environment {name}" for name in environment if is_secret_name(name)]
    values = [value for name, value in environment.items() if is_secret_name(name)]
    _, flags, flag_values = strip_secret_args(argv)
    return where + flags, values + flag_values


def import_target(
    unit_path: Path, base_target: Path, out_path: Path, pkg: Path
) -> tuple[dict[str, Any], list[str]]:
    """The target profile data for a unit, on top of a base profile; validated before it is returned."""
    rel = unit_path.relative_to(pkg).as_posix()
    argv, unit_env = read_unit(unit_path.read_text(encoding="utf-8"), rel)
    argv, secret_flags, _ = strip_secret_args(argv)
    secret_env = sorted(name for name in unit_env if is_secret_name(name))
    unit_env = {name: value for name, value in unit_env.items() if name not in secret_env}
    launcher, args, extra, host_paths = map_exec_start(argv, rel)
    data = load_yaml(base_target)
    data["name"] = out_path.stem
    data["server_args"] = args
    data["environment"] = {**(data.get("environment") or {}), **unit_env}
    if extra:
        data["extra_args"] = extra
    else:
        data.pop("extra_args", None)
    data["origin"] = {
        "imported_from": f"{pkg.name}/{rel}",
        "base_profile": base_target.name,
        "launcher": " ".join(launcher),
        "host_paths": host_paths,
    }
    validate_target(data, out_path)
    notes = [f"{rel}: kept verbatim (unknown to the profile schema): {' '.join(extra)}"] if extra else []
    stripped = [f"Environment {name}" for name in secret_env] + list(dict.fromkeys(secret_flags))
    if stripped:
        notes.append(
            f"{rel}: secrets stripped (a profile is baked into the image): {', '.join(stripped)}; give them "
            "at run time (DDTREE_API_KEY_FILE, HF_TOKEN, or -- ARGS to ddtree serve)"
        )
    return data, notes
