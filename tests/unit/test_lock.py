"""Locks equal the freeze pin for pin, every entry hashed; `lock --check` catches drift offline."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree.errors import UserError
from ddtree.lockfile import read_pins
from ddtree_build import lock, resolver
from ddtree_build.freeze import read_freeze


@pytest.fixture
def env_copy(repo_root: Path, tmp_path: Path) -> Path:
    """A copy of env/ so tests can break it without touching the real one."""
    target = tmp_path / "env"
    shutil.copytree(repo_root / "env", target)
    return target


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddtree_build.cli", "lock", *args], capture_output=True, text=True, check=False
    )


def test_each_committed_lock_agrees_with_the_freeze_pin_for_pin(repo_root: Path) -> None:
    env = repo_root / "env"
    freeze = read_freeze(env / "freeze.txt").versions()
    profiles = lock.load_profiles(env)
    assert {"py312", "py311", "ci"} <= set(profiles)
    for profile in profiles.values():
        pins = read_pins(env / profile.output)
        assert pins, profile.output
        for pin in pins:
            assert pin.text.startswith(f"{pin.name}=="), f"{profile.output}: {pin.text!r} not normalized"
            assert pin.hashes, f"{profile.output}: {pin.name} unhashed"
            assert all(h.startswith("sha256:") for h in pin.hashes)
        got = {p.name: p.version for p in pins}
        wanted = {n: v for n, v in freeze.items() if profile.only is None or n in profile.only}
        for name, spec in profile.deviations.items():
            wanted[name] = spec["version"]
        assert got == wanted, profile.output
        assert lock.check_lock(profile, env, env / "freeze.txt") == []


def test_py312_lock_is_the_freeze_exactly_and_ci_is_small(repo_root: Path) -> None:
    env = repo_root / "env"
    freeze = read_freeze(env / "freeze.txt").versions()
    py312 = {p.name: p.version for p in read_pins(env / "requirements-py312.lock")}
    assert py312 == freeze and len(py312) == 191
    ci = {p.name: p.version for p in read_pins(env / "requirements-ci.lock")}
    assert set(ci) == {"idna", "packaging", "pyyaml", "six"}


def test_check_cli_passes_on_the_repo() -> None:
    done = _cli("--check")
    assert done.returncode == 0, done.stderr
    assert "locks agree" in done.stdout


def test_check_detects_a_changed_freeze(env_copy: Path) -> None:
    freeze = env_copy / "freeze.txt"
    freeze.write_text(freeze.read_text().replace("six==1.17.0", "six==1.16.0"))
    done = _cli("--check", "--env-dir", str(env_copy))
    assert done.returncode == 1
    assert "stale, freeze.txt changed" in done.stdout
    assert "six==1.17.0 but the freeze pins 1.16.0" in done.stdout


def test_check_detects_an_edited_lock(env_copy: Path) -> None:
    path = env_copy / "requirements-ci.lock"
    path.write_text(path.read_text().replace("six==1.17.0", "six==1.16.0"))
    problems = lock.check_lock(lock.load_profiles(env_copy)["ci"], env_copy, env_copy / "freeze.txt")
    assert problems == [f"{path}: six==1.16.0 but the freeze pins 1.17.0"]


def test_check_detects_an_unhashed_entry_and_a_changed_profile(env_copy: Path) -> None:
    path = env_copy / "requirements-ci.lock"
    text = path.read_text()
    path.write_text(text.replace("idna==3.18 \\\n", "idna==3.18\nxidna==0 \\\n", 1))
    (env_copy / "locks.yaml").write_text(
        (env_copy / "locks.yaml")
        .read_text()
        .replace("only: [idna, packaging, pyyaml, six]", "only: [idna, six]")
    )
    problems = lock.check_lock(lock.load_profiles(env_copy)["ci"], env_copy, env_copy / "freeze.txt")
    assert any("stale, profile ci changed" in p for p in problems)
    assert any(p.endswith("idna has no --hash") for p in problems)
    assert any("xidna==0 is not in the freeze" in p for p in problems)


def test_missing_lock_and_unknown_profile(env_copy: Path) -> None:
    (env_copy / "requirements-ci.lock").unlink()
    done = _cli("--check", "--env-dir", str(env_copy), "--profile", "ci")
    assert done.returncode == 1 and "requirements-ci.lock: missing" in done.stdout
    done = _cli("--check", "--env-dir", str(env_copy), "--profile", "nope")
    assert done.returncode == 1 and "unknown lock profile 'nope'" in done.stderr


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("profiles: {}\n", "expected a mapping 'profiles:'"),
        ("profiles:\n  x: {output: a.lock, python: 3.12, platform: p}\n", "profiles.x: key 'python' must be"),
        (
            "profiles:\n  x: {output: a.lock, python: '3.12', platform: p, colour: red}\n",
            "unknown key 'colour'",
        ),
        (
            "profiles:\n  x: {output: a, python: '3', platform: p, deviations: {s: {version: 1}}}\n",
            "needs 'version'",
        ),
    ],
)
def test_profile_schema_errors(tmp_path: Path, yaml_text: str, message: str) -> None:
    (tmp_path / "locks.yaml").write_text(yaml_text)
    with pytest.raises(UserError, match=message):
        lock.load_profiles(tmp_path)


def test_resolver_adding_a_package_is_refused(env_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stub replaces the resolver to simulate a drifted resolution (a real one cannot drift on cue)."""

    def fake(requirements: str, **_: object) -> tuple[str, list[str]]:
        return requirements.replace(
            "six==1.17.0", "six==1.17.0 --hash=sha256:aa"
        ) + "extra==1 --hash=sha256:bb\n", []

    monkeypatch.setattr(resolver, "compile_requirements", fake)
    with pytest.raises(UserError, match=r"lock ci: extra==1 is not in the freeze"):
        lock.write_lock(lock.load_profiles(env_copy)["ci"], env_copy, env_copy / "freeze.txt")


def test_real_lock_run_rewrites_the_ci_lock_identically(env_copy: Path, repo_root: Path) -> None:
    """Runs the real resolver (PyPI) for the small CI profile: the same code path as the full locks."""
    (env_copy / "requirements-ci.lock").unlink()
    done = _cli("--env-dir", str(env_copy), "--profile", "ci")
    assert done.returncode == 0, done.stderr
    fresh = (env_copy / "requirements-ci.lock").read_text()
    committed = (repo_root / "env" / "requirements-ci.lock").read_text()
    body = lambda text: [line for line in text.splitlines() if not line.startswith("#")]  # noqa: E731
    assert body(fresh) == body(committed)
    assert _cli("--check", "--env-dir", str(env_copy), "--profile", "ci").returncode == 0


@pytest.mark.parametrize("check", [True, False], ids=["check", "write"])
def test_missing_or_unreadable_freeze_is_one_line(env_copy: Path, check: bool) -> None:
    """No env/freeze.txt (or a folder in its place): one line naming it and what makes it, exit 1; no lock
    is touched."""
    locks = {p.name: p.read_bytes() for p in env_copy.glob("requirements-*.lock")}
    mode = ["--check"] if check else []
    (env_copy / "freeze.txt").unlink()
    done = _cli(*mode, "--env-dir", str(env_copy))
    assert done.returncode == 1
    assert done.stderr == (
        f"ddtree-build: error: {env_copy / 'freeze.txt'}: not found; run `ddtree-build freeze` or "
        "`ddtree-build import`\n"
    )
    (env_copy / "freeze.txt").mkdir()
    done = _cli(*mode, "--env-dir", str(env_copy))
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "freeze.txt: is a folder, not a file" in done.stderr
    assert {p.name: p.read_bytes() for p in env_copy.glob("requirements-*.lock")} == locks
