"""Streaming HTTP client for SGLang and OpenAI-compatible servers, standard library only.

Three request kinds share one timing model:
- `generate`: SGLang's native /generate with `input_ids`; its stream carries `meta_info` with
  `completion_tokens`, `spec_verify_ct` and `spec_accept_length`, the only per-request source of the
  acceptance length on 0.5.13.post1 (its OpenAI endpoints refuse `return_meta_info` when streaming).
- `completions`: /v1/completions (token ids or text), usage in every chunk when the server honours
  `stream_options.continuous_usage_stats` (SGLang and vLLM do), else in the final chunk.
- `chat`: /v1/chat/completions; the chat template adds tokens, so the context is what the server reports.

A server is input like any other: every answer is parsed with a depth limit (ddtree.jsontext) and checked
against the shape the code reads (ddtree.jsonshape) before a field is touched, and a request's timeout
bounds the whole exchange (a watchdog closes the socket), so a stream of keep-alives cannot outlast it.
The reading is bench.wire's, the stream's meaning bench.stream's.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddtree.bench.stream import GENERATE_EVENT, OPENAI_EVENT, RequestResult, StreamTracker
from ddtree.bench.wire import Deadline, iter_sse, read_body, snippet
from ddtree.errors import UserError
from ddtree.jsonshape import ANY, NONE, problem
from ddtree.jsontext import JsonProblem, parse

API_KINDS = ("generate", "completions", "chat")
META_INFO = ({"completion_tokens": (int, NONE), "spec_accept_length": (float, NONE)}, NONE)
GENERATE_REPLY = {"text": (str, NONE), "meta_info": META_INFO}
OPENAI_REPLY = {
    "choices": (
        [
            {
                "text": (str, NONE),
                "message": ({"content": (str, NONE), "reasoning_content": (str, NONE)}, NONE),
                "meta_info": META_INFO,
            }
        ],
        NONE,
    ),
    "usage": ({"completion_tokens": (int, NONE)}, NONE),
}


@dataclass
class GenerationRequest:
    """One request: the prompt as token ids (exact context) and/or text, and the sampling settings."""

    prompt_ids: list[int] | None = None
    prompt_text: str | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    ignore_eos: bool = True
    model: str = "default"
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        hint = "give e.g. http://127.0.0.1:30000"
        try:
            parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
            port = parsed.port  # raises on a port that is not a number in 0..65535
        except ValueError as exc:
            raise UserError(f"--url {url!r} is not a valid URL ({exc}); {hint}") from exc
        if parsed.username is not None or parsed.password is not None:
            shown = parsed._replace(netloc=f"****@{parsed.netloc.rpartition('@')[2]}").geturl()
            raise UserError(
                f"--url {shown} holds a user name or password, which this client never sends (and would "
                "print): give the server's API key with DDTREE_API_KEY or --api-key instead"
            )
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise UserError(f"--url {url!r} is not an http(s) URL; {hint}")
        if port == 0:
            raise UserError(f"--url {url!r} has port 0; {hint}")
        if any(c.isspace() or ord(c) < 32 for c in url):
            raise UserError(f"--url {url!r} holds spaces or control characters; {hint}")
        port = port or (443 if parsed.scheme == "https" else 80)
        base = parsed.path.rstrip("/")
        if base.endswith("/v1"):  # people paste the OpenAI base URL; the native routes live above it
            base = base[: -len("/v1")]
        return cls(parsed.scheme, parsed.hostname, port, base)

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def path(self, route: str) -> str:
        return f"{self.base_path}{route}"


class Client:
    """Talks to one server; safe to share between threads (one connection per request)."""

    def __init__(self, url: str, api: str = "generate", timeout: float = 600.0, api_key: str | None = None):
        if api not in API_KINDS:
            raise UserError(f"--api {api!r} is not one of {', '.join(API_KINDS)}")
        self.endpoint = Endpoint.parse(url)
        self.url = url
        self.api = api
        self.timeout = timeout
        self.api_key = api_key

    def at(self, url: str) -> Client:
        """A client for another server with this one's dialect, timeout and API key."""
        return Client(url, api=self.api, timeout=self.timeout, api_key=self.api_key)

    # -- plain JSON calls -------------------------------------------------------------------
    def _headers(self, stream: bool = False) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if stream else "*/*"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _exchange(self, method: str, route: str, body: str | None, timeout: float) -> tuple[int, str]:
        """(status, body) of one request, all of it within `timeout`. Connection problems, a timeout and
        a body over MAX_BODY_BYTES give status 0 and the error text. The body never holds the API key.
        No request outlasts the client's timeout (--timeout), whatever `timeout` its caller asks for."""
        status, body = self._exchange_raw(method, route, body, min(timeout, self.timeout))
        return status, self.redact(body)

    def _exchange_raw(self, method: str, route: str, body: str | None, timeout: float) -> tuple[int, str]:
        conn = self.endpoint.connect(timeout)
        with Deadline(conn, timeout) as deadline:
            try:
                conn.request(method, self.endpoint.path(route), body, headers=self._headers())
                resp = conn.getresponse()
                raw = read_body(resp, lambda: deadline.expired)
            except (OSError, http.client.HTTPException) as exc:
                return 0, deadline.explain(exc)
            finally:
                conn.close()
        if deadline.expired:
            return 0, deadline.explain(None)
        return resp.status, raw.decode("utf-8", "replace")

    def get_text(self, route: str, timeout: float = 10.0) -> tuple[int, str]:
        """GET a route; (status, body). Connection problems give status 0 and the error text."""
        return self._exchange("GET", route, None, timeout)

    def post_text(self, route: str, payload: dict[str, Any], timeout: float) -> tuple[int, str]:
        """POST JSON; (status, body), never raising: for callers that judge every answer themselves."""
        return self._exchange("POST", route, json.dumps(payload), timeout)

    def redact(self, text: str) -> str:
        """`text` without the API key: a hostile or misconfigured server may echo the request's headers."""
        return text.replace(self.api_key, "****") if self.api_key else text

    def get_json(self, route: str, timeout: float = 10.0, schema: Any = ANY) -> Any | None:
        return self.get_json_answer(route, timeout, schema)[0]

    def get_json_answer(self, route: str, timeout: float = 10.0, schema: Any = ANY) -> tuple[Any | None, str]:
        """(decoded JSON or None, what the server answered in a few words): messages say what came back
        (no connection, HTTP 500 and its body, a page that is not JSON, JSON of another shape than
        `schema`), not only that nothing useful did."""
        status, body = self.get_text(route, timeout)
        if status == 0:
            return None, f"GET {route}: no answer ({body})"
        if status != 200:
            return None, f"GET {route} -> HTTP {status}: {snippet(body)}"
        try:
            value = parse(body)
        except JsonProblem as exc:
            return None, f"GET {route} -> HTTP 200 but {exc.brief}: {snippet(body)}"
        if isinstance(schema, dict) and not isinstance(value, dict):
            return None, f"GET {route} -> HTTP 200 JSON {type(value).__name__}, not an object"
        misfit = problem(value, schema)
        if misfit:
            return None, f"GET {route} -> HTTP 200 JSON of another shape ({misfit})"
        return value, f"GET {route} -> HTTP 200 JSON"

    def post_json(
        self, route: str, payload: dict[str, Any], timeout: float | None = None, schema: Any = ANY
    ) -> Any:
        """POST JSON and decode the JSON answer. No answer, a non-200 answer, a body that is not JSON or
        not of `schema`'s shape raises RuntimeError naming the route and what came back."""
        status, body = self.post_text(route, payload, timeout or self.timeout)
        if status == 0:
            raise RuntimeError(f"POST {route}: no answer ({body})")
        if status != 200:
            raise RuntimeError(f"POST {route} -> HTTP {status}: {snippet(body, 300)}")
        try:
            value = parse(body)
        except JsonProblem as exc:
            raise RuntimeError(f"POST {route} -> HTTP 200 but {exc.brief}: {snippet(body)}") from exc
        misfit = problem(value, schema)
        if misfit:
            raise RuntimeError(f"POST {route} -> HTTP 200 JSON of another shape ({misfit})")
        return value

    # -- streaming generation ---------------------------------------------------------------
    def build_payload(self, req: GenerationRequest, stream: bool = True) -> tuple[str, dict[str, Any]]:
        """The route and JSON body for `req` in this client's API dialect."""
        if req.prompt_ids is None and req.prompt_text is None:
            raise ValueError("a request needs prompt_ids or prompt_text")
        if self.api == "generate":
            body: dict[str, Any] = {
                "sampling_params": {
                    "max_new_tokens": req.max_tokens,
                    "temperature": req.temperature,
                    "ignore_eos": req.ignore_eos,
                },
                "stream": stream,
            }
            if req.prompt_ids is not None:
                body["input_ids"] = list(req.prompt_ids)
            else:
                body["text"] = req.prompt_text
            route = "/generate"
        else:
            body = {
                "model": req.model,
                "max_tokens": req.max_tokens,
                "temperature": req.temperature,
                "stream": stream,
                "ignore_eos": req.ignore_eos,
            }
            if stream:
                body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
            if self.api == "completions":
                body["prompt"] = list(req.prompt_ids) if req.prompt_ids is not None else req.prompt_text
                route = "/v1/completions"
            else:
                if req.prompt_text is None:
                    raise ValueError("the chat API needs prompt_text")
                body["messages"] = [{"role": "user", "content": req.prompt_text}]
                route = "/v1/chat/completions"
        body.update(req.extra_body)
        return route, body

    def stream(self, req: GenerationRequest) -> RequestResult:
        """Send one streaming request and time every chunk. Never raises for server or network errors."""
        route, body = self.build_payload(req, stream=True)
        result = RequestResult(ok=False, start=time.perf_counter())
        conn = self.endpoint.connect(self.timeout)
        deadline = Deadline(conn, self.timeout)
        schema = GENERATE_EVENT if self.api == "generate" else OPENAI_EVENT
        try:
            deadline.start()
            conn.request("POST", self.endpoint.path(route), json.dumps(body), self._headers(stream=True))
            resp = conn.getresponse()
            if resp.status != 200:
                result.error = f"HTTP {resp.status}: {resp.read(4096).decode('utf-8', 'replace')[:300]}"
                return result
            tracker = StreamTracker(self.api, result)
            ended = False
            for data in iter_sse(resp, lambda: deadline.expired):
                now = time.perf_counter()
                if data == "[DONE]":
                    ended = True
                    break
                try:
                    event = parse(data)
                except JsonProblem as exc:
                    result.error = f"{exc} in the stream: {data[:120]!r}"
                    return result
                if isinstance(event, dict) and event.get("error"):
                    result.error = f"server error in stream: {json.dumps(event['error'])[:300]}"
                    return result
                misfit = problem(event, schema, "event")
                if misfit:
                    result.error = f"an event of another shape in the stream ({misfit}): {data[:120]!r}"
                    return result
                tracker.feed(event, now)
            if deadline.expired:
                result.error = deadline.explain(None)
                return result
            tracker.finish()
            if not ended and result.finish_reason is None:
                # Seen behind SGLang's router: a replica that dies mid-stream leaves a well-formed but
                # short response; without [DONE] or a finish reason it is a failure, not a short answer.
                result.error = (
                    f"the stream ended early after {result.output_tokens} token(s), "
                    "without [DONE] or a finish reason (the server or a proxy in between dropped it)"
                )
                return result
            result.ok = result.output_tokens > 0
            if not result.ok:
                result.error = "the stream ended without any output token"
        except (OSError, http.client.HTTPException) as exc:
            result.error = deadline.explain(exc)
        finally:
            deadline.cancel()
            result.end = time.perf_counter()
            conn.close()
            if result.error:
                result.error = self.redact(result.error)
        return result

    def complete(self, req: GenerationRequest) -> dict[str, Any]:
        """A non-streaming request; returns the server's JSON answer (used by HumanEval)."""
        route, body = self.build_payload(req, stream=False)
        return self.post_json(route, body, schema=GENERATE_REPLY if self.api == "generate" else OPENAI_REPLY)


def run_concurrently(client: Client, requests: Sequence[GenerationRequest]) -> list[RequestResult]:
    """Send all requests at once (one thread each, released together) and wait for all of them."""
    results: list[RequestResult | None] = [None] * len(requests)
    barrier = threading.Barrier(len(requests)) if requests else None

    def work(index: int) -> None:
        assert barrier is not None
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=60)
        results[index] = client.stream(requests[index])

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [r if r is not None else RequestResult(ok=False, error="worker died") for r in results]
