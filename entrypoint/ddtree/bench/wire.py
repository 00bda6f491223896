"""HTTP reading under a deadline: server-sent events and whole bodies, read as they arrive, bounded in
time (a watchdog shuts the socket) and in size, so a server cannot hold a request or the memory for ever."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Callable, Iterator

# A plain JSON answer longer than this is not one this client asked for (server info is a few kB).
MAX_BODY_BYTES = 64 << 20


class Deadline:
    """Bounds a whole exchange: after `seconds` it shuts the connection's socket down, which ends any
    read in progress. A socket timeout alone bounds each read, so a server that sends a keep-alive every
    few seconds, or one byte at a time, would hold a request open for ever."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float):
        self.conn = conn
        self.seconds = seconds
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def _expire(self) -> None:
        self.expired = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def __enter__(self) -> Deadline:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def explain(self, exc: BaseException | None) -> str:
        """Why the exchange ended: the timeout when it expired, else the connection error."""
        if self.expired:
            return f"no complete answer within the timeout of {self.seconds:g} s (--timeout)"
        return f"{type(exc).__name__}: {exc}" if exc is not None else "the connection ended"


def snippet(body: str, width: int = 120) -> str:
    """A body on one line, cut short: enough to recognise an error page or a traceback's last words."""
    text = " ".join(body.split())
    return repr(text if len(text) <= width else text[:width] + "...") if text else "(empty body)"


def iter_sse(resp: http.client.HTTPResponse, expired: Callable[[], bool] = lambda: False) -> Iterator[str]:
    """Yield each server-sent event's data (multi-line data joined with newlines). Reads with `read1`
    (what has arrived, at most one socket read) and asks `expired` before each read, so keep-alives or
    one byte at a time cannot hold it past a deadline; a line over MAX_BODY_BYTES is refused."""
    lines: list[str] = []
    for raw in _lines(resp, expired):
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if lines:
                yield "\n".join(lines)
                lines = []
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        if line.startswith("data:"):
            lines.append(line[5:].removeprefix(" "))
    if lines:
        yield "\n".join(lines)


def _lines(resp: http.client.HTTPResponse, expired: Callable[[], bool]) -> Iterator[bytes]:
    pending = b""
    while not expired():
        try:
            chunk = resp.read1(1 << 16)
        except http.client.IncompleteRead:  # the stream was cut: judged by what came (no [DONE])
            break
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from complete
        if len(pending) > MAX_BODY_BYTES:
            raise http.client.HTTPException(f"a stream line longer than {MAX_BODY_BYTES >> 20} MiB")
    if pending and not expired():
        yield pending


def read_body(
    resp: http.client.HTTPResponse, expired: Callable[[], bool], limit: int = MAX_BODY_BYTES
) -> bytes:
    """The whole body, read as it arrives while `expired` says no; a body over `limit` raises."""
    parts: list[bytes] = []
    size = 0
    while not expired():
        chunk = resp.read1(1 << 16)
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise http.client.HTTPException(f"the answer is longer than {limit >> 20} MiB")
    return b"".join(parts)
