"""The host tool shares the runtime's error type, so one message style serves both CLIs."""

from ddtree.errors import UserError

__all__ = ["UserError"]
