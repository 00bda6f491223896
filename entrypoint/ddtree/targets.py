"""Target profiles (env/targets/NAME.yaml): the GPU host a build is for and the SGLang server it runs.

A profile is data, checked here once, so `ddtree serve`, the render step and the self-check all read the
same validated values. Server arguments stay structured (flag -> value) so the entrypoint can override
one of them from the environment and assemble argv at the last moment.

Public API (stable; serve, render and selfcheck call these):
    load_target(name_or_path, targets_dir=None) -> Target
    validate_target(data, source) -> Target       schema check of already-parsed YAML
    default_targets_dir() -> Path                 $DDTREE_ENV_DIR/targets, else /opt/ddtree/env/targets,
                                                  else the checkout's env/targets
    targets_dir_for(env_dir) -> Path              --env-dir's targets/, else default_targets_dir()
    known_targets(folder) -> list[str]            the profile names there, sorted
    server_argv(args) -> list[str]                {flag: value} -> ["--flag", "value", ...]
    merge_server_args(base, overrides) -> dict    overrides win; a value of None or False removes a flag
    Target.server_argv(overrides=None) -> list[str]   structured flags, then extra_args verbatim
    Target.arch -> "sm_120"; Target.compute_capability -> "12.0"

Value rules for server_args: True -> bare `--flag`; False/None -> flag left out; a list -> `--flag a b`
(SGLang's nargs options); numbers and strings -> `--flag VALUE`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ddtree.errors import UserError
from ddtree.secret_rules import profile_secrets
from ddtree.yamlfile import load_yaml

SCHEMA_VERSION = 1
ServerArgValue = Union[str, int, float, bool, list, None]  # noqa: UP007 (runtime alias, py3.10)

INTERCONNECTS = ("pcie", "nvlink")
REQUIRED_SERVER_ARGS = (
    "model-path",
    "speculative-draft-model-path",
    "speculative-algorithm",
    "tp",
    "host",
    "port",
)
# sm_12x (RTX PRO 6000 class) has no FlashMLA and no trtllm-gen kernels.
_SM120_MISSING_BACKENDS = ("flashmla", "trtllm_mla", "trtllm_mha", "cutlass_mla")
_TOP_KEYS = {
    "schema",
    "name",
    "description",
    "gpu",
    "interconnect",
    "tensor_parallel",
    "environment",
    "server_args",
    "extra_args",
    "origin",
}
_GPU_KEYS = {"model", "compute_capability", "count", "memory_gb"}
_FLAG = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_CAPABILITY = re.compile(r"^(\d{1,2})\.(\d)$")


@dataclass(frozen=True)
class GpuSpec:
    model: str
    compute_capability: str  # "12.0", "10.3"
    count: int
    memory_gb: float | None = None


@dataclass(frozen=True)
class Target:
    """One validated target profile."""

    name: str
    path: Path
    description: str
    gpu: GpuSpec
    interconnect: str
    tensor_parallel: int
    environment: dict[str, str] = field(default_factory=dict)
    server_args: dict[str, ServerArgValue] = field(default_factory=dict)
    # Tokens appended verbatim after the structured flags (flags `import` did not know how to map).
    extra_args: tuple[str, ...] = ()
    # Free-form provenance (what `import` read, host paths it replaced); never turned into argv.
    origin: dict[str, Any] = field(default_factory=dict)

    @property
    def compute_capability(self) -> str:
        return self.gpu.compute_capability

    @property
    def arch(self) -> str:
        """The CUDA arch name, e.g. sm_120 for 12.0, sm_103 for 10.3."""
        major, minor = self.gpu.compute_capability.split(".")
        return f"sm_{major}{minor}"

    def server_argv(self, overrides: Mapping[str, ServerArgValue] | None = None) -> list[str]:
        return server_argv(merge_server_args(self.server_args, overrides or {})) + list(self.extra_args)


def default_targets_dir() -> Path:
    """Where profiles live: $DDTREE_ENV_DIR/targets, the image's /opt/ddtree/env/targets, or the checkout."""
    if os.environ.get("DDTREE_ENV_DIR"):
        return Path(os.environ["DDTREE_ENV_DIR"]) / "targets"
    image = Path("/opt/ddtree/env/targets")
    if image.is_dir():
        return image
    return Path(__file__).resolve().parents[2] / "env" / "targets"


def targets_dir_for(env_dir: str | None) -> Path:
    """--env-dir's targets/, else the loader's default ($DDTREE_ENV_DIR, /opt/ddtree/env, the checkout)."""
    return Path(env_dir) / "targets" if env_dir else default_targets_dir()


def known_targets(folder: Path) -> list[str]:
    """The profile names in `folder`, sorted (empty when it is not a folder): what an unknown name lists."""
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_target(name_or_path: str | Path, targets_dir: Path | None = None) -> Target:
    """Load and validate a profile by name (`pro6000`) or by path to a YAML file."""
    text_name = str(name_or_path)
    if text_name.endswith((".yaml", ".yml")) or os.sep in text_name:
        path = Path(name_or_path)
    else:
        folder = Path(targets_dir) if targets_dir else default_targets_dir()
        path = folder / f"{text_name}.yaml"
        if not path.is_file():
            known = ", ".join(known_targets(folder)) or "none"
            raise UserError(f"unknown target {text_name!r} (no {path}); known: {known}")
    return validate_target(load_yaml(path), path)


def _fail(source: Path | str, key: str, message: str) -> UserError:
    return UserError(f"{source}: {key}: {message}")


def _str(source: Path | str, data: Mapping[str, Any], key: str, prefix: str = "") -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _fail(source, prefix + key, f"must be a non-empty string, got {value!r}")
    return value


def _int(source: Path | str, data: Mapping[str, Any], key: str, prefix: str = "") -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(source, prefix + key, f"must be a positive integer, got {value!r}")
    return value


def _check_keys(source: Path | str, data: Mapping[str, Any], allowed: set[str], prefix: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise _fail(source, prefix + unknown[0], f"unknown key; allowed: {', '.join(sorted(allowed))}")


def _gpu(source: Path | str, data: Any) -> GpuSpec:
    if not isinstance(data, dict):
        raise _fail(source, "gpu", "must be a mapping with model, compute_capability, count")
    _check_keys(source, data, _GPU_KEYS, "gpu.")
    capability = data.get("compute_capability")
    if not isinstance(capability, str) or not _CAPABILITY.match(capability):
        raise _fail(
            source, "gpu.compute_capability", f'must be a quoted string like "12.0", got {capability!r}'
        )
    memory = data.get("memory_gb")
    if memory is not None and (
        isinstance(memory, bool) or not isinstance(memory, (int, float)) or not 0 < memory < 1e6
    ):
        raise _fail(source, "gpu.memory_gb", f"must be a positive, finite number of GB, got {memory!r}")
    return GpuSpec(
        model=_str(source, data, "model", "gpu."),
        compute_capability=capability,
        count=_int(source, data, "count", "gpu."),
        memory_gb=memory,
    )


def _environment(source: Path | str, data: Any) -> dict[str, str]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail(source, "environment", 'must be a mapping NAME: "value"')
    for name, value in data.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise _fail(source, f"environment.{name}", "not a valid variable name (A-Z, 0-9, _)")
        if not isinstance(value, str):
            raise _fail(source, f"environment.{name}", f"must be a quoted string, got {value!r}")
    return dict(data)


def _server_args(source: Path | str, data: Any) -> dict[str, ServerArgValue]:
    if not isinstance(data, dict) or not data:
        raise _fail(source, "server_args", "must be a mapping flag: value (flags without the leading --)")
    for flag, value in data.items():
        key = f"server_args.{flag}"
        if not isinstance(flag, str) or not _FLAG.match(flag):
            raise _fail(source, key, "flag names are lower-case-with-dashes, without the leading --")
        scalar = (str, int, float, bool)
        is_list = isinstance(value, list) and value and all(isinstance(v, scalar) for v in value)
        if value is not None and not isinstance(value, scalar) and not is_list:
            raise _fail(source, key, f"must be a string, number, boolean or list of them, got {value!r}")
    for flag in REQUIRED_SERVER_ARGS:
        if data.get(flag) in (None, False, ""):
            raise _fail(source, f"server_args.{flag}", "is required")
    port = data.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise _fail(source, "server_args.port", f"must be a port number 1..65535, got {port!r}")
    return dict(data)


def _extra_args(source: Path | str, data: Any) -> tuple[str, ...]:
    if data is None:
        return ()
    if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
        raise _fail(source, "extra_args", "must be a list of strings (argv tokens, appended verbatim)")
    return tuple(data)


def _origin(source: Path | str, data: Any) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail(source, "origin", "must be a mapping (provenance notes)")
    return dict(data)


def _cross_checks(source: Path | str, target: Target) -> None:
    """Rules that tie fields together: each one is a fact about the hardware (see DESIGN.md)."""
    args = target.server_args
    if args.get("tp") != target.tensor_parallel:
        raise _fail(
            source, "server_args.tp", f"is {args.get('tp')!r} but tensor_parallel is {target.tensor_parallel}"
        )
    if target.tensor_parallel > target.gpu.count or target.gpu.count % target.tensor_parallel:
        raise _fail(
            source,
            "tensor_parallel",
            f"{target.tensor_parallel} does not divide gpu.count {target.gpu.count}",
        )
    if target.interconnect == "pcie" and args.get("disable-custom-all-reduce") is not True:
        raise _fail(source, "server_args.disable-custom-all-reduce", "must be true on a PCIe-only host")
    if target.gpu.compute_capability.startswith("12."):
        if target.environment.get("SGLANG_ENABLE_JIT_DEEPGEMM") != "0":
            raise _fail(
                source, "environment.SGLANG_ENABLE_JIT_DEEPGEMM", 'must be "0" on sm_12x (no DeepGEMM)'
            )
        if args.get("attention-backend") in _SM120_MISSING_BACKENDS:
            raise _fail(
                source, "server_args.attention-backend", f"{args['attention-backend']} has no sm_12x kernels"
            )


def _refuse_control_characters(source: Path | str, data: Any) -> None:
    """No profile value holds a newline or another control character: values become Dockerfile ENV and
    EXPOSE lines, shell-quoted commands and argv tokens, where a newline starts a new instruction. `origin`
    (free provenance notes, rendered nowhere) may. Walked once per container (YAML aliases share them)."""
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        key, item = stack.pop()
        if isinstance(item, (dict, list)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for name, value in pairs:
                path = f"{key}[{name}]" if isinstance(item, list) else (f"{key}.{name}" if key else str(name))
                stack += [(path, name), (path, value)]
        elif isinstance(item, str) and any(ord(c) < 32 or ord(c) == 127 for c in item):
            raise _fail(
                source, key, f"holds a control character (a newline, a tab...): {item!r}; keep it on one line"
            )


def validate_target(data: Any, source: Path | str) -> Target:
    """Schema-check parsed YAML; every error is one line naming the file and the key."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping at the top level")
    _check_keys(source, data, _TOP_KEYS, "")
    secret = profile_secrets(data)
    if secret:
        raise _fail(
            source,
            secret[0],
            "holds a secret, and a profile is baked into the image: remove it and give it at run time "
            "(DDTREE_API_KEY_FILE, HF_TOKEN, or -- ARGS to ddtree serve)",
        )
    if data.get("schema") != SCHEMA_VERSION:
        raise _fail(source, "schema", f"must be {SCHEMA_VERSION}, got {data.get('schema')!r}")
    name = _str(source, data, "name")
    if isinstance(source, Path) and source.stem != name:
        raise _fail(source, "name", f"{name!r} differs from the file name {source.stem!r}")
    interconnect = data.get("interconnect")
    if interconnect not in INTERCONNECTS:
        raise _fail(
            source, "interconnect", f"must be one of {', '.join(INTERCONNECTS)}, got {interconnect!r}"
        )
    _refuse_control_characters(source, {k: v for k, v in data.items() if k != "origin"})
    target = Target(
        name=name,
        path=Path(source),
        description=str(data.get("description") or ""),
        gpu=_gpu(source, data.get("gpu")),
        interconnect=interconnect,
        tensor_parallel=_int(source, data, "tensor_parallel"),
        environment=_environment(source, data.get("environment")),
        server_args=_server_args(source, data.get("server_args")),
        extra_args=_extra_args(source, data.get("extra_args")),
        origin=_origin(source, data.get("origin")),
    )
    _cross_checks(source, target)
    return target


def merge_server_args(
    base: Mapping[str, ServerArgValue], overrides: Mapping[str, ServerArgValue]
) -> dict[str, ServerArgValue]:
    """Overrides win; None or False removes a flag. Flag names may be given with or without `--`."""
    merged = dict(base)
    for flag, value in overrides.items():
        merged[flag.lstrip("-")] = value
    return {flag: value for flag, value in merged.items() if value is not None and value is not False}


def server_argv(args: Mapping[str, ServerArgValue]) -> list[str]:
    """{flag: value} -> argv in mapping order (see the module docstring for the value rules)."""
    argv: list[str] = []
    for flag, value in args.items():
        if value is None or value is False:
            continue
        argv.append(f"--{flag}")
        if value is True:
            continue
        values = value if isinstance(value, list) else [value]
        argv.extend(str(v).lower() if isinstance(v, bool) else str(v) for v in values)
    return argv
