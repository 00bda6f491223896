"""No secret of a reproduction package reaches env/, the profile or the rendered Dockerfile.

Real parts: the generated hand-made-style package (tests/fixtures/make_repro_package.py, from the real
pristine wheel) with secrets added to its systemd unit, `ddtree-build import` on it, and the real render
of the Dockerfile from an env/ written into tmp_path (as tests/unit/test_render.py does).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ddtree import secret_rules
from ddtree.errors import UserError
from ddtree.targets import load_target
from ddtree_build import render
from ddtree_build.reproduction import unit
from ddtree_build.reproduction.import_cmd import run_import
from ddtree_build.reproduction.manifest import write_manifest

from tests.unit.test_import import package, repro_package, targets_dir  # noqa: F401 (pytest fixtures)
from tests.unit.test_render import _write_env

HF_TOKEN = "hf_UnitTokenValue0123456789"
SGLANG_KEY = "sglang-env-key-0123456789"
API_KEY = "unit-api-key-0123456789"
ADMIN_KEY = "unit-admin-key-0123456789"
SECRETS = (HF_TOKEN, SGLANG_KEY, API_KEY, ADMIN_KEY)


def _with_secrets(pkg: Path) -> None:
    unit = pkg / "services" / "sglang-ddtree.service"
    text = unit.read_text()
    text = text.replace(
        "Environment=NCCL_P2P_DISABLE=1\n",
        f"Environment=NCCL_P2P_DISABLE=1\nEnvironment=HF_TOKEN={HF_TOKEN} 'SGLANG_API_KEY={SGLANG_KEY}'\n",
    )
    text = text.replace(
        "    --host 0.0.0.0", f"    --api-key {API_KEY} --admin-api-k={ADMIN_KEY} --host 0.0.0.0"
    )
    assert text.count(API_KEY) == 1 and text.count(HF_TOKEN) == 1
    unit.write_text(text)
    (pkg / "bench" / "run_bench.sh").write_text(f"curl -H 'Authorization: Bearer {API_KEY}' localhost\n")
    write_manifest(pkg)


def test_import_strips_the_units_secrets_and_names_them(
    package: Path,  # noqa: F811
    tmp_path: Path,
    targets_dir: Path,  # noqa: F811
) -> None:
    _with_secrets(package)
    out = tmp_path / "out"
    report = run_import(package, out, False, None, targets_dir)
    stripped = [n for n in report.notes if "secrets stripped" in n]
    assert stripped and all(s not in stripped[0] for s in SECRETS)
    for name in ("Environment HF_TOKEN", "Environment SGLANG_API_KEY", "--api-key", "--admin-api-key"):
        assert name in stripped[0]
    target = load_target(out / "env" / "targets" / "pro6000.yaml")
    assert "HF_TOKEN" not in target.environment and target.environment["NCCL_P2P_DISABLE"] == "1"
    assert "--host" in target.server_argv() and target.server_args["port"] == 30000  # the rest is kept
    leaks = [
        (path, s)
        for path in out.rglob("*")
        if path.is_file()
        for s in SECRETS
        if s.encode() in path.read_bytes()
    ]
    assert leaks == []  # the profile, the copied unit and bench scripts, everything under env/


@pytest.mark.parametrize(
    ("place", "value"),
    [
        ("environment", {"HF_TOKEN": HF_TOKEN}),
        ("environment", {"SGLANG_API_KEY": SGLANG_KEY}),
        ("server_args", {"api-key": API_KEY}),
        ("server_args", {"ssl-keyfile-password": "pw-0123456789"}),
        ("extra_args", ["--admin-api", ADMIN_KEY]),
    ],
)
def test_render_refuses_a_profile_that_carries_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str, value: object
) -> None:
    """The profile's environment becomes the Dockerfile's ENV and env/ is copied into the image."""
    folder = _write_env(tmp_path / "env")
    monkeypatch.setattr(render, "ENV_DIR", folder)
    profile = folder / "targets" / "pro6000.yaml"
    doc = yaml.safe_load(profile.read_text())
    doc[place] = {**doc.get(place, {}), **value} if isinstance(value, dict) else value
    profile.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(UserError) as caught:
        render.render("pro6000")
    message = str(caught.value)
    assert "holds a secret" in message and "pro6000.yaml" in message
    assert all(s not in message for s in (*SECRETS, "pw-0123456789"))


@pytest.mark.parametrize(
    "line",
    [
        f"ExecStart=sglang --api-key {API_KEY} --host '0.0.0.0\n",
        f"Environment=HF_TOKEN={HF_TOKEN} 'SGLANG_API_KEY={SGLANG_KEY}\nExecStart=sglang\n",
        f"Environment={HF_TOKEN}\nExecStart=sglang\n",
    ],
)
def test_a_unit_it_cannot_read_is_refused_without_showing_its_secrets(line: str) -> None:
    """The one-line error names the unit and the line's kind, not the line (it holds the key)."""
    with pytest.raises(UserError) as caught:
        unit.read_unit(f"[Service]\n{line}", "services/sglang.service")
    message = str(caught.value)
    assert message.startswith("services/sglang.service: ") and "\n" not in message
    assert all(s not in message for s in SECRETS)


def test_secret_names_are_told_from_sglangs_own_knobs() -> None:
    for name in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "SGLANG_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
    ):
        assert secret_rules.is_secret_name(name), name
    for name in ("TOKENIZERS_PARALLELISM", "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS", "NCCL_P2P_DISABLE",
                 "SGLANG_ROUTING_KEY_POLICY_DEBUG_LOG", "SSL_KEYFILE"):  # fmt: skip
        assert not secret_rules.is_secret_name(name), name
