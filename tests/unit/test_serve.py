"""`ddtree serve`: profile loading, argv assembly, masking, every pre-launch failure, and the real exec.

Real parts: synthetic weight folders on disk, the real /dev/shm, real sockets, a real exec into a
stand-in `sglang.launch_server` module (SGLang and a GPU cannot run here; the stand-in prints its PID
and argv and handles SIGTERM the way SGLang's tokenizer manager does). nvidia-smi is a shell script on
PATH printing the csv rows the real one prints, because there is no GPU here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ddtree import cli
from ddtree.serve import argv as serve_argv
from ddtree.serve import launch as serve_launch
from ddtree.serve import secret_args

from tests.synthetic_weights import write_drafter, write_target

PROFILE = """\
schema: 1
name: pro6000
interconnect: pcie
gpu: {model: RTX PRO 6000 Blackwell, compute_capability: "12.0", count: 8}
tensor_parallel: 8
environment: {NCCL_P2P_DISABLE: "1", SGLANG_ENABLE_JIT_DEEPGEMM: "0"}
server_args:
  model-path: /models/target
  speculative-draft-model-path: /models/drafter
  trust-remote-code: true
  tp: 8
  speculative-algorithm: DDTREE
  speculative-num-draft-tokens: 8
  speculative-draft-window-size: 2048
  disable-custom-all-reduce: true
  enable-foo: false
  host: 0.0.0.0
  port: 30000
"""
PRO6000_ROW = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 580.82.07"
H200_ROW = "NVIDIA H200, 9.0, 580.95.05"


@pytest.fixture
def env_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "env"
    (folder / "targets").mkdir(parents=True)
    (folder / "targets" / "pro6000.yaml").write_text(PROFILE)
    return folder


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Path]:
    target, drafter = tmp_path / "target", tmp_path / "drafter"
    write_target(target, shards=3)
    write_drafter(drafter, block_size=8)
    return target, drafter


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("DDTREE_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(os, "execvp", _no_exec)
    return monkeypatch


def _no_exec(*args: object) -> None:
    raise AssertionError(f"exec must not happen in this test: {args}")


def fake_nvidia_smi(folder: Path, rows: list[str]) -> Path:
    """A stand-in nvidia-smi on PATH (no GPU here) that answers the query with `rows`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    body = "".join(f"echo '{row}'\n" for row in rows)
    script.write_text(f"#!/bin/sh\n{body}")
    script.chmod(0o755)
    return folder


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_serve(env_dir: Path, *extra: str) -> int:
    return cli.main(["serve", "--env-dir", str(env_dir), *extra])


def test_dry_run_prints_command(env_dir: Path, clean_env, capsys) -> None:
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    assert run_serve(env_dir, "--dry-run") == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1:3] == ["NCCL_P2P_DISABLE=1 \\", "SGLANG_ENABLE_JIT_DEEPGEMM=0 \\"]
    assert lines[3] == f"{sys.executable} -m sglang.launch_server \\"
    assert lines[4:] == [
        "    --model-path /models/target \\",
        "    --speculative-draft-model-path /models/drafter \\",
        "    --trust-remote-code \\",
        "    --tp 8 \\",
        "    --speculative-algorithm DDTREE \\",
        "    --speculative-num-draft-tokens 8 \\",
        "    --speculative-draft-window-size 2048 \\",
        "    --disable-custom-all-reduce \\",
        "    --host 0.0.0.0 \\",
        "    --port 30000",
    ]


def test_overrides_and_extra_args(env_dir: Path, clean_env, capsys) -> None:
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    clean_env.setenv("DDTREE_PORT", "31000")
    clean_env.setenv("DDTREE_MODEL_DIR", "/mnt/kimi")
    clean_env.setenv("DDTREE_TP", "4")
    clean_env.setenv("DDTREE_EXTRA_ARGS", "--log-level debug --chat-template 'a b'")
    clean_env.setenv("NCCL_P2P_DISABLE", "0")  # the caller's environment wins over the profile's
    assert run_serve(env_dir, "--dry-run", "--", "--mem-fraction-static", "0.8") == 0
    out = capsys.readouterr().out
    assert "NCCL_P2P_DISABLE=0 \\" in out
    assert "--model-path /models/target" not in out and "    --model-path /mnt/kimi \\" in out
    assert "    --port 31000 \\" in out and "--port 30000" not in out
    assert "    --tp 4 \\" in out
    tail = out.splitlines()[-3:]
    assert tail == [
        "    --log-level debug \\",
        "    --chat-template 'a b' \\",
        "    --mem-fraction-static 0.8",
    ]


def test_secrets_masked(env_dir: Path, clean_env, capsys) -> None:
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    clean_env.setenv("DDTREE_API_KEY", "supersecret123")
    token = "hf_" + "A1b2C3d4E5f6G7h8"
    assert run_serve(env_dir, "--dry-run", "--", "--admin-api-key=adminpw", "--tokenizer-path", token) == 0
    out = capsys.readouterr().out
    assert "supersecret123" not in out and "adminpw" not in out and token not in out
    assert "--tokenizer-path ****" in out  # a token-shaped value is masked wherever it is
    # Both keys left the command line for the in-memory --config YAML.
    assert "--api-key" not in out and "--admin-api-key" not in out
    assert out.rstrip().endswith("    --config '<in-memory server-config.yaml: admin-api-key, api-key>'")


def test_mask_env_value() -> None:
    assert secret_args.mask_env_value("HF_TOKEN", "hf_abcdefghijk") == secret_args.MASK
    assert secret_args.mask_env_value("NCCL_P2P_DISABLE", "1") == "1"


def test_unknown_target(env_dir: Path, clean_env, capsys) -> None:
    clean_env.setenv("DDTREE_TARGET", "h100")
    assert run_serve(env_dir, "--dry-run") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"ddtree: error: unknown target 'h100' (DDTREE_TARGET): known targets in {env_dir / 'targets'} "
        "are pro6000; set DDTREE_TARGET to one of them"
    )


def test_no_target(env_dir: Path, clean_env, capsys) -> None:
    assert run_serve(env_dir, "--dry-run") == 2
    assert "no target: set DDTREE_TARGET" in capsys.readouterr().err


def test_bad_skip_name(env_dir: Path, clean_env, models, capsys) -> None:
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    clean_env.setenv("DDTREE_SKIP_CHECKS", "weights,gpus")
    assert run_serve(env_dir) == 2
    assert "DDTREE_SKIP_CHECKS names unknown check 'gpus'" in capsys.readouterr().err


def _prepare(clean_env, models, tmp_path: Path, rows: list[str] | None) -> None:
    target, drafter = models
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    clean_env.setenv("DDTREE_MODEL_DIR", str(target))
    clean_env.setenv("DDTREE_DRAFTER_DIR", str(drafter))
    clean_env.setenv("DDTREE_HOST", "127.0.0.1")
    clean_env.setenv("DDTREE_PORT", str(_free_port()))
    clean_env.setenv("DDTREE_MIN_SHM_GIB", "0.001")
    clean_env.setenv(
        "PATH", str(fake_nvidia_smi(tmp_path / "bin", rows)) if rows is not None else "/nonexistent"
    )


def _break_missing_mount(target: Path, drafter: Path) -> None:
    import shutil

    shutil.rmtree(target)


def _break_empty(target: Path, drafter: Path) -> None:
    for child in target.iterdir():
        child.unlink()


def _break_missing_shard(target: Path, drafter: Path) -> None:
    (target / "model-00002-of-00003.safetensors").unlink()


def _break_truncated(target: Path, drafter: Path) -> None:
    path = target / "model-00003-of-00003.safetensors"
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 10)


def _break_header(target: Path, drafter: Path) -> None:
    with open(target / "model-00001-of-00003.safetensors", "r+b") as handle:
        handle.seek(8)
        handle.write(b"}}}}")


def _break_model_type(target: Path, drafter: Path) -> None:
    (target / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 61}')


def _break_block_size(target: Path, drafter: Path) -> None:
    write_drafter(drafter, block_size=4)


@pytest.mark.parametrize(
    ("breaker", "expected"),
    [
        (_break_missing_mount, "target weights folder {target} does not exist: mount the target weights"),
        (_break_empty, "target weights folder {target} is empty: the mount points at the wrong host folder"),
        (_break_missing_shard, "shard {target}/model-00002-of-00003.safetensors is missing (1 of 3 shards"),
        (_break_truncated, "shard {target}/model-00003-of-00003.safetensors is truncated: "),
        (_break_header, "shard {target}/model-00001-of-00003.safetensors has a corrupt header (not JSON"),
        (_break_model_type, "has model_type 'llama', the target expects 'kimi_k25'"),
        (_break_block_size, "has block_size 4 but the target profile sets num-draft-tokens/block size 8"),
    ],
    ids=[
        "missing-mount",
        "empty",
        "missing-shard",
        "truncated",
        "corrupt-header",
        "model-type",
        "block-size",
    ],
)
def test_weights_failures_exit_1(breaker, expected, env_dir, clean_env, models, tmp_path, capsys) -> None:
    _prepare(clean_env, models, tmp_path, [PRO6000_ROW] * 8)
    target, drafter = models
    breaker(target, drafter)
    assert run_serve(env_dir) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ddtree: error: ")
    assert expected.format(target=target) in err


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (None, "no GPU visible: nvidia-smi is not on PATH"),
        ([], "no GPU visible: nvidia-smi lists no devices"),
        ([H200_ROW] * 8, "NVIDIA H200 has compute capability 9.0, the target expects 12.0"),
        ([PRO6000_ROW] * 2, "too few GPUs: 2 visible, tensor parallel size is 8"),
    ],
    ids=["no-gpu-binary", "no-gpu-rows", "wrong-arch", "too-few"],
)
def test_gpu_failures_exit_1(rows, expected, env_dir, clean_env, models, tmp_path, capsys) -> None:
    _prepare(clean_env, models, tmp_path, rows)
    assert run_serve(env_dir) == 1
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_small_shm_exit_1(env_dir, clean_env, models, tmp_path, capsys) -> None:
    _prepare(clean_env, models, tmp_path, [PRO6000_ROW] * 8)
    clean_env.setenv("DDTREE_MIN_SHM_GIB", "4000")
    assert run_serve(env_dir) == 1
    assert "/dev/shm is " in capsys.readouterr().err


def test_port_in_use_exit_1(env_dir, clean_env, models, tmp_path, capsys) -> None:
    _prepare(clean_env, models, tmp_path, [PRO6000_ROW] * 8)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        clean_env.setenv("DDTREE_PORT", str(port))
        assert run_serve(env_dir) == 1
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def test_arch_override_reaches_exec(env_dir, clean_env, models, tmp_path, capsys) -> None:
    _prepare(clean_env, models, tmp_path, [H200_ROW] * 8)
    clean_env.setenv("DDTREE_ALLOW_ARCH_MISMATCH", "1")
    calls: list[tuple[str, list[str]]] = []
    clean_env.setattr(os, "execvp", lambda file, argv: calls.append((file, list(argv))))
    run_serve(env_dir)
    assert calls and calls[0][1][1:3] == ["-m", "sglang.launch_server"]
    assert os.environ["NCCL_P2P_DISABLE"] == "1"  # the profile's environment is exported to the server
    out = capsys.readouterr().out
    assert "ok   gpu      8 x NVIDIA H200" in out and "ok   weights" in out and "ok   port" in out


FAKE_SERVER = '''\
"""Stand-in for sglang.launch_server: prints its PID and argv, exits 0 on SIGTERM like SGLang does."""
import os, signal, sys, time
def stop(signum, frame):
    print("SIGTERM received", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("PID", os.getpid(), flush=True)
print("ARGV", " ".join(sys.argv[1:]), flush=True)
print("ENV", os.environ.get("NCCL_P2P_DISABLE"), flush=True)
time.sleep(60)
'''


def test_exec_keeps_pid_and_sigterm_reaches_server(env_dir: Path, models, tmp_path: Path) -> None:
    """The real thing: serve execs; the server has serve's PID; SIGTERM sent to it is handled by it."""
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(FAKE_SERVER)
    target, drafter = models
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDTREE_") and k != "NCCL_P2P_DISABLE"}
    repo = Path(__file__).resolve().parents[2]
    env.update(
        PYTHONPATH=os.pathsep.join([str(fake), str(repo / "entrypoint"), str(repo)]),
        DDTREE_TARGET="pro6000",
        DDTREE_ENV_DIR=str(env_dir),
        DDTREE_MODEL_DIR=str(target),
        DDTREE_DRAFTER_DIR=str(drafter),
        DDTREE_HOST="127.0.0.1",
        DDTREE_PORT=str(_free_port()),
        DDTREE_SKIP_CHECKS="gpu,shm",
        PYTHONUNBUFFERED="1",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddtree.cli", "serve", "--", "--extra-flag", "x"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if line.startswith("ENV"):
            break
    assert f"PID {proc.pid}" in seen, seen  # exec, not a child process
    argv_line = next(x for x in seen if x.startswith("ARGV"))
    assert argv_line.endswith("--extra-flag x") and f"--model-path {target}" in argv_line
    assert "ENV 1" in seen  # the profile's environment reached the server
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=20)
    assert "SIGTERM received" in rest
    assert proc.returncode == 0


def test_bad_profile_exit_2(env_dir: Path, clean_env, capsys) -> None:
    (env_dir / "targets" / "pro6000.yaml").write_text(PROFILE.replace("tp: 8", "tp: 4"))
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    assert run_serve(env_dir, "--dry-run") == 2
    assert "server_args.tp: is 4 but tensor_parallel is 8" in capsys.readouterr().err


def test_block_size_prefers_explicit_flag() -> None:
    argv = ["--speculative-num-draft-tokens", "9", "--speculative-dflash-block-size", "8"]
    assert serve_argv.block_size_of(argv) == 8
    assert serve_argv.block_size_of(["--speculative-num-draft-tokens=8"]) == 8
    assert serve_argv.block_size_of([]) is None


@pytest.mark.parametrize("target", ["pro6000", "b300"])
def test_real_profiles_dry_run(target: str, clean_env, capsys) -> None:
    """The committed env/targets profiles assemble into a DDTree launch with the measured settings."""
    clean_env.setenv("DDTREE_TARGET", target)
    repo_env = Path(__file__).resolve().parents[2] / "env"
    assert run_serve(repo_env, "--dry-run") == 0
    out = capsys.readouterr().out
    for line in (
        "--speculative-algorithm DDTREE",
        "--speculative-num-draft-tokens 8",
        "--speculative-ddtree-budget 8",
        "--speculative-ddtree-topk 4",
        "--speculative-draft-window-size 2048",
        "--model-path /models/target",
        "--speculative-draft-model-path /models/drafter",
        "--tp 8",
    ):
        assert f"    {line} \\" in out or out.rstrip().endswith(f"    {line}"), line


@pytest.mark.parametrize(
    ("env", "extra", "expected"),
    [
        ({"DDTREE_TP": "0"}, [], "--tp '0' is not an integer >= 1 and <= 64: set DDTREE_TP"),
        ({"DDTREE_TP": "-1"}, [], "--tp '-1' is not an integer >= 1"),
        ({"DDTREE_TP": "eight"}, [], "--tp 'eight' is not an integer"),
        ({"DDTREE_PORT": "70000"}, [], "--port '70000' is not an integer >= 1 and <= 65535: set DDTREE_PORT"),
        ({"DDTREE_PORT": "abc"}, [], "--port 'abc' is not an integer"),
        ({"DDTREE_EXTRA_ARGS": "--port abc"}, [], "--port 'abc' is not an integer"),
        ({}, ["--", "--port", "abc"], "--port 'abc' is not an integer"),
        ({}, ["--", "--port=0"], "--port '0' is not an integer"),
        ({"DDTREE_EXTRA_ARGS": "--port"}, [], "--port needs a value"),
        ({"DDTREE_EXTRA_ARGS": "--tp-size 3.5"}, [], "--tp-size '3.5' is not an integer"),
        ({"DDTREE_EXTRA_ARGS": "--mem-fraction-static inf"}, [], "'inf' is not a number > 0"),
        ({"DDTREE_EXTRA_ARGS": "--mem-fraction-static nan"}, [], "'nan' is not a number"),
        ({}, ["--", "--speculative-ddtree-budget", "64"], "--speculative-ddtree-budget '64' is not"),
        ({}, ["--", "--speculative-num-draft-tokens", "0"], "--speculative-num-draft-tokens '0' is not"),
        ({}, ["--", "--model-path", "--tp", "8"], "--model-path needs a value"),
        ({}, ["--", "--api-key"], "--api-key needs a value"),
    ],
)  # fmt: skip
def test_bad_values_on_the_final_command_line_exit_2(
    env_dir, clean_env, capsys, env, extra, expected
) -> None:
    """Wherever a value comes from, the final command line is checked before anything runs (dry run too)."""
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert run_serve(env_dir, "--dry-run", *extra) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing printed as if it would run
    assert captured.err.count("\n") == 1 and captured.err.startswith("ddtree: error: "), captured.err
    assert expected in captured.err


def test_config_file_values_are_checked_too(env_dir, clean_env, tmp_path, capsys) -> None:
    """SGLang reads --config values before the command line's: a bad number there is refused the same way."""
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    config = tmp_path / "server.yaml"
    config.write_text("cuda-graph-max-bs: -4\n")
    assert run_serve(env_dir, "--dry-run", "--", "--config", str(config)) == 2
    assert "--cuda-graph-max-bs '-4' is not an integer >= 1" in capsys.readouterr().err
    config.write_text("- a list\n")
    assert run_serve(env_dir, "--dry-run", "--", "--config", str(config)) == 2
    assert "expected a mapping of option: value" in capsys.readouterr().err
    assert run_serve(env_dir, "--dry-run", "--", "--config", str(tmp_path / "absent.yaml")) == 2
    assert "absent.yaml: not found; --config names SGLang's YAML config file" in capsys.readouterr().err


def test_user_config_and_secrets_merge_into_one_config(env_dir, clean_env, tmp_path, capsys) -> None:
    """SGLang takes one --config: with a key to hide, the user's file is folded into the in-memory one."""
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    clean_env.setenv("DDTREE_API_KEY", "k-123456")
    config = tmp_path / "server.yaml"
    config.write_text("enable-metrics: true\ncontext-length: 8192\n")
    launch = serve_launch.plan(dict(os.environ), None, str(env_dir), ["--config", str(config)])
    assert "--config" not in launch.server_args and launch.secrets == {"api-key": "k-123456"}
    assert launch.user_config == {"enable-metrics": True, "context-length": 8192}
    assert launch.value("--context-length") == "8192"


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "abc", "5000"])
def test_bad_shm_floor_exit_2_before_other_checks(
    value, env_dir, clean_env, models, tmp_path, capsys
) -> None:
    _prepare(clean_env, models, tmp_path, [PRO6000_ROW] * 8)
    clean_env.setenv("DDTREE_MIN_SHM_GIB", value)
    assert run_serve(env_dir) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1  # refused before the weights were read
    assert f"DDTREE_MIN_SHM_GIB {value!r} is not a number > 0 and <= 4096" in captured.err


def test_tp_must_divide_the_visible_gpus(env_dir, clean_env, models, tmp_path, capsys) -> None:
    _prepare(clean_env, models, tmp_path, [PRO6000_ROW] * 8)
    clean_env.setenv("DDTREE_TP", "3")
    assert run_serve(env_dir) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (
        "tensor parallel size 3 does not divide the 8 visible GPUs: set DDTREE_TP to one of 1, 2, 4, 8" in err
    )


def test_tp_must_divide_the_attention_heads(env_dir, clean_env, models, tmp_path, capsys) -> None:
    import json

    _prepare(clean_env, models, tmp_path, [PRO6000_ROW] * 8)
    target, _ = models
    config = json.loads((target / "config.json").read_text())
    config["text_config"]["num_attention_heads"] = 6
    (target / "config.json").write_text(json.dumps(config))
    clean_env.setenv("DDTREE_TP", "4")
    assert run_serve(env_dir) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "tensor parallel size 4 does not divide the model's 6 attention heads" in err
    assert "set DDTREE_TP to one of 1, 2, 3, 6" in err


def test_api_key_file_problems_are_one_line(env_dir, clean_env, tmp_path, capsys) -> None:
    clean_env.setenv("DDTREE_TARGET", "pro6000")
    clean_env.setenv("DDTREE_API_KEY_FILE", str(tmp_path / "absent"))
    assert run_serve(env_dir, "--dry-run") == 2
    err = capsys.readouterr().err
    hint = "not found; DDTREE_API_KEY_FILE names the file holding the API key"
    assert err == f"ddtree: error: {tmp_path / 'absent'}: {hint}\n"
    (tmp_path / "empty").write_text("\n")
    clean_env.setenv("DDTREE_API_KEY_FILE", str(tmp_path / "empty"))
    assert run_serve(env_dir, "--dry-run") == 2
    assert "empty: empty; DDTREE_API_KEY_FILE must hold the API key" in capsys.readouterr().err
