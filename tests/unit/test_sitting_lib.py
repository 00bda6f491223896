"""tests/gpu/sitting_lib.sh, the functions every sitting script shares, run here with bash and a stand-in
for device_queue.sh (the real queue's jobs need the GPU device) that records what it was given."""

from __future__ import annotations

import subprocess
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "sitting_lib.sh"
STAND_IN = """#!/bin/bash
echo "lane=${QUEUE_LANE:-} out=$OUT runs=$RUNS deadline=$DEADLINE algo=${OVERLAP_ALGORITHM:-} jobs=$*" \\
  >> "$RECORD"
[[ $1 == hang ]] && sleep 6  # past END (3 s), and gone soon after the test
[[ $1 == fail ]] && exit 1
exit 0
"""


def run_sitting(tmp_path: Path, script: str, timeout: float = 30) -> tuple[str, list[str]]:
    """Source the library with END and the stand-in queue, run `script`; (stdout, the stand-in's calls)."""
    queue = tmp_path / "queue.sh"
    queue.write_text(STAND_IN)
    record = tmp_path / "calls.txt"
    record.touch()
    prelude = (
        f"export RECORD={record} SITTING_OUT={tmp_path / 'out'} SITTING_RUNS={tmp_path / 'runs'} "
        f"SITTING_QUEUE={queue} SITTING_POLL_S=0.2\nEND=${{END:-100}}\nsource {LIB}\n"
    )
    log = tmp_path / "sitting.log"  # a file, not a pipe: a hung lane left behind must not hold the test
    with open(log, "w") as out:
        done = subprocess.run(
            ["bash", "-c", prelude + script], stdout=out, stderr=subprocess.STDOUT, timeout=timeout
        )
    assert done.returncode == 0, log.read_text()
    return log.read_text(), sorted(record.read_text().splitlines())


def test_lanes_run_in_the_background_with_their_deadline_and_env_and_say_when_they_end(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    _, calls = run_sitting(
        tmp_path, "lane a 40 smoke core-tests\nOVERLAP_ALGORITHM=DFLASH lane b 70 fail\nwait_lanes 10 a b\n"
    )
    assert calls == [
        f"lane=a out={out}/lanea runs={tmp_path}/runs/a deadline=60 algo= jobs=smoke core-tests",
        f"lane=b out={out}/laneb runs={tmp_path}/runs/b deadline=30 algo=DFLASH jobs=fail",
    ]
    assert (out / "lanea.done").read_text() == "0\n" and (out / "laneb.done").read_text() == "1\n"
    assert (out / "timing-start.txt").read_text().startswith("timing starts at ")


def test_wait_lanes_gives_up_at_its_margin_and_timing_runs_in_the_foreground(tmp_path: Path) -> None:
    """A lane that never ends (a hung job) holds the timing jobs only until MARGIN seconds before END; the
    timing queue then runs at once, its deadline counted from the same END."""
    out = tmp_path / "out"
    script = "END=3\nlane a 0 hang\nwait_lanes 1 a\necho waited $SECONDS\ntiming t1 0 options\necho after\n"
    stdout, calls = run_sitting(tmp_path, script)
    waited = int(stdout.split("waited ")[1].split()[0])
    assert 1 <= waited <= 3, stdout
    assert not (out / "lanea.done").exists()
    assert (out / "timing-start.txt").is_file()
    assert f"lane= out={out}/t1 runs={tmp_path}/runs/t1 deadline={3 - waited} algo= jobs=options" in calls
    assert stdout.rstrip().endswith("after")


def test_the_queues_get_the_long_pair_unless_the_plan_names_another(tmp_path: Path, monkeypatch) -> None:
    """12-03b lost 180 s to a job run without PAIR=/tmp/pair-long ("no trained pair in /tmp/pair")."""
    monkeypatch.delenv("PAIR", raising=False)
    out, _ = run_sitting(tmp_path, 'echo "pair=$PAIR"; bash -c \'echo "child=$PAIR"\'')
    assert "pair=/tmp/pair-long" in out and "child=/tmp/pair-long" in out
    monkeypatch.setenv("PAIR", "/tmp/pair")  # a plan that trains names its own
    out, _ = run_sitting(tmp_path, 'echo "pair=$PAIR"')
    assert "pair=/tmp/pair\n" in out
