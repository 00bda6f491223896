"""ddtree selfcheck --smoke, the parts that need no GPU: the on-purpose weights' logic, the statistics, the
verdict, and the clear "cannot run here" exit on a machine without a GPU/SGLang (what CI sees).

The GPU run itself is tests/gpu/test_smoke_gpu.py (and tests/gpu/device_ddtree.sh on the device).
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from ddtree.smoke import check as smoke
from ddtree.smoke import dims as smoke_dims
from ddtree.smoke import models as smoke_models
from ddtree.smoke import server as smoke_server


def test_successor_is_one_cycle_through_the_real_tokens() -> None:
    f = smoke_models.successor_cycle(1234)
    seen, tok = set(), 0
    for _ in range(smoke_dims.REAL_TOKENS):
        seen.add(tok)
        tok = f[tok]
    assert tok == 0 and seen == set(range(smoke_dims.REAL_TOKENS))


def test_logit_table_ranks_the_next_four_cycle_steps_and_blocks_eos_and_mask() -> None:
    f = smoke_models.successor_cycle(7)
    table = smoke_models.logit_table(f)
    row = table[5]
    assert [row[f[5]], row[f[f[5]]], row[f[f[f[5]]]], row[f[f[f[f[5]]]]]] == list(smoke_models.LOGIT_LADDER)
    assert row[smoke_dims.EOS_ID] == row[smoke_dims.MASK_ID] == smoke_models.BLOCKED_LOGIT
    assert sorted(row, reverse=True)[:5] == [*smoke_models.LOGIT_LADDER, 0.0]


def test_class_probabilities_and_transition_classes() -> None:
    probs = smoke_models.target_class_probabilities(1.0)
    assert abs(sum(probs) - 1.0) < 1e-9 and probs[0] > 0.85
    f = smoke_models.successor_cycle(3)
    a = 10
    seq = [a, f[a], f[f[f[f[a]]]], 0 if f[f[f[f[a]]]] != 0 else 1]
    classes = smoke.transition_classes(seq, f, skip_first=1)
    assert classes[:2] == [0, 2]
    assert smoke.transition_classes([a, f[a], f[f[a]]], f, skip_first=2) == [0]


def _results(dflash_acc: float = 2.0, ddtree_acc: float = 3.0, same: bool = True, counts=None):
    outputs = [[1, 2, 3], [4, 5]]
    probs = smoke_models.target_class_probabilities(1.0)
    fair = counts or [round(2000 * p) for p in probs]
    res = {
        "baseline": smoke.ModeResult("baseline", outputs=outputs, cuda_graph=True, sampling_counts=fair),
        "dflash": smoke.ModeResult(
            "dflash", outputs=outputs, accept_lengths=[dflash_acc], cuda_graph=True, sampling_counts=fair
        ),
        "ddtree": smoke.ModeResult(
            "ddtree",
            outputs=outputs if same else [[1, 2, 9], [4, 5]],
            accept_lengths=[ddtree_acc],
            cuda_graph=True,
            sampling_counts=fair,
        ),
    }
    return res


def test_judge_passes_a_good_run() -> None:
    ok, lines = smoke.judge(_results(), smoke_models.SmokeSettings())
    assert ok, lines


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"same": False}, "ddtree greedy outputs identical"),
        ({"ddtree_acc": 1.0, "dflash_acc": 1.0}, "strictly between 1 and 8"),
        ({"ddtree_acc": 8.0}, "strictly between 1 and 8"),
        ({"ddtree_acc": 1.5}, "ddtree acceptance 1.5 >= dflash 2.0"),
        ({"counts": [1000, 900, 50, 20, 30]}, "chi2"),
    ],
)
def test_judge_fails_what_it_must(kwargs: dict, needle: str) -> None:
    ok, lines = smoke.judge(_results(**kwargs), smoke_models.SmokeSettings())
    assert not ok
    assert any(line.startswith("FAIL") and needle in line for line in lines), lines


def test_judge_fails_without_cuda_graphs() -> None:
    results = _results()
    results["ddtree"].cuda_graph = False
    ok, lines = smoke.judge(results, smoke_models.SmokeSettings())
    assert not ok and any("FAIL ddtree: CUDA graphs" in line for line in lines)


def test_settings_follow_the_pro6000_profile() -> None:
    s = smoke.settings_from_profile("pro6000")
    assert (s.block_size, s.budget, s.topk, s.window) == (8, 8, 4, 2048)
    assert s.long_prompt > s.window


def test_both_profiles_give_the_smoke_the_same_ddtree_settings() -> None:
    """The smoke and the stress take only block size, budget, top-k and window from a profile; while b300's
    equal pro6000's, a DDTREE_TARGET=b300 run is the same run (the profiles' other flags are TP-only or
    environment for their own GPUs)."""
    assert smoke.settings_from_profile("b300") == smoke.settings_from_profile("pro6000")


def test_greedy_tok_s_leaves_first_use_compiles_out() -> None:
    """A client double standing in for an SGLang server (none runs here) whose first request of each shape
    (prompt length, new tokens) takes 30 s, a Triton compile, and every later one 0.1 s. The timed batch
    must see no compile: the warm-up sends the same shapes first, with other tokens."""

    class Clock:
        now = 0.0

    lock = threading.Lock()
    seen: set[tuple[int, int]] = set()
    sent: list[list[int]] = []

    class Client:
        def post_json(self, route: str, body: dict) -> dict:
            ids, new = body["input_ids"], body["sampling_params"]["max_new_tokens"]
            with lock:
                Clock.now += 0.1 if (len(ids), new) in seen else 30.0
                seen.add((len(ids), new))
                sent.append(ids)
            return {"output_ids": [ids[-1]] * new, "meta_info": {}}

    settings = smoke_models.SmokeSettings()
    prompts = smoke.greedy_prompts(settings)
    result = smoke.ModeResult("baseline")
    smoke.run_greedy(Client(), prompts, settings, result, clock=lambda: Clock.now)
    tokens = len(prompts) * settings.max_new_tokens
    assert result.tokens_per_s == pytest.approx(tokens / (0.1 * len(prompts)))
    assert result.warmup_s == pytest.approx(30.0 * (len(prompts) + 1) + 0.1)
    assert result.outputs == [[p[-1]] * settings.max_new_tokens for p in prompts]
    warm = sent[: len(prompts) + 1]
    assert sorted(len(p) for p in warm[1:]) == sorted(len(p) for p in prompts)  # lengths as the prompts', ...
    assert not any(p in prompts for p in warm)  # ... other tokens: no prefix-cache hit on the timed prompts
    assert sent[len(prompts) + 1] == prompts[0]
    assert "warmup_s" in result.as_dict()


def test_selfcheck_smoke_says_it_cannot_run_without_gpu_or_sglang() -> None:
    """This machine (and CI) has no GPU and no SGLang in the test venv: exit 2 with the reason."""
    done = subprocess.run(
        [sys.executable, "-m", "ddtree.cli", "selfcheck", "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == smoke.EXIT_CANNOT_RUN, done.stdout + done.stderr
    assert "smoke: cannot run here:" in done.stdout


@pytest.mark.parametrize("tp", [3, 8, 0])
def test_smoke_tp_must_divide_the_tiny_models_heads(tp: int) -> None:
    """Checked before torch or SGLang are imported: a clear one-line reason and exit 2."""
    done = subprocess.run(
        [sys.executable, "-m", "ddtree.cli", "selfcheck", "--smoke", "--smoke-tp", str(tp)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == smoke.EXIT_CANNOT_RUN, done.stdout + done.stderr
    reason = f"--smoke-tp {tp}: the tiny gqa target has {smoke_dims.HEADS} attention heads; use 1, 2, 4"
    assert reason in done.stdout


def test_smoke_tp_adds_tp_size_to_every_server() -> None:
    assert smoke_server.tp_args(smoke_models.SmokeSettings()) == []
    assert smoke_server.tp_args(smoke_models.SmokeSettings(tp=2)) == ["--tp-size", "2"]
