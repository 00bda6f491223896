"""tests/gpu/device_queue.sh's own logic, run here with bash (its jobs need the GPU device, so none starts:
the deadline and the missing pair stop them before they would)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

QUEUE = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "device_queue.sh"


def run_queue(tmp_path: Path, *jobs: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "OUT": str(tmp_path / "out"), "PAIR": str(tmp_path / "pair"),
               "RUNS": str(tmp_path / "runs"), "TRAIN_DONE": str(tmp_path / "train.done"), **env}  # fmt: skip
    command = ["bash", str(QUEUE), *jobs]
    return subprocess.run(
        command, capture_output=True, text=True, env=environ, timeout=60, cwd=QUEUE.parents[2]
    )


def test_an_unknown_job_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = run_queue(tmp_path, "secrets", "profiel")
    assert done.returncode == 2 and "unknown job 'profiel'" in done.stderr
    assert not (tmp_path / "out").exists()


def test_every_job_the_queue_runs_passes_its_check_and_is_named_when_refused(tmp_path: Path) -> None:
    """The job list is written three times (the check, the refusal's message, the runner's cases): on
    2026-12-03e a new `phases` case was missing from the check and the sitting's first job was refused."""
    import re

    text = QUEUE.read_text()
    runner = text[text.index("run_job() {") :] if "run_job() {" in text else text
    cases = set(re.findall(r"^\s{4}([a-z0-9-]+)\) timeout", runner, flags=re.M))
    assert len(cases) > 30, cases
    (tmp_path / "train.done").write_text("1\n")  # no pair: timing jobs are skipped, never started
    for job in sorted(cases):
        done = run_queue(tmp_path, job, DEADLINE="0")  # past the deadline: checked, then skipped
        assert done.returncode == 0, f"{job}: {done.stderr}"
    refused = run_queue(tmp_path, "no-such-job")
    named = set(refused.stderr.split("(", 1)[1].rstrip(")\n").split())
    assert named == cases


def test_jobs_past_the_deadline_and_timing_jobs_without_a_pair_are_skipped_and_said(tmp_path: Path) -> None:
    (tmp_path / "train.done").write_text("1\n")  # the training failed: no pair
    done = run_queue(tmp_path, "profile", "paired", "options", DEADLINE="100")
    assert done.returncode == 0, done.stderr
    status = (tmp_path / "out" / "queue" / "status.txt").read_text().splitlines()
    assert status[:3] == [
        f"{job}: skipped, no trained pair in {tmp_path / 'pair'}" for job in ("profile", "paired", "options")
    ]
    assert status[-1].startswith("queue: done after")
    late = run_queue(tmp_path, "secrets", "mla", DEADLINE="0")
    assert late.returncode == 0
    status = (tmp_path / "out" / "queue" / "status.txt").read_text().splitlines()
    assert "secrets: skipped, past the queue's 0 s deadline" in status
    assert "mla: skipped, past the queue's 0 s deadline" in status


def test_servers_a_job_leaves_running_are_stopped_before_the_next_job(tmp_path: Path) -> None:
    """A stand-in "server" (a sleep named like one) started in this queue's lane outlives the job; the queue
    stops it and says so. One started in another lane (a second queue beside it) is left alone. The job itself
    (core-bench) fails at once here (no GPU): what is checked is what happens after it."""
    (tmp_path / "train.done").write_text("0\n")
    marker = f"ddtree-fake-server-{os.getpid()}"

    def fake_server(lane: str) -> subprocess.Popen:
        return subprocess.Popen(
            ["bash", "-c", f"exec -a {marker} sleep 120"], start_new_session=True,
            env={**os.environ, "GPU_QUEUE_LANE": lane},
        )  # fmt: skip

    ours, theirs = fake_server("a"), fake_server("b")
    try:
        done = run_queue(
            tmp_path, "core-bench", SERVER_PATTERN=marker, REAP_GRACE="0", JOB_TIMEOUT="20", QUEUE_LANE="a"
        )
        assert done.returncode == 0, done.stderr
        assert ours.wait(timeout=10) != 0  # killed, not finished
        assert theirs.poll() is None  # the other lane's server still runs
        status = (tmp_path / "out" / "queue" / "status.txt").read_text()
        assert "core-bench: stopped the servers it left running" in status
    finally:
        for server in (ours, theirs):
            if server.poll() is None:
                server.kill()


def recording_python(tmp_path: Path) -> tuple[str, Path]:
    """(PATH, log): a stand-in python3 first on PATH that appends its arguments to $ARGS_LOG (the real jobs
    need the GPU), a finished training and a pair folder, so a timing job's command can be read back."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text('#!/bin/bash\necho "$*" >> "$ARGS_LOG"\n')
    (bin_dir / "python3").chmod(0o755)
    (tmp_path / "train.done").write_text("0\n")
    (tmp_path / "pair").mkdir()
    (tmp_path / "pair" / "eval_prompts.json").write_text("{}")
    return f"{bin_dir}:{os.environ['PATH']}", tmp_path / "args.txt"


def test_paired_job_measures_its_two_modes_from_the_trained_pair(tmp_path: Path) -> None:
    """The `paired` job's command, with a stand-in python3 on PATH that records its arguments (the real job
    needs the GPU): ddtree-16@eager against ddtree-16 at context 256 by default, PAIRED_* override."""
    path, log = recording_python(tmp_path)
    assert run_queue(tmp_path, "paired", PATH=path, ARGS_LOG=str(log)).returncode == 0
    override = {"PAIRED_MODES": "dflash,dflash@upstream", "PAIRED_CONTEXTS": "256,4096", "PAIRED_ROUNDS": "4"}
    assert run_queue(tmp_path, "paired", PATH=path, ARGS_LOG=str(log), **override).returncode == 0
    runs = tmp_path / "runs" / "paired"
    assert log.read_text().splitlines() == [
        f"-m benchmarks.pair.paired_step --pair {tmp_path / 'pair'} --out {runs} "
        "--paired ddtree-16@eager,ddtree-16 --contexts 256 --rounds 8",
        f"-m benchmarks.pair.paired_step --pair {tmp_path / 'pair'} --out {runs} "
        "--paired dflash,dflash@upstream --contexts 256,4096 --rounds 4",
    ]
    assert "paired: exit 0 after" in (tmp_path / "out" / "queue" / "status.txt").read_text()


def test_serve_and_stacks_jobs_measure_overlap_at_concurrency_32_and_at_contexts(tmp_path: Path) -> None:
    """Issue 25: `serve` runs serve_bench over none, DFLASH and DDTREE-16 under overlap at context 256,
    concurrency 1 and 32 by default (the concurrency-32 goal over the bench's rounds), SERVE_MODES/SERVE_ARGS
    replace them; `stacks` takes STACKS_CONTEXTS (256 by default; 256,1024 for what of the v2 step grows with
    context). A stand-in python3 records the commands."""
    path, log = recording_python(tmp_path)
    assert run_queue(tmp_path, "serve", "stacks", PATH=path, ARGS_LOG=str(log)).returncode == 0
    override = {"SERVE_MODES": "none,ddtree-16", "SERVE_ARGS": "--contexts 4096 --concurrency 8",
                "STACKS_MODES": "ddtree-16@overlap", "STACKS_CONTEXTS": "256,1024"}  # fmt: skip
    assert run_queue(tmp_path, "serve", "stacks", PATH=path, ARGS_LOG=str(log), **override).returncode == 0
    pair, runs = tmp_path / "pair", tmp_path / "runs"
    serve = f"-m benchmarks.pair.serve_bench --pair {pair} --out {runs / 'serve'}"
    stacks = f"-m benchmarks.pair.profile_step --pair {pair} --out {runs / 'stacks'} --stacks"
    assert log.read_text().splitlines() == [
        f"{serve} --modes none,dflash@overlap,ddtree-16@overlap --deadline 480 --contexts 256"
        " --concurrency 1,32 --temperatures 0",
        f"{stacks} --modes ddtree-16 --contexts 256 --steps 8",
        f"{serve} --modes none,ddtree-16 --deadline 480 --contexts 4096 --concurrency 8",
        f"{stacks} --modes ddtree-16@overlap --contexts 256,1024 --steps 8",
    ]


def test_device_jobs_run_their_commands_with_their_switches(
    tmp_path: Path,
) -> None:
    """The MLA jobs' commands (issue 32), the sync-debug `steps` job (issue 25), `verify-bench` (issue 26),
    the options stress (issue 28) and the overlap switch's stresses (issue 25), through device_ddtree.sh, with
    a stand-in python3 on PATH that records its arguments and the switches it was given (the real jobs need
    the GPU). profile-mla is a timing job that needs no trained pair: it waits for the training, then runs
    without $PAIR."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(
        '#!/bin/bash\necho "arch=${DDTREE_SMOKE_ARCH:-} graphs=${SGLANG_DFLASH_STEP_GRAPHS:-}'
        ' meta=${SGLANG_DDTREE_FAST_METADATA:-}${SGLANG_DFLASH_OVERLAP:+ overlap=$SGLANG_DFLASH_OVERLAP} $*"'
        ' >> "$ARGS_LOG"\n'
    )
    (bin_dir / "python3").chmod(0o755)
    (tmp_path / "train.done").write_text("0\n")
    log = tmp_path / "args.txt"
    jobs = (
        "mla",
        "smoke-mla-graphs",
        "stress-mla",
        "stress-mla-graphs",
        "profile-mla",
        "steps",
        "verify-bench",
        "options-stress",
        "options-stress-dflash",
        "stress-overlap",
        "options-stress-overlap",
    )
    done = run_queue(tmp_path, *jobs, PATH=f"{bin_dir}:{os.environ['PATH']}", ARGS_LOG=str(log))
    assert done.returncode == 0, done.stderr
    calls = [line for line in log.read_text().splitlines() if "patchset" not in line]
    out, runs = tmp_path / "out", tmp_path / "runs"
    stress = "tests/gpu/stress_ddtree.py --out"
    assert calls == [
        "arch=mla graphs= meta= -m ddtree.cli selfcheck --smoke --json --smoke-tp 1",
        "arch=mla graphs=1 meta=1 -m ddtree.cli selfcheck --smoke --json --smoke-tp 1",
        f"arch= graphs= meta= {stress} {out / 'stress-mla' / 'stress'} --tp 1 --arch mla",
        f"arch= graphs=1 meta=1 {stress} {out / 'stress-mla-graphs' / 'stress'} --tp 1 --arch mla",
        f"arch= graphs= meta= -m benchmarks.pair.profile_step --smoke-arch mla --out {runs / 'profile-mla'}"
        " --modes ddtree-8,ddtree-8@eager,dflash,none --contexts 256,4096",
        f"arch= graphs= meta= tests/gpu/ddtree_step_checks.py --out {out / 'steps'}",
        "arch= graphs= meta= -m pytest -q -s -p no:cacheprovider tests/gpu/test_verify_attention_gpu.py",
        "arch= graphs= meta= benchmarks/verify_attention_bench.py --splits 4 8 16 32 64 --json"
        f" {out / 'verify-bench' / 'verify_attention_bench.json'}",
        "arch= graphs= meta= benchmarks/verify_metadata_bench.py --sglang /tmp/site --json"
        f" {out / 'verify-bench' / 'verify_metadata_bench.json'}",
        f"arch= graphs= meta= {stress} {out / 'options-stress' / 'stress'} --tp 1 --options-only",
        f"arch= graphs= meta= {stress} {out / 'options-stress-dflash' / 'stress'} --tp 1 --options-only"
        " --algorithm DFLASH",
        f"arch= graphs= meta= overlap=1 {stress} {out / 'stress-overlap' / 'stress'} --tp 1"
        " --algorithm DDTREE",
        f"arch= graphs= meta= overlap=1 {stress} {out / 'options-stress-overlap' / 'stress'} --tp 1"
        " --options-only --algorithm DDTREE",
    ]
    status = (out / "queue" / "status.txt").read_text()
    assert all(f"{job}: exit 0 after" in status for job in jobs), status


def test_a_packed_pair_unpacks_byte_for_byte_and_a_damaged_part_is_refused(tmp_path: Path) -> None:
    """device_pair.sh pack-pair / unpack-pair (the pair kept between sittings) on a small stand-in folder."""
    script = QUEUE.parent / "device_pair.sh"
    pair = tmp_path / "pair"
    (pair / "target").mkdir(parents=True)
    (pair / "target" / "model.safetensors").write_bytes(os.urandom(40 * 1024 * 1024))  # three 15 MiB parts
    (pair / "eval_prompts.json").write_text('{"prompts": [[1, 2]]}')
    environ = {**os.environ, "OUT": str(tmp_path / "out"), "PAIR": str(pair), "RUNS": str(tmp_path / "runs")}
    packed = subprocess.run(["bash", str(script), "pack-pair"], capture_output=True, text=True, env=environ,
                            cwd=QUEUE.parents[2], timeout=120)  # fmt: skip
    assert packed.returncode == 0, packed.stdout + packed.stderr
    parts = tmp_path / "out" / "pair"
    assert sorted(p.name for p in parts.iterdir()) == [f"pair.tar.0{i}" for i in range(3)] + [
        "pair.tar.sha256"
    ]
    assert all(p.stat().st_size <= 15 * 2**20 for p in parts.iterdir())

    def unpack(into: Path) -> subprocess.CompletedProcess:
        env = {**environ, "PAIR": str(into), "PAIR_PARTS": str(parts), "TRAIN_DONE": str(tmp_path / "done")}
        return subprocess.run(["bash", str(script), "unpack-pair"], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)  # fmt: skip

    done = unpack(tmp_path / "again")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("target/model.safetensors", "eval_prompts.json"):
        assert (tmp_path / "again" / name).read_bytes() == (pair / name).read_bytes()
    assert (tmp_path / "done").read_text().strip() == "0"
    (tmp_path / "done").unlink()
    with (parts / "pair.tar.01").open("r+b") as handle:
        handle.write(b"\0\0\0\0")
    damaged = unpack(tmp_path / "damaged")
    assert damaged.returncode != 0 and "FAILED" in damaged.stdout + damaged.stderr
    assert not (tmp_path / "damaged").exists() and not (tmp_path / "done").exists()


def test_the_options_job_measures_the_drafter_with_and_without_the_request_options(tmp_path: Path) -> None:
    """Issue 28: `options` runs options_acceptance over $OPTIONS_MODES, by default ddtree-16 (the drafter sees
    the request's penalties, patch 0031) beside ddtree-16@nodraftpen (SGLANG_DDTREE_DRAFT_PENALTIES=0) and
    plain decoding; OPTIONS_MODES replaces the list. A stand-in python3 records the command."""
    path, log = recording_python(tmp_path)
    done = run_queue(tmp_path, "options", PATH=path, ARGS_LOG=str(log))
    assert done.returncode == 0, done.stderr
    done = run_queue(
        tmp_path, "options", PATH=path, ARGS_LOG=str(log), OPTIONS_MODES="dflash,dflash@nodraftpen"
    )
    assert done.returncode == 0, done.stderr
    pair, runs = tmp_path / "pair", tmp_path / "runs" / "options"
    command = f"-m benchmarks.pair.options_acceptance --pair {pair} --out {runs}"
    assert log.read_text().splitlines() == [
        f"{command} --modes none,ddtree-16,ddtree-16@nodraftpen",
        f"{command} --modes dflash,dflash@nodraftpen",
    ]
