"""benchmarks/pair/paired_step.py on the CPU: two modes' step time from two servers up at once, ABBA order.

No GPU here for SGLang, so the two servers are TEST DOUBLES (ddtree.smoke.server.Server replaced) whose
clients advance a scripted clock (profile_step's time.perf_counter monkeypatched): each mode has a known step
time and the host slows down a little with every request, as the H200's drifted between servers. One test
starts real child processes through the real Server, with a stand-in `sglang.launch_server` module that
records its environment, to show each server's step switches reach its own process only.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ddtree.smoke import server as smoke_server
from ddtree.smoke.models import SmokeSettings

from benchmarks.pair import near_tie, paired_step, profile_step, serve_bench
from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401  (fixture)

A, B = "ddtree-16@eager", "ddtree-16"
STEP_MS = {A: 4.0, B: 3.6}  # B's step is 0.9x A's
TOKENS_PER_STEP = 4
DRIFT = 0.05  # the host slows by 5% of the first step time with every full request, both servers alike
HICCUP_ROUND = 2  # B's two measurements of this round take 20% longer: the per-round max shows it


class Clock:
    now = 0.0


class Script:
    """What the doubles do and saw: the full requests in order, the servers made, a failure to inject."""

    def __init__(self) -> None:
        self.full_requests: list[str] = []
        self.servers: list[DoubleServer] = []
        self.fail_on_full_request: int | None = None
        self.failure: type[BaseException] = RuntimeError
        self.fail_ready: str | None = None
        # (mode, prompt, new tokens) -> the greedy output to answer; None: the scripted range with B's token 5
        self.greedy: Callable[[str, list[int], int], list[int]] | None = None


class DoubleClient:
    def __init__(self, mode: str, script: Script) -> None:
        self.mode, self.script = mode, script

    def post_json(self, route: str, body: dict) -> dict:
        assert route == "/generate" and body["sampling_params"]["temperature"] == 0.0
        new = body["sampling_params"]["max_new_tokens"]
        if new == 1:
            Clock.now += 0.002  # prefill only
            return {"output_ids": [7], "meta_info": {"completion_tokens": 1, "spec_verify_ct": 0}}
        self.script.full_requests.append(self.mode)
        count = len(self.script.full_requests)
        if count == self.script.fail_on_full_request:
            raise self.script.failure("the server went away")
        steps = math.ceil((new - 1) / TOKENS_PER_STEP)
        factor = 1 + DRIFT * count
        round_index = (count - 3) // 4  # after the two warm-ups, four full requests a round
        if self.mode == B and round_index == HICCUP_ROUND and count > 2:
            factor *= 1.2
        Clock.now += 0.002 + steps * STEP_MS[self.mode] * factor / 1000
        if self.script.greedy is not None:
            output = self.script.greedy(self.mode, body["input_ids"], new)
        else:
            output = list(range(new))
            if self.mode == B:
                output[5] = 999  # B's greedy output differs from A's at token 5
        return {"output_ids": output, "meta_info": {"completion_tokens": new, "spec_verify_ct": steps}}


class DoubleServer:
    """Stands in for smoke_server.Server (SGLang needs the GPU): records its settings and env, and stop()."""

    script: Script

    def __init__(self, target, args, log_path, settings, skip_tokenizer_init=True, env=None) -> None:
        self.args, self.settings, self.env = args, settings, dict(env or {})
        self.cmd = ["python", *args, *settings.extra_server_args]
        self.mode = next(m for m in (B, A) if serve_bench.step_environment_of(m) == self.env)
        self.client = DoubleClient(self.mode, self.script)
        self.stopped = False
        self.script.servers.append(self)

    def wait_ready(self) -> float:
        if self.script.fail_ready == self.mode:
            raise RuntimeError("server exited with code 1")
        return 1.5

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def script(monkeypatch, tmp_path: Path) -> Script:
    made = Script()
    monkeypatch.setattr(DoubleServer, "script", made, raising=False)
    monkeypatch.setattr(paired_step.smoke_server, "Server", DoubleServer)
    monkeypatch.setattr(paired_step.smoke, "gpu_problem", lambda: None)
    monkeypatch.setattr(profile_step.time, "perf_counter", lambda: Clock.now)
    pair = tmp_path / "pair"
    pair.mkdir()
    (pair / "eval_prompts.json").write_text(json.dumps({"prompts": [[5, 6, 7]], "continuations": [[1] * 8]}))
    return made


def argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["--pair", str(tmp_path / "pair"), "--out", str(tmp_path / "out"), "--paired", f"{A},{B}", *extra]


def test_abba_rounds_give_each_modes_median_and_the_per_round_ratio_that_drift_cannot_move(
    tmp_path: Path, script: Script
) -> None:
    environ = dict(os.environ)
    assert (
        paired_step.main(argv(tmp_path, "--rounds", "4", "--contexts", "256,64", "--new-tokens", "257")) == 0
    )
    assert dict(os.environ) == environ  # the switches went to the servers' own environments only
    rounds = [A, B, B, A] * 4
    assert script.full_requests == [A, B, *rounds, A, B, *rounds]  # warm-ups first, then ABBA per context
    a, b = script.servers
    assert (a.mode, b.mode) == (A, B) and a.stopped and b.stopped
    assert a.env == serve_bench.step_environment_of(A) and b.env["SGLANG_DFLASH_STEP_GRAPHS"] == "1"
    assert a.env["SGLANG_DFLASH_STEP_GRAPHS"] == "0"
    assert a.settings.port != b.settings.port and abs(a.settings.port - b.settings.port) != 10000
    assert a.args == b.args and a.settings.extra_server_args == b.settings.extra_server_args
    assert {"--sleep-on-idle", "0.2"} <= set(a.settings.extra_server_args)

    result = json.loads((tmp_path / "out" / "paired.json").read_text())
    first = result["contexts"][0]
    assert first["context"] == 256
    # A's full requests are the 3rd, 6th, 7th, 10th, ... of the context (after two warm-ups)
    a_counts = [3 + 4 * r + k for r in range(4) for k in (0, 3)]
    want_a = statistics.median(round(STEP_MS[A] * (1 + DRIFT * c), 3) for c in a_counts)
    assert first["per_mode"][A]["step_ms"] == pytest.approx(want_a, abs=1e-3)
    assert first["per_mode"][A]["tokens_per_step"] == pytest.approx(256 / 64 + 1 / 64, abs=1e-3)
    ratio = first["ratio_b_over_a"]["step_ms"]
    assert ratio["rounds"][:2] == pytest.approx([0.9, 0.9], abs=2e-4)  # the drift cancels within a round
    assert (ratio["median"], ratio["min"], ratio["max"]) == pytest.approx((0.9, 0.9, 1.08), abs=1e-3)
    assert first["ratio_b_over_a"]["tok_s"]["rounds"][0] == pytest.approx(1 / 0.9, rel=0.01)
    diff = first["greedy_first_difference"]
    assert {k: diff[k] for k in ("at", "a", "b")} == {"at": 5, "a": 5, "b": 999}
    assert len(first["measurements"]) == 16
    markdown = (tmp_path / "out" / "paired.md").read_text()
    assert f"| step without profiler (ms), median | {first['per_mode'][A]['step_ms']} |" in markdown
    assert "| 0.9 (0.9-1.08) |" in markdown
    assert "first differ at token 5 (A 5, B 999)" in markdown
    # both outputs and the prompt's identity are kept; this pair folder has no weights: said, exit still 0
    assert first["greedy_outputs"][A][5] == 5 and first["greedy_outputs"][B][5] == 999
    assert first["prompt"]["sha256"] == near_tie.ids_digest(profile_step.prompt_of([[5, 6, 7]], 256))
    assert first["prompt"]["tokens"] == 256
    assert "the rig could not load: FileNotFoundError" in diff["gap_error"] and "gap" not in diff
    assert "first differ at token 5 (A 5, B 999); gap not computed: the rig could not load" in markdown


def train_toy_pair(tmp_path: Path) -> Path:
    """The toy pair, trained on the CPU as tests/unit/test_pair_rig.py trains it (seconds)."""
    from benchmarks.pair import train
    from tests.unit.test_pair_rig import _fake_stdlib

    root = _fake_stdlib(tmp_path / "stdlib")
    for i in range(40):  # more text, so the toy tokenizer and windows have something to read
        (root / f"more{i:02d}.py").write_text("def f(x):\n    return [x * i for i in range(10)]\n" * 20)
    argv = ["--out", str(tmp_path / "toy"), "--preset", "toy", "--stdlib", str(root), "--device", "cpu"]
    assert train.main(argv) == 0
    return tmp_path / "toy"


def test_each_first_difference_gets_the_float32_rigs_gap_at_its_position_and_a_wide_gap_is_flagged(
    tmp_path: Path, script: Script, monkeypatch
) -> None:
    """The real toy pair's target (float32, CPU) judges the differences; the servers are the doubles: A
    answers with that target's own greedy output, B with it changed at one token (the widest gap at context
    40, the narrowest at context 48). Every gap is recomputed here from one forward over the whole output,
    and its neighbours' differ, so an off-by-one position or a gap read after the difference fails."""
    import torch

    from benchmarks.pair.modeling import greedy_generate

    pair = train_toy_pair(tmp_path)
    target = near_tie.load_target(pair, "cpu")
    evals, _ = serve_bench.eval_prompts(pair)
    new = 12
    greedy, gaps, tops = {}, {}, {}
    for context in (40, 48):
        prompt = profile_step.prompt_of(evals, context)
        greedy[context] = greedy_generate(target, torch.tensor([prompt]), new)[0].tolist()
        with torch.no_grad():
            logits, _ = target(torch.tensor([prompt + greedy[context]]))
        top = logits[0, len(prompt) - 1 : len(prompt) - 1 + new].topk(2)  # row i: the choice of token i
        gaps[context] = (top.values[:, 0] - top.values[:, 1]).tolist()
        tops[context] = top.indices.tolist()
    inner = range(1, new - 1)  # a neighbour on each side
    wide = max(inner, key=lambda i: gaps[40][i])
    narrow = min(inner, key=lambda i: gaps[48][i])
    for context, at in ((40, wide), (48, narrow)):
        assert all(abs(gaps[context][at] - gaps[context][j]) > 0.01 for j in (at - 1, at + 1)), gaps
        assert tops[context][at][0] == greedy[context][at]
    assert gaps[40][wide] > near_tie.NEAR_TIE, "the toy target's widest gap is no near-tie by the real rule"
    # the trained toy has no real near-tie (its narrowest gap is about 0.45): the rule is moved between them
    monkeypatch.setattr(near_tie, "NEAR_TIE", (gaps[48][narrow] + gaps[40][wide]) / 2)
    changed = {40: wide, 48: narrow}

    def answer(mode: str, prompt: list[int], count: int) -> list[int]:
        output = list(greedy[len(prompt)][:count])
        if mode == B:
            context = len(prompt)
            output[changed[context]] = tops[context][changed[context]][1]  # B took the runner-up
        return output

    script.greedy = answer
    args = ["--pair", str(pair), "--out", str(tmp_path / "out"), "--paired", f"{A},{B}", "--rounds", "1",
            "--contexts", "40,48", "--new-tokens", str(new)]  # fmt: skip
    assert paired_step.main(args) == 0
    result = json.loads((tmp_path / "out" / "paired.json").read_text())
    assert result["rig"]["device"] == "cpu" and result["rig"]["dtype"] == "float32"
    markdown = (tmp_path / "out" / "paired.md").read_text()
    for ctx, near in zip(result["contexts"], (False, True), strict=True):
        context, diff = ctx["context"], ctx["greedy_first_difference"]
        at = changed[context]
        assert diff["at"] == at and diff["a"] == greedy[context][at] and diff["b"] == tops[context][at][1]
        assert diff["gap"] == pytest.approx(gaps[context][at], abs=1e-3)
        assert diff["rig_top"] == tops[context][at] and diff["near_tie"] is near
        assert ctx["greedy_outputs"] == {A: greedy[context], B: answer(B, [0] * context, new)}
        assert ctx["prompt"]["sha256"] == near_tie.ids_digest(profile_step.prompt_of(evals, context))
    (wide_row,) = [ln for ln in markdown.splitlines() if f"first differ at token {wide} " in ln]
    assert (
        f"rig float32 top-1 minus top-2 {result['contexts'][0]['greedy_first_difference']['gap']}" in wide_row
    )
    assert "NOT a near-tie" in wide_row and "a bug" in wide_row
    assert markdown.count("NOT a near-tie") == 1 and markdown.count("): near-tie (<=") == 1


def test_summarize_and_replay_gap_read_the_same_gap_as_paired_step_on_the_toy_pair(tmp_path: Path) -> None:
    """summarize.divergence_gaps (serve runs) and replay_gap (a prompt rebuilt from a paired_step context)
    go through near_tie.logit_gap too: on the toy pair each gap equals the one recomputed here."""
    import torch

    from benchmarks.pair import replay_gap, summarize
    from benchmarks.pair.modeling import greedy_generate

    pair = train_toy_pair(tmp_path)
    target = near_tie.load_target(pair, "cpu")
    evals, _ = serve_bench.eval_prompts(pair)
    base = [greedy_generate(target, torch.tensor([p]), 8)[0].tolist() for p in evals]
    with torch.no_grad():
        logits, _ = target(torch.tensor([evals[1] + base[1]]))
    top = logits[0, len(evals[1]) + 3 - 1].topk(2)
    other = [list(base[0]), [*base[1][:3], int(top.indices[1]), *base[1][4:]]]  # prompt 2 differs at 3
    runs = tmp_path / "runs"
    for mode, outputs in (("none", base), ("ddtree-16", other)):
        (runs / mode).mkdir(parents=True)
        (runs / mode / "greedy.json").write_text(json.dumps({"outputs": outputs}))
    gaps = summarize.divergence_gaps(runs, pair, "cpu", ["none", "ddtree-16"])
    assert gaps == {"ddtree-16": [pytest.approx(float(top.values[0] - top.values[1]), abs=1e-3)]}

    context = len(evals[0]) + 5  # prompt 1 whole, then prompt 2's first 5 tokens
    replayed = replay_gap.replay(pair, context, 4, "cpu")
    prompt = profile_step.prompt_of(evals, context)
    assert replayed["prompt_sha256"] == near_tie.ids_digest(prompt)
    assert replayed["tokens"] == greedy_generate(target, torch.tensor([prompt]), 5)[0].tolist()
    with torch.no_grad():
        logits, _ = target(torch.tensor([prompt + replayed["tokens"][:4]]))
    top = logits[0, -1].topk(2)
    assert replayed["full_forward"]["top"] == top.indices.tolist() == replayed["incremental"]["top"]
    assert replayed["full_forward"]["gap"] == pytest.approx(float(top.values[0] - top.values[1]), abs=1e-3)
    assert replayed["incremental"]["gap"] == pytest.approx(replayed["full_forward"]["gap"], abs=1e-3)
    # --force: the runner-up at token 1, and the path goes on from it
    runner_up = int(logits_at(target, prompt + replayed["tokens"][:1]).topk(2).indices[1])
    forced = replay_gap.replay(pair, context, 4, "cpu", force={1: runner_up})
    assert forced["tokens"][:2] == [replayed["tokens"][0], runner_up] and forced["forced"] == {"1": runner_up}
    follow = greedy_generate(target, torch.tensor([prompt + forced["tokens"][:2]]), 3)[0].tolist()
    assert forced["tokens"][2:] == follow
    assert replay_gap.main(["--pair", str(pair), "--context", "8", "--at", "2", "--force", "2:5"]) == 2


def logits_at(target, ids: list[int]):
    """The target's next-token logits after ids (float32, CPU)."""
    import torch

    with torch.no_grad():
        logits, _ = target(torch.tensor([ids]))
    return logits[0, -1]


@pytest.mark.parametrize(
    ("failure", "when", "code"),
    [(RuntimeError, 5, 1), (KeyboardInterrupt, 5, 130), (RuntimeError, "ready", 1)],
    ids=["a round raises", "ctrl-c in a round", "B never ready"],
)
def test_both_servers_are_stopped_when_something_fails(
    tmp_path: Path, script: Script, failure: type[BaseException], when: object, code: int
) -> None:
    if when == "ready":
        script.fail_ready = B
    else:
        script.fail_on_full_request, script.failure = int(when), failure
    assert paired_step.main(argv(tmp_path, "--rounds", "2")) == code
    assert len(script.servers) == 2 and all(s.stopped for s in script.servers)
    if failure is RuntimeError and when != "ready":  # the context's failure is recorded
        result = json.loads((tmp_path / "out" / "paired.json").read_text())
        (ctx,) = result["contexts"]
        assert ctx["context"] == 256 and ctx["error"] == "RuntimeError: the server went away"


@pytest.mark.parametrize(
    ("paired", "extra", "message"),
    [
        ("ddtree-16", (), "give two modes"),
        ("ddtree-16,ddtree-16", (), "start the same server"),
        ("dflash,dflash@bogus", (), "unknown variant @bogus"),
        ("dflash,turbo", (), "unknown mode 'turbo'"),
        (f"{A},{B}", ("--contexts", "256,long"), "--contexts '256,long'"),
        (f"{A},{B}", ("--rounds", "0"), "--rounds 0"),
    ],
)
def test_bad_input_is_one_line_naming_the_value_and_exit_2(
    tmp_path: Path, script: Script, capsys, paired: str, extra: tuple[str, ...], message: str
) -> None:
    args = ["--pair", str(tmp_path / "pair"), "--out", str(tmp_path / "out"), "--paired", paired, *extra]
    assert paired_step.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("paired_step: ") and message in err
    assert script.servers == [] and not (tmp_path / "out").exists()


def fake_sglang(tmp_path: Path, monkeypatch) -> None:
    """A stand-in `sglang.launch_server`, first on PYTHONPATH: writes its SGLANG_* environment and argv to
    tmp_path/launch-PORT.json, then sleeps until stop() ends it."""
    fake = tmp_path / "fake" / "sglang"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "launch_server.py").write_text(
        "import json, os, sys, time\n"
        "port = sys.argv[sys.argv.index('--port') + 1]\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('SGLANG_')}\n"
        f"record = {str(tmp_path)!r} + f'/launch-{{port}}.json'\n"
        "open(record + '.tmp', 'w').write(json.dumps({'env': env, 'argv': sys.argv[1:]}))\n"
        "os.rename(record + '.tmp', record)\n"
        "time.sleep(120)\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{fake.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def launched(tmp_path: Path, servers: list[smoke_server.Server]) -> list[dict]:
    """What each started stand-in recorded, once all have."""
    records = [tmp_path / f"launch-{s.port}.json" for s in servers]
    deadline = time.monotonic() + 30
    while not all(r.exists() for r in records):
        assert time.monotonic() < deadline, [s.tail() for s in servers]
        time.sleep(0.1)
    return [json.loads(r.read_text()) for r in records]


def test_each_servers_step_switches_reach_its_own_process_only(tmp_path: Path, monkeypatch) -> None:
    """The real Server, two real child processes at once (the stand-in launch_server)."""
    fake_sglang(tmp_path, monkeypatch)
    monkeypatch.setenv("SGLANG_DFLASH_STEP_GRAPHS", "1")  # a stray shell setting: each server's own wins
    first = smoke_server.free_port()
    second = smoke_server.free_port(avoid={first})
    assert abs(second - first) not in (0, 10000)
    servers = []
    try:
        for mode, port in ((A, first), (B, second)):
            env = serve_bench.step_environment_of(mode)
            servers.append(
                smoke_server.Server(
                    tmp_path / "t", [], tmp_path / f"{port}.log", SmokeSettings(port=port), env=env
                )
            )
        seen_a, seen_b = (record["env"] for record in launched(tmp_path, servers))
        assert seen_a == serve_bench.step_environment_of(A) and seen_a["SGLANG_DFLASH_STEP_GRAPHS"] == "0"
        assert seen_b == serve_bench.step_environment_of(B) and seen_b["SGLANG_DFLASH_STEP_GRAPHS"] == "1"
        assert os.environ["SGLANG_DFLASH_STEP_GRAPHS"] == "1" and "SGLANG_DFLASH_FAST_STEP" not in os.environ
    finally:
        for server in servers:
            server.stop()
    assert all(s.proc.poll() is not None for s in servers)


def test_the_paired_servers_flags_parse_with_the_real_sglang_parser(
    tmp_path: Path,
    monkeypatch,
    sglang_cpu_path: str,  # noqa: F811
) -> None:
    """paired_step.start_server's command line (recorded by the stand-in launch_server) read by the patched
    0.5.13.post1's own argparse: --sleep-on-idle exists, the paired mem fraction and graph sizes win over
    the Server's defaults, the DDTREE flags are the mode's."""
    fake_sglang(tmp_path, monkeypatch)
    server = paired_step.start_server(A, tmp_path / "pair", tmp_path / "a.log", smoke_server.free_port())
    try:
        (record,) = launched(tmp_path, [server])
    finally:
        server.stop()
    probe = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(); ServerArgs.add_cli_args(parser)
a = parser.parse_args(json.loads(sys.argv[1]))
print("PROBE", json.dumps({k: getattr(a, k) for k in ("sleep_on_idle", "mem_fraction_static", "cuda_graph_bs",
      "port", "speculative_algorithm", "speculative_ddtree_budget")}))
"""
    env = {**os.environ, "PYTHONPATH": sglang_cpu_path, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(record["argv"])],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert line, done.stderr[-3000:]
    assert json.loads(line[6:]) == {
        "sleep_on_idle": True, "mem_fraction_static": 0.2, "cuda_graph_bs": [1, 2, 4], "port": server.port,
        "speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 16,
    }  # fmt: skip
