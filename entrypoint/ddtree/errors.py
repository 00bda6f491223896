"""One exception for problems the user can fix: printed as one line, no traceback."""

from __future__ import annotations


class UserError(Exception):
    """A bad input or environment. The message names the file or value and what to do."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
