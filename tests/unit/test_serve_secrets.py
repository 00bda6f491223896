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
  start-up, so the log line is the one SGLang would print; then it runs the patched /server_info handler.
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

from tests.unit.test_ddtree_sglang import TINY_TARGET, sglang_cpu_path  # noqa: F401 (a pytest fixture)
from tests.unit.test_serve import PROFILE

API_KEY = "sk-live-0123456789abcdefSECRET"
ADMIN_KEY = "adm1n-S3CRET-value"
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
then the real (patched) /server_info handler, compiled from http_server.py's source on its own (importing
that module needs uvloop) with a stand-in tokenizer manager holding the real ServerArgs."""
import ast, asyncio, dataclasses, hashlib, json, logging, os, signal, sys, time, types
import sglang
from sglang.srt.server_args import prepare_server_args
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
server_args = prepare_server_args(sys.argv[1:])
logging.getLogger("sglang.srt.entrypoints.engine").info(f"{server_args=}")
for name in ("api_key", "admin_api_key"):
    print(name, "sha256", hashlib.sha256(str(getattr(server_args, name)).encode()).hexdigest(), flush=True)
source = os.path.join(sglang.__path__[-1], "srt", "entrypoints", "http_server.py")
tree = ast.parse(open(source).read())
handler = next(n for n in tree.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "server_info")
handler.decorator_list = []
async def no_states():
    return []
manager = types.SimpleNamespace(server_args=server_args, get_internal_state=no_states)
scope = {"dataclasses": dataclasses, "List": list, "Dict": dict, "Any": object, "__version__": "test",
         "_global_state": types.SimpleNamespace(tokenizer_manager=manager, scheduler_info={})}
exec(compile(ast.Module(body=[handler], type_ignores=[]), source, "exec"), scope)
info = asyncio.run(scope["server_info"]())
print("SERVER_INFO", json.dumps(info, default=str), flush=True)
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


def _run_until_ready(env: dict[str, str], timeout: float) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddtree.cli", "serve", "--", "--admin-api-key", ADMIN_KEY],
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


def _assert_no_secret_anywhere(proc: subprocess.Popen[str], log: list[str]) -> None:
    """argv (/proc and ps, every process), the server's environment and every log line."""
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
    assert "sglang.launch_server" in cmdline and "--config" in cmdline  # it is the server, after exec
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
    ps = subprocess.run(["ps", "-eo", "pid,args", "--width", "100000"], capture_output=True, text=True)
    assert str(proc.pid) in ps.stdout
    for secret in (API_KEY, ADMIN_KEY):
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
    proc, log = _run_until_ready(env, timeout=30)
    try:
        assert f"api-key sha256 {_sha(API_KEY)}" in log  # the server got the key from the file
        assert f"admin-api-key sha256 {_sha(ADMIN_KEY)}" in log  # and the one given after --
        assert "    --config '<in-memory server-config.yaml: admin-api-key, api-key>'" in log
        _assert_no_secret_anywhere(proc, log)
        link = next(Path(arg) for arg in Path(f"/proc/{proc.pid}/cmdline").read_text().split("\0")
                    if arg.endswith("server-config.yaml"))  # fmt: skip
        assert os.readlink(link).startswith(f"/proc/{proc.pid}/fd/")  # memory only: no copy on disk
        assert link.parent.stat().st_mode & 0o777 == 0o700
    finally:
        log += _stop(proc)
    assert not [line for line in log if API_KEY in line or ADMIN_KEY in line]


def test_real_sglang_reads_the_keys_and_does_not_log_them(
    tmp_path: Path,
    sglang_cpu_path: str,  # noqa: F811
) -> None:

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
    extra = (
        f"--model-path {models / 'target'} --speculative-draft-model-path {models / 'drafter'} "
        "--skip-tokenizer-init --device cpu --tp 1 --attention-backend triton --log-level info"
    )
    env = _serve_env(tmp_path, [str(shim), *sglang_cpu_path.split(os.pathsep)], extra)
    proc, log = _run_until_ready(env, timeout=600)
    try:
        assert f"api_key sha256 {_sha(API_KEY)}" in log  # real SGLang parsed the in-memory --config
        assert f"admin_api_key sha256 {_sha(ADMIN_KEY)}" in log
        logged = [line for line in log if "server_args=ServerArgs(" in line]
        assert logged, log[-20:]  # SGLang's own start-up log line ran
        assert "api_key" not in logged[0] and "port=" in logged[0]
        served = json.loads(next(line for line in log if line.startswith("SERVER_INFO ")).split(" ", 1)[1])
        assert "api_key" not in served and "admin_api_key" not in served and served["tp_size"] == 1
        _assert_no_secret_anywhere(proc, log)
    finally:
        log += _stop(proc)
    assert not [line for line in log if API_KEY in line or ADMIN_KEY in line]
