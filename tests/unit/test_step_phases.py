"""Patch scheduler-step-phases: SGLANG_STEP_PHASES=FILE makes the scheduler append one line per busy decode
spell with the mean microseconds per decode iteration of each event-loop phase. Checked on SGLang's own
dispatch_event_loop, event_loop_overlap and event_loop_normal (the real patched SGLang on CPU) driven on a
stand-in scheduler whose forwards, result events and processing sleep known times
(tests/unit/step_phases_probe.py): a GPU and a model cannot run here, the loops and the clock can."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("step_phases_probe.py")
LAUNCH_US, WAIT_US, PROCESS_US = 4000, 6000, 2000  # the probe's LAUNCH_S, WAIT_S, PROCESS_S


@pytest.fixture(scope="module")
def probed(sglang_cpu_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict:  # noqa: F811
    folder = tmp_path_factory.mktemp("step-phases")
    return run_probe(PROBE, "STEP-PHASES", sglang_cpu_path, str(folder), timeout=300)


@pytest.mark.parametrize("loop", ["overlap", "normal"])
def test_one_line_per_decode_spell_with_its_batch_size(probed: dict, loop: str) -> None:
    spells = probed[loop]["spells"]
    assert [(s["decode_iterations"], s["other_iterations"], s["mean_bs"]) for s in spells] == [
        (6, 1, 1.0),
        (4, 1, 32.0),
    ]
    assert [s["bs_counts"] for s in spells] == [{"1": 6}, {"32": 4}]


@pytest.mark.parametrize("loop", ["overlap", "normal"])
def test_phases_add_up_to_the_wall_and_hold_the_scripted_times(probed: dict, loop: str) -> None:
    for spell in probed[loop]["spells"]:
        phases = ("schedule", "launch", "wait", "process", "sample", "input", "other")
        assert abs(sum(spell[f"{p}_us"] for p in phases) - spell["wall_us"]) < 1.0
        assert spell["other_us"] >= 0.0
        # sleeps last at least what they ask; a loaded CI machine may stretch them, never shorten them
        assert LAUNCH_US <= spell["launch_us"] < LAUNCH_US + 5000
        assert PROCESS_US <= spell["process_us"] < PROCESS_US + 5000


def test_overlap_waits_for_the_previous_step_and_normal_for_its_own(probed: dict) -> None:
    """Under overlap an iteration processes the previous batch's result: the first decode iteration of a
    spell waits for the prefill's (no wait), so the mean is 5/6 and 3/4 of a decode's wait; the normal loop
    processes its own decode result every iteration. The wait is timed apart from the processing although
    the processor synchronises again itself (a done event returns at once)."""
    overlap = [s["wait_us"] for s in probed["overlap"]["spells"]]
    normal = [s["wait_us"] for s in probed["normal"]["spells"]]
    assert WAIT_US * 5 / 6 <= overlap[0] < WAIT_US * 5 / 6 + 3000
    assert WAIT_US * 3 / 4 <= overlap[1] < WAIT_US * 3 / 4 + 3000
    assert all(WAIT_US <= w < WAIT_US + 3000 for w in normal)
    assert probed["overlap"]["seen"]["sampled"] == 16 and probed["normal"]["seen"]["sampled"] == 0


def test_the_clock_wraps_the_five_methods_on_the_instance(probed: dict) -> None:
    wrapped = {"get_next_batch_to_run", "run_batch", "process_batch_result", "launch_batch_sample_if_needed",
               "process_input_requests"}  # fmt: skip
    assert wrapped <= set(probed["overlap"]["wrapped"]) and wrapped <= set(probed["normal"]["wrapped"])


def test_unset_or_another_rank_wraps_nothing_and_bad_values_are_refused_by_name(probed: dict) -> None:
    refusals = probed["refusals"]
    assert refusals["unset"] is True and refusals["rank1"] is True
    assert refusals["sync"] == "SGLANG_STEP_PHASES_SYNC='yes': use 0 or 1"
    assert refusals["path"].startswith("SGLANG_STEP_PHASES='") and "no-such-folder" in refusals["path"]
    assert refusals["path"].endswith("name a writable file")
