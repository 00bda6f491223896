"""A dependency-free progress bar: redrawn in place on a terminal, one line per step in logs."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """`update(note)` after each step; `done()` at the end. Silent when `enabled` is False."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, enabled: bool = True):
        self.total = max(1, total)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.count = 0
        self.started = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self, note: str = "") -> str:
        width = 24
        filled = int(width * self.count / self.total)
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.count * (self.total - self.count) if self.count else 0.0
        bar = "#" * filled + "-" * (width - filled)
        return f"{self.label} [{bar}] {self.count}/{self.total} {elapsed:5.0f}s eta {eta:5.0f}s {note}"

    def update(self, note: str = "", step: int = 1) -> None:
        self.count = min(self.total, self.count + step)
        self.show(note)

    def show(self, note: str = "") -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line(note))
        else:
            self.stream.write(self.line(note) + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
