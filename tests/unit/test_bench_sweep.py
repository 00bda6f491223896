"""`ddtree bench` end to end against the loopback test double (bench_double: real HTTP, fake model)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from ddtree.bench.client import Client
from ddtree.bench.prompts import PromptBuilder, ServerTokenizer, resolve_tokenizer
from ddtree.cli import main
from ddtree.errors import UserError
from ddtree.receipts import receipt

from tests.unit.bench_double import DoubleConfig, send_body, serve, serve_handler

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def sweep_argv(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "bench",
        "--url",
        url,
        "--contexts",
        "60,300",
        "--concurrency",
        "1,4",
        "--max-tokens",
        "16",
        "--repeats",
        "2",
        "--warmup",
        "1",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def generate_calls(server) -> int:
    """Sweep requests (token ids); the receipt's greedy runs of the fixed text prompt are counted apart."""
    return sum(1 for path, body in server.requests_seen if path == "/generate" and "input_ids" in body)


def greedy_calls(server) -> list[dict]:
    return [body for path, body in server.requests_seen if path == "/generate" and "text" in body]


def test_sweep_writes_results_report_and_plots(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    config = DoubleConfig(ttft_s=0.03, chunk_interval_s=0.01, tokens_per_chunk=4)
    with serve(config) as (url, server):
        assert main(sweep_argv(url, out)) == 0
        # 4 cells x (1 warm-up + 2 rounds) x concurrency
        assert generate_calls(server) == 2 * (3 * 1 + 3 * 4)
        sent = [body for path, body in server.requests_seen if path == "/generate" and "input_ids" in body]
        greedy = greedy_calls(server)
    # The receipt: two greedy runs of the fixed prompt, identical output, sealed and complete.
    assert len(greedy) == receipt.GREEDY_RUNS and greedy[0]["text"] == receipt.PROMPT
    assert {b["sampling_params"]["temperature"] for b in greedy} == {0.0}
    document = json.loads((out / "receipt.json").read_text())
    # The double is no ddtree image: only the served identity is missing (test_receipt covers it).
    assert receipt.problems(document) == [
        "image: the server reported no image identity (/server_info has no ddtree_image)"
    ]
    assert document["verdict"] == "COMPLETE"
    assert document["greedy"]["output_sha256"] and document["figures"]["ctx300-conc4"]["ttft_s"]["n"] == 8
    summary = json.loads((out / "results.json").read_text())
    assert summary["schema"] == "ddtree-bench/1" and summary["kind"] == "sweep"
    assert summary["server"]["version"] == "0.5.13.post1"
    assert summary["prompt_method"]["tokenizer"] == "server"
    cells = {(c["context"], c["concurrency"]): c for c in summary["cells"]}
    assert set(cells) == {(60, 1), (60, 4), (300, 1), (300, 4)}
    for (context, concurrency), cell in cells.items():
        m = cell["metrics"]
        assert m["errors"] == 0 and m["requests"] == 2 * concurrency
        assert m["prompt_tokens"]["min"] == m["prompt_tokens"]["max"] == context  # exact context
        assert m["accept_length_weighted"] == pytest.approx(4.0)
        assert m["per_request_tok_s"]["median"] > 0 and m["aggregate_tok_s"]["median"] > 0
        assert cell["accept_length_source"] == "meta_info"
    # Prompts are exact, distinct (no shared cached prefix), and warm-up requests are short.
    assert {len(b["input_ids"]) for b in sent} == {60, 300}
    assert len({tuple(b["input_ids"]) for b in sent}) == len(sent)
    assert {b["sampling_params"]["max_new_tokens"] for b in sent} == {16}
    report = (out / "report.md").read_text()
    assert "| 300 | 4 | 300 |" in report
    for name in ("tok_s.png", "accept_length.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert "results:" in capsys.readouterr().out


def test_aggregate_reflects_real_concurrency(tmp_path: Path) -> None:
    """With 4 requests at once, aggregate tok/s is ~4x one request's rate (they overlap in time)."""
    out = tmp_path / "run"
    config = DoubleConfig(ttft_s=0.02, chunk_interval_s=0.02, tokens_per_chunk=2)
    argv = sweep_argv("", out)
    argv[argv.index("--contexts") + 1] = "60"
    argv[argv.index("--max-tokens") + 1] = "40"
    with serve(config) as (url, _):
        argv[2] = url
        assert main([*argv, "--no-plots"]) == 0
    cells = {c["concurrency"]: c["metrics"] for c in json.loads((out / "results.json").read_text())["cells"]}
    single, quad = cells[1]["aggregate_tok_s"]["median"], cells[4]["aggregate_tok_s"]["median"]
    assert quad / single == pytest.approx(4.0, rel=0.3)
    assert cells[4]["per_request_tok_s"]["median"] == pytest.approx(
        cells[1]["per_request_tok_s"]["median"], rel=0.3
    )


@pytest.mark.parametrize("speculative", [True, False])
def test_rounds_record_the_decode_span_and_server_steps(tmp_path: Path, speculative: bool) -> None:
    """A round's decode span and steps (verify passes of its longest request, or tokens - 1 without
    speculation): the double sends 20 chunks of 2 tokens; the span is checked against its real send times."""
    out = tmp_path / "run"
    config = DoubleConfig(ttft_s=0.01, chunk_interval_s=0.005, tokens_per_chunk=2,
                          speculative_algorithm="DFLASH" if speculative else None)  # fmt: skip
    argv = sweep_argv("", out, "--no-plots")
    argv[argv.index("--contexts") + 1] = "60"
    argv[argv.index("--max-tokens") + 1] = "40"
    with serve(config) as (url, server):
        argv[2] = url
        assert main(argv) == 0
        sent = [record["sent"] for record in server.emissions if len(record["sent"]) == 20]
    cells = {c["concurrency"]: c for c in json.loads((out / "results.json").read_text())["cells"]}
    for cell in cells.values():
        for rd in cell["rounds"]:
            assert rd["decode_steps"] == (20 if speculative else 39), rd
            assert 0 < rd["decode_s"] <= rd["wall_s"]
    # one request a round: its span is its first-to-last chunk time as the double sent them (+ delivery)
    spans = sorted(s[-1] - s[0] for s in sent)
    for rd in cells[1]["rounds"]:
        assert any(abs(rd["decode_s"] - span) < 0.02 for span in spans), (rd["decode_s"], spans)


def test_interrupted_run_keeps_finished_cells_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = DoubleConfig(ttft_s=0.01, chunk_interval_s=0.005)
    with serve(config) as (url, server):
        assert main(sweep_argv(url, out, "--no-plots")) == 0
        first = generate_calls(server)
        # A crash mid-cell: that cell's file never got written.
        (out / "cells" / "ctx300-conc4.json").unlink()
        assert main(sweep_argv(url, out, "--no-plots")) == 0
        assert generate_calls(server) - first == 3 * 4  # only the lost cell, warm-up included
        # Nothing to do the third time.
        again = generate_calls(server)
        assert main(sweep_argv(url, out, "--no-plots")) == 0
        assert generate_calls(server) == again
    manifest = json.loads((out / "run.json").read_text())
    assert len(manifest["resumed"]) == 2
    assert len(json.loads((out / "results.json").read_text())["cells"]) == 4


def test_server_failure_stops_with_a_resumable_message(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with serve(DoubleConfig(fail_generate=True)) as (url, _):
        assert main(sweep_argv(url, out, "--no-plots")) == 1
    err = capsys.readouterr().err
    assert "every request failed" in err and "run the same command again to resume" in err
    assert not list((out / "cells").glob("*.json")) if (out / "cells").exists() else True


def test_resume_refuses_other_settings_or_another_server(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with serve(DoubleConfig(ttft_s=0.01, chunk_interval_s=0.005)) as (url, _):
        assert main(sweep_argv(url, out, "--no-plots")) == 0
        assert main([*sweep_argv(url, out, "--no-plots"), "--max-tokens", "32"]) == 1
        assert "settings differ" in capsys.readouterr().err
    with serve(DoubleConfig(speculative_algorithm=None)) as (url, _):
        assert main(sweep_argv(url, out, "--no-plots")) == 1
        assert "server fingerprint differ" in capsys.readouterr().err


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_openai_dialects_with_metrics_fallback(tmp_path: Path, api: str) -> None:
    out = tmp_path / api
    with serve(DoubleConfig(ttft_s=0.01, chunk_interval_s=0.005, metrics_accept_length=3.6)) as (url, _):
        argv = sweep_argv(url, out, "--no-plots", "--api", api)
        argv[argv.index("--contexts") + 1] = "100"
        assert main(argv) == 0
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["accept_length_source"] == "metrics"  # OpenAI streams carry no meta_info
    assert cell["server_gauge_accept_length"] == pytest.approx(3.6)
    expected_prompt = 100 if api == "completions" else None
    if expected_prompt:
        assert cell["metrics"]["prompt_tokens"]["median"] == expected_prompt


def test_bad_arguments_are_one_line_errors(tmp_path: Path, capsys) -> None:
    assert main(["bench", "--contexts", "60", "--out", str(tmp_path)]) == 1
    assert "--url is required" in capsys.readouterr().err
    assert main(["bench", "--url", "http://127.0.0.1:9", "--timeout", "2", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "is the server up?" in err and "Connection refused" in err and err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(["bench", "--url", "x", "--contexts", "60,abc"])


@contextmanager
def _answering(
    status: int, content_type: str, body: bytes, seen: list[str | None] | None = None
) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 that gives every GET the same answer (an error page, HTML...);
    `seen` collects each request's Authorization header."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if seen is not None:
                seen.append(self.headers.get("Authorization"))
            send_body(self, status, content_type, body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serve_handler(Handler) as url:
        yield url


@pytest.mark.parametrize(
    ("status", "content_type", "body", "said"),
    [
        (
            500,
            "text/plain",
            b"Internal Server Error: CUDA out of memory",
            "HTTP 500: 'Internal Server Error: CUDA",
        ),
        (
            200,
            "text/html",
            b"<html><body>nginx welcome</body></html>",
            "HTTP 200 but not JSON: '<html><body>nginx",
        ),
        (200, "application/json", b"[1, 2]", "HTTP 200 JSON list, not an object"),
        (502, "text/plain", b"", "HTTP 502: (empty body)"),
    ],
)
def test_bench_says_what_the_server_answered(
    tmp_path: Path, capsys, status: int, content_type: str, body: bytes, said: str
) -> None:
    """HTTP 500, an HTML page or JSON of the wrong shape: the one line names the status and the body seen,
    and nothing is written to --out."""
    out = tmp_path / "bench-out"
    with _answering(status, content_type, body) as url:
        assert main(["bench", "--url", url, "--timeout", "5", "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ddtree: error: --url ") and err.count("\n") == 1, err
    assert f"GET /server_info -> {said}" in err
    assert "GET /v1/models -> HTTP" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [("--timeout", "inf"), ("--timeout", "0"), ("--repeats", "-1"), ("--max-tokens", "nan"),
     ("--warmup", "-1"), ("--temperature", "1e9"), ("--concurrency", "0,8")],
)  # fmt: skip
def test_numeric_options_are_range_checked(tmp_path: Path, capsys, option: str, value: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--url", "http://127.0.0.1:9", option, value, "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {value!r} is not" in err or f"argument {option}: {value!r}: expected" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_prompt_builder_is_exact_and_deterministic() -> None:
    with serve() as (url, _):
        builder = PromptBuilder(ServerTokenizer(Client(url)))
        for tokens in (1, 5, 60, 1024, 8192):
            prompt = builder.build(tokens, 7)
            assert prompt.exact and len(prompt.ids or []) == tokens
        assert builder.build(512, 3).digest == builder.build(512, 3).digest
        assert builder.build(512, 3).digest != builder.build(512, 4).digest
        assert builder.build(4096, 1).text.endswith("write unit tests for it.")


def test_approx_prompts_without_a_tokenizer() -> None:
    prompt = PromptBuilder(None).build(1000, 2)
    assert not prompt.exact and prompt.ids is None
    assert 3000 < len(prompt.text) < 4000


def test_broken_server_tokenizer_is_named_or_falls_back(tmp_path: Path) -> None:
    with serve(DoubleConfig(fail_tokenize=True)) as (url, _):
        client = Client(url)
        with pytest.raises(UserError, match=r"/v1/tokenize does not work \(POST /v1/tokenize -> HTTP 500"):
            resolve_tokenizer("server", client, None)
        assert resolve_tokenizer("auto", client, str(tmp_path / "no-such-model")) is None  # approx


def test_cells_with_failed_requests_are_measured_again(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    config = DoubleConfig(ttft_s=0.01, chunk_interval_s=0.005, fail_every=5)
    with serve(config) as (url, _):
        assert main(sweep_argv(url, out, "--no-plots")) == 1
        assert "incomplete cells" in capsys.readouterr().err
        kept = len(json.loads((out / "results.json").read_text())["cells"])
        assert kept < 4
        config.fail_every = 0
        assert main(sweep_argv(url, out, "--no-plots")) == 0
    assert len(json.loads((out / "results.json").read_text())["cells"]) == 4


def test_api_key_comes_from_the_environment_or_a_secret_file(tmp_path: Path, capsys, monkeypatch) -> None:
    """No --api-key on the command line needed (a flag's value is public in `ps`): DDTREE_API_KEY_FILE."""
    key_file = tmp_path / "api_key"
    key_file.write_text("sk-from-a-secret-file\n")
    monkeypatch.delenv("DDTREE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("DDTREE_API_KEY_FILE", str(key_file))
    seen: list[str | None] = []
    with _answering(500, "text/plain", b"no", seen) as url:
        assert main(["bench", "--url", url, "--timeout", "5", "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert seen and set(seen) == {"Bearer sk-from-a-secret-file"}
    assert "sk-from-a-secret-file" not in capsys.readouterr().err
