"""The streaming client against a real loopback HTTP server (a test double with controlled timing)."""

from __future__ import annotations

import time

import pytest
from ddtree.bench.client import Client, Endpoint, GenerationRequest, run_concurrently
from ddtree.bench.serverinfo import parse_prometheus, probe_server, scrape_accept_length
from ddtree.bench.wire import iter_sse
from ddtree.errors import UserError

from tests.unit.bench_double import DoubleConfig, serve

TTFT = 0.10
INTERVAL = 0.02
PER_CHUNK = 4
MAX_TOKENS = 64


def expected_decode_rate(max_tokens: int = MAX_TOKENS) -> float:
    chunks = -(-max_tokens // PER_CHUNK)
    return (max_tokens - 1) / ((chunks - 1) * INTERVAL)


@pytest.fixture(scope="module")
def double():
    config = DoubleConfig(ttft_s=TTFT, chunk_interval_s=INTERVAL, tokens_per_chunk=PER_CHUNK)
    with serve(config) as (url, server):
        yield url, server


@pytest.mark.parametrize("api", ["generate", "completions", "chat"])
def test_tok_s_and_ttft_match_the_controlled_timing(double, api: str) -> None:
    url, server = double
    client = Client(url, api=api)
    req = GenerationRequest(prompt_ids=list(range(100)), prompt_text="p" * 100, max_tokens=MAX_TOKENS)
    res = client.stream(req)
    assert res.ok, res.error
    assert res.output_tokens == MAX_TOKENS
    sent = server.emissions[-1]
    true_ttft = sent["sent"][0] - sent["received"]
    true_rate = (MAX_TOKENS - 1) / (sent["sent"][-1] - sent["sent"][0])
    # The double keeps its pace (loosely: sleeps overshoot on a loaded machine) ...
    assert true_ttft == pytest.approx(TTFT, rel=0.5)
    assert true_rate == pytest.approx(expected_decode_rate(), rel=0.5)
    # ... and the client measures what was really sent: TTFT never earlier than the first token
    # left the server, the decode rate close to the true one. The bounds leave room for a loaded CI
    # machine and still catch the real mistakes (counting chunks is 4x off, timing from the wrong event).
    assert true_ttft <= (res.ttft_s or 0) <= true_ttft + 0.2
    assert res.decode_tok_s == pytest.approx(true_rate, rel=0.2)
    # One chunk per verify step: counting chunks would give a quarter of the true rate.
    assert res.chunks <= MAX_TOKENS // PER_CHUNK + 3
    if api == "chat":
        assert res.prompt_tokens == 110  # what the server says, template included
    else:
        assert res.prompt_tokens == 100


def test_acceptance_metadata_is_parsed_from_meta_info(double) -> None:
    url, _ = double
    res = Client(url, api="generate").stream(GenerationRequest(prompt_ids=[1, 2, 3], max_tokens=40))
    assert res.ok
    assert res.verify_ct == 10
    assert res.accept_length == pytest.approx(4.0)
    assert res.finish_reason == "length"


def test_requests_really_run_concurrently() -> None:
    """8 requests of ~0.5 s each finish in ~0.5 s together, not 4 s."""
    config = DoubleConfig(ttft_s=0.1, chunk_interval_s=0.1, tokens_per_chunk=1)
    with serve(config) as (url, _):
        client = Client(url, api="generate")
        reqs = [GenerationRequest(prompt_ids=[i], max_tokens=5) for i in range(8)]
        t0 = time.perf_counter()
        results = run_concurrently(client, reqs)
        wall = time.perf_counter() - t0
    assert all(r.ok for r in results), [r.error for r in results]
    assert 0.45 <= wall < 2.0, wall  # serially it would take 4 s
    starts = [r.start for r in results]
    assert max(starts) - min(starts) < 0.1  # released together by the barrier


def test_server_error_is_reported_not_raised() -> None:
    with serve(DoubleConfig(fail_generate=True)) as (url, _):
        res = Client(url, api="generate").stream(GenerationRequest(prompt_ids=[1], max_tokens=4))
    assert not res.ok and "HTTP 500" in (res.error or "")


def test_unreachable_server_is_an_error_result() -> None:
    res = Client("http://127.0.0.1:9", api="generate", timeout=2).stream(
        GenerationRequest(prompt_ids=[1], max_tokens=4)
    )
    assert not res.ok and res.error


def test_probe_reads_version_mode_and_metrics(double) -> None:
    url, _ = double
    client = Client(url)
    info = probe_server(client)
    assert info["kind"] == "sglang"
    assert info["version"] == "0.5.13.post1"
    assert info["mode"] == "dflash"
    assert info["speculative"]["speculative_num_draft_tokens"] == 8
    assert info["model_id"] == "kimi-k2.6"
    assert scrape_accept_length(client) == pytest.approx(3.9)


def test_probe_modes() -> None:
    with serve(DoubleConfig(speculative_algorithm=None)) as (url, _):
        assert probe_server(Client(url))["mode"] == "baseline"
    extra = {"speculative_ddtree_budget": 8}
    with serve(DoubleConfig(extra_server_info=extra)) as (url, _):
        assert probe_server(Client(url))["mode"] == "ddtree"


def test_prometheus_parser() -> None:
    text = (
        '# HELP x\nsglang:spec_accept_length{a="1"} 3.5\n'
        'sglang:spec_accept_length{a="2"} 4.5\nfoo 1e3\nbad line\n'
    )
    parsed = parse_prometheus(text)
    assert parsed["sglang:spec_accept_length"] == [3.5, 4.5]
    assert parsed["foo"] == [1000.0]


def test_sse_parser_joins_multiline_data_and_skips_comments() -> None:
    class Fake:
        def __init__(self, raw: bytes):
            self.lines = raw.splitlines(keepends=True)

        def read1(self, n: int = -1) -> bytes:
            return self.lines.pop(0) if self.lines else b""

    raw = b': keep-alive\n\ndata: {"a":\ndata: 1}\n\ndata:[DONE]\n\n'
    assert list(iter_sse(Fake(raw))) == ['{"a":\n1}', "[DONE]"]  # type: ignore[arg-type]


def test_endpoint_parsing() -> None:
    assert Endpoint.parse("http://h:30000/v1") == Endpoint("http", "h", 30000, "")
    assert Endpoint.parse("localhost:8000").port == 8000
    with pytest.raises(UserError, match="--url"):
        Endpoint.parse("ftp://x")
