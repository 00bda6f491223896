"""The host tool shares the runtime's error type, so one message style serves both CLIs."""

from ddtree.errors import UserError

__all__ = ["UserError", "one_line"]


def one_line(text: str, last: int = 15) -> str:
    """A tool's output (stderr, a log) as one line for a UserError: its last `last` lines joined by " | "."""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-last:])
