"""The launch plan: the target profile (or `auto`'s choice), the environment overrides, the argv assembled
and checked, secrets split off; `Launch` is everything exec needs. Shared by serve and the self-check."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtree import gpu, numbers, targets
from ddtree.errors import UserError
from ddtree.serve import jit_cache, server_flags
from ddtree.serve.argv import (
    BLOCK_SIZE_FLAGS,
    CONFIG_FLAG,
    EXIT_CANNOT_RUN,
    argv_value,
    argv_value_any,
    block_size_of,
    config_argv,
    read_user_config,
    replace_value,
    without_config,
)
from ddtree.serve.secret_args import (
    CONFIG_NAME,
    api_key_from,
    spell_guarded_flags,
    split_secrets,
)
from ddtree.serve.values import CHECKED_NUMBERS, read_server_flags, validate_values
from ddtree.weights import lock as weights_lock
from ddtree.weights.layout import resolve_checkout

DEFAULT_MODEL_DIR = "/models/target"


DEFAULT_DRAFTER_DIR = "/models/drafter"


SERVER_MODULE = "sglang.launch_server"


# The profile schema has no model type field; Kimi K2.6 loads as kimi_k25 (DDTREE_MODEL_TYPE overrides).
EXPECTED_MODEL_TYPE = "kimi_k25"


# Environment variable -> server flag (profile keys are flags without the leading --).
ENV_FLAGS = (
    ("DDTREE_MODEL_DIR", "model-path"),
    ("DDTREE_DRAFTER_DIR", "speculative-draft-model-path"),
    ("DDTREE_HOST", "host"),
    ("DDTREE_PORT", "port"),
    ("DDTREE_TP", "tp"),
)


@dataclass(frozen=True)
class Launch:
    """Everything exec needs: the profile, the server arguments (no secrets: those are in `secrets`, for
    the in-memory --config YAML) and the environment to export."""

    target: targets.Target
    server_args: list[str]
    environment: dict[str, str]
    model_type: str
    # role -> the revision env/weights.yaml pins (picks the snapshot in a Hugging Face cache folder)
    locked_revisions: dict[str, str | None] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    # The user's own --config YAML (already read): SGLang puts its values before the command line's.
    user_config: dict[str, Any] = field(default_factory=dict)
    # Variables to remove before exec (the baked target's, when DDTREE_TARGET=auto chose another profile).
    unset: tuple[str, ...] = ()
    # SGLang's own reading of the final command line, {destination: value} (ddtree.serve.server_flags); None
    # where SGLang cannot be imported (then the tokens are read, aliases resolved).
    parsed: dict[str, Any] | None = None

    @property
    def command(self) -> list[str]:
        """The command as printed: the --config path exists only at exec time (`server_command`)."""
        shown = f"<in-memory {CONFIG_NAME}: {', '.join(sorted(self.secrets))}>"
        return self.server_command(shown if self.secrets else None)

    def server_command(self, config: str | None) -> list[str]:
        """The server command: weights folders replaced by the snapshot to load (a Hugging Face cache
        repository resolves to its locked snapshot), then `--config FILE` when secrets went into one."""
        args = list(self.server_args)
        from_config = config_argv(self.user_config)
        for flag, folder in (
            ("--model-path", self.model_dir),
            ("--speculative-draft-model-path", self.drafter_dir),
        ):
            if not replace_value(args, flag, str(folder())) and (
                argv_value(from_config, flag) or self.value(flag) is not None
            ):
                args += [flag, str(folder())]  # given in --config or another spelling: the last value wins
        extra = [CONFIG_FLAG, config] if config else []
        return [sys.executable, "-m", SERVER_MODULE, *args, *extra]

    def value(self, flag: str) -> str | None:
        """The value SGLang will use: its own parser's reading, else the command line's last (any spelling
        of the option), else the --config file's."""
        if self.parsed is not None:
            return server_flags.value(self.parsed, flag)
        found = argv_value_any(self.server_args, flag)
        return found if found is not None else argv_value_any(config_argv(self.user_config), flag)

    def mounted_dir(self, role: str) -> Path:
        """The folder as given (--model-path / --speculative-draft-model-path, else the mount point)."""
        if role == "target":
            return Path(self.value("--model-path") or DEFAULT_MODEL_DIR)
        return Path(self.value("--speculative-draft-model-path") or DEFAULT_DRAFTER_DIR)

    def model_dir(self) -> Path:
        """The target weights folder the server will load (a cache repository resolves to its snapshot)."""
        return resolve_checkout(self.mounted_dir("target"), self.locked_revisions.get("target")).path

    def drafter_dir(self) -> Path:
        """The drafter folder the server will load (a cache repository resolves to its snapshot)."""
        return resolve_checkout(self.mounted_dir("drafter"), self.locked_revisions.get("drafter")).path


def load_profile(name: str, folder: Path) -> targets.Target:
    """The named, schema-checked target profile. Unknown name or bad profile: exit 2 (nothing can run)."""
    path = folder / f"{name}.yaml"
    if "/" in name or not path.is_file():
        known = ", ".join(targets.known_targets(folder)) or "none"
        raise UserError(
            f"unknown target {name!r} (DDTREE_TARGET): known targets in {folder} are "
            f"{known}; set DDTREE_TARGET to one of them",
            exit_code=EXIT_CANNOT_RUN,
        )
    try:
        return targets.load_target(name, targets_dir=folder)
    except UserError as exc:
        raise UserError(str(exc), exit_code=EXIT_CANNOT_RUN) from exc


def resolve_target(environ: Mapping[str, str], cli_target: str | None) -> str:
    name = cli_target or environ.get("DDTREE_TARGET", "")
    if not name:
        raise UserError(
            "no target: set DDTREE_TARGET (pro6000, b300 or auto; the image sets it) or pass --target",
            exit_code=EXIT_CANNOT_RUN,
        )
    return name


def assemble(target: targets.Target, environ: Mapping[str, str], extra: Sequence[str]) -> list[str]:
    """Profile arguments with the environment overrides, then DDTREE_EXTRA_ARGS, then `-- extra`.
    DDTREE_API_KEY(_FILE) becomes --api-key here; `plan` moves every secret off the command line."""
    overrides: dict[str, targets.ServerArgValue] = {
        flag: environ[var] for var, flag in ENV_FLAGS if environ.get(var)
    }
    argv = target.server_argv(overrides)
    api_key = api_key_from(environ)
    if api_key is not None:
        argv += ["--api-key", api_key]
    try:
        argv += shlex.split(environ.get("DDTREE_EXTRA_ARGS", ""))
    except ValueError as exc:
        raise UserError(
            f"DDTREE_EXTRA_ARGS cannot be split ({exc}): fix its quoting", exit_code=EXIT_CANNOT_RUN
        ) from exc
    return argv + list(extra)


def locked_revisions(environ: Mapping[str, str]) -> dict[str, str | None]:
    """role -> the locked revision; empty when there is no usable lock (the lock check reports that)."""
    try:
        lock = weights_lock.load_lock(weights_lock.default_lock_path(environ))
    except UserError:
        return {}
    return {role: model.revision for role, model in lock.models.items()}


def plan(
    environ: Mapping[str, str],
    target_name: str | None = None,
    env_dir: str | None = None,
    extra: Sequence[str] = (),
    gpu_runner: gpu.Runner = gpu.run_nvidia_smi,
) -> Launch:
    """Resolve the target (`auto`: the profile that fits the GPUs, see ddtree.serve.profiles) and assemble the
    launch; shared by serve and the offline self-check. Values are checked here, so even --dry-run refuses
    a command SGLang could not take."""
    from ddtree.serve import profiles

    folder = targets.targets_dir_for(env_dir)
    name = resolve_target(environ, target_name)
    unset: tuple[str, ...] = ()
    if name == profiles.AUTO:
        target = load_profile(profiles.choose_name(folder, gpu_runner), folder)
        baked_name = environ.get(profiles.IMAGE_TARGET_ENV, "")
        baked = load_profile(baked_name, folder) if baked_name in targets.known_targets(folder) else None
        environment, unset = profiles.environment_for(target, baked, environ)
    else:
        target = load_profile(name, folder)
        # The profile's environment fills in what the caller did not set; the caller's values win.
        environment = {k: environ.get(k, v) for k, v in target.environment.items()}
    environment.update(jit_cache.environment(environ))
    argv = spell_guarded_flags(assemble(target, environ, extra))
    validate_values(argv)
    config_path, user_config = read_user_config(argv)
    validate_values(config_argv(user_config))
    parsed = read_server_flags(argv, user_config)
    argv, secrets = split_secrets(argv)
    if secrets and config_path is not None:
        argv = without_config(argv)  # its values go into the in-memory config, with the secrets
    return Launch(
        target=target,
        server_args=argv,
        environment=environment,
        model_type=environ.get("DDTREE_MODEL_TYPE") or EXPECTED_MODEL_TYPE,
        locked_revisions=locked_revisions(environ),
        secrets=secrets,
        user_config=user_config,
        unset=unset,
        parsed=parsed,
    )


def launch_block_size(launch: Launch) -> int | None:
    """The drafter block size SGLang will use: its parser's reading, else the tokens (block_size_of)."""
    if launch.parsed is None:
        return block_size_of(launch.server_args)
    for flag in BLOCK_SIZE_FLAGS:
        value = launch.value(flag)
        if value is not None:
            return int(value)
    return None


def tp_of(launch: Launch) -> int:
    """The tensor-parallel size SGLang will use (any spelling, else the profile's); range-checked."""
    value = launch.value("--tp-size")
    if value:
        bounds, fix = CHECKED_NUMBERS["--tp-size"]
        return int(numbers.parse(value, "--tp-size", bounds, fix))
    return launch.target.tensor_parallel
