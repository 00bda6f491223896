"""A TEST DOUBLE of an SGLang server: real HTTP on 127.0.0.1, fake model.

Why a double: the real server needs GPUs and the 595 GB Kimi K2.6 weights, which cannot run here.
What is real: the sockets, HTTP/1.1 chunked transfer, server-sent events, the JSON shapes of SGLang
0.5.13.post1's /generate stream (meta_info with completion_tokens, spec_verify_ct, spec_accept_length),
its OpenAI /v1/completions and /v1/chat/completions streams (usage per chunk with
continuous_usage_stats), /server_info, /model_info, /v1/models, /metrics and /v1/tokenize.
What is fake: the tokens. Timing is controlled: the first chunk comes `ttft_s` after the request,
then one chunk every `chunk_interval_s`, each carrying `tokens_per_chunk` tokens (one verify step of
speculative decoding: acceptance length = tokens_per_chunk). The toy tokenizer is one token per character.
`server.stop()` acts like a killed replica: streams in flight are cut off mid-response (no last chunk),
the listening socket closes, and new connections are refused.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def send_body(handler: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes) -> None:
    """One whole response with a Content-Length (the stand-in servers' non-streaming answers)."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serve_handler(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1 (a free port) in a thread; yields the base URL, shuts down after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class DoubleConfig:
    ttft_s: float = 0.05
    chunk_interval_s: float = 0.01
    tokens_per_chunk: int = 4
    speculative_algorithm: str | None = "DFLASH"
    version: str = "0.5.13.post1"
    metrics_accept_length: float | None = 3.9
    responder: Callable[[str], str] | None = None  # non-streaming answers (HumanEval)
    fail_generate: bool = False
    fail_every: int = 0  # when > 0, every n-th /generate request answers HTTP 503
    fail_tokenize: bool = False  # like 0.5.13.post1 when the tokenizer has no model_max_length
    extra_server_info: dict[str, Any] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _DoubleServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def parse_request(self) -> bool:
        """A stopped double answers nothing, also on a kept-alive connection (a router pools them)."""
        if self.server.stopped.is_set():
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return False
        return super().parse_request()

    # -- helpers -------------------------------------------------------------------------
    def _json(self, payload: Any, status: int = 200) -> None:
        send_body(self, status, "application/json", json.dumps(payload).encode())

    def _text(self, text: str) -> None:
        send_body(self, 200, "text/plain", text.encode())

    def _sse(self, events: Iterator[Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            if self.server.stopped.is_set():  # killed: drop the connection without ending the response
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            data = event if isinstance(event, str) else json.dumps(event)
            raw = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _timed_chunks(self, max_tokens: int) -> Iterator[tuple[int, int]]:
        """(tokens in this chunk, tokens so far), paced by the config.

        Each chunk's real send time is kept in server.emissions (one record per request): on a loaded
        machine sleeps overshoot, so tests compare the client's figures with what was really sent."""
        cfg = self.server.config
        record = {"received": self.received, "sent": [], "tokens": []}
        self.server.emissions.append(record)
        time.sleep(cfg.ttft_s)
        done = 0
        while done < max_tokens:
            step = min(cfg.tokens_per_chunk, max_tokens - done)
            done += step
            yield step, done
            record["sent"].append(time.perf_counter())
            record["tokens"].append(done)
            if done < max_tokens:
                time.sleep(cfg.chunk_interval_s)

    # -- routes --------------------------------------------------------------------------
    def do_GET(self) -> None:
        cfg = self.server.config
        self.server.authorizations.append(self.headers.get("Authorization"))
        if self.path == "/health":  # SGLang's liveness route (selfcheck --live asks it first)
            send_body(self, 200, "text/plain", b"")
        elif self.path in ("/server_info", "/get_server_info"):
            self._json(
                {
                    "version": cfg.version,
                    "model_path": "/models/Kimi-K2.6",
                    "tp_size": 8,
                    "speculative_algorithm": cfg.speculative_algorithm,
                    "speculative_num_draft_tokens": 8 if cfg.speculative_algorithm else None,
                    "internal_states": [{"avg_spec_accept_length": cfg.metrics_accept_length}],
                    **cfg.extra_server_info,
                }
            )
        elif self.path == "/model_info":
            self._json({"model_path": "/models/Kimi-K2.6", "tokenizer_path": None, "model_type": "kimi_k25"})
        elif self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": "kimi-k2.6", "object": "model"}]})
        elif self.path == "/metrics":
            value = cfg.metrics_accept_length
            lines = [
                "# HELP sglang:spec_accept_length Mean acceptance length",
                "# TYPE sglang:spec_accept_length gauge",
            ]
            if value is not None:
                lines.append(f'sglang:spec_accept_length{{model_name="kimi",engine_type="unified"}} {value}')
            self._text("\n".join(lines) + "\n")
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self) -> None:
        self.received = time.perf_counter()
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests_seen.append((self.path, body))
        self.server.authorizations.append(self.headers.get("Authorization"))
        if self.path == "/generate":
            self._generate(body)
        elif self.path in ("/v1/completions", "/v1/chat/completions"):
            self._openai(body, chat=self.path.endswith("chat/completions"))
        elif self.path == "/v1/tokenize" and self.server.config.fail_tokenize:
            self._json({"detail": "Integer exceeds 64-bit range"}, 500)
        elif self.path == "/v1/tokenize":
            tokens = [ord(ch) for ch in body.get("prompt", "")]
            self._json({"tokens": tokens, "count": len(tokens), "max_model_len": 262144})
        elif self.path == "/v1/detokenize":
            self._json({"text": "".join(chr(t) for t in body.get("tokens", []))})
        else:
            self._json({"error": "not found"}, 404)

    def _generate(self, body: dict[str, Any]) -> None:
        cfg = self.server.config
        if cfg.fail_generate:
            self._json({"error": {"message": "boom"}}, 500)
            return
        generates = sum(1 for path, _ in self.server.requests_seen if path == "/generate")
        if cfg.fail_every and generates % cfg.fail_every == 0:
            self._json({"error": {"message": "overloaded"}}, 503)
            return
        prompt_tokens = len(body["input_ids"]) if "input_ids" in body else len(body.get("text", ""))
        max_tokens = int(body["sampling_params"]["max_new_tokens"])

        def events() -> Iterator[Any]:
            for verify, (_, done) in enumerate(self._timed_chunks(max_tokens), start=1):
                meta: dict[str, Any] = {
                    "id": "req",
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": done,
                    "finish_reason": {"type": "length"} if done == max_tokens else None,
                }
                if done == max_tokens and cfg.speculative_algorithm:
                    # Like 0.5.13.post1: spec metrics only on the finished chunk.
                    meta.update(spec_verify_ct=verify, spec_accept_length=done / verify)
                yield {"text": "x" * done, "output_ids": list(range(done)), "meta_info": meta}
            yield "[DONE]"

        if body.get("stream"):
            self._sse(events())
        else:  # like SGLang: without "stream" one JSON object, the finished state
            self._json([e for e in events() if isinstance(e, dict)][-1])

    def _openai(self, body: dict[str, Any], chat: bool) -> None:
        cfg = self.server.config
        if chat:
            prompt_text = " ".join(m["content"] for m in body["messages"])
            prompt_tokens = len(prompt_text) + 10  # the chat template's tokens
        else:
            prompt = body["prompt"]
            prompt_text = prompt if isinstance(prompt, str) else ""
            prompt_tokens = len(prompt)
        max_tokens = int(body.get("max_tokens", 16))
        if not body.get("stream"):
            text = cfg.responder(prompt_text) if cfg.responder else "ok"
            choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            if body.get("return_meta_info"):
                choice["meta_info"] = {
                    "spec_accept_length": 3.7,
                    "spec_verify_ct": 10,
                    "completion_tokens": 37,
                }
            self._json(
                {
                    "choices": [choice],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 37, "total_tokens": 0},
                }
            )
            return
        continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))

        def events() -> Iterator[Any]:
            if chat:
                yield {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
            for step, done in self._timed_chunks(max_tokens):
                piece = "y" * step
                choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                if done == max_tokens:
                    choice["finish_reason"] = "length"
                event: dict[str, Any] = {"choices": [choice]}
                if continuous:
                    event["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": done}
                yield event
            yield {"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens}}
            yield "[DONE]"

        self._sse(events())


class _DoubleServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # 64 concurrent connections must not be refused
    config: DoubleConfig
    requests_seen: list[tuple[str, dict[str, Any]]]
    authorizations: list[str | None]  # each request's Authorization header (None when absent)
    emissions: list[dict[str, Any]]
    stopped: threading.Event
    tls_errors: list[str]  # failed TLS handshakes (an https double): the client did not trust the certificate

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed handshake is recorded, not printed (a client probing may fail many); the rest printed."""
        failure = sys.exc_info()[1]
        if isinstance(failure, ssl.SSLError):
            self.tls_errors.append(str(failure))
            return
        super().handle_error(request, client_address)

    def stop(self) -> None:
        """Stop like a killed server: cut the streams in flight, close the port (callable once or more)."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        self.shutdown()
        self.server_close()


@contextmanager
def serve(
    config: DoubleConfig | None = None, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[str, _DoubleServer]]:
    """Run the double on 127.0.0.1 (a free port) in a thread; yields (base URL, server). With `tls` (a
    server context holding its certificate) it speaks https: each handshake in its request's thread."""
    server = _DoubleServer(("127.0.0.1", 0), _Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    server.config = config or DoubleConfig()
    server.requests_seen = []
    server.authorizations = []
    server.emissions = []
    server.tls_errors = []
    server.stopped = threading.Event()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.stop()
        thread.join(timeout=5)
