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


def _hypothesis_profiles() -> None:
    """Property tests (tests/unit/test_properties_*.py): `ci` bounds the examples so `make test` stays
    fast; HYPOTHESIS_PROFILE=release runs 25x more before a release (see README, "Bad input")."""
    import os

    from hypothesis import HealthCheck, settings

    # capsys is read and cleared by every run_cli, so sharing it between examples is safe
    common = {
        "deadline": None,
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        "derandomize": False,
    }
    settings.register_profile("ci", max_examples=40, **common)
    settings.register_profile("release", max_examples=1000, **common)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profiles()
