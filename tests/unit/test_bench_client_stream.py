"""The streaming client's per-event checks: as strict as before, without a Python walk over the cumulative
`output_ids` that SGLang's native stream repeats in every event (O(n^2) a request, the cap at concurrency 32
on the H200). Structural tests (calls counted), no timing."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from ddtree import jsonshape, jsontext
from ddtree.bench.client import Client, GenerationRequest
from ddtree.bench.stream import GENERATE_EVENT, RequestResult, StreamTracker
from ddtree.jsonshape import NONE, problem
from ddtree.jsontext import JsonProblem, parse

from benchmarks.bench_client_stream import FakeServer, sglang_events
from tests.unit.bench_double import serve_handler


@pytest.fixture
def depth_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every value jsontext.parse hands to its depth walk."""
    calls: list[Any] = []
    real = jsontext.depth

    def counting(value: Any) -> int:
        calls.append(value)
        return real(value)

    monkeypatch.setattr(jsontext, "depth", counting)
    return calls


@pytest.fixture
def problem_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every call of jsonshape.problem, the recursive ones included (they go through the module name)."""
    calls: list[Any] = []
    real = jsonshape.problem

    def counting(value: Any, schema: Any, where: str = "") -> str | None:
        calls.append(schema)
        return real(value, schema, where)

    monkeypatch.setattr(jsonshape, "problem", counting)
    return calls


def test_a_long_flat_event_is_parsed_without_the_depth_walk(depth_calls: list[Any]) -> None:
    event = {"output_ids": list(range(10_000)), "meta_info": {"completion_tokens": 10_000}}
    assert parse(json.dumps(event)) == event
    assert depth_calls == []


@pytest.mark.parametrize("levels", [64, 65])
def test_the_depth_limit_is_unchanged(levels: int, depth_calls: list[Any]) -> None:
    text = '{"meta_info": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"
    if levels > jsontext.MAX_DEPTH:
        with pytest.raises(JsonProblem, match=r"^JSON nested deeper than 64 levels$"):
            parse(text)
        assert len(depth_calls) == 1  # more brackets than the limit: the walk decides
    else:
        value = parse(text)
        assert depth_calls == []  # 64 brackets cannot nest deeper than 64
        assert jsontext.depth(value) == 64


def test_brackets_inside_strings_only_cost_the_walk(depth_calls: list[Any]) -> None:
    value = {"text": "[{" * 100}
    assert parse(json.dumps(value)) == value
    assert len(depth_calls) == 1


def test_a_list_of_token_ids_is_checked_in_one_call(problem_calls: list[Any]) -> None:
    assert jsonshape.problem(list(range(10_000)), [int], "event.output_ids") is None
    assert len(problem_calls) == 1


def test_a_whole_generate_event_costs_a_fixed_number_of_calls(problem_calls: list[Any]) -> None:
    short, long = (
        {"output_ids": list(range(n)), "meta_info": {"completion_tokens": n, "finish_reason": None}}
        for n in (1, 5_000)
    )
    assert jsonshape.problem(short, GENERATE_EVENT, "event") is None
    calls_short = len(problem_calls)
    assert jsonshape.problem(long, GENERATE_EVENT, "event") is None
    assert len(problem_calls) == 2 * calls_short


class Level(enum.IntEnum):
    LOW = 1


@pytest.mark.parametrize(
    ("items", "schema", "expected"),
    [
        ([1, 2, "x", 4], [int], "ids[2] is a string, expected an integer"),
        ([1, True], [int], "ids[1] is a boolean, expected an integer"),
        ([1, 2.5], [int], "ids[1] is a number, expected an integer"),
        ([1, None], [int], "ids[1] is null, expected an integer"),
        ([1, [2]], [int], "ids[1] is a list, expected an integer"),
        ([1, 2.5, False], [float], "ids[2] is a boolean, expected a number"),
        (["a", 1], [str], "ids[1] is a number, expected a string"),
        ([None, 0], [NONE], "ids[1] is a number, expected null"),
        ([Level.LOW, 2], [int], None),  # an int subclass takes the walk and fits as before
        ([1, 2.5], [float], None),
        ([], [int], None),
        ([1, None], [(int, NONE)], None),
    ],
)
def test_list_checks_name_the_same_misfit(items: list[Any], schema: Any, expected: str | None) -> None:
    assert problem(items, schema, "ids") == expected


def test_scalar_fast_path_keeps_the_messages() -> None:
    assert problem(True, int, "n") == "n is a boolean, expected an integer"
    assert problem(True, (int, NONE), "n") == "n is a boolean, expected an integer or null"
    assert problem(3, float, "x") is None
    assert problem(False, float, "x") == "x is a boolean, expected a number"
    assert problem({}, {"a": jsonshape.Required(int)}, "o") == "o.a is missing"
    assert problem({}, {"a": jsonshape.Required(int)}) == "a is missing"


def _stream_handler(events: list[str]) -> type[BaseHTTPRequestHandler]:
    class Stream(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for data in [*events, "[DONE]"]:
                raw = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

    return Stream


def _cumulative(ids: Iterator[list[Any]]) -> list[str]:
    return [json.dumps({"output_ids": each, "meta_info": {"completion_tokens": len(each)}}) for each in ids]


def _stream(events: list[str]) -> RequestResult:
    with serve_handler(_stream_handler(events)) as url:
        return Client(url, api="generate", timeout=10).stream(GenerationRequest(prompt_ids=[1], max_tokens=3))


def test_a_bad_id_in_the_old_part_of_a_cumulative_list_is_refused() -> None:
    """A server that rewrites an id it already sent is caught: every event's whole list is checked (the
    words are jsonshape's for a misfit among alternatives, `[int]` or null, as before)."""
    result = _stream(_cumulative(iter([[5], [5, 6], ["x", 6, 7]])))
    assert not result.ok
    assert result.error == (
        "an event of another shape in the stream (event.output_ids is a list, expected a list or null): "
        + repr(json.dumps({"output_ids": ["x", 6, 7], "meta_info": {"completion_tokens": 3}})[:120])
    )


def test_an_event_nested_too_deep_is_refused() -> None:
    deep = '{"output_ids": [1], "extra": ' + "[" * 70 + "]" * 70 + "}"
    result = _stream([deep])
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("JSON nested deeper than 64 levels in the stream")


def test_the_benchmark_events_fit_the_schema_and_count_one_token_each() -> None:
    chunks = sglang_events(8, 3)
    events = [json.loads(c.split(b"data: ", 1)[1].rsplit(b"\n\n", 1)[0]) for c in chunks[:-2]]
    assert [len(e["output_ids"]) for e in events] == [3, 6, 8]
    tracker = StreamTracker("generate", RequestResult(ok=False))
    for now, event in enumerate(events):
        assert problem(event, GENERATE_EVENT, "event") is None
        tracker.feed(event, float(now))
    assert (tracker.result.output_tokens, tracker.result.finish_reason) == (8, "length")


def test_the_benchmark_server_streams_to_the_real_client() -> None:
    server = FakeServer(per_event=1)
    try:
        result = Client(server.url, api="generate", timeout=30).stream(
            GenerationRequest(prompt_ids=[1, 2], max_tokens=16)
        )
    finally:
        server.close()
    assert result.ok, result.error
    assert (result.output_tokens, result.chunks, result.prompt_tokens) == (16, 16, 60)
    assert result.first_token_at is not None and result.last_token_at is not None
    assert result.last_token_at >= result.first_token_at
