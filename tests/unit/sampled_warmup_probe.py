"""Probe for tests/unit/test_sampled_warmup.py, run in the CPU SGLang environment (patched sglang
0.5.13.post1): patch 0016's _send_sampled_warmup against a real loopback HTTP server that records what
it is sent and answers 200, then 500; and with SGLANG_DDTREE_SAMPLED_WARMUP=0. Prints SAMPLED-WARMUP-
PROBE {json}."""

from __future__ import annotations

import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def load_patched_function():
    """_send_sampled_warmup and its constants compiled from the patched http_server.py on their own: importing
    the module needs uvloop, which the CPU environment lacks; they use only os, time, requests and logger."""
    import ast
    import time
    import types

    import requests
    import sglang

    path = os.path.join(os.path.dirname(sglang.__file__), "srt", "entrypoints", "http_server.py")
    with open(path) as handle:
        tree = ast.parse(handle.read())
    wanted = {"_send_sampled_warmup", "SAMPLED_WARMUP_ENV", "SAMPLED_WARMUP_PARAMS"}
    nodes = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in wanted)
        or (isinstance(n, ast.Assign) and {getattr(t, "id", None) for t in n.targets} & wanted)
    ]
    module = types.ModuleType("http_server_parts")
    module.__dict__.update(os=os, time=time, requests=requests, logger=logging.getLogger("http_server_parts"))
    exec(compile(ast.Module(body=nodes, type_ignores=[]), path, "exec"), module.__dict__)
    return module


def main() -> dict:
    http_server = load_patched_function()

    sent: list[dict] = []
    answers = [200, 500]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            sent.append(
                {"path": self.path, "json": json.loads(body), "auth": self.headers.get("Authorization")}
            )
            self.send_response(answers.pop(0))
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args) -> None:
            pass

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(f"{record.levelname}: {record.getMessage()}")

    http_server.logger.addHandler(Keep())
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"
    greedy = {
        "sampling_params": {"temperature": 0, "max_new_tokens": 8},
        "text": "The capital city of France is",
    }
    headers = {"Authorization": "Bearer k"}
    ok = http_server._send_sampled_warmup(url, greedy, headers, True, 30)
    refused = http_server._send_sampled_warmup(url, greedy, headers, True, 30)
    os.environ[http_server.SAMPLED_WARMUP_ENV] = "0"
    skipped = http_server._send_sampled_warmup(url, greedy, headers, True, 30)
    server.shutdown()
    return {
        "ok": ok,
        "refused": refused,
        "skipped": skipped,
        "sent": sent,
        "greedy_after": greedy,
        "log": records,
    }


if __name__ == "__main__":
    try:
        result = main()
    except Exception as exc:  # reported, so the test shows why
        result = {"probe_error": f"{type(exc).__name__}: {exc}"}
    print("SAMPLED-WARMUP-PROBE " + json.dumps(result), flush=True)
