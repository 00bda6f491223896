"""What every bad input must end in, for the property and table tests of issue 30: exit 0, or exit 1/2
with exactly one line on stderr that is no traceback (and, where a secret was given, does not show it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest


def run_cli(main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str], argv: Sequence[str]):
    """(exit code, stdout lines, stderr lines) of one in-process CLI run."""
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err.strip().splitlines()


def assert_clean_outcome(code: int, err: Sequence[str], secrets: Sequence[str] = ()) -> None:
    """Exit 0, or exit 1/2 with one stderr line and no traceback; no secret anywhere in stderr."""
    text = "\n".join(err)
    assert "Traceback" not in text, text
    for secret in secrets:
        assert secret not in text, f"secret {secret!r} shown: {text}"
    if code == 0:
        return
    assert code in (1, 2), (code, text)
    assert len(err) == 1, f"expected one line, got {len(err)}: {text}"
    assert ": error: " in err[0], err[0]
