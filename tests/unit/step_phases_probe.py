"""Probe for patch scheduler-step-phases, run in the patched CPU SGLang environment
(tests.unit.test_ddtree_sglang.run_probe): SGLang's own dispatch_event_loop and event loops (overlap and
normal) driven on a stand-in scheduler whose batches, forwards and result events are scripted with sleeps,
so the phase clock's lines can be checked against known times. The stand-in is what lets the real loops run
without a GPU or a model; every line of the loops and of step_phases.py that runs is SGLang's as patched.

    python tests/unit/step_phases_probe.py FOLDER  -> STEP-PHASES {json: overlap, normal, refusals}
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from types import SimpleNamespace

LAUNCH_S = 0.004  # run_batch of a decode batch
WAIT_S = 0.006  # a decode result's copy_done event
PROCESS_S = 0.002  # process_batch_result after the wait
# get_next_batch_to_run's answers, in order: a prefill, 6 decodes at bs 1, idle twice (the first spell
# ends), a prefill of 32, 4 decodes at bs 32, idle (the second spell ends); then the loop is stopped.
SCRIPT = [("extend", 1), *[("decode", 1)] * 6, None, None, ("extend", 32), *[("decode", 32)] * 4, None, None]


class StopLoop(Exception):
    """Raised by the stand-in's request receiver once the script is spent: the only way out of the loop."""


class Mode:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def is_decode(self) -> bool:
        return self.kind == "decode"

    def is_extend(self) -> bool:
        return self.kind == "extend"


class Batch:
    def __init__(self, kind: str, bs: int) -> None:
        self.forward_mode = Mode(kind)
        self.bs = bs

    def batch_size(self) -> int:
        return self.bs

    def copy(self) -> Batch:
        return self


class Event:
    """A result's copy_done: synchronize() waits the first time (the GPU finishing the step), then not."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def synchronize(self) -> None:
        time.sleep(self.seconds)
        self.seconds = 0.0


def stand_in(overlap: bool):
    """A scheduler with what dispatch_event_loop and the two loops read, its work scripted."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler import Scheduler

    script = list(SCRIPT)
    seen = {"processed": 0, "sampled": 0, "inputs": 0}

    class StandIn:
        tp_rank = 0
        server_args = SimpleNamespace(pp_size=1)
        disaggregation_mode = DisaggregationMode.NULL
        enable_pdmux = False
        enable_overlap_mlx = False
        enable_overlap = overlap
        _engine_paused = False
        _war_barrier_enabled = False
        is_generation = True
        last_batch = None
        cur_batch = None
        event_loop_overlap = Scheduler.event_loop_overlap
        event_loop_normal = Scheduler.event_loop_normal

        def __init__(self) -> None:
            self.request_receiver = SimpleNamespace(recv_requests=self.recv_requests)

        def recv_requests(self) -> list:
            if not script:
                raise StopLoop
            return []

        def process_input_requests(self, reqs: list) -> None:
            seen["inputs"] += 1

        def get_next_batch_to_run(self):
            step = script.pop(0)
            return None if step is None else Batch(*step)

        def is_disable_overlap_for_batch(self, batch) -> bool:
            return False

        def run_batch(self, batch):
            if batch.forward_mode.is_decode():
                time.sleep(LAUNCH_S)
            waits = WAIT_S if batch.forward_mode.is_decode() else 0.0
            return SimpleNamespace(copy_done=Event(waits))

        def process_batch_result(self, batch, result) -> None:
            result.copy_done.synchronize()  # as SGLang's processor does first
            time.sleep(PROCESS_S)
            seen["processed"] += 1

        def launch_batch_sample_if_needed(self, result) -> None:
            seen["sampled"] += 1

        def on_idle(self) -> None:
            pass

        def self_check_during_busy(self) -> None:
            pass

    return StandIn(), seen


def run(loop: str, path: str) -> dict:
    from sglang.srt.managers.scheduler import dispatch_event_loop

    os.environ["SGLANG_STEP_PHASES"] = path
    scheduler, seen = stand_in(overlap=loop == "overlap")
    with contextlib.suppress(StopLoop):  # the script is spent
        dispatch_event_loop(scheduler)
    with open(path) as f:
        spells = [json.loads(line) for line in f]
    wrapped = sorted(name for name in vars(scheduler) if name != "request_receiver")
    return {"spells": spells, "seen": seen, "wrapped": wrapped}


def refusals(folder: str) -> dict:
    """install_from_env: a bad sync switch and an unwritable file refused with a line naming them; unset:
    nothing wrapped; another TP rank: nothing wrapped."""
    from sglang.srt.managers.step_phases import install_from_env

    answers: dict = {}
    os.environ.pop("SGLANG_STEP_PHASES", None)
    scheduler, _ = stand_in(overlap=True)
    answers["unset"] = install_from_env(scheduler) is None and not vars(scheduler).keys() - {
        "request_receiver"
    }
    os.environ["SGLANG_STEP_PHASES"] = os.path.join(folder, "rank1.jsonl")
    scheduler.tp_rank = 1
    answers["rank1"] = install_from_env(scheduler) is None and not os.path.exists(
        os.environ["SGLANG_STEP_PHASES"]
    )
    for name, env in (
        ("sync", {"SGLANG_STEP_PHASES": os.path.join(folder, "x.jsonl"), "SGLANG_STEP_PHASES_SYNC": "yes"}),
        ("path", {"SGLANG_STEP_PHASES": os.path.join(folder, "no-such-folder", "x.jsonl")}),
    ):
        os.environ.update(env)
        scheduler, _ = stand_in(overlap=True)
        try:
            install_from_env(scheduler)
            answers[name] = "accepted"
        except ValueError as exc:
            answers[name] = str(exc)
        os.environ.pop("SGLANG_STEP_PHASES_SYNC", None)
    return answers


def main() -> None:
    folder = sys.argv[1]
    try:
        result = {loop: run(loop, os.path.join(folder, f"{loop}.jsonl")) for loop in ("overlap", "normal")}
        result["refusals"] = refusals(folder)
    except Exception:  # the test reads the failure from the printed line
        result = {"probe_error": traceback.format_exc()}
    print("STEP-PHASES " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
