"""CPU benchmark of `ddtree bench`'s streaming client: how many SGLang /generate events a second it absorbs.

Why: on the H200 (2026-12-03) plain decoding at concurrency 32 measured 3557 tok/s through the client while
SGLang's own log said 14000: with one token per event, SGLang's native stream repeats the whole cumulative
`output_ids` in every event, and the client's per-event checks walked that list in Python (depth walk,
then a shape check per element), O(n^2) per request, all under one GIL.

A fake /generate server runs in a child process (its own GIL and core, so its work is not counted against
the client) and sends pre-encoded chunked SSE events shaped like SGLang 0.5.13.post1's native stream with
--skip-tokenizer-init: cumulative `output_ids`, `meta_info` with id, finish_reason, prompt_tokens,
weight_version, num_retractions, reasoning_tokens, completion_tokens, cached_tokens (+ e2e_latency at the
end), then `data: [DONE]`. The real `ddtree.bench.client` drives it (run_concurrently) at concurrency 1 and
32, 256 new tokens, 1 and 3 tokens per event. Each side (the old commit, --old, and this tree) runs in its
own subprocess with its own server, one after the other; the table shows events/s, tok/s, and how much of
a core the client and the fake server each used (the side near 100% is the one that saturates).

    .venv/bin/python -m benchmarks.bench_client_stream [--old REV] [--seconds 2] [--profile]

Measured 2026-12-03 16:43 UTC on the 2-core dev machine, shared (load average 3), old = 5564f79 (main
before the fix), new = c12d49b; the fake server sending as fast as it can; client and server CPU in % of
one core (a later run at load average 5-6 gave lower figures, the same 3.6-4.2x ratio):

    conc tok/ev | old ev/s   tok/s  cli%  srv% | new ev/s   tok/s  cli%  srv%
       1      1 |     2947    2947    88%    1% |     7881    7881    51%    4%
       1      3 |     2894    8614    96%    2% |     7335   21836    59%    7%
      32      1 |     2940    2940    97%    1% |    12659   12659    90%    5%
      32      3 |     2749    8183    90%    2% |     9403   27990    78%    7%

The old client saturated its core at ~2900 events/s whatever the concurrency (the H200's 3557 tok/s at
concurrency 32 was this cap); the new one is bound by json.loads of the cumulative list (C, O(n) an event).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import multiprocessing
import os
import pstats
import random
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OLD_DEFAULT = "5564f79"  # main before the client fix (branch client-throughput)
CASES = ((1, 1), (1, 3), (32, 1), (32, 3))  # (concurrency, tokens per event)
NEW_TOKENS = 256
PROMPT_TOKENS = 60


# -- the fake server (child process) -------------------------------------------------------------
def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk holding one server-sent event."""
    raw = b"data: " + data + b"\n\n"
    return f"{len(raw):x}\r\n".encode() + raw + b"\r\n"


def sglang_events(max_tokens: int, per_event: int, seed: int = 0) -> list[bytes]:
    """The chunks of one streamed answer, like SGLang's native /generate with skip-tokenizer-init: each
    event repeats the whole `output_ids` so far (compact JSON, as orjson writes it), then [DONE]."""
    rng = random.Random(seed)
    ids = [rng.randrange(1000, 163840) for _ in range(max_tokens)]  # Kimi K2.6 ids: 4-6 digits
    rid = f"{rng.getrandbits(128):032x}"
    chunks = []
    done = 0
    while done < max_tokens:
        done = min(done + per_event, max_tokens)
        last = done == max_tokens
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": {"type": "length", "length": max_tokens} if last else None,
            "prompt_tokens": PROMPT_TOKENS,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": done,
            "cached_tokens": 0,
        }
        if last:
            meta["e2e_latency"] = 2.5
        event = {"output_ids": ids[:done], "meta_info": meta}
        chunks.append(_chunk(json.dumps(event, separators=(",", ":")).encode()))
    chunks.append(_chunk(b"[DONE]"))
    chunks.append(b"0\r\n\r\n")
    return chunks


def _read_request(sock: socket.socket) -> dict[str, Any]:
    """The JSON body of one POST (headers up to the blank line, then Content-Length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        if not part:
            raise ConnectionError("the client closed before sending a request")
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        part = sock.recv(65536)
        if not part:
            raise ConnectionError("the client closed mid-body")
        body += part
    return json.loads(body)


def _serve_one(sock: socket.socket, per_event: int, interval: float, cache: dict[int, list[bytes]]) -> None:
    with sock:
        request = _read_request(sock)
        max_tokens = int(request["sampling_params"]["max_new_tokens"])
        chunks = cache.get(max_tokens)
        if chunks is None:
            chunks = cache.setdefault(max_tokens, sglang_events(max_tokens, per_event))
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n"
        )
        for chunk in chunks:  # one send per event, as SGLang flushes each
            sock.sendall(chunk)
            if interval:
                time.sleep(interval)


def _server_main(listener: socket.socket, per_event: int, interval: float, control: Connection) -> None:
    """Accept connections (one thread each) until the parent says stop; answer CPU-time queries."""
    cache: dict[int, list[bytes]] = {}

    def accept() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_serve_one, args=(sock, per_event, interval, cache), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    while True:
        message = control.recv()
        if message == "cpu":
            times = os.times()
            control.send(times.user + times.system)
        else:
            return


class FakeServer:
    """The fake /generate server in a child process: `url`, `cpu_s()` (its CPU time so far), `close()`."""

    def __init__(self, per_event: int, interval: float = 0.0):
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.control, child_end = multiprocessing.Pipe()
        context = multiprocessing.get_context("fork")  # before the client starts any thread
        self.process = context.Process(
            target=_server_main, args=(self.listener, per_event, interval, child_end), daemon=True
        )
        self.process.start()
        self.listener.close()  # the child holds it

    def cpu_s(self) -> float:
        self.control.send("cpu")
        return float(self.control.recv())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.control.send("stop")
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()


# -- one side: this interpreter's ddtree ---------------------------------------------------------
def _client_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def measure(concurrency: int, per_event: int, seconds: float, interval: float) -> dict[str, Any]:
    """Rounds of `concurrency` streams against a fresh fake server for at least `seconds` (2 rounds or
    more); events and tokens absorbed per second of wall time, and each side's CPU in % of a core."""
    from ddtree.bench.client import Client, GenerationRequest, run_concurrently

    server = FakeServer(per_event, interval)
    try:
        client = Client(server.url, api="generate", timeout=120)
        request = GenerationRequest(prompt_ids=list(range(PROMPT_TOKENS)), max_tokens=NEW_TOKENS)
        run_concurrently(client, [request] * concurrency)  # warm-up: caches the events server-side
        events = tokens = rounds = 0
        cpu0, srv0, wall0 = _client_cpu_s(), server.cpu_s(), time.perf_counter()
        while rounds < 2 or time.perf_counter() - wall0 < seconds:
            results = run_concurrently(client, [request] * concurrency)
            failed = [r.error for r in results if not r.ok]
            if failed:
                raise RuntimeError(f"a stream failed: {failed[0]}")
            events += sum(r.chunks for r in results)
            tokens += sum(r.output_tokens for r in results)
            rounds += 1
        wall = time.perf_counter() - wall0
        cpu, srv = _client_cpu_s() - cpu0, server.cpu_s() - srv0
    finally:
        server.close()
    return {
        "concurrency": concurrency,
        "per_event": per_event,
        "rounds": rounds,
        "events_s": events / wall,
        "tok_s": tokens / wall,
        "client_cpu": 100 * cpu / wall,
        "server_cpu": 100 * srv / wall,
    }


def profile(concurrency: int, per_event: int, top: int) -> str:
    """cProfile of every stream thread of two rounds (one profiler per thread, timed by that thread's CPU
    clock, merged), top by tottime."""
    from ddtree.bench.client import Client, GenerationRequest, run_concurrently

    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    class ProfiledClient(Client):
        def stream(self, req: GenerationRequest) -> Any:
            prof = cProfile.Profile(time.thread_time)  # CPU time: waits for data or the GIL are not work
            prof.enable()
            try:
                return super().stream(req)
            finally:
                prof.disable()
                with lock:
                    profiles.append(prof)

    server = FakeServer(per_event)
    try:
        client = ProfiledClient(server.url, api="generate", timeout=120)
        request = GenerationRequest(prompt_ids=list(range(PROMPT_TOKENS)), max_tokens=NEW_TOKENS)
        for _ in range(2):
            run_concurrently(client, [request] * concurrency)
    finally:
        server.close()
    out = io.StringIO()
    stats = pstats.Stats(profiles[0], stream=out)
    for prof in profiles[1:]:
        stats.add(prof)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def side_main(args: argparse.Namespace) -> int:
    """One side's figures as JSON lines on stdout (and its profile text when asked)."""
    for concurrency, per_event in CASES:
        row = measure(concurrency, per_event, args.seconds, args.interval)
        print(json.dumps(row), flush=True)
    if args.profile:
        print(json.dumps({"profile": profile(32, 1, args.top)}), flush=True)
    return 0


# -- the driver: old commit vs this tree ---------------------------------------------------------
def run_side(entrypoint: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    command = [sys.executable, "-m", "benchmarks.bench_client_stream", "--side"]
    command += ["--seconds", str(args.seconds), "--interval", str(args.interval), "--top", str(args.top)]
    if args.profile:
        command.append("--profile")
    env = {**os.environ, "BENCH_CLIENT_ENTRYPOINT": str(entrypoint)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the side with {entrypoint} failed:\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def old_entrypoint(rev: str, into: Path) -> Path:
    """`entrypoint/` of commit `rev`, extracted under `into` (git archive)."""
    blob = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "entrypoint"], capture_output=True, check=False
    )
    if blob.returncode != 0:
        raise SystemExit(f"--old {rev}: git archive failed: {blob.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(blob.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "entrypoint"


def table(old: list[dict[str, Any]] | None, new: list[dict[str, Any]]) -> str:
    def cells(row: dict[str, Any]) -> str:
        return (
            f"{row['events_s']:8.0f} {row['tok_s']:7.0f} {row['client_cpu']:5.0f}% {row['server_cpu']:4.0f}%"
        )

    head = "conc tok/ev |"
    head += " old ev/s   tok/s  cli%  srv% |" if old else ""
    lines = [head + " new ev/s   tok/s  cli%  srv%"]
    for i, row in enumerate(new):
        line = f"{row['concurrency']:4d} {row['per_event']:6d} |"
        if old:
            line += f" {cells(old[i])} |"
        lines.append(f"{line} {cells(row)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default=OLD_DEFAULT, help="commit to compare with ('' for none)")
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="wall time per case and side (>= 2 rounds)"
    )
    parser.add_argument("--interval", type=float, default=0.0, help="seconds between a stream's events")
    parser.add_argument("--profile", action="store_true", help="cProfile concurrency 32, 1 token/event")
    parser.add_argument("--top", type=int, default=12, help="profile lines to show")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.interval < 0 or args.top < 1:
        parser.error("--seconds must be > 0, --interval >= 0 and --top >= 1")
    if args.side:
        sys.path.insert(0, os.environ.get("BENCH_CLIENT_ENTRYPOINT", str(REPO / "entrypoint")))
        return side_main(args)
    print(f"{NEW_TOKENS} new tokens a stream; fake server: {args.interval:g} s between events; 2 cores here")
    old = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.old:
            old = run_side(old_entrypoint(args.old, Path(tmp)), args)
        new = run_side(REPO / "entrypoint", args)
    old_rows = [r for r in old if "profile" not in r] if old else None
    print(table(old_rows, [r for r in new if "profile" not in r]))
    for name, rows in (("old", old or []), ("new", new)):
        for row in rows:
            if "profile" in row:
                print(f"\n-- profile, {name}: concurrency 32, 1 token/event, two rounds --\n{row['profile']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
