"""`ddtree-build lock`: env/freeze.txt -> one hash-locked requirements file per profile (env/locks.yaml).

Locks are written only here. The resolver (uv) is given every freeze pin exactly, so it can only confirm
the set and add hashes; anything it adds or changes is an error, because the lock must equal the freeze
pin for pin (save the profile's declared `deviations`). `--check` proves that without the network, from
the lock's header (sha256 of the freeze and of the profile) and its pins, so it runs in `make test`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, sha256_bytes, sha256_file
from ddtree.lockfile import Pin, parse_pins
from ddtree.yamlfile import load_yaml

from ddtree_build import paths, resolver
from ddtree_build.freeze import FREEZE_NAME, read_freeze, read_header

PROFILES_NAME = "locks.yaml"
_PROFILE_KEYS = {"output", "python", "platform", "used-by", "deviations", "only"}


@dataclass(frozen=True)
class Profile:
    """One lock: where it goes, its interpreter and platform, and how it may differ from the freeze."""

    name: str
    output: str
    python: str
    platform: str
    used_by: str = ""
    deviations: dict[str, dict[str, str]] = field(default_factory=dict)
    only: tuple[str, ...] | None = None

    def digest(self) -> str:
        """sha256 of the profile's settings: a lock is stale when they change."""
        data = {
            "python": self.python,
            "platform": self.platform,
            "deviations": {k: v["version"] for k, v in sorted(self.deviations.items())},
            "only": list(self.only) if self.only is not None else None,
        }
        return sha256_bytes(json.dumps(data, sort_keys=True).encode())

    def marker_environment(self) -> dict[str, str]:
        """PEP 508 marker values of a CPython of this version on linux x86_64."""
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "implementation_name": "cpython",
            "implementation_version": f"{self.python}.0",
            "platform_python_implementation": "CPython",
            "os_name": "posix",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": "x86_64",
            "platform_release": "",
            "platform_version": "",
        }


def _require_str(where: str, data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise UserError(f"{where}: key '{key}' must be a non-empty string (quote versions like \"3.12\")")
    return value


def load_profiles(env_dir: Path) -> dict[str, Profile]:
    """Read and schema-check env/locks.yaml."""
    from packaging.utils import canonicalize_name  # here: importing it costs ~40 ms (see ddtree.lockfile)

    path = Path(env_dir) / PROFILES_NAME
    data = load_yaml(path, missing="not found; it lists the lock profiles")
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict) or not data["profiles"]:
        raise UserError(f"{path}: expected a mapping 'profiles:' with one entry per lock")
    profiles = {}
    for name, body in data["profiles"].items():
        where = f"{path}: profiles.{name}"
        if not isinstance(body, dict):
            raise UserError(f"{where}: expected a mapping")
        unknown = set(body) - _PROFILE_KEYS
        if unknown:
            raise UserError(f"{where}: unknown key '{sorted(unknown)[0]}'; allowed: {sorted(_PROFILE_KEYS)}")
        deviations = {}
        for dep, spec in (body.get("deviations") or {}).items():
            if not isinstance(spec, dict) or not spec.get("version") or not spec.get("reason"):
                raise UserError(f"{where}.deviations.{dep}: needs 'version' and 'reason'")
            deviations[canonicalize_name(dep)] = {
                "version": str(spec["version"]),
                "reason": str(spec["reason"]),
            }
        only = body.get("only")
        if only is not None and (not isinstance(only, list) or not all(isinstance(x, str) for x in only)):
            raise UserError(f"{where}.only: expected a list of distribution names")
        profiles[name] = Profile(
            name=name,
            output=_require_str(where, body, "output"),
            python=_require_str(where, body, "python"),
            platform=_require_str(where, body, "platform"),
            used_by=str(body.get("used-by", "")),
            deviations=deviations,
            only=tuple(sorted(canonicalize_name(x) for x in only)) if only is not None else None,
        )
    return profiles


def expected_pins(profile: Profile, freeze_pins: list[Pin]) -> dict[str, str]:
    """{name: version} the profile's lock must hold: freeze pins that apply, subset, deviations applied."""
    env = profile.marker_environment()
    pins = {p.name: p.version or p.url or "" for p in freeze_pins if p.applies(env)}
    if profile.only is not None:
        missing = [name for name in profile.only if name not in pins]
        if missing:
            raise UserError(f"profile {profile.name}: 'only' names {missing[0]!r}, which the freeze lacks")
        pins = {name: pins[name] for name in profile.only}
    for name, spec in profile.deviations.items():
        if name not in pins:
            raise UserError(f"profile {profile.name}: deviation {name!r} is not in the freeze; remove it")
        pins[name] = spec["version"]
    return pins


def _compare(label: str, expected: dict[str, str], got: dict[str, str]) -> list[str]:
    problems = [
        f"{label}: {n} missing (freeze pins {v})" for n, v in sorted(expected.items()) if n not in got
    ]
    problems += [
        f"{label}: {n}=={v} is not in the freeze" for n, v in sorted(got.items()) if n not in expected
    ]
    problems += [
        f"{label}: {n}=={got[n]} but the freeze pins {v}"
        for n, v in sorted(expected.items())
        if n in got and got[n] != v
    ]
    return problems


def _lock_header(profile: Profile, freeze_path: Path, freeze_header: dict[str, str], argv: list[str]) -> str:
    lines = [
        f"# Hash-locked requirements, profile {profile.name}: {profile.used_by}.",
        "# Written by `ddtree-build lock` from the freeze; never edit by hand.",
        f"# profile: {profile.name}",
        f"# python: {profile.python}",
        f"# platform: {profile.platform}",
        f"# freeze: {freeze_path.name}",
        f"# freeze-sha256: {sha256_file(freeze_path)}",
        f"# profile-sha256: {profile.digest()}",
    ]
    if freeze_header.get("exclude-newer"):
        lines.append(f"# exclude-newer: {freeze_header['exclude-newer']}")
    for name, spec in sorted(profile.deviations.items()):
        lines.append(f"# deviation: {name}=={spec['version']} ({spec['reason']})")
    lines.append(f"# locked-by: {resolver.uv_version()}: {' '.join(argv)}")
    return "\n".join(lines) + "\n"


def write_lock(profile: Profile, env_dir: Path, freeze_path: Path) -> Path:
    """Resolve the profile's exact pins with hashes, verify them against the freeze, write atomically."""
    freeze = read_freeze(freeze_path)
    expected = expected_pins(profile, freeze.pins)
    source_pins = {p.name: p for p in freeze.pins if p.applies(profile.marker_environment())}
    lines = []
    for name, version in sorted(expected.items()):
        pin = source_pins[name]
        lines.append(pin.requirement_line() if version == pin.version else f"{name}=={version}")
    body, argv = resolver.compile_requirements(
        "\n".join(lines) + "\n",
        python=profile.python,
        platform=profile.platform,
        exclude_newer=freeze.header.get("exclude-newer"),
        hashes=True,
    )
    got_pins = parse_pins(body, f"uv output for {profile.name}")
    problems = _compare(f"lock {profile.name}", expected, {p.name: p.version or "" for p in got_pins})
    problems += [f"lock {profile.name}: {p.name} has no hash" for p in got_pins if not p.hashes]
    if problems:
        raise UserError(problems[0] + f" ({len(problems)} problem(s)); fix env/{FREEZE_NAME} or the profile")
    out = Path(env_dir) / profile.output
    atomic_write(out, _lock_header(profile, freeze.path, freeze.header, argv) + body, mode=0o644)
    return out


def check_lock(profile: Profile, env_dir: Path, freeze_path: Path) -> list[str]:
    """Problems of one lock versus the current freeze and profile; no network."""
    path = Path(env_dir) / profile.output
    if not path.is_file():
        return [f"{path}: missing; run `ddtree-build lock --profile {profile.name}`"]
    text = path.read_text(encoding="utf-8")
    header = read_header(text)
    problems = []
    if header.get("freeze-sha256") != sha256_file(freeze_path):
        problems.append(
            f"{path}: stale, {freeze_path.name} changed since it was locked; run `ddtree-build lock`"
        )
    if header.get("profile-sha256") != profile.digest():
        problems.append(
            f"{path}: stale, profile {profile.name} changed in {PROFILES_NAME}; run `ddtree-build lock`"
        )
    pins = parse_pins(text, str(path))
    problems += [f"{path}:{p.lineno}: {p.name} has no --hash" for p in pins if not p.hashes]
    expected = expected_pins(profile, read_freeze(freeze_path).pins)
    problems += _compare(str(path), expected, {p.name: p.version or "" for p in pins})
    return problems


def _selected(profiles: dict[str, Profile], names: list[str] | None) -> list[Profile]:
    for name in names or []:
        if name not in profiles:
            raise UserError(f"unknown lock profile {name!r}; known: {', '.join(profiles)}")
    return [profiles[n] for n in names] if names else list(profiles.values())


def _cmd_lock(args: argparse.Namespace) -> int:
    env_dir = Path(args.env_dir)
    freeze_path = Path(args.freeze) if args.freeze else env_dir / FREEZE_NAME
    chosen = _selected(load_profiles(env_dir), args.profile)
    read_freeze(freeze_path)  # inputs before work: a missing or bad freeze is one line, in both modes
    if args.check:
        problems = [line for profile in chosen for line in check_lock(profile, env_dir, freeze_path)]
        for line in problems:
            print(line)
        if problems:
            raise UserError(f"{len(problems)} lock problem(s); run `ddtree-build lock` to rewrite the locks")
        print(f"locks agree with {freeze_path}: {', '.join(p.output for p in chosen)}")
        return 0
    for profile in chosen:
        out = write_lock(profile, env_dir, freeze_path)
        print(f"wrote {out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("lock", help="env/freeze.txt -> hash-locked requirements per profile")
    parser.add_argument("--profile", action="append", help="lock only this profile (repeatable)")
    parser.add_argument("--check", action="store_true", help="verify the locks against the freeze, offline")
    parser.add_argument("--env-dir", default=str(paths.ENV_DIR), help="folder with locks.yaml and the locks")
    parser.add_argument("--freeze", help="freeze file (default: ENV_DIR/freeze.txt)")
    parser.set_defaults(func=_cmd_lock)
