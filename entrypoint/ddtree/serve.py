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
    DDTREE_API_KEY         the server's API key (never on a command line: see "Secrets" below)
    DDTREE_API_KEY_FILE    a file holding it (a compose/Docker secret: then not in `docker inspect` either)
    DDTREE_EXTRA_ARGS      more server arguments, shell-quoted, appended before the ones after `--`
    DDTREE_SKIP_CHECKS     comma list of checks to skip: weights, drafter, gpu, shm, port, tree (the
                           whole-tree digest measured for /server_info in the image; see measured_tree)
    DDTREE_MIN_SHM_GIB     the /dev/shm floor (default 1)
    DDTREE_MODEL_TYPE      the config.json model_type the weights must have (default kimi_k25)
    DDTREE_ALLOW_ARCH_MISMATCH=1   run on a GPU architecture other than the target's
    DDTREE_ALLOW_UNLOCKED_WEIGHTS=1   run weights that differ from env/weights.yaml (said in the log)
    DDTREE_WEIGHTS_LOCK    another weights lock than $DDTREE_ENV_DIR/weights.yaml

A weights folder may be a plain folder or a Hugging Face cache repository (models--ORG--NAME, holding
refs/, snapshots/, blobs/): the server gets the snapshot of the locked revision (else refs/main).

Numbers are range-checked before anything starts: every value the checks read from the final command line
(port, TP, block size, ...), wherever it came from (profile, DDTREE_*, DDTREE_EXTRA_ARGS, after `--`, a
--config file), and DDTREE_MIN_SHM_GIB; TP must also divide the visible GPUs and the model's heads.

Secrets. A process's argv is public on the host (/proc/PID/cmdline, `ps`, `docker top`), so --api-key,
--admin-api-key and --ssl-keyfile-password never reach the server's command line, wherever they were given:
they are moved into a YAML that SGLang 0.5.13.post1 reads with `--config FILE` (server_args_config_parser;
config values come before the command line's, and no secret is left on it to override them). The YAML lives
only in memory: a memfd this process passes across exec, reached through a `server-config.yaml` link in a
private temporary folder (SGLang wants a .yaml name). DDTREE_API_KEY(_FILE) are removed from the server's
environment, and so are HF_TOKEN and HUGGING_FACE_HUB_TOKEN (the server loads local folders). SGLang's
argparse takes abbreviations (`--api-ke`): an abbreviation of a secret option or of --config is refused,
and `--config=PATH` becomes `--config PATH` (SGLang merges the file only then). The patch
`secret-args-repr` keeps the secrets out of ServerArgs' repr (logged at start-up), /server_info,
the schedulers' internal states and the request dumps.

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
import shlex
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtree import gpu, jit_cache, numbers, server_flags, targets
from ddtree.errors import UserError
from ddtree.fsutil import read_text
from ddtree.secret_rules import FULL_PREFIX_FLAGS, SECRET_PATTERN, SERVER_SECRET_FLAGS
from ddtree.weights import folders as weights
from ddtree.weights import lock as weights_lock
from ddtree.weights.layout import is_read_only, resolve_checkout
from ddtree.yamlfile import load_yaml

EXIT_FAIL = 1
EXIT_CANNOT_RUN = 2
DEFAULT_MODEL_DIR = "/models/target"
DEFAULT_DRAFTER_DIR = "/models/drafter"
SERVER_MODULE = "sglang.launch_server"
# The profile schema has no model type field; Kimi K2.6 loads as kimi_k25 (DDTREE_MODEL_TYPE overrides).
EXPECTED_MODEL_TYPE = "kimi_k25"
CHECK_NAMES = ("weights", "drafter", "gpu", "shm", "port", "tree")

# Flags whose value is a secret, and token shapes masked wherever they appear.
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--ssl-keyfile-password", "--hf-token", "--token"})
# SGLang's secret flags (ddtree.secret_rules): moved off the command line into the in-memory --config YAML.
# Consumed here, not inherited: the server loads local folders (fetching is `ddtree weights fetch`'s job),
# so the Hub token has no use in it either.
SECRET_ENV = ("DDTREE_API_KEY", "DDTREE_API_KEY_FILE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
CONFIG_FLAG = "--config"
CONFIG_NAME = "server-config.yaml"
# SGLang's argparse takes any unique prefix of an option (allow_abbrev): these must be spelt in full.
GUARDED_FLAGS = (*SERVER_SECRET_FLAGS, CONFIG_FLAG)
SECRET_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
MASK = "****"

# Where the block size lives, most specific first (DDTree keeps B apart from num-draft-tokens = N).
BLOCK_SIZE_FLAGS = (
    "--speculative-dflash-block-size",
    "--speculative-ddtree-block-size",
    "--speculative-num-draft-tokens",
)


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
)
WHERE_SET = "the profile, DDTREE_EXTRA_ARGS, an argument after -- or the --config file"
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
    # SGLang's own reading of the final command line, {destination: value} (ddtree.server_flags); None
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
            if not _replace_value(args, flag, str(folder())) and (
                _argv_value(from_config, flag) or self.value(flag) is not None
            ):
                args += [flag, str(folder())]  # given in --config or another spelling: the last value wins
        extra = [CONFIG_FLAG, config] if config else []
        return [sys.executable, "-m", SERVER_MODULE, *args, *extra]

    def value(self, flag: str) -> str | None:
        """The value SGLang will use: its own parser's reading, else the command line's last (any spelling
        of the option), else the --config file's."""
        if self.parsed is not None:
            return server_flags.value(self.parsed, flag)
        found = _argv_value_any(self.server_args, flag)
        return found if found is not None else _argv_value_any(config_argv(self.user_config), flag)

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


def _replace_value(argv: list[str], flag: str, value: str) -> bool:
    """Set the value of the last `flag` in argv (both `--flag v` and `--flag=v`); False if it is not there."""
    for i in range(len(argv) - 1, -1, -1):
        if argv[i] == flag and i + 1 < len(argv):
            argv[i + 1] = value
            return True
        if argv[i].startswith(flag + "="):
            argv[i] = f"{flag}={value}"
            return True
    return False


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
    path = Path(_argv_value(argv, CONFIG_FLAG) or "")
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


def _without_config(argv: Sequence[str]) -> list[str]:
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


def plan(
    environ: Mapping[str, str],
    target_name: str | None = None,
    env_dir: str | None = None,
    extra: Sequence[str] = (),
    gpu_runner: gpu.Runner = gpu.run_nvidia_smi,
) -> Launch:
    """Resolve the target (`auto`: the profile that fits the GPUs, see ddtree.profiles) and assemble the
    launch; shared by serve and the offline self-check. Values are checked here, so even --dry-run refuses
    a command SGLang could not take."""
    from ddtree import profiles

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
        argv = _without_config(argv)  # its values go into the in-memory config, with the secrets
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


# What the token fallback reads and so must not meet abbreviated (the secret options and --config are
# spell_guarded_flags' own).
FALLBACK_CHECKED = (*CHECKED_NUMBERS, "--model-path", "--speculative-draft-model-path", "--host")


def read_server_flags(argv: Sequence[str], user_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The final command line through SGLang's own parser (ddtree.server_flags), config tokens first as
    SGLang merges them; every checked number is range-checked on the value SGLang will use, whatever the
    spelling (alias, abbreviation, `=`, repeated). Without SGLang: None, after refusing abbreviations of
    the checked options (the token checks cannot resolve them)."""
    tokens = config_argv(user_config) + _without_config(argv)
    parsed = server_flags.parse(tokens)
    if parsed is None:
        server_flags.refuse_abbreviations(tokens, FALLBACK_CHECKED)
        return None
    for flag, (bounds, fix) in CHECKED_NUMBERS.items():
        value = server_flags.value(parsed, flag)
        if value is not None:
            numbers.parse(value, server_flags.spellings(flag), bounds, fix)
    return parsed


def _argv_value_any(argv: Sequence[str], flag: str) -> str | None:
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


def locked_revisions(environ: Mapping[str, str]) -> dict[str, str | None]:
    """role -> the locked revision; empty when there is no usable lock (the lock check reports that)."""
    try:
        lock = weights_lock.load_lock(weights_lock.default_lock_path(environ))
    except UserError:
        return {}
    return {role: model.revision for role, model in lock.models.items()}


def write_server_config(launch: Launch) -> str | None:
    """The --config path SGLang will read: the user's config plus the secrets, held in a memfd that exec
    keeps open (no copy on any disk), linked as server-config.yaml in a private (0700) temporary folder.
    The link names /proc/<our pid>/fd/N: the server keeps our PID, so it resolves for the server only."""
    if not launch.secrets:
        return None
    import yaml

    data = {**launch.user_config, **launch.secrets}
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


def launch_block_size(launch: Launch) -> int | None:
    """The drafter block size SGLang will use: its parser's reading, else the tokens (block_size_of)."""
    if launch.parsed is None:
        return block_size_of(launch.server_args)
    for flag in BLOCK_SIZE_FLAGS:
        value = launch.value(flag)
        if value is not None:
            return int(value)
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
    summary: weights.ModelSummary | None = None
    shm_floor(environ)  # a bad DDTREE_MIN_SHM_GIB is refused before the slower checks
    if "weights" not in skip:
        summary = check_weights(launch)
        check_tp_divides_heads(launch)
        log(
            f"ok   weights  {summary.path}: {summary.model_type}, {len(summary.shards)} shards, "
            f"{summary.total_bytes / 1e9:.1f} GB"
        )
        weights_lock.enforce("target", launch.model_dir(), environ, log)
        warn_read_write(launch.mounted_dir("target"), log)
    if "drafter" not in skip:
        drafter = check_drafter(launch, summary)
        log(f"ok   drafter  {drafter.path}: block size {drafter.block_size}")
        weights_lock.enforce("drafter", launch.drafter_dir(), environ, log)
        warn_read_write(launch.mounted_dir("drafter"), log)
    if "gpu" not in skip:
        found = check_gpu(launch, environ, runner)
        log(f"ok   gpu      {gpu.describe(found, tp_of(launch))}")
    if "shm" not in skip:
        size = gpu.check_shm(shm_floor(environ))
        log(f"ok   shm      /dev/shm {size / 2**30:.1f} GiB")
    if "port" not in skip:
        port, host = check_port(launch)
        log(f"ok   port     {host}:{port} is free")
    if "tree" not in skip:
        launch.environment.update(measured_tree(log))


def measured_tree(log: Callable[[str], None]) -> dict[str, str]:
    """In the image: the whole-tree digest measured now (a few seconds on the cores), exported to the server
    as DDTREE_SERVED_TREE_SHA256 for its /server_info (patch ddtree-served-identity): a receipt then names
    the files that served, also in an image built FROM this one. Outside an image (no baked identity): {}."""
    from ddtree import image_identity
    from ddtree.receipts import tree_identity

    if not tree_identity.IDENTITY_FILE.is_file():
        return {}
    site, extra = tree_identity.image_roots()
    report = tree_identity.scan(site, extra)
    baked = (tree_identity.read_identity(tree_identity.IDENTITY_FILE) or {}).get("digest")
    same = "the build's" if report.digest == baked else f"NOT the build's {str(baked)[:16]}"
    log(f"ok   tree     {report.digest[:16]} ({same}; {report.files} files, {report.seconds:.1f} s)")
    return {image_identity.SERVED_TREE_ENV: report.digest}


def check_weights(launch: Launch) -> weights.ModelSummary:
    return weights.check_target(
        launch.model_dir(), launch.model_type, env_var="MODEL_DIR or DDTREE_MODEL_DIR"
    )


def target_config(launch: Launch) -> weights.ModelSummary:
    """The target's config facts only (no shard headers): enough to check the drafter against."""
    return weights.read_target_config(
        launch.model_dir(), launch.model_type, env_var="MODEL_DIR or DDTREE_MODEL_DIR"
    )


def check_drafter(launch: Launch, target: weights.ModelSummary | None) -> weights.DrafterSummary:
    """The drafter against the profile's block size and, when the target was checked, its shape facts."""
    return weights.check_drafter(
        launch.drafter_dir(),
        launch_block_size(launch),
        target.num_hidden_layers if target else None,
        env_var="DRAFTER_DIR or DDTREE_DRAFTER_DIR",
        target=target,
        tp=tp_of(launch),
    )


def warn_read_write(folder: Path, log: Callable[[str], None]) -> None:
    """Weights are inputs: a read-write mount lets anything in the container change what was measured."""
    if is_read_only(folder) is False:
        log(
            f"warn mount    {folder} is mounted read-write: mount it read-only (docker run -v HOST:PATH:ro; "
            "the compose file does) so nothing in the container can change the weights"
        )


def tp_of(launch: Launch) -> int:
    """The tensor-parallel size SGLang will use (any spelling, else the profile's); range-checked."""
    value = launch.value("--tp-size")
    if value:
        bounds, fix = CHECKED_NUMBERS["--tp-size"]
        return int(numbers.parse(value, "--tp-size", bounds, fix))
    return launch.target.tensor_parallel


def attention_heads(folder: Path) -> int | None:
    """num_attention_heads of the target's config.json (top level or text_config, as Kimi K2.6 nests it)."""
    config = weights.read_json(folder / "config.json", "target config")
    for holder in (config, config.get("text_config")):
        heads = holder.get("num_attention_heads") if isinstance(holder, dict) else None
        if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0:
            return heads
    return None


def check_tp_divides_heads(launch: Launch) -> None:
    """SGLang splits the attention heads over the TP ranks: TP must divide them (else found after loading)."""
    tp = tp_of(launch)
    heads = attention_heads(launch.model_dir())
    if heads is not None and heads % tp:
        fits = [n for n in range(1, heads + 1) if heads % n == 0 and n <= 64]
        raise UserError(
            f"tensor parallel size {tp} does not divide the model's {heads} attention heads "
            f"({launch.model_dir() / 'config.json'}): set DDTREE_TP to one of {', '.join(map(str, fits))}"
        )


def check_gpu(
    launch: Launch, environ: Mapping[str, str], runner: gpu.Runner = gpu.run_nvidia_smi
) -> list[gpu.Gpu]:
    allow = environ.get(gpu.ARCH_OVERRIDE_ENV) == "1"
    return gpu.check_gpus(tp_of(launch), launch.target.compute_capability, runner, allow)


def shm_floor(environ: Mapping[str, str]) -> int:
    text = environ.get("DDTREE_MIN_SHM_GIB")
    if not text:
        return gpu.DEFAULT_MIN_SHM_BYTES
    gib = numbers.parse(text, "DDTREE_MIN_SHM_GIB", SHM_GIB, "the /dev/shm floor in GiB (default 1)")
    return int(gib * (1 << 30))


def check_port(launch: Launch) -> tuple[int, str]:
    bounds, fix = CHECKED_NUMBERS["--port"]
    port = int(numbers.parse(launch.value("--port") or "30000", "--port", bounds, fix))
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
    command = launch.server_command(write_server_config(launch))
    os.environ.update(launch.environment)
    for name in SECRET_ENV:  # consumed: the server and its workers do not inherit them
        os.environ.pop(name, None)
    os.execvp(command[0], command)
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
