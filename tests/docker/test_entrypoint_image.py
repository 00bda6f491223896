"""The entrypoint and the offline self-check inside the real image, with synthetic weights mounted.

The image is the docker tier's CI-lock build (same template, the real sglang wheel patched by the real
series; `ddtree-build image`'s own code path, so the layers come from the cache when test_image_build
ran first). Weights are tiny synthetic safetensors folders bind-mounted read-only at the paths compose
uses. There is no GPU here, so the pre-launch run skips the GPU and /dev/shm checks through
DDTREE_SKIP_CHECKS (the GPU part is the gpu tier's). The server launch uses a stand-in
`sglang.launch_server` mounted first on PYTHONPATH: the CI image has sglang without torch, so the real one
cannot start; the stand-in records its PID and exits 0 on SIGTERM, which shows exec and signal delivery.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.docker.test_image_build import SITE, TEST_NAME, build_ci_image, docker_run
from tests.synthetic_weights import write_drafter, write_target

# tree: serve's whole-tree scan (for /server_info's identity) takes 10-30 s of this shared 2-core machine per
# start; tests/unit/test_receipt_tamper.py runs it over a real pip-installed folder.
SKIP_HOST = "DDTREE_SKIP_CHECKS=gpu,shm,tree"
FAKE_SERVER = """\
import hashlib, os, signal, sys, time
def stop(signum, frame):
    print("SIGTERM received by PID", os.getpid(), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
argv = sys.argv[1:]
print("stand-in server PID", os.getpid(), "uid", os.getuid(), "argv", " ".join(argv), flush=True)
if "--config" in argv:  # read as SGLang's ConfigArgumentMerger does
    import yaml
    key = yaml.safe_load(open(argv[argv.index("--config") + 1]))["api-key"]
    print("api-key sha256", hashlib.sha256(key.encode()).hexdigest(), flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def tag(docker: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_ci_image(tmp_path_factory.mktemp("entrypoint-image")).tags[0]


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Path]:
    target, drafter = tmp_path / "target", tmp_path / "drafter"
    write_target(target, shards=3)
    write_drafter(drafter, block_size=8)
    for path in (tmp_path, target, drafter, *target.iterdir(), *drafter.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target, drafter


def mounts(target: Path | None, drafter: Path | None) -> list[str]:
    args = []
    if target is not None:
        args += ["-v", f"{target}:/models/target:ro"]
    if drafter is not None:
        args += ["-v", f"{drafter}:/models/drafter:ro"]
    return args


def test_dry_run_prints_the_profile_command(docker: str, tag: str) -> None:
    out = docker_run(docker, tag, "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# ddtree serve --dry-run: target pro6000 (/opt/ddtree/env/targets/pro6000.yaml)"
    assert "NCCL_P2P_DISABLE=1 \\" in lines and "SGLANG_ENABLE_JIT_DEEPGEMM=0 \\" in lines
    assert any(line.endswith("-m sglang.launch_server \\") for line in lines)
    for option in (
        "--model-path /models/target",
        "--speculative-draft-model-path /models/drafter",
        "--tp 8",
        "--speculative-algorithm DDTREE",
        "--speculative-num-draft-tokens 8",
        "--speculative-ddtree-budget 8",
        "--speculative-ddtree-topk 4",
        "--speculative-draft-window-size 2048",
        "--disable-custom-all-reduce",
    ):
        assert f"    {option} \\" in lines, option


def test_dry_run_overrides_and_masking(docker: str, tag: str) -> None:
    out = docker_run(
        docker,
        "-e",
        "DDTREE_PORT=31000",
        "-e",
        "DDTREE_API_KEY=s3cret-key",
        tag,
        "--dry-run",
        "--",
        "--log-level",
        "debug",
    )
    assert out.returncode == 0, out.stderr
    assert "    --port 31000 \\" in out.stdout and "    --log-level debug \\" in out.stdout
    assert "s3cret-key" not in out.stdout and "--api-key" not in out.stdout
    assert out.stdout.rstrip().endswith("    --config '<in-memory server-config.yaml: api-key>'")


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no-mount", "target weights folder /models/target does not exist"),
        ("empty", "target weights folder /models/target is empty"),
        ("missing-shard", "shard /models/target/model-00002-of-00003.safetensors is missing (1 of 3 shards"),
        ("truncated", "shard /models/target/model-00003-of-00003.safetensors is truncated"),
        ("no-drafter", "drafter folder /models/drafter does not exist"),
    ],
)
def test_bad_mounts_exit_1_with_the_message(
    docker: str, tag: str, models, tmp_path: Path, case, expected
) -> None:
    target, drafter = models
    args: list[str]
    if case == "no-mount":
        args = []
    elif case == "empty":
        empty = tmp_path / "empty"
        empty.mkdir(mode=0o755)
        args = mounts(empty, drafter)
    elif case == "missing-shard":
        (target / "model-00002-of-00003.safetensors").unlink()
        args = mounts(target, drafter)
    elif case == "truncated":
        shard = target / "model-00003-of-00003.safetensors"
        shard.write_bytes(shard.read_bytes()[:-5])
        args = mounts(target, drafter)
    else:
        args = mounts(target, None)
    started = time.monotonic()
    out = docker_run(docker, "-e", SKIP_HOST, *args, tag)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.startswith("ddtree: error: ") and expected in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1
    assert time.monotonic() - started < 60  # "stop within seconds"


def test_no_gpu_exit_1(docker: str, tag: str, models) -> None:
    out = docker_run(docker, *mounts(*models), tag)
    assert out.returncode == 1
    assert "ddtree: error: no GPU visible: nvidia-smi is not on PATH" in out.stderr


def fake_sglang(tmp_path: Path) -> Path:
    """A folder holding a stand-in `sglang.launch_server` (FAKE_SERVER), readable by the image's user."""
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(FAKE_SERVER)
    for path in (fake, fake / "sglang", *(fake / "sglang").iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return fake


def wait_for_log(docker: str, name: str, marker: str, timeout_s: float = 60.0) -> str:
    """The container's logs once `marker` shows, or at the deadline (the caller's asserts say what is
    missing)."""
    deadline = time.monotonic() + timeout_s
    logs = ""
    while time.monotonic() < deadline and marker not in logs:
        time.sleep(0.5)
        logs = subprocess.run([docker, "logs", name], capture_output=True, text=True).stdout
    return logs


def test_exec_pid1_and_sigterm(docker: str, tag: str, models, tmp_path: Path) -> None:
    """Good mounts: the checks pass, serve execs (the server is PID 1) and `docker stop` reaches it."""
    fake = fake_sglang(tmp_path)
    name = f"ddtree-entrypoint-test-{int(time.time() * 1000)}"
    run = subprocess.run(
        [docker, "run", "-d", "--name", name, "--network=none", "-e", SKIP_HOST, "-e", "PYTHONPATH=/fake",
         "-v", f"{fake}:/fake:ro", *mounts(*models), tag],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    try:
        logs = wait_for_log(docker, name, "stand-in server PID")
        assert "ok   weights  /models/target: kimi_k25, 3 shards" in logs, logs
        assert "ok   drafter  /models/drafter: block size 8" in logs and "ok   port" in logs
        assert "stand-in server PID 1 uid 10001 argv --model-path /models/target" in logs, logs
        started = time.monotonic()
        subprocess.run([docker, "stop", "-t", "20", name], capture_output=True, check=True)
        assert time.monotonic() - started < 15, "SIGTERM did not stop the server; docker had to kill it"
        state = json.loads(subprocess.run([docker, "inspect", name], capture_output=True, text=True).stdout)
        assert state[0]["State"]["ExitCode"] == 0
        logs = subprocess.run([docker, "logs", name], capture_output=True, text=True).stdout
        assert "SIGTERM received by PID 1" in logs
    finally:
        subprocess.run([docker, "rm", "-f", name], capture_output=True)


def test_runs_unprivileged_with_the_api_key_in_no_argv_and_no_log(
    docker: str, tag: str, models, tmp_path: Path
) -> None:
    """The container's PID 1 (the server, after exec) runs as uid 10001 and still reads the read-only
    weights; DDTREE_API_KEY reaches it through the in-memory --config, and appears neither in
    /proc/1/cmdline, nor in `docker top`, nor in the server's environment, nor in `docker logs`."""
    import hashlib

    key = "sk-docker-test-0123456789SECRET"
    fake = fake_sglang(tmp_path)
    name = f"ddtree-secret-test-{int(time.time() * 1000)}"
    run = subprocess.run(
        [docker, "run", "-d", "--name", name, "--network=none", "-e", SKIP_HOST, "-e", "PYTHONPATH=/fake",
         "-e", f"DDTREE_API_KEY={key}", "-v", f"{fake}:/fake:ro", *mounts(*models), tag],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    try:
        logs = wait_for_log(docker, name, "api-key sha256")
        assert f"api-key sha256 {hashlib.sha256(key.encode()).hexdigest()}" in logs, logs
        assert "stand-in server PID 1 uid 10001 argv" in logs and "ok   weights  /models/target" in logs
        cmdline = subprocess.run([docker, "exec", name, "cat", "/proc/1/cmdline"], capture_output=True).stdout
        environ = subprocess.run([docker, "exec", name, "cat", "/proc/1/environ"], capture_output=True).stdout
        top = subprocess.run([docker, "top", name, "-eo", "pid,user,args"], capture_output=True, text=True)
        assert b"sglang.launch_server" in cmdline and b"--config" in cmdline
        assert "sglang.launch_server" in top.stdout, top
        for seen in (cmdline.decode(), environ.decode(errors="replace"), top.stdout, logs):
            assert key not in seen
    finally:
        subprocess.run([docker, "rm", "-f", name], capture_output=True)


def _selfcheck(docker: str, image_tag: str, *args: str) -> tuple[int, dict]:
    out = docker_run(docker, "--entrypoint", "ddtree", *args, image_tag, "selfcheck", "--offline", "--json")
    return out.returncode, json.loads(out.stdout)


def test_selfcheck_offline_passes_with_weights(docker: str, tag: str, models) -> None:
    code, report = _selfcheck(docker, tag, *mounts(*models))
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert code == 0, json.dumps(report, indent=1)[-3000:]
    for name in ("target", "lock", "patches", "patched-files", "labels", "weights", "drafter"):
        assert statuses[name] == "pass", (name, report)
    assert statuses["gpu"] == "skip" and statuses["shm"] == "skip"


def test_selfcheck_offline_fails_on_an_altered_image(docker: str, tag: str, models) -> None:
    """Alter one patched file in a derived image (docker commit, as root: the image's own user cannot write
    site-packages): the patch and parse checks fail."""
    raw = docker_run(docker, "--entrypoint", "cat", tag, "/opt/ddtree/patch-manifest/manifest.json")
    files = sorted(json.loads(raw.stdout)["files"])
    py = next(f for f in files if f.endswith(".py"))
    name = f"ddtree-alter-{int(time.time() * 1000)}"
    altered = f"{TEST_NAME}:altered-{name}"
    subprocess.run(
        [docker, "run", "--name", name, "--network=none", "--user", "0", "--entrypoint", "sh", tag, "-c",
         f"echo 'def broken(:' >> {SITE}/{py}"],
        capture_output=True, check=True,
    )  # fmt: skip
    try:
        subprocess.run([docker, "commit", name, altered], capture_output=True, check=True)
        code, report = _selfcheck(docker, altered, *mounts(*models))
        checks = {c["name"]: c for c in report["checks"]}
        assert code == 1
        assert (
            checks["patches"]["status"] == "fail"
            and f"tampered post-image: {SITE}/{py}" in checks["patches"]["detail"]
        )
        assert checks["patched-files"]["status"] == "fail" and py in checks["patched-files"]["detail"]
    finally:
        subprocess.run([docker, "rm", "-f", name], capture_output=True)
        subprocess.run([docker, "rmi", "-f", altered], capture_output=True)
