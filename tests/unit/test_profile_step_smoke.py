"""profile_step --smoke-arch: the smoke's tiny models (the MLA target: issue 32) profiled as the smoke serves
them, and DDTree's own kernels' share of the step stated.

A real profile needs SGLang serving on a GPU, so the server is a test double (it records what it was started
with; its client answers /generate and writes a synthetic torch-profiler trace on /start_profile, in the
format test_pair_rig's analysis tests use). The tiny models themselves are really written (torch on CPU).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from ddtree.smoke import check as smoke
from ddtree.smoke import server as smoke_server
from ddtree.smoke.dims import REAL_TOKENS

from benchmarks.pair import profile_step


def synthetic_trace(steps: int, speculative: bool) -> dict[str, Any]:
    """`steps` steps 200 us apart. Speculative: the drafter's forward (a 30 us kernel), the target's verify
    (60 us), then one DDTree kernel launched outside both (10 us); plain: the target's decode (60 us) alone.
    Each kernel is tied to its launch by a correlation id, as CUPTI writes them."""
    events: list[dict[str, Any]] = []

    def launch(corr: int, at: float, kernel: str, kernel_at: float, dur: float, span: str | None) -> None:
        if span:
            events.append(
                {"ph": "X", "cat": "user_annotation", "name": span, "ts": at - 1, "dur": 4, "tid": 1}
            )
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": at, "dur": 1,
                       "tid": 1, "args": {"correlation": corr}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": kernel, "ts": kernel_at, "dur": dur, "tid": 7,
                       "args": {"correlation": corr}})  # fmt: skip

    for step in range(steps):
        base, corr = 200.0 * step + 10, 10 * step
        if speculative:
            launch(corr, base - 8, "drafter_gemm", base, 30, "step[TARGET_VERIFY bs=1]")
            launch(corr + 1, base + 32, "target_gemm", base + 40, 60, "step[TARGET_VERIFY bs=1]")
            launch(corr + 2, base + 95, "_score_kernel_0d1d", base + 100, 10, None)
        else:
            launch(corr, base + 32, "target_gemm", base + 40, 60, "step[DECODE bs=1]")
    return {"traceEvents": events}


class FakeServer:
    """Stands in for ddtree.smoke.server.Server (no SGLang or GPU here): records its start, answers."""

    started: ClassVar[list[dict[str, Any]]] = []

    def __init__(
        self, target: Path, args: list[str], log_path: Path, settings: Any, env: dict[str, str] | None = None
    ) -> None:
        """Like a server with patch scheduler-step-phases: creates the clock's file named in `env`."""
        config = json.loads((target / "config.json").read_text())
        self.phases = Path((env or {})["SGLANG_STEP_PHASES"])
        self.phases.write_text("")
        drafter = Path(args[args.index("--speculative-draft-model-path") + 1]) if args else None
        FakeServer.started.append({"architectures": config["architectures"], "args": args,
                                   "settings": settings, "drafter_written": bool(drafter and
                                   (drafter / "config.json").is_file()), "prompts": []})  # fmt: skip
        self.client = self
        self.speculative = bool(args)

    def wait_ready(self) -> float:
        return 1.0

    def stop(self) -> None:
        FakeServer.started[-1]["stopped"] = True

    def post_json(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        ids, new = body["input_ids"], body["sampling_params"]["max_new_tokens"]
        FakeServer.started[-1]["prompts"].append(ids)
        if new > 1:  # a decode spell ends: the clock's line (one line per request; enough for the table)
            with self.phases.open("a") as f:
                f.write(json.dumps({"decode_iterations": new // 3, "mean_bs": 1.0, "wall_us": 500.0}) + "\n")
        return {
            "output_ids": [1] * new,
            "meta_info": {"completion_tokens": new, "spec_verify_ct": max(1, new // 3)},
        }

    def post_text(self, route: str, body: dict[str, Any], timeout: float) -> tuple[int, str]:
        assert route == "/start_profile"
        FakeServer.started[-1]["prompts"].append("profile")
        with gzip.open(Path(body["output_dir"]) / "host.trace.json.gz", "wt") as handle:
            json.dump(synthetic_trace(body["num_steps"], self.speculative), handle)
        return 200, "Start profiling."


def test_smoke_arch_mla_profiles_the_smokes_tiny_mla_models_and_states_ddtrees_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(smoke_server, "Server", FakeServer)
    monkeypatch.setattr(profile_step, "_wait_for_trace", lambda folder, timeout_s: None)
    monkeypatch.delenv("DDTREE_TARGET", raising=False)
    FakeServer.started.clear()
    scratch: list[Path] = []
    write_models = profile_step.smoke_models

    def recorded(arch: str, folder: Path) -> profile_step.Served:
        scratch.append(folder)
        return write_models(arch, folder)

    monkeypatch.setattr(profile_step, "smoke_models", recorded)
    argv = ["--smoke-arch", "mla", "--out", str(tmp_path / "out"), "--modes", "ddtree-4,none",
            "--contexts", "256", "--steps", "4", "--new-tokens", "16"]  # fmt: skip
    assert profile_step.main(argv) == 0
    ddtree, plain = FakeServer.started
    # the smoke's tiny MLA target and its drafter, served with the smoke's own settings (budget from the mode)
    assert ddtree["architectures"] == plain["architectures"] == ["DeepseekV3ForCausalLM"]
    assert ddtree["drafter_written"] and ddtree["stopped"] and plain["stopped"]
    expected = dataclasses.replace(smoke.settings_from_profile("pro6000"), arch="mla")
    assert ddtree["settings"] == dataclasses.replace(expected, budget=4) and plain["settings"] == expected
    assert ddtree["args"] == smoke_server.mode_args("ddtree", Path(ddtree["args"][3]), ddtree["settings"])
    assert "--speculative-ddtree-budget" in ddtree["args"] and plain["args"] == []
    assert all(len(p) == 256 and max(p) < REAL_TOKENS for p in ddtree["prompts"] if p != "profile")
    assert not scratch[0].exists()  # the temporary models are gone
    # DDTree's own kernels: 10 us of each 200 us step; the window runs from the first kernel to the last
    window = 200.0 * 3 + 110
    share = round(100 * 40 / window, 1)
    results = json.loads((tmp_path / "out" / "profile.json").read_text())
    assert [r["ddtree_kernel_share_pct"] for r in results] == [share, 0.0]
    assert results[0]["per_step_us"]["DDTree kernels"] == 10.0
    printed = capsys.readouterr().out
    assert "profile_step: the smoke's tiny mla target + drafter in" in printed
    # the phase clock's lines, read after the unprofiled requests, at one request and at 32
    assert "| c1 wall | 500.0 | 500.0 |" in printed and "| c32 mean_bs | 1.0 | 1.0 |" in printed
    assert all(r["phases_c1"]["decode_iterations"] == 5 for r in results)
    assert (
        f"DDTREE's own kernels, ddtree-4 ctx 256: 10.0 of {window / 4} us per step ({share} % of the step)"
        in printed
    )


def test_every_contexts_unprofiled_figures_come_before_any_profiled_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 2026-12-03e the requests right after a profiled window ran slower for seconds, so a context measured
    after another's window read slower: every unprofiled request now comes before the first window."""
    monkeypatch.setattr(smoke_server, "Server", FakeServer)
    monkeypatch.setattr(profile_step, "_wait_for_trace", lambda folder, timeout_s: None)
    monkeypatch.delenv("DDTREE_TARGET", raising=False)
    FakeServer.started.clear()
    argv = ["--smoke-arch", "mla", "--out", str(tmp_path / "out"), "--modes", "none",
            "--contexts", "128,256", "--steps", "4", "--new-tokens", "16"]  # fmt: skip
    assert profile_step.main(argv) == 0
    (plain,) = FakeServer.started
    sent = plain["prompts"]
    first_window = sent.index("profile")
    assert {len(p) for p in sent[:first_window]} == {128, 256}  # both contexts' unprofiled requests
    assert [len(p) if p != "profile" else p for p in sent[first_window:]] == ["profile", 128, "profile", 256]


def test_pair_or_smoke_arch_one_of_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["--out", str(tmp_path)],
        ["--out", str(tmp_path), "--pair", str(tmp_path), "--smoke-arch", "mla"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            profile_step.main(argv)
        assert exit_info.value.code == 2
        assert "one of --pair or --smoke-arch" in capsys.readouterr().err
