"""Docker tier fixtures: a real engine (make test sets it up), the registry-free base image, a build client.

Containers run through testcontainers with its reaper (Ryuk) off: Ryuk's image lives on Docker Hub, which
no build host here can reach; each test removes its own containers instead.
"""

from __future__ import annotations

import os

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from collections.abc import Iterator

import pytest
from ddtree_build import base_image, engine


@pytest.fixture(scope="session")
def docker() -> str:
    """The build client's path, once engine, BuildKit client and compose v2 answer (`make engine` set them
    up; then this is quiet). Never skips: the tier must run, so an engine that cannot be had is an error
    (engine.ensure's one line naming the fix)."""
    return engine.ensure(lambda msg: None)


@pytest.fixture(scope="session")
def base_image_tag(docker: str) -> Iterator[str]:
    """The registry-free base image (built here only if `make test` did not build it already)."""
    yield base_image.ensure_base_image(say=lambda msg: print(msg, flush=True))


_OUTCOMES = ("passed", "failed", "error", "skipped")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per tier, so a CI log shows that the docker tier ran and passed (not skipped)."""
    counts: dict[str, dict[str, int]] = {}
    for outcome in _OUTCOMES:
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") != "call" and outcome == "passed":
                continue
            keywords = getattr(report, "keywords", {})
            tier = next((t for t in ("slow", "gpu", "docker", "unit") if t in keywords), None)
            if tier:
                tier_counts = counts.setdefault(tier, dict.fromkeys(_OUTCOMES, 0))
                tier_counts[outcome] += 1
    if counts:
        terminalreporter.write_sep("-", "tiers")
        for tier, tier_counts in sorted(counts.items()):
            summary = ", ".join(f"{n} {o}" for o, n in tier_counts.items() if n)
            terminalreporter.write_line(f"{tier} tier: {summary}")
