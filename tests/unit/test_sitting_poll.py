"""tests/gpu/sitting_poll.sh, the device sitting's poll, run here with bash on stand-in result folders: every
poll must leave the results so far in $OUT (what the device brings back), so a lost hold loses nothing
older than the last poll."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

POLL = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "sitting_poll.sh"


def poll(tmp_path: Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    dirs = f"{tmp_path / 'out'} {tmp_path / 'runs'}"
    environ = {**os.environ, "OUT": str(tmp_path / "back"), "SNAP_DIRS": dirs, **env}
    command = ["bash", str(POLL), "0"]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60, cwd=cwd)


def members(tmp_path: Path) -> set[str]:
    with tarfile.open(tmp_path / "back" / "snapshot.tgz") as tar:
        return {Path(member.name).name for member in tar.getmembers() if member.isfile()}


def sitting(tmp_path: Path) -> None:
    """What a sitting leaves: queue logs and status lines, a JSON, a profiler trace and a pair part."""
    queue = tmp_path / "out" / "laneA" / "queue"
    queue.mkdir(parents=True)
    lines = ["smoke: exit 0 after 250 s (queue at 250 s)", "smoke: stopped the servers it left running"]
    (queue / "status.txt").write_text("\n".join(lines) + "\n")
    (queue / "smoke.log").write_text("PASS\n" * 100)
    (tmp_path / "runs" / "paired").mkdir(parents=True)
    (tmp_path / "runs" / "paired" / "paired.json").write_text('{"ratio": 1.1}\n')
    (tmp_path / "runs" / "paired" / "step.trace.json.gz").write_bytes(b"t" * 1000)
    (tmp_path / "out" / "pair.tar.00").write_bytes(b"p" * 1000)


def test_a_poll_prints_the_status_lines_and_packs_the_results(tmp_path: Path) -> None:
    sitting(tmp_path)
    done = poll(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "smoke: exit 0 after 250 s" in done.stdout and "stopped the servers" not in done.stdout
    assert members(tmp_path) == {"status.txt", "smoke.log", "paired.json"}  # no trace, no pair part
    assert not (tmp_path / "back" / "snapshot.tgz.tmp").exists()


def test_an_oversized_snapshot_leaves_out_its_big_files_and_names_them(tmp_path: Path) -> None:
    sitting(tmp_path)
    (tmp_path / "out" / "laneA" / "queue" / "server.log").write_bytes(os.urandom(300_000))  # incompressible
    done = poll(tmp_path, SNAP_LIMIT="100000", SNAP_BIG="200000")
    assert done.returncode == 0, done.stderr
    assert "server.log" not in members(tmp_path) and "smoke.log" in members(tmp_path)
    left_out = (tmp_path / "back" / "snapshot-left-out.txt").read_text()
    assert "server.log 300000" in left_out


def test_without_out_it_says_so(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run(["bash", str(POLL), "0"], capture_output=True, text=True, env=environ, timeout=60)
    assert done.returncode == 2 and "OUT is not set" in done.stderr


def test_a_fresh_machine_reads_no_status_from_the_checkout(tmp_path: Path) -> None:
    """A poll on a machine the hold was lost to has no result folders: it must say so, not print the status
    files committed under the working directory as if they were this sitting's."""
    checkout = tmp_path / "checkout" / "results"
    checkout.mkdir(parents=True)
    (checkout / "status.txt").write_text("old: exit 0 after 1 s (queue at 1 s)\n")
    done = poll(tmp_path, cwd=tmp_path / "checkout")
    assert done.returncode == 0, done.stderr
    assert "nothing to pack yet" in done.stdout and "old: exit 0" not in done.stdout
