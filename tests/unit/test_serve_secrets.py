"""Secrets stay off every command line and out of every log, in a real running process.

`ddtree serve` runs for real (its real command-line builder, the real exec) into a stand-in for
`python -m sglang.launch_server`: SGLang's HTTP server cannot start here (no GPU; its server module needs
uvloop and CUDA). While the stand-in runs, the tests read its argv three ways (/proc/PID/cmdline, `ps`
over every process, /proc/PID/environ) and every line it and `ddtree serve` logged.

- test_api_key_never_on_a_command_line: the stand-in reads the --config YAML with PyYAML (as SGLang's
  ConfigArgumentMerger does) and prints sha256 of each key, proving the server got the values.
- test_real_sglang_reads_the_keys_and_does_not_log_them: the stand-in is a shim package whose only own
  module is launch_server; everything else is the real patched sglang 0.5.13.post1 on CPU (built by
  test_ddtree_sglang's fixture). It calls the real `prepare_server_args` (the real --config parsing, through
  the memfd link) and logs `f"{server_args=}"` with SGLang's logger exactly as engine.py:787 does at
  start-up, so the log line is the one SGLang would print; then the real patched scheduler's
  get/set_internal_state (on a stand-in scheduler with no model), the /server_info handler and the
  tokenizer manager's request and crash dumps. The user key, the admin key (from a `--config=PATH` file),
  the SSL key password and an HF token are searched in argv, environments, logs, answers and the dumps.
- The spelling tests: abbreviations of secret options and of --config are refused (checked against the
  real parser's option list), `--config=PATH` is read like `--config PATH`.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ddtree import image_identity
from ddtree.bench.serverinfo import server_settings
from ddtree.errors import UserError
from ddtree.receipts import receipt
from ddtree.secret_rules import FULL_PREFIX_FLAGS
from ddtree.serve import launch as serve_launch
from ddtree.serve import secret_args

from tests.unit.test_ddtree_sglang import TINY_TARGET, sglang_cpu_path  # noqa: F401 (a pytest fixture)
from tests.unit.test_router_secrets import open_file_targets
from tests.unit.test_serve import PROFILE

API_KEY = "sk-live-0123456789abcdefSECRET"
ADMIN_KEY = "adm1n-S3CRET-value"
PW = "ssl-pass-0123456789PW"
HF_TOKEN = "hf_TokenValue0123456789abcdef"
REPO = Path(__file__).resolve().parents[2]

STAND_IN = '''\
"""STAND-IN for sglang.launch_server (see tests/unit/test_serve_secrets.py): reads --config like SGLang."""
import hashlib, os, signal, sys, time
import yaml
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
argv = sys.argv[1:]
config = yaml.safe_load(open(argv[argv.index("--config") + 1]))
for key in ("api-key", "admin-api-key"):
    print(key, "sha256", hashlib.sha256(str(config[key]).encode()).hexdigest(), flush=True)
print("READY", os.getpid(), flush=True)
time.sleep(120)
'''

SHIM_INIT = '''\
"""STAND-IN shim of the sglang package: its own folder first (launch_server), then the real sglang."""
import os, sys
_own = os.path.dirname(os.path.abspath(__file__))
_real = next(os.path.join(p, "sglang") for p in sys.path[1:]
             if p and os.path.abspath(os.path.join(p, "sglang")) != _own
             and os.path.isfile(os.path.join(p, "sglang", "__init__.py")))
__path__ = [_own, _real]
_init = os.path.join(_real, "__init__.py")
exec(compile(open(_init).read(), _init, "exec"))
'''

REAL_LAUNCH = '''\
"""STAND-IN launch_server over the real sglang: the real prepare_server_args, then engine.py's log line,
then the real (patched) scheduler's get_internal_state and set_internal_state (on a stand-in scheduler:
no model), the real /server_info handler and the real tokenizer manager's request and crash dumps, each
compiled from its module's source on its own (importing http_server or tokenizer_manager needs uvloop) with
stand-ins for what they read besides the real ServerArgs."""
import ast, asyncio, dataclasses, hashlib, json, logging, os, pickle, signal, sys, time, types
import sglang
from sglang.srt import server_args as sa
from sglang.srt.managers.scheduler import Scheduler
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
server_args = sa.prepare_server_args(sys.argv[1:])
logging.getLogger("sglang.srt.entrypoints.engine").info(f"{server_args=}")
for name in ("api_key", "admin_api_key", "ssl_keyfile_password"):
    print(name, "sha256", hashlib.sha256(str(getattr(server_args, name)).encode()).hexdigest(), flush=True)
sa.set_global_server_args_for_scheduler(server_args)
NS = types.SimpleNamespace
runner = NS(weight_load_mem_usage=1.0, graph_mem_usage=0.5)
scheduler = NS(
    metrics_reporter=NS(last_gen_throughput=0.0, spec_total_num_forward_ct=0, spec_total_num_accept_tokens=0),
    tp_worker=NS(model_runner=runner), max_total_num_tokens=4096, max_running_requests=8,
    token_to_kv_pool_allocator=NS(get_kvcache=lambda: NS(mem_usage=0.25)), ps=NS(pp_size=1),
    spec_algorithm=NS(is_none=lambda: True),
)
state = Scheduler.get_internal_state(scheduler, None).internal_state
answer = Scheduler.set_internal_state(scheduler, NS(server_args={"pp_max_micro_batch_size": 1}))
print("SET_INTERNAL_STATE", json.dumps(answer.server_args, default=str), flush=True)
srt = os.path.join(sglang.__path__[-1], "srt")

def compiled(module, name, scope):
    source = os.path.join(srt, *module.split("/"))
    tree = ast.parse(open(source).read())
    node = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == name)
    node.decorator_list = []
    exec(compile(ast.Module(body=[node], type_ignores=[]), source, "exec"), scope)
    return scope[name]

async def states():
    return [state]
manager = NS(server_args=server_args, get_internal_state=states)
from ddtree import image_identity  # the stand-in's image: the labels file the test wrote
image_identity.LABEL_FILES = (__import__("pathlib").Path(os.environ["TEST_IMAGE_LABELS"]),)
# what `ddtree serve`'s tree step exports in an image (here there is no baked tree to measure)
os.environ[image_identity.SERVED_TREE_ENV] = os.environ["TEST_MEASURED_TREE"]
try:
    ddtree_image = compiled("entrypoints/http_server.py", "_ddtree_image", {})
except StopIteration:  # a series without the patch ddtree-served-identity
    ddtree_image = lambda: None
server_info = compiled("entrypoints/http_server.py", "server_info", {
    "_ddtree_image": ddtree_image,
    "dataclasses": dataclasses, "List": list, "Dict": dict, "Any": object, "__version__": "test",
    "without_secret_args": getattr(sa, "without_secret_args", lambda d: d),
    "_global_state": NS(tokenizer_manager=manager, scheduler_info={})})
print("SERVER_INFO", json.dumps(asyncio.run(server_info()), default=str), flush=True)
dump = compiled("managers/tokenizer_manager.py", "_dump_data_to_file", {
    "logging": logging, "logger": logging.getLogger("dump"), "os": os, "pickle": pickle,
    "asyncio": asyncio, "List": list, "Tuple": tuple,
    "secret_free_server_args": getattr(sa, "secret_free_server_args", lambda s: s)})
dump_path = os.environ["DUMP_FILE"]

async def write_dump():
    dump(NS(server_args=server_args), [], dump_path, "dumping requests")
    while not os.path.exists(dump_path) or not os.path.getsize(dump_path):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
asyncio.run(write_dump())
crash_dump = compiled("managers/tokenizer_manager.py", "dump_requests_before_crash", {
    "os": os, "socket": __import__("socket"), "sys": sys, "pickle": pickle,
    "logger": logging.getLogger("dump"), "datetime": __import__("datetime").datetime,
    "envs": NS(SGLANG_PYSPY_DUMP_BEFORE_CRASH=NS(get=lambda: False),
               SGLANG_CUDA_COREDUMP_BEFORE_CRASH=NS(get=lambda: False)),
    "secret_free_server_args": getattr(sa, "secret_free_server_args", lambda s: s)})
crash_dump(NS(server_args=server_args, crash_dump_folder=os.environ["CRASH_DUMP_DIR"],
              crash_dump_performed=False, rid_to_state={},
              crash_dump_request_list=[({"text": "hi"}, {"text": "!"}, 0.0, 1.0)]), "host")
print("READY", os.getpid(), flush=True)
time.sleep(120)
'''


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _env_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "env"
    (folder / "targets").mkdir(parents=True)
    (folder / "targets" / "pro6000.yaml").write_text(PROFILE)
    return folder


def _serve_env(tmp_path: Path, pythonpath: list[str], extra_args: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDTREE_")}
    key_file = tmp_path / "api_key"
    key_file.write_text(API_KEY + "\n")
    env.update(
        PYTHONPATH=os.pathsep.join([*pythonpath, str(REPO / "entrypoint"), str(REPO)]),
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        DDTREE_TARGET="pro6000",
        DDTREE_ENV_DIR=str(_env_dir(tmp_path)),
        DDTREE_SKIP_CHECKS="weights,drafter,gpu,shm,port",
        DDTREE_API_KEY_FILE=str(key_file),
        DDTREE_EXTRA_ARGS=extra_args,
        DDTREE_HOST="127.0.0.1",
    )
    return env


def _run_until_ready(
    env: dict[str, str], timeout: float, after: tuple[str, ...] = ("--admin-api-key", ADMIN_KEY)
) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddtree.cli", "serve", "--", *after],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if line.startswith("READY"):
            return proc, seen
    proc.kill()
    proc.wait()
    pytest.fail("the server stand-in never became ready:\n" + "\n".join(seen[-40:]))


def _assert_no_secret_anywhere(
    proc: subprocess.Popen[str], log: list[str], secrets: tuple[str, ...] = (API_KEY, ADMIN_KEY)
) -> None:
    """argv (/proc and ps, every process), the server's environment and every log line."""
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
    assert "sglang.launch_server" in cmdline and "--config" in cmdline  # it is the server, after exec
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
    ps = subprocess.run(["ps", "-eo", "pid,args", "--width", "100000"], capture_output=True, text=True)
    assert str(proc.pid) in ps.stdout
    for secret in secrets:
        assert secret not in cmdline
        assert secret not in ps.stdout
        assert secret not in environ
        assert not [line for line in log if secret in line]
    assert "DDTREE_API_KEY_FILE" not in environ  # consumed by serve, not inherited by the server


def _stop(proc: subprocess.Popen[str]) -> list[str]:
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=30)
    return rest.splitlines()


def test_api_key_never_on_a_command_line(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(STAND_IN)
    env = _serve_env(tmp_path, [str(fake)], "--log-level info")
    env["DDTREE_SERVED_TREE_SHA256"] = "e" * 64  # inherited, not measured: must not reach the server
    proc, log = _run_until_ready(env, timeout=120)  # a loaded 2-core machine
    try:
        assert f"api-key sha256 {_sha(API_KEY)}" in log  # the server got the key from the file
        assert f"admin-api-key sha256 {_sha(ADMIN_KEY)}" in log  # and the one given after --
        assert "    --config '<in-memory server-config.yaml: admin-api-key, api-key>'" in log
        _assert_no_secret_anywhere(proc, log)
        link = next(Path(arg) for arg in Path(f"/proc/{proc.pid}/cmdline").read_text().split("\0")
                    if arg.endswith("server-config.yaml"))  # fmt: skip
        assert os.readlink(link).startswith(f"/proc/{proc.pid}/fd/")  # memory only: no copy on disk
        assert link.parent.stat().st_mode & 0o777 == 0o700
        assert "DDTREE_SERVED_TREE_SHA256" not in Path(f"/proc/{proc.pid}/environ").read_text()
    finally:
        log += _stop(proc)
    assert not [line for line in log if API_KEY in line or ADMIN_KEY in line]


def test_a_secret_in_ddtree_extra_args_is_not_left_in_the_servers_environment(tmp_path: Path) -> None:
    """DDTREE_EXTRA_ARGS is read into the command line (the secret into the in-memory config); the variable
    itself, which held the secret, is not inherited by the server (it was, until 2026-12-01)."""
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(STAND_IN)
    env = _serve_env(tmp_path, [str(fake)], f"--log-level info --admin-api-key {ADMIN_KEY}")
    proc, log = _run_until_ready(env, timeout=120, after=())
    try:
        assert f"admin-api-key sha256 {_sha(ADMIN_KEY)}" in log  # the server got it, from the config
        _assert_no_secret_anywhere(proc, log)
        assert "DDTREE_EXTRA_ARGS" not in Path(f"/proc/{proc.pid}/environ").read_text()
    finally:
        log += _stop(proc)


def test_real_sglang_reads_the_keys_and_does_not_log_them(
    tmp_path: Path,
    sglang_cpu_path: str,  # noqa: F811
) -> None:
    """The user key from DDTREE_API_KEY_FILE, the admin key from a `--config=PATH` file (SGLang drops a
    file given that way unless serve rewrites it), the SSL key password after `--`, an HF token in the
    environment: the real SGLang gets each value, and none is in argv, environments, logs, /server_info
    (top level and internal_states), set_internal_state's answer or the request dump."""
    models = tmp_path / "models"
    (models / "target").mkdir(parents=True)
    (models / "target" / "config.json").write_text(json.dumps(TINY_TARGET))
    (models / "drafter").mkdir()
    drafter = {**TINY_TARGET, "architectures": ["DFlashDraftModel"], "num_hidden_layers": 2,
               "block_size": 8, "dflash_config": {"block_size": 8, "target_layer_ids": [1, 4],
                                                  "mask_token_id": 511}}  # fmt: skip
    (models / "drafter" / "config.json").write_text(json.dumps(drafter))
    shim = tmp_path / "shim"
    (shim / "sglang").mkdir(parents=True)
    (shim / "sglang" / "__init__.py").write_text(SHIM_INIT)
    (shim / "sglang" / "launch_server.py").write_text(REAL_LAUNCH)
    user_config = tmp_path / "user.yaml"
    user_config.write_text(f"admin-api-key: {ADMIN_KEY}\n")
    for name in ("key.pem", "cert.pem"):  # SGLang wants both files for a key password (read at serving only)
        (tmp_path / name).write_text("not read before the server starts serving\n")
    extra = (
        f"--model-path {models / 'target'} --speculative-draft-model-path {models / 'drafter'} "
        f"--skip-tokenizer-init --device cpu --tp 1 --attention-backend triton --log-level info "
        f"--ssl-keyfile {tmp_path / 'key.pem'} --ssl-certfile {tmp_path / 'cert.pem'} --config={user_config}"
    )
    env = _serve_env(tmp_path, [str(shim), *sglang_cpu_path.split(os.pathsep)], extra)
    dump_file = tmp_path / "dumps" / "requests.pkl"
    labels = {"io.ddtree.target": "pro6000", "io.ddtree.tree.sha256": "c" * 64}
    (tmp_path / "image-labels.json").write_text(json.dumps(labels))
    crash_dir = tmp_path / "crash-dumps"
    env.update(HF_TOKEN=HF_TOKEN, DUMP_FILE=str(dump_file), TEST_MEASURED_TREE="d" * 64)
    env["CRASH_DUMP_DIR"] = str(crash_dir)
    env["TEST_IMAGE_LABELS"] = str(tmp_path / "image-labels.json")
    secrets = (API_KEY, ADMIN_KEY, PW, HF_TOKEN)
    proc, log = _run_until_ready(env, timeout=600, after=("--ssl-keyfile-password", PW))
    try:
        assert f"api_key sha256 {_sha(API_KEY)}" in log  # real SGLang parsed the in-memory --config
        assert f"admin_api_key sha256 {_sha(ADMIN_KEY)}" in log  # and the user's --config=PATH file
        assert f"ssl_keyfile_password sha256 {_sha(PW)}" in log
        logged = [line for line in log if "server_args=ServerArgs(" in line]
        assert logged, log[-20:]  # SGLang's own start-up log line ran
        assert "api_key" not in logged[0] and "ssl_keyfile_password" not in logged[0] and "port=" in logged[0]
        served = json.loads(next(line for line in log if line.startswith("SERVER_INFO ")).split(" ", 1)[1])
        assert served["tp_size"] == 1 and served["internal_states"][0]["tp_size"] == 1
        # patch ddtree-served-identity: the server names its image and the tree serve measured
        assert served["ddtree_image"]["key"] == image_identity.identity_key(labels, with_tree=False)
        assert served["ddtree_image"]["tree_sha256_measured"] == "d" * 64
        answer = json.loads(next(ln for ln in log if ln.startswith("SET_INTERNAL_STATE ")).split(" ", 1)[1])
        assert answer["pp_max_micro_batch_size"] == 1
        for name in ("api_key", "admin_api_key", "ssl_keyfile_password"):
            assert name not in served and name not in served["internal_states"][0] and name not in answer
        assert dump_file.stat().st_size > 0
        # the in-memory config is closed and its link removed once SGLang has merged it (secret-args-repr)
        link = next(
            a for a in Path(f"/proc/{proc.pid}/cmdline").read_text().split("\0") if a.endswith(".yaml")
        )
        assert link.endswith("server-config.yaml") and not os.path.lexists(link)
        assert not Path(link).parent.exists()
        open_files = open_file_targets(proc.pid)
        assert open_files and not [f for f in open_files if f.startswith("/memfd:")]
        # a receipt records the server's settings from that answer
        document = receipt.build("live", server=server_settings(served), figures={}, greedy={}, checks=[],
                                 verdict="REPRODUCED", image={}, host={})  # fmt: skip
        assert not [s for s in secrets if s in json.dumps(document)]
        _assert_no_secret_anywhere(proc, log, secrets)
        dumped = dump_file.read_bytes()
        assert b"server_args" in dumped and not [s for s in secrets if s.encode() in dumped]
        (crashed,) = (crash_dir / "host").glob("crash_dump_*.pkl")  # with the launch command (sys.argv)
        crash = crashed.read_bytes()
        assert b"server_args" in crash and b"launch_command" in crash
        assert not [s for s in secrets if s.encode() in crash]
    finally:
        log += _stop(proc)
    assert not [line for line in log for s in secrets if s in line]


# ---------------------------------------------------------------- spellings (no server needed)


def _plan(tmp_path: Path, extra: list[str], **environ: str) -> serve_launch.Launch:
    return serve_launch.plan({"DDTREE_TARGET": "pro6000", **environ}, None, str(_env_dir(tmp_path)), extra)


@pytest.mark.parametrize(
    "spelling",
    [["--api-ke", API_KEY], [f"--api-k={API_KEY}"], ["--admin-api", ADMIN_KEY], ["--ad", ADMIN_KEY],
     ["--ssl-keyfile-pass", PW], [f"--ssl-keyfile-={PW}"], ["--conf", "x.yaml"], ["--confi=x.yaml"]],
)  # fmt: skip
def test_an_abbreviated_secret_or_config_option_is_refused_naming_the_option_only(
    tmp_path: Path, spelling: list[str]
) -> None:
    """SGLang's argparse expands any unique prefix (allow_abbrev): `--api-ke KEY` would set the key and stay
    on argv and in the launch log; an abbreviated --config would drop the file."""
    with pytest.raises(UserError) as caught:
        _plan(tmp_path, spelling)
    message = str(caught.value)
    assert "write the option in full" in message and caught.value.exit_code == 2
    assert API_KEY not in message and ADMIN_KEY not in message and PW not in message


def test_ssl_keyfile_password_moves_into_the_config_and_ssl_keyfile_stays(tmp_path: Path) -> None:
    launch = _plan(tmp_path, ["--ssl-keyfile", "/k.pem", f"--ssl-keyfile-password={PW}"])
    assert launch.secrets == {"ssl-keyfile-password": PW}
    assert "--ssl-keyfile" in launch.server_args and PW not in " ".join(launch.command)


@pytest.mark.parametrize("with_key", [False, True])
def test_config_with_equals_is_read_like_the_separate_token(tmp_path: Path, with_key: bool) -> None:
    """SGLang merges a config file only for the token `--config`: `--config=PATH` would drop the file
    (its api-key included) silently. Without secrets the command gets `--config PATH`; with one, the
    file's values go into the in-memory config with the secrets."""
    config = tmp_path / "server.yaml"
    config.write_text(f"api-key: {API_KEY}\ncontext-length: 8192\n")
    launch = _plan(tmp_path, [f"--config={config}"], **({"DDTREE_API_KEY": ADMIN_KEY} if with_key else {}))
    assert launch.user_config == {"api-key": API_KEY, "context-length": 8192}
    assert launch.value("--context-length") == "8192"
    if with_key:
        assert "--config" not in " ".join(launch.server_args) and launch.secrets == {"api-key": ADMIN_KEY}
    else:
        args = launch.server_args
        assert args[args.index("--config") + 1] == str(config)
        assert not [a for a in args if a.startswith("--config=")]


@pytest.mark.parametrize(
    "text", [f"api-key: {API_KEY}: x\n", f'admin-api-key: "{ADMIN_KEY}\n', f"ssl-keyfile-password: [{PW}\n"]
)
def test_a_malformed_config_file_is_refused_without_showing_its_secret(tmp_path: Path, text: str) -> None:
    """PyYAML's message quotes the line it failed on; the one-line error keeps the position only."""
    config = tmp_path / "server.yaml"
    config.write_text(text)
    with pytest.raises(UserError) as caught:
        _plan(tmp_path, ["--config", str(config)])
    message = str(caught.value)
    assert message.startswith(f"{config}: not valid YAML (") and " at line " in message
    assert API_KEY not in message and ADMIN_KEY not in message and PW not in message


def test_the_full_prefix_list_is_sglangs(sglang_cpu_path: str) -> None:  # noqa: F811
    """The real parser of the patched 0.5.13.post1: every SGLang option that is a proper prefix of a guarded
    one is in FULL_PREFIX_FLAGS, and every other prefix of a guarded option (from `--` plus one letter)
    that argparse accepts resolves to a guarded option, so refusing it loses nothing SGLang would take."""
    probe = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(); ServerArgs.add_cli_args(parser)
guarded, out = json.loads(sys.argv[1]), {"exact": [], "resolved": {}}
options = list(parser._option_string_actions)
for flag in guarded:
    out["exact"] += [o for o in options if flag.startswith(o) and o != flag]
    for n in range(3, len(flag)):
        matches = [o for o in options if o.startswith(flag[:n])]
        if flag[:n] not in options:
            out["resolved"][flag[:n]] = matches
print("PROBE", json.dumps(out))
"""
    env = {**os.environ, "PYTHONPATH": sglang_cpu_path, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(secret_args.GUARDED_FLAGS)],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert line, done.stderr[-3000:]
    found = json.loads(line[6:])
    assert sorted(set(found["exact"])) == sorted(FULL_PREFIX_FLAGS)
    for prefix, matches in found["resolved"].items():
        # Unique: argparse takes it as that option (a guarded one). Several: argparse refuses it too.
        assert len(matches) > 1 or matches[0] in secret_args.GUARDED_FLAGS, (prefix, matches)
        with pytest.raises(UserError):
            secret_args.spell_guarded_flags([prefix, "value"])
