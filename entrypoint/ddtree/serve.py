"""`ddtree serve`: the image's entrypoint. Check everything cheap, then become the SGLang server.

Order: pick the target profile baked into the image (DDTREE_TARGET), apply the environment overrides,
check the weights, the drafter, the GPUs, /dev/shm and the port, print the command one option per line
(secrets masked), then `os.execvp` the server. Any failure stops here, within seconds, with one line
naming the path or value and the fix; nothing has loaded 600 GB yet.

Environment overrides (all optional; the profile gives the defaults):
    DDTREE_TARGET          pro6000 | b300 | auto: which profile under env/targets/ (the image bakes its own;
                           auto picks the one that fits the GPUs, see ddtree.profiles)
    DDTREE_JIT_CACHE_DIR   a persistent folder for the JIT caches, keyed by the image (see ddtree.jit_cache)
    DDTREE_ENV_DIR         where env/ lives (image: /opt/ddtree/env; a checkout: the repo's env/)
    DDTREE_MODEL_DIR       --model-path (default /models/target)
    DDTREE_DRAFTER_DIR     --speculative-draft-model-path (default /models/drafter)
    DDTREE_HOST            --host
    DDTREE_PORT            --port
    DDTREE_TP              --tp (testing on fewer GPUs; the measured setup is TP 8)
    DDTREE_API_KEY         --api-key (masked when printed)
    DDTREE_EXTRA_ARGS      more server arguments, shell-quoted, appended before the ones after `--`
    DDTREE_SKIP_CHECKS     comma list of checks to skip: weights, drafter, gpu, shm, port
    DDTREE_MIN_SHM_GIB     the /dev/shm floor (default 1)
    DDTREE_MODEL_TYPE      the config.json model_type the weights must have (default kimi_k25)
    DDTREE_ALLOW_ARCH_MISMATCH=1   run on a GPU architecture other than the target's

Arguments after `--` are appended last; SGLang's parser keeps the last value of a repeated option, so
they override the profile. The checks read the final command line, so an override is also what is checked.

PID 1 and signals. The image's ENTRYPOINT is the exec form (["ddtree", "serve"]), so no shell sits in
between, and this process replaces itself with the server (`os.execvp`): the server keeps our PID, and
`docker stop`'s SIGTERM reaches it directly. SGLang's tokenizer manager installs its own SIGTERM handler
(drain, then exit), which matters because a PID 1 without a handler ignores SIGTERM. What exec cannot
give is zombie reaping: SGLang spawns scheduler and detokenizer processes, and flashinfer's JIT spawns
compilers; an orphan re-parented to PID 1 is never waited for by SGLang. So the compose services should
set `init: true` (Docker's tini as PID 1: it forwards SIGTERM to us and reaps orphans); exec keeps the
signal path direct with or without it, and tini is the engine's, so the image needs no extra package.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddtree import gpu, jit_cache, targets, weights
from ddtree.errors import UserError

EXIT_FAIL = 1
EXIT_CANNOT_RUN = 2
DEFAULT_MODEL_DIR = "/models/target"
DEFAULT_DRAFTER_DIR = "/models/drafter"
SERVER_MODULE = "sglang.launch_server"
# The profile schema has no model type field; Kimi K2.6 loads as kimi_k25 (DDTREE_MODEL_TYPE overrides).
EXPECTED_MODEL_TYPE = "kimi_k25"
CHECK_NAMES = ("weights", "drafter", "gpu", "shm", "port")

# Flags whose value is a secret, and token shapes masked wherever they appear.
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--hf-token", "--token"})
SECRET_PATTERN = re.compile(r"(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,})")
SECRET_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
MASK = "****"

# Where the block size lives, most specific first (DDTree keeps B apart from num-draft-tokens = N).
BLOCK_SIZE_FLAGS = (
    "--speculative-dflash-block-size",
    "--speculative-ddtree-block-size",
    "--speculative-num-draft-tokens",
)


def targets_dir_for(env_dir: str | None) -> Path:
    """--env-dir's targets/, else the loader's default ($DDTREE_ENV_DIR, /opt/ddtree/env, the checkout)."""
    return Path(env_dir) / "targets" if env_dir else targets.default_targets_dir()


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


# ---------------------------------------------------------------------------------------------------
# argv assembly
# ---------------------------------------------------------------------------------------------------


def _argv_value(argv: Sequence[str], flag: str) -> str | None:
    """The last value given to `flag` (`--flag v` or `--flag=v`), as SGLang's argparse would see it."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


# Environment variable -> server flag (profile keys are flags without the leading --).
ENV_FLAGS = (
    ("DDTREE_MODEL_DIR", "model-path"),
    ("DDTREE_DRAFTER_DIR", "speculative-draft-model-path"),
    ("DDTREE_HOST", "host"),
    ("DDTREE_PORT", "port"),
    ("DDTREE_TP", "tp"),
    ("DDTREE_API_KEY", "api-key"),
)


@dataclass(frozen=True)
class Launch:
    """Everything exec needs: the profile, the server arguments and the environment to export."""

    target: targets.Target
    server_args: list[str]
    environment: dict[str, str]
    model_type: str
    # Variables to remove before exec (the baked target's, when DDTREE_TARGET=auto chose another profile).
    unset: tuple[str, ...] = ()

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", SERVER_MODULE, *self.server_args]

    def value(self, flag: str) -> str | None:
        return _argv_value(self.server_args, flag)

    def model_dir(self) -> Path:
        """The target weights folder the server will load (--model-path, else the image's mount point)."""
        return Path(self.value("--model-path") or DEFAULT_MODEL_DIR)

    def drafter_dir(self) -> Path:
        """The drafter folder the server will load (--speculative-draft-model-path, else the mount point)."""
        return Path(self.value("--speculative-draft-model-path") or DEFAULT_DRAFTER_DIR)


def assemble(target: targets.Target, environ: Mapping[str, str], extra: Sequence[str]) -> list[str]:
    """Profile arguments with the environment overrides, then DDTREE_EXTRA_ARGS, then `-- extra`."""
    overrides: dict[str, targets.ServerArgValue] = {
        flag: environ[var] for var, flag in ENV_FLAGS if environ.get(var)
    }
    argv = target.server_argv(overrides)
    port = _argv_value(argv, "--port")
    if port is not None and not port.isdigit():
        raise UserError(
            f"port {port!r} is not a number: set DDTREE_PORT to 1..65535", exit_code=EXIT_CANNOT_RUN
        )
    try:
        argv += shlex.split(environ.get("DDTREE_EXTRA_ARGS", ""))
    except ValueError as exc:
        raise UserError(
            f"DDTREE_EXTRA_ARGS cannot be split ({exc}): fix its quoting", exit_code=EXIT_CANNOT_RUN
        ) from exc
    return argv + list(extra)


def plan(
    environ: Mapping[str, str],
    target_name: str | None = None,
    env_dir: str | None = None,
    extra: Sequence[str] = (),
    gpu_runner: gpu.Runner = gpu.run_nvidia_smi,
) -> Launch:
    """Resolve the target (`auto`: the profile that fits the GPUs, see ddtree.profiles) and assemble the
    launch; shared by serve and the offline self-check."""
    from ddtree import profiles

    folder = targets_dir_for(env_dir)
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
    return Launch(
        target=target,
        server_args=assemble(target, environ, extra),
        environment=environment,
        model_type=environ.get("DDTREE_MODEL_TYPE") or EXPECTED_MODEL_TYPE,
        unset=unset,
    )


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


def group_options(argv: Sequence[str]) -> list[list[str]]:
    """Split argv into [option, values...] groups (a value is anything not starting with `--`)."""
    groups: list[list[str]] = []
    for arg in argv:
        if arg.startswith("--") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


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


# ---------------------------------------------------------------------------------------------------
# checks and launch
# ---------------------------------------------------------------------------------------------------


def block_size_of(argv: Sequence[str]) -> int | None:
    for flag in BLOCK_SIZE_FLAGS:
        value = _argv_value(argv, flag)
        if value is not None:
            try:
                return int(value)
            except ValueError as exc:
                raise UserError(f"{flag} {value!r} is not an integer", exit_code=EXIT_CANNOT_RUN) from exc
    return None


def skipped_checks(environ: Mapping[str, str]) -> set[str]:
    names = {n.strip() for n in environ.get("DDTREE_SKIP_CHECKS", "").split(",") if n.strip()}
    unknown = names - set(CHECK_NAMES)
    if unknown:
        raise UserError(
            f"DDTREE_SKIP_CHECKS names unknown check {sorted(unknown)[0]!r}: use {', '.join(CHECK_NAMES)}",
            exit_code=EXIT_CANNOT_RUN,
        )
    return names


def preflight(
    launch: Launch,
    environ: Mapping[str, str],
    runner: gpu.Runner = gpu.run_nvidia_smi,
    log: Callable[[str], None] = print,
) -> None:
    """Every pre-launch check, in the order a person would fix them; raises at the first failure."""
    skip = skipped_checks(environ)
    target_layers: int | None = None
    if "weights" not in skip:
        summary = check_weights(launch)
        target_layers = summary.num_hidden_layers
        log(
            f"ok   weights  {summary.path}: {summary.model_type}, {len(summary.shards)} shards, "
            f"{summary.total_bytes / 1e9:.1f} GB"
        )
    if "drafter" not in skip:
        drafter = check_drafter(launch, target_layers)
        log(f"ok   drafter  {drafter.path}: block size {drafter.block_size}")
    if "gpu" not in skip:
        found = check_gpu(launch, environ, runner)
        log(f"ok   gpu      {gpu.describe(found, tp_of(launch))}")
    if "shm" not in skip:
        size = gpu.check_shm(shm_floor(environ))
        log(f"ok   shm      /dev/shm {size / 2**30:.1f} GiB")
    if "port" not in skip:
        port, host = check_port(launch)
        log(f"ok   port     {host}:{port} is free")


def check_weights(launch: Launch) -> weights.ModelSummary:
    return weights.check_target(
        launch.model_dir(), launch.model_type, env_var="MODEL_DIR or DDTREE_MODEL_DIR"
    )


def check_drafter(launch: Launch, target_layers: int | None) -> weights.DrafterSummary:
    return weights.check_drafter(
        launch.drafter_dir(),
        block_size_of(launch.server_args),
        target_layers,
        env_var="DRAFTER_DIR or DDTREE_DRAFTER_DIR",
    )


def tp_of(launch: Launch) -> int:
    value = launch.value("--tp") or launch.value("--tp-size")
    try:
        return int(value) if value else launch.target.tensor_parallel
    except ValueError as exc:
        raise UserError(
            f"--tp {value!r} is not an integer: fix DDTREE_TP", exit_code=EXIT_CANNOT_RUN
        ) from exc


def check_gpu(
    launch: Launch, environ: Mapping[str, str], runner: gpu.Runner = gpu.run_nvidia_smi
) -> list[gpu.Gpu]:
    allow = environ.get(gpu.ARCH_OVERRIDE_ENV) == "1"
    return gpu.check_gpus(tp_of(launch), launch.target.compute_capability, runner, allow)


def shm_floor(environ: Mapping[str, str]) -> int:
    text = environ.get("DDTREE_MIN_SHM_GIB")
    if not text:
        return gpu.DEFAULT_MIN_SHM_BYTES
    try:
        return int(float(text) * (1 << 30))
    except ValueError as exc:
        raise UserError(f"DDTREE_MIN_SHM_GIB {text!r} is not a number", exit_code=EXIT_CANNOT_RUN) from exc


def check_port(launch: Launch) -> tuple[int, str]:
    port = int(launch.value("--port") or 30000)
    host = launch.value("--host") or "0.0.0.0"
    gpu.check_port(port, host)
    return port, host


def resolve_target(environ: Mapping[str, str], cli_target: str | None) -> str:
    name = cli_target or environ.get("DDTREE_TARGET", "")
    if not name:
        raise UserError(
            "no target: set DDTREE_TARGET (pro6000, b300 or auto; the image sets it) or pass --target",
            exit_code=EXIT_CANNOT_RUN,
        )
    return name


def run(args: argparse.Namespace) -> int:
    extra = list(args.server_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    launch = plan(os.environ, args.target, args.env_dir, extra)
    if args.dry_run:
        print(f"# ddtree serve --dry-run: target {launch.target.name} ({launch.target.path})")
        print(render_command(launch.command, launch.environment))
        return 0
    preflight(launch, os.environ)
    cache = jit_cache.prepare(os.environ)
    print(f"ddtree serve: target {launch.target.name}: launching")
    if cache is not None:
        print(f"# JIT caches in {cache} (this image's; kept across restarts)")
    if launch.unset:
        print(f"# unset (the image's own target's settings): {' '.join(launch.unset)}")
    print(render_command(launch.command, launch.environment))
    sys.stdout.flush()
    sys.stderr.flush()
    for name in launch.unset:
        os.environ.pop(name, None)
    os.environ.update(launch.environment)
    os.execvp(launch.command[0], launch.command)
    return EXIT_FAIL  # not reached: exec replaces this process


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="check weights, GPUs, shm and port, then exec the SGLang server (the image's entrypoint)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--target", help="target profile (default: $DDTREE_TARGET)")
    parser.add_argument(
        "--env-dir", help="env/ folder (default: $DDTREE_ENV_DIR, /opt/ddtree/env, the checkout)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit 0; no checks")
    parser.add_argument("server_args", nargs=argparse.REMAINDER, help="-- then extra SGLang arguments")
    parser.set_defaults(func=run)
