"""Tiers by folder: tests/unit, tests/docker, tests/gpu, tests/slow get their marker automatically."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "docker", "gpu", "slow")
REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO_ROOT / "tests").parts
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
            if parts[0] == "slow":
                item.add_marker(pytest.mark.docker)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") and not _cuda_available():
        pytest.skip("no CUDA device here: GPU tests run on the device machine (see README, GPU tier)")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT
