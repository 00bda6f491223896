"""The live self-check against a stand-in SGLang server on 127.0.0.1.

The real server needs eight GPUs and 600 GB of weights, so these tests start `FakeSGLang`: a stdlib
HTTP server that imitates SGLang 0.5.13.post1's routes as read from its http_server.py and
tokenizer_manager.py (/health, /server_info and the deprecated /get_server_info, streaming /generate
whose chunks carry cumulative meta_info.completion_tokens and, at the end, spec_accept_length and
spec_verify_ct), with controlled token timing. The HTTP client, timing and verdict code are real.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from ddtree.errors import UserError
from ddtree.selfcheck import live

from tests.unit.bench_double import send_body, serve_handler

REPO = Path(__file__).resolve().parents[2]
GOOD_INFO = {
    "version": "0.5.13.post1",
    "speculative_algorithm": "DDTREE",
    "speculative_num_draft_tokens": 8,
    "speculative_ddtree_budget": 8,
    "speculative_ddtree_topk": 4,
    "speculative_draft_window_size": 2048,
    "tp_size": 8,
}


@dataclass
class Behaviour:
    """What the stand-in server does; tests change one field at a time."""

    health_status: int = 200
    server_info: dict[str, Any] | None = field(default_factory=lambda: dict(GOOD_INFO))
    new_route: bool = True  # False: only the deprecated /get_server_info answers
    tok_s: float = 170.0
    accept_length: float = 3.8
    spec_meta: bool = True
    generate_status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)


class FakeSGLang(BaseHTTPRequestHandler):
    """Stand-in for SGLang's HTTP server (see the module docstring); `behaviour` is set per server."""

    behaviour: Behaviour

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _json(self, status: int, payload: Any) -> None:
        send_body(self, status, "application/json", json.dumps(payload).encode())

    def do_GET(self) -> None:
        b = self.behaviour
        if self.path == "/health":
            self.send_response(b.health_status)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif (self.path == "/server_info" and b.new_route) or self.path == "/get_server_info":
            if b.server_info is None:
                self._json(404, {"detail": "Not Found"})
            else:
                self._json(200, {**b.server_info, "internal_states": [{}]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        b = self.behaviour
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        b.requests.append(body)
        if self.path != "/generate" or b.generate_status != 200:
            self._json(b.generate_status if self.path == "/generate" else 404, {"error": "boom"})
            return
        total = body["sampling_params"]["max_new_tokens"]
        step = max(1, round(b.accept_length))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        done = 0
        verify = 0
        while done < total:
            if done:
                time.sleep(step / b.tok_s)
            done = min(total, done + step)
            verify += 1
            meta: dict[str, Any] = {"prompt_tokens": 40, "completion_tokens": done}
            if done == total:
                meta["finish_reason"] = {"type": "length", "length": total}
                if b.spec_meta:
                    meta["spec_verify_ct"] = verify
                    meta["spec_accept_length"] = b.accept_length
            event = {"text": "x" * done, "output_ids": list(range(done)), "meta_info": meta}
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


@contextmanager
def fake_server(behaviour: Behaviour) -> Iterator[str]:
    handler = type("Handler", (FakeSGLang,), {"behaviour": behaviour})
    with serve_handler(handler) as url:
        yield url


@pytest.fixture
def expectation() -> live.Expectation:
    return live.load_expectation(REPO / "env" / "reference" / "results.yaml")


def check(behaviour: Behaviour, expectation: live.Expectation) -> live.LiveReport:
    with fake_server(behaviour) as url:
        return live.run_live(url, expectation, max_tokens=64, timeout=30)


def statuses(report: live.LiveReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def test_reference_expectation(expectation: live.Expectation) -> None:
    """The real env/reference: DDTree 150-170 tok/s, acceptance 3.5-4.1, the measured settings."""
    assert (expectation.min_tok_s, expectation.max_tok_s) == (150, 170)
    assert (expectation.min_accept, expectation.max_accept) == (3.5, 4.1)
    assert expectation.settings["speculative-algorithm"] == "DDTREE"
    assert expectation.settings["speculative-ddtree-topk"] == 4


def test_reproduced(expectation: live.Expectation) -> None:
    behaviour = Behaviour()
    report = check(behaviour, expectation)
    assert report.verdict == live.REPRODUCED and report.exit_code == 0, live.render_table(report)
    assert set(statuses(report).values()) == {"pass"}
    assert 140 < report.figures["decode_tok_s"] < 260
    assert report.figures["accept_length"] == 3.8 and report.figures["verify_ct"] == 16
    # one warm-up, three measured requests (median and spread), all greedy through /generate
    assert [r["sampling_params"]["max_new_tokens"] for r in behaviour.requests] == [16, 64, 64, 64]
    assert report.figures["runs"] == 3 and report.figures["spread"]["decode_tok_s"]["n"] == 3
    assert report.greedy["output_sha256"] == hashlib.sha256(b"x" * 64).hexdigest()
    assert all(r["sampling_params"]["temperature"] == 0.0 and r["stream"] for r in behaviour.requests)
    assert "verdict: REPRODUCED" in live.render_table(report)


def test_deprecated_route_fallback(expectation: live.Expectation) -> None:
    assert check(Behaviour(new_route=False), expectation).verdict == live.REPRODUCED


def test_degraded_slow(expectation: live.Expectation) -> None:
    report = check(Behaviour(tok_s=60.0), expectation)
    assert report.verdict == live.DEGRADED and report.exit_code == 1
    assert statuses(report)["decode_tok_s"] == "warn"
    assert "is below reference 150-170, tolerance 10%" in report.checks[4].detail


def test_degraded_low_acceptance(expectation: live.Expectation) -> None:
    report = check(Behaviour(accept_length=2.0, tok_s=400.0), expectation)
    assert report.verdict == live.DEGRADED
    assert statuses(report)["accept_length"] == "warn" and statuses(report)["decode_tok_s"] == "pass"


def test_failed_not_ddtree(expectation: live.Expectation) -> None:
    info = {**GOOD_INFO, "speculative_algorithm": "DFLASH"}
    report = check(Behaviour(server_info=info), expectation)
    assert report.verdict == live.FAILED and report.exit_code == 1
    detail = next(c.detail for c in report.checks if c.name == "settings")
    assert "speculative_algorithm='DFLASH', expected 'DDTREE'" in detail
    assert statuses(report)["generation"] == "skip"


def test_failed_wrong_budget(expectation: live.Expectation) -> None:
    report = check(Behaviour(server_info={**GOOD_INFO, "speculative_ddtree_budget": 16}), expectation)
    assert report.verdict == live.FAILED
    assert "speculative_ddtree_budget=16, expected 8" in report.checks[2].detail


def test_failed_unpatched_server(expectation: live.Expectation) -> None:
    info = {k: v for k, v in GOOD_INFO.items() if "ddtree" not in k}
    report = check(Behaviour(server_info=info), expectation)
    assert report.verdict == live.FAILED
    assert "speculative_ddtree_budget absent (is the DDTree patch set applied?)" in report.checks[2].detail


def test_failed_unhealthy(expectation: live.Expectation) -> None:
    report = check(Behaviour(health_status=503), expectation)
    assert report.verdict == live.FAILED
    assert report.checks[0].detail.startswith("GET /health -> HTTP 503")


def test_failed_no_spec_metadata(expectation: live.Expectation) -> None:
    report = check(Behaviour(spec_meta=False), expectation)
    assert report.verdict == live.FAILED
    assert "speculative decoding did not run" in report.checks[3].detail


def test_failed_generate_error(expectation: live.Expectation) -> None:
    report = check(Behaviour(generate_status=500), expectation)
    assert report.verdict == live.FAILED
    assert "POST /generate failed: HTTP 500" in report.checks[3].detail


def test_could_not_run(expectation: live.Expectation) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    report = live.run_live(f"http://127.0.0.1:{port}", expectation, timeout=5)
    assert report.verdict == live.COULD_NOT_RUN and report.exit_code == 2
    assert "does not answer" in report.checks[0].detail
    assert json.loads(json.dumps(report.to_json()))["verdict"] == "COULD NOT RUN"


def test_reference_without_figure(tmp_path: Path) -> None:
    path = tmp_path / "results.yaml"
    path.write_text("schema: 1\nresults:\n  - {id: other, algorithm: none, output_tokens_per_s: 98}\n")
    with pytest.raises(UserError) as info:
        live.load_expectation(path)
    assert info.value.exit_code == 2 and "no result 'ddtree-single'" in str(info.value)


def _cli(capsys, *args: str) -> tuple[int, str]:
    from ddtree import cli

    code = cli.main(["selfcheck", *args, "--receipt", ""])
    return code, capsys.readouterr().out


def test_cli_live_json_reproduced(capsys) -> None:
    with fake_server(Behaviour()) as url:
        code, out = _cli(capsys, "--live", url, "--json", "--max-tokens", "48")
    document = json.loads(out)
    assert code == 0 and document["verdict"] == "REPRODUCED" and document["exit_code"] == 0
    names = [c["name"] for c in document["checks"]]
    assert names == [
        "live:health",
        "live:server_info",
        "live:settings",
        "live:generation",
        "live:decode_tok_s",
        "live:accept_length",
        "live:greedy_output",
        "live:verdict",
    ]
    assert document["figures"]["verify_ct"] == 12
    assert document["checks"][2]["data"]["speculative_ddtree_topk"] == 4


def test_cli_live_table_degraded(capsys) -> None:
    with fake_server(Behaviour(tok_s=50.0)) as url:
        code, out = _cli(capsys, "--live", url, "--max-tokens", "32")
    assert code == 1
    assert "DEGRADED: " in out and out.rstrip().endswith("verdict: DEGRADED")


def test_cli_live_unreachable_exit_2(capsys) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out = _cli(capsys, "--live", f"http://127.0.0.1:{port}")
    assert code == 2 and out.rstrip().endswith("verdict: COULD NOT RUN")


def test_cli_live_and_offline_exclusive(capsys) -> None:
    from ddtree import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["selfcheck", "--offline", "--live", "http://127.0.0.1:1"])
    assert info.value.code == 2


def test_block_size_kept_apart(expectation: live.Expectation) -> None:
    """A DDTree integration may keep B in its own field and set num_draft_tokens to budget + 1."""
    info = {**GOOD_INFO, "speculative_num_draft_tokens": 9, "speculative_dflash_block_size": 8}
    report = check(Behaviour(server_info=info), expectation)
    assert report.verdict == live.REPRODUCED, live.render_table(report)
    info = {**GOOD_INFO, "speculative_num_draft_tokens": 9}
    report = check(Behaviour(server_info=info), expectation)
    assert report.verdict == live.FAILED
    assert "speculative_num_draft_tokens=9, expected 8" in report.checks[2].detail
