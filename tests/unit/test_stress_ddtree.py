"""The device's `stress` mode (tests/gpu/stress_ddtree.py) without a GPU.

Real here: the request mix, stop-string placement, divergence and log checks, the noise written into
the smoke check's tiny weights, and the whole script (main, HTTP, aborts, gap queries, verdict, summary.json)
run against two TEST DOUBLES of SGLang's /generate and /abort_request: real HTTP, fake model (the crafted
options target's table, tests/gpu/options_target.py: the smoke's successor cycle with gadget rows, walked
greedily or sampled, request options applied by options_target's reference of plain decoding; answered by
token ids, with EOS and stop ids, stop strings on the byte tokenizer's text, aborts by rid, batches of
prompts, top-2 log-probs and the speculative server's custom-logit-processor refusal), because the real
servers need a GPU (`device_ddtree.sh stress`). A double can be told to ignore request options, greedy or
sampled, to see the verdict fail."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ddtree.smoke import dims as smoke_dims
from ddtree.smoke import models as smoke_models

from tests.gpu import options_target
from tests.gpu import stress_ddtree as stress
from tests.unit.bench_double import send_body

CYCLE = smoke_models.successor_cycle(1234)
LADDER = smoke_models.logit_table(CYCLE)  # the stress's target (its greedy walk is CYCLE)
CRAFTED = options_target.options_table(smoke_models.SmokeSettings().seed)  # the --options-only target
LOGIT_OPTIONS = {
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "logit_bias",
}


def test_request_mix_covers_lengths_cuts_and_aborts() -> None:
    reqs = stress.mixed_requests(7, 2048, 8, smoke_dims.REAL_TOKENS, tp=1)
    lengths = [len(r.prompt) for r in reqs]
    news = [r.max_new_tokens for r in reqs]
    assert len(reqs) == 32 and min(lengths) == 5 and max(lengths) == 3000
    assert sum(n > 2048 for n in lengths) == 8, "several prompts past the drafter window"
    assert {1, 2, 3, 7, 8, 9, 300} <= set(news) and all(1 <= n <= 300 for n in news)
    aborted = [r for r in reqs if r.abort]
    assert len(aborted) == 4 and min(r.max_new_tokens for r in aborted) >= sorted(news)[-5]
    assert not any(r.sampled for r in reqs)
    assert stress.mixed_requests(7, 2048, 8, smoke_dims.REAL_TOKENS, tp=1) == reqs, "seeded"
    sampled = stress.mixed_requests(7, 2048, 8, smoke_dims.REAL_TOKENS, tp=2)
    assert [r.sampled for r in sampled] == [i % 2 == 1 for i in range(32)]
    assert sampled[1].payload("x")["sampling_params"] == {
        "max_new_tokens": news[1],
        "temperature": 0.8,
        "top_p": 0.9,
    }


def test_stop_strings_are_printable_pairs_near_the_middle() -> None:
    assert stress.stop_string_from([67, 68, 200, 65, 66, 201, 202, 203, 204]) == "AB", (
        "the pair nearest the middle"
    )
    assert stress.stop_string_from([0x20, 0x41, 200, 0x7F, 0x42]) is None, (
        "space, DEL and high bytes are skipped"
    )
    reqs = stress.mixed_requests(7, 2048, 8, smoke_dims.REAL_TOKENS, tp=2)
    answers = {r.name: stress.Answer(output_ids=[200, 65, 66, 201], finish="length") for r in reqs}
    stops = stress.stop_requests(reqs, answers)
    given = [r for r in stops if r.stop is not None]
    assert len(given) == 12 and all(r.stop == "AB" and not r.sampled and not r.abort for r in given)


def test_first_divergence_and_top2_gap() -> None:
    assert stress.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert stress.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert stress.first_divergence([1, 2], [1, 2, 3]) == 2
    meta = {"output_top_logprobs": [[[-0.1, 5, None], [-0.4, 9, None]]]}
    assert stress.top2_gap(meta) == pytest.approx(0.3)
    assert stress.top2_gap({}) is None


def test_log_checks() -> None:
    log = (
        "Testing retraction. #retracted_reqs: 1, #new_tokens_gained: 300\n"
        "KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 9\n"
        "DFLASH non-greedy verification is unavailable; falling back to greedy argmax verification.\n"
    )
    assert stress.retractions(log) == 3
    assert stress.log_problems(log, speculative=False) == []
    assert stress.log_problems(log, speculative=True) == ["1x 'falling back to greedy argmax verification'"]
    assert stress.log_problems(
        "Traceback (most recent call last):\nAssertionError: Full Pool Mem Leak Detected!", True
    ) == [
        "1x 'Traceback (most recent call last)'",
        "1x 'Mem Leak Detected'",
    ]


def test_compare_phase_judges_divergences_by_their_gap() -> None:
    reqs = [stress.StressRequest(f"r{i}", [1, 2], 4) for i in range(4)]
    reqs.append(stress.StressRequest("cut", [1], 300, abort=True))
    plain = {r.name: stress.Answer(output_ids=[3, 4, 5], finish="length") for r in reqs}
    ddtree = dict(plain)
    ddtree["r1"] = stress.Answer(output_ids=[3, 9, 5], finish="length")
    ddtree["r2"] = stress.Answer(output_ids=[7, 4, 5], finish="length")
    ddtree["cut"] = stress.Answer(error="HTTP 400: aborted")
    verdict = stress.Verdict()
    stress.compare_phase(verdict, "mixed", reqs, ddtree, plain, {("mixed", "r1"): 0.1, ("mixed", "r2"): 0.6})
    assert [n["request"] for n in verdict.noise] == ["r1"] and [b["request"] for b in verdict.bugs] == ["r2"]
    assert not verdict.ok and "2/4 greedy outputs identical" in verdict.lines[1]
    ddtree["r3"] = stress.Answer(output_ids=[3, 4], finish="abort")
    verdict = stress.Verdict()
    stress.compare_phase(verdict, "mixed", reqs, ddtree, plain, {("mixed", "r1"): 0.1, ("mixed", "r2"): 0.2})
    assert verdict.lines[0].startswith("FAIL") and "ddtree r3: abort" in verdict.lines[0]


def test_context_noise_touches_only_attention_and_mlp(tmp_path: Path) -> None:
    """ddtree.smoke's real tiny weights: seeded noise; embeddings, norms and the LM head keep their values."""
    torch = pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors.torch")
    target, _ = smoke_models.write_models(tmp_path / "m", smoke_models.SmokeSettings())
    before = safetensors.load_file(str(target / "model.safetensors"))
    stress.add_context_noise(target, 0.03, seed=5)
    after = safetensors.load_file(str(target / "model.safetensors"))
    changed = sorted(k for k in before if not torch.equal(before[k], after[k]))
    assert changed and all((".self_attn." in k and "_proj" in k) or ".mlp." in k for k in changed)
    assert len(changed) == 6 * 7, "q, k, v, o, gate, up and down of all six layers"
    assert 0.02 < float(after["model.layers.0.mlp.up_proj.weight"].float().std()) < 0.04
    again = tmp_path / "again"
    target2, _ = smoke_models.write_models(again, smoke_models.SmokeSettings())
    stress.add_context_noise(target2, 0.03, seed=5)
    name = "model.layers.3.self_attn.q_proj.weight"
    assert torch.equal(safetensors.load_file(str(target2 / "model.safetensors"))[name], after[name])


def test_context_noise_on_the_mla_target_touches_its_projections_router_and_experts(tmp_path: Path) -> None:
    """--arch mla: every attention projection, the dense MLP, each router (weight and correction bias), expert
    and shared expert gets noise; norms, embeddings and the LM head keep their values."""
    torch = pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors.torch")
    target, _ = smoke_models.write_models(tmp_path / "m", smoke_models.SmokeSettings(arch="mla"))
    before = safetensors.load_file(str(target / "model.safetensors"))
    stress.add_context_noise(target, 0.03, seed=5)
    after = safetensors.load_file(str(target / "model.safetensors"))
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert not any(k.endswith("norm.weight") or "embed" in k or "lm_head" in k for k in changed)
    moe_layer = 2 + 16 * 3 + 3  # router weight and bias, 16 experts and the shared one (gate, up, down each)
    assert len(changed) == 6 * 5 + 3 + 5 * moe_layer, (
        "q_a, q_b, kv_a, kv_b, o; the dense MLP; five MoE layers"
    )


# ---------------------------------------------------------------------------------------- the test double


class _Generate(BaseHTTPRequestHandler):
    """/generate (whole or streamed) and /abort_request of a fake SGLang that walks CYCLE greedily."""

    protocol_version = "HTTP/1.1"
    server: _Double

    def log_message(self, format: str, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/abort_request":
            self.server.aborted.add(body["rid"])
            send_body(self, 200, "text/plain", b"")
            return
        params = body["sampling_params"]
        self.server.seen_params.append(params)
        if self.server.algorithm and body.get("custom_logit_processor"):
            message = (
                f"{self.server.algorithm} speculative decoding does not support custom_logit_processor: ..."
            )
            send_body(self, 400, "application/json", json.dumps({"error": {"message": message}}).encode())
            return
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in self._walk(body, params):
                raw = f"data: {json.dumps(event)}\n\n".encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()
            raw = b"data: [DONE]\n\n"
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n0\r\n\r\n")
            return
        if body["input_ids"] and isinstance(body["input_ids"][0], list):  # a batch of prompts
            answers = [[*self._walk({**body, "input_ids": ids}, params)][-1] for ids in body["input_ids"]]
            send_body(self, 200, "application/json", json.dumps(answers).encode())
            return
        *_, answer = self._walk(body, params)
        send_body(self, 200, "application/json", json.dumps(answer).encode())

    def _next(self, last: int, out: list[int], params: dict) -> int:
        """The crafted table's next token: options_target's reference of plain decoding, greedy or sampled."""
        sampled = params.get("temperature", 1.0) > 0
        ignore = self.server.ignore_sampled_options if sampled else self.server.ignore_greedy_options
        options = {"temperature": params.get("temperature", 1.0)} if ignore else params
        row_of = out[-1] if out else last
        if row_of >= smoke_dims.REAL_TOKENS:
            return 0
        if not sampled and not LOGIT_OPTIONS & set(options):
            return self.server.greedy_next[row_of]
        if not sampled:
            logits = options_target.adjusted_row(self.server.table[row_of], out, options)
            return max(range(smoke_dims.VOCAB), key=logits.__getitem__)
        weights = options_target.probabilities(self.server.table, last, out, options)
        return self.server.rng.choices(range(smoke_dims.VOCAB), weights)[0]

    def _walk(self, body: dict, params: dict) -> Iterator[dict]:
        """One event per 4 tokens (a verify step), cumulative output_ids, the last with its finish reason."""
        cur, out, finish = body["input_ids"][-1], [], None
        stop = (params.get("stop") or [None])[0]
        stop_ids = {smoke_dims.EOS_ID, *(params.get("stop_token_ids") or ())}
        while finish is None:
            time.sleep(0.002)
            for _ in range(4):
                if body.get("rid") in self.server.aborted:
                    finish = "abort"
                    break
                cur = self._next(body["input_ids"][-1], out, {"temperature": 0.0, **params})
                out.append(
                    (cur + 1) % smoke_dims.REAL_TOKENS if len(out) + 1 in self.server.corrupt_at else cur
                )
                text = bytes(t for t in out if t < 128).decode("latin-1")
                if (stop and text.endswith(stop)) or out[-1] in stop_ids:
                    finish = "stop"
                elif len(out) == params["max_new_tokens"]:
                    finish = "length"
                if finish:
                    break
            meta = {"finish_reason": {"type": finish} if finish else None}
            meta["spec_accept_length"] = 3.5 if self.server.algorithm else None
            if finish and body.get("return_logprob"):
                meta["output_top_logprobs"] = [[[-0.01, t, None], [-2.0, 17, None]] for t in out]
            yield {"output_ids": list(out), "meta_info": meta}


class _Double(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # 32 requests connect at once (the default backlog of 5 resets some)

    def __init__(self, algorithm: str | None, corrupt_at: set[int], ignore: str = "", crafted: bool = False):
        super().__init__(("127.0.0.1", 0), _Generate)
        self.algorithm = algorithm  # the speculative double: refuses custom logit processors
        self.seen_params: list[dict] = []
        self.corrupt_at = corrupt_at
        self.aborted: set[str] = set()
        self.ignore_greedy_options = ignore == "greedy"
        self.ignore_sampled_options = ignore == "sampled"
        self.rng = random.Random(5)
        self.table = CRAFTED if crafted else LADDER
        self.greedy_next = [max(range(smoke_dims.VOCAB), key=row.__getitem__) for row in self.table]


@contextmanager
def _doubles(
    corrupt_at: set[int],
    algorithm: str = "DDTREE",
    ignore: tuple[str, str] = ("", ""),
    crafted: bool = False,
) -> Iterator[tuple[str, str]]:
    """The speculative double and the plain one, on the ladder or the crafted options target; `ignore`: the
    request options each ignores ("greedy" or "sampled" requests' options)."""
    servers = [_Double(algorithm, corrupt_at, ignore[0], crafted), _Double(None, set(), ignore[1], crafted)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    try:
        yield tuple(f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


@pytest.mark.parametrize("corrupt", [False, True])
def test_whole_run_against_servers_already_up(tmp_path: Path, corrupt: bool, capsys) -> None:
    """main() with --ddtree-url/--baseline-url: every phase, aborts, stop strings, the options phase (an
    information line under forced retraction), the refusal, the verdict. A DDTREE double that emits one wrong
    token at output index 40 (gap 1.99 > 0.25) must fail the run."""
    random.seed(0)
    with _doubles({41} if corrupt else set()) as (ddtree_url, plain_url):
        rc = stress.main(["--out", str(tmp_path), "--ddtree-url", ddtree_url, "--baseline-url", plain_url])
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["passed"] is (not corrupt) and rc == (1 if corrupt else 0), printed
    assert "ok   stop: " in printed
    assert "ok   ddtree refuses a streamed custom_logit_processor before the stream: HTTP 400" in printed
    assert "ok   mixed: 4/4 DDTREE requests aborted mid-stream" in printed
    if corrupt:
        bugs = summary["bug_divergences"]
        assert bugs and all(b["index"] == 40 and b["gap"] == pytest.approx(1.99) for b in bugs), bugs
        assert not any(b["phase"] == "options" for b in bugs), "options: not judged under forced retraction"
    else:
        assert (
            "mixed: 28/28 greedy outputs identical" in printed
            and "long: 4/4 greedy outputs identical" in printed
            and "info options: 9/9 greedy outputs identical" in printed
            and "info options change plain output in " in printed
        )


@pytest.mark.parametrize("corrupt", [False, True])
def test_options_only_judges_the_options_phase(tmp_path: Path, corrupt: bool, capsys) -> None:
    """--options-only: the 8 option requests and the refusal only, judged token for token (gaps asked with
    each request's options); the wrong token at index 40 fails every option request."""
    with _doubles({41} if corrupt else set()) as (ddtree_url, plain_url):
        rc = stress.main(
            [
                "--out",
                str(tmp_path),
                "--ddtree-url",
                ddtree_url,
                "--baseline-url",
                plain_url,
                "--options-only",
            ]
        )
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["options_only"] and summary["passed"] is (not corrupt), printed
    assert rc == (1 if corrupt else 0) and "mixed:" not in printed and "stop:" not in printed, printed
    assert "ok   ddtree refuses a streamed custom_logit_processor before the stream: HTTP 400" in printed
    if corrupt:
        bugs = summary["bug_divergences"]
        assert {b["request"] for b in bugs} == {f"opt-{c[0]}" for c in options_target.OPTION_CASES}, bugs
        assert all(b["index"] == 40 and b["gap"] == pytest.approx(1.99) for b in bugs), bugs
    else:
        assert "ok   options: 9/9 greedy outputs identical to plain decoding" in printed, printed
        assert "info options change plain output in " in printed, "not the crafted target: information"
        assert "chi " not in printed, "the sampling phase needs the crafted target"


def test_without_a_gpu_it_says_why_and_exits_2(tmp_path: Path, capsys) -> None:
    assert stress.main(["--out", str(tmp_path)]) == 2
    assert "stress: cannot run here:" in capsys.readouterr().out


def test_urls_go_together(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        stress.main(["--out", str(tmp_path), "--ddtree-url", "http://127.0.0.1:1"])
    assert exit_info.value.code == 2


def test_stop_as_token_when_the_servers_have_no_tokenizer() -> None:
    req = stress.StressRequest("r", [1], 9, stop="AB")
    assert req.payload("x")["sampling_params"]["stop"] == ["AB"]
    params = stress.dataclasses.replace(req, stop_as_token=True).payload("x")["sampling_params"]
    assert params["stop_token_ids"] == [66] and "stop" not in params


def test_a_server_that_needs_skip_tokenizer_init_is_started_again_that_way(
    tmp_path: Path, monkeypatch
) -> None:
    """smoke_server.Server is MOCKED (a real one needs SGLang on a GPU): with the tokenizer, never ready."""
    started: list[bool] = []

    class FakeServer:
        def __init__(self, target, args, log_path, settings, skip_tokenizer_init):
            started.append(skip_tokenizer_init)
            self.skip, self.client = skip_tokenizer_init, "client"
            self.proc = type("P", (), {"poll": staticmethod(lambda: None)})
            log_path.write_text("#retracted_reqs: 1\n")

        def wait_ready(self) -> float:
            if not self.skip:
                raise RuntimeError("server exited with code 1")
            return 1.0

        def stop(self) -> None:
            pass

    monkeypatch.setattr(stress.smoke_server, "Server", FakeServer)
    seen: list[bool] = []
    run = stress.launched(
        "ddtree",
        [],
        tmp_path,
        stress.smoke_models.SmokeSettings(),
        tmp_path,
        lambda c, t: (seen.append(t), ({}, None))[1],
    )
    assert started == [False, True] and seen == [False]
    assert run.skipped_tokenizer and run.alive and stress.retractions(run.log) == 1
    with pytest.raises(RuntimeError):
        stress.launched("plain", [], tmp_path, stress.smoke_models.SmokeSettings(), tmp_path, None, (False,))


def test_dflash_runs_the_same_stress_without_the_ddtree_only_checks(tmp_path: Path, capsys) -> None:
    """--algorithm DFLASH: the same phases; the patched DFLASH refuses custom logit processors too."""
    with _doubles(set(), algorithm="DFLASH") as (spec_url, plain_url):
        rc = stress.main(
            [
                "--out",
                str(tmp_path),
                "--ddtree-url",
                spec_url,
                "--baseline-url",
                plain_url,
                "--algorithm",
                "DFLASH",
            ]
        )
    printed = capsys.readouterr().out
    assert rc == 0 and "ok   dflash refuses a streamed custom_logit_processor before the stream" in printed, (
        printed
    )
    assert json.loads((tmp_path / "summary.json").read_text())["algorithm"] == "DFLASH"


def test_options_phase_sends_each_option_case_greedy() -> None:
    mixed = stress.mixed_requests(7, 2048, 8, smoke_dims.REAL_TOKENS, tp=2)
    opts = stress.options_requests(mixed)
    assert [r.name for r in opts] == [f"opt-{c[0]}" for c in options_target.OPTION_CASES]
    assert not any(r.abort or r.sampled for r in opts)
    assert [r.prompt for r in opts] == [r.prompt for r in mixed if not r.abort and not r.sampled][: len(opts)]
    params = opts[0].payload("x")["sampling_params"]
    assert params == {
        "max_new_tokens": options_target.OPTIONS_NEW,
        "temperature": 0.0,
        "frequency_penalty": 0.7,
    }
    by_name = {r.name: r for r in opts}
    assert json.loads(by_name["opt-min_new_stop_id"].base_options) == {"stop_token_ids": [options_target.S]}
    assert by_name["opt-logit_bias"].payload("x")["sampling_params"]["logit_bias"] == {
        "112": 3.0,
        "111": -1.0,
    }
    crafted = stress.options_requests(mixed, crafted=True)
    assert [r.prompt for r in crafted] == [
        [*options_target.PREFIX, c[1]] for c in options_target.OPTION_CASES
    ]
    without = stress.options_requests(mixed, with_tokenizer=False, crafted=True)
    assert without and all("min_new_tokens" not in r.options for r in without), (
        "no tokenizer: no min_new_tokens"
    )


def _crafted_run(
    tmp_path: Path, ignore: tuple[str, str], monkeypatch, algorithm: str = "DDTREE"
) -> tuple[int, str]:
    monkeypatch.setattr(stress, "CHI_REQUESTS", 1500)  # the doubles sample in Python; power stays ample
    with _doubles(set(), algorithm, ignore=ignore, crafted=True) as (ddtree_url, plain_url):
        rc = stress.main(
            ["--out", str(tmp_path), "--ddtree-url", ddtree_url, "--baseline-url", plain_url,
             "--options-only", "--crafted-target", "--algorithm", algorithm]
        )  # fmt: skip
    return rc, capsys_text(tmp_path)


def capsys_text(out: Path) -> str:
    return "\n".join(json.loads((out / "summary.json").read_text())["checks"])


@pytest.mark.parametrize("algorithm", ["DDTREE", "DFLASH"])
def test_options_only_on_the_crafted_target_judges_every_option(
    tmp_path: Path, monkeypatch, algorithm: str
) -> None:
    """--options-only on the crafted options target (the doubles serve its table and apply the options as
    plain decoding does): every case equal token for token, every case's option changes plain decoding's
    output, plain decoding is the table's exact walk, and both servers' samples pass the chi-square test
    against the exact distribution and fail it against the one without options."""
    rc, checks = _crafted_run(tmp_path, ("", ""), monkeypatch, algorithm)
    assert rc == 0, checks
    n = len(options_target.OPTION_CASES)
    assert f"ok   options: {n}/{n} greedy outputs identical to plain decoding" in checks, checks
    assert f"ok   options change plain output in {n}/{n} requests" in checks, checks
    walk = f"ok   options: plain decoding's {n}/{n} outputs are the crafted table's exact greedy walk"
    assert walk in checks, checks
    for label in (algorithm.lower(), "plain"):
        assert f"ok   chi {label}: 1500 samples at temperature 1 with every option" in checks, checks
        assert f"ok   chi {label}: and " in checks and "(power)" in checks, checks
    assert json.loads((tmp_path / "summary.json").read_text())["crafted_options_target"]


@pytest.mark.parametrize(
    ("ignore", "failed"),
    [
        (("sampled", ""), ["FAIL chi ddtree: 1500 samples", "FAIL chi ddtree: and "]),
        (("greedy", ""), ["FAIL options: 1/9 greedy outputs identical"]),  # stop_token_ids: not a logit
        (("", "greedy"), ["FAIL options change plain output in 1/9", "FAIL options: plain decoding's 1/9"]),
    ],
)
def test_crafted_options_target_fails_a_server_that_ignores_options(
    tmp_path: Path, monkeypatch, ignore: tuple[str, str], failed: list[str]
) -> None:
    """A speculative server that samples without the options fails the chi-square test (and passes the one
    without options: no power check passes); one that decodes greedily without them diverges from plain
    decoding; a plain server without them changes no output and is not the table's walk."""
    rc, checks = _crafted_run(tmp_path, ignore, monkeypatch)
    assert rc == 1, checks
    for text in failed:
        assert text in checks, checks


def test_options_only_launch_serves_the_crafted_target_without_noise_or_forced_retraction(
    tmp_path: Path, monkeypatch
) -> None:
    """main() without URLs and --options-only: the real model writers run, the target's logits become the
    crafted table (no noise), neither SGLANG_TEST_RETRACT nor the small KV pool reach the servers, the plain
    server runs without overlap scheduling, and a retraction in a server's log fails the run.
    smoke.gpu_problem and `launched` are MOCKED (a real server needs SGLang on a GPU): `launched` answers
    through the crafted doubles and returns a log."""
    safetensors = pytest.importorskip("safetensors.torch")
    monkeypatch.setattr(stress.smoke, "gpu_problem", lambda tp, arch: None)
    monkeypatch.setattr(stress, "CHI_REQUESTS", 480)
    for name in stress.STRESS_ENV:  # main() sets the servers' environment in its own: restored afterwards
        monkeypatch.delenv(name, raising=False)
    seen: dict[str, object] = {}

    with _doubles(set(), crafted=True) as (ddtree_url, plain_url):

        def fake_launched(label, mode_args, target, settings, out, work, skip_choices=(False, True)):
            head = safetensors.load_file(str(target / "model.safetensors"))["lm_head.weight"].float()
            seen[label] = (head, settings.extra_server_args, stress.os.environ.get("SGLANG_TEST_RETRACT"))
            seen[f"{label} args"] = list(mode_args)
            client = stress.Client(ddtree_url if label == "ddtree" else plain_url)
            answers, refusal = work(client, True)
            log = "#retracted_reqs: 2\n" if label == "plain" else ""
            return stress.ServerRun(answers, refusal, log, True, False)

        monkeypatch.setattr(stress, "launched", fake_launched)
        rc = stress.main(["--out", str(tmp_path), "--options-only"])
    checks = capsys_text(tmp_path)
    head, extra, retract = seen["ddtree"]
    row = options_target.options_table(smoke_models.SmokeSettings().seed)[options_target.A]
    assert head[:, options_target.A].mul(16).tolist() == row, "lm_head column A = the crafted row / 16"
    assert extra == () and retract is None, (extra, retract)
    # plain decoding as the options define them: overlap scheduling off (it shifts SGLang's penalizers)
    assert seen["plain args"] == ["--disable-overlap-schedule"], seen["plain args"]
    assert "--disable-overlap-schedule" not in seen["ddtree args"], seen["ddtree args"]
    assert "ok   ddtree: 0 requests retracted (none expected: default KV pool)" in checks, checks
    assert rc == 1 and "FAIL plain: 2 requests retracted" in checks, checks
    assert "ok   chi ddtree: 480 samples" in checks, checks
