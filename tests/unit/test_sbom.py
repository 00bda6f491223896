"""The image's CycloneDX SBOM: made on the host with cyclonedx-python-lib (validated against the 1.6
schema by the same library), summarised in the image by the stdlib-only `sbom` self-check.

Real parts: the checkout's CI lock and weights lock, the real patch series digest, the library's strict
JSON validator, the selfcheck framework reading the file written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ddtree.lockfile import read_pins
from ddtree.selfcheck import checks as framework
from ddtree.selfcheck import sbom as selfcheck_sbom
from ddtree.weights import lock as weights_lock
from ddtree_build import image, render, sbom

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "env" / "requirements-ci.lock"


def _inputs(**changes) -> sbom.SbomInputs:
    values = {
        "image_name": "ddtree:pro6000",
        "version": "0.1.0+gabc",
        "lock": LOCK,
        "base_image": "nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04",
        "base_digest": "sha256:" + "1" * 64,
        "series_digest": image.patch_series_digest(),
        "weights_lock": REPO / "env" / "weights.yaml",
        **changes,
    }
    return sbom.SbomInputs(**values)


def test_sbom_names_every_input_with_its_hashes() -> None:
    text = sbom.make_sbom(_inputs())
    assert text == sbom.make_sbom(_inputs())  # byte-stable: no clock, no random serial
    data = json.loads(text)
    assert data["bomFormat"] == "CycloneDX" and data["specVersion"] == "1.6"
    components = {c["bom-ref"]: c for c in data["components"]}
    for pin in read_pins(LOCK):
        component = components[f"pypi:{pin.name}@{pin.version}"]
        assert component["purl"] == f"pkg:pypi/{pin.name}@{pin.version}"
        assert sorted(h["content"] for h in component["hashes"]) == sorted(
            h.split(":")[1] for h in pin.hashes
        )
    base = components["base-image"]
    assert base["hashes"] == [{"alg": "SHA-256", "content": "1" * 64}]
    assert base["purl"].startswith("pkg:docker/nvidia/cuda@sha256")
    assert components["patch-series"]["version"] == image.patch_series_digest()
    identity = weights_lock.lock_identity(REPO / "env" / "weights.yaml").removeprefix("sha256:")
    assert components["weights-lock"]["hashes"] == [{"alg": "SHA-256", "content": identity}]
    target = components["model:target"]
    assert target["type"] == "machine-learning-model" and target["name"] == "moonshotai/Kimi-K2.6"
    assert target["version"] == "unknown"  # said, not hidden, until a capture fills the lock
    assert {p["name"]: p["value"] for p in target["properties"]}["io.ddtree:unknown"] == "revision, files"


def test_summary_in_the_image(tmp_path: Path) -> None:
    path = tmp_path / "sbom.cdx.json"
    sbom.write_sbom(_inputs(), path)
    env = {"DDTREE_SBOM": str(path), "DDTREE_ENV_DIR": str(REPO / "env")}
    (check,) = [c for c in framework.REGISTRY if c.name == "sbom"]
    (outcome,) = framework.run_checks([check], framework.Context(offline=True, environ=env))
    assert outcome.result.status == "pass", outcome.result.detail
    pins = len(read_pins(LOCK))
    assert outcome.result.detail.startswith(
        f"CycloneDX 1.6: {pins} Python distributions (all hashed), base nvidia/cuda"
    )
    assert "moonshotai/Kimi-K2.6@unknown" in outcome.result.detail
    # The image's env/ changed after the build: the SBOM's weights lock no longer names it.
    other = tmp_path / "weights.yaml"
    other.write_text((REPO / "env" / "weights.yaml").read_text() + "# edited\n")
    (outcome,) = framework.run_checks(
        [check], framework.Context(offline=True, environ={**env, "DDTREE_WEIGHTS_LOCK": str(other)})
    )
    assert (
        outcome.result.status == "fail"
        and "the image's env/ changed after the build" in outcome.result.detail
    )
    assert selfcheck_sbom.summarise(json.loads(path.read_text()))["distributions"] == pins


def test_no_sbom_is_a_skip(tmp_path: Path) -> None:
    (check,) = [c for c in framework.REGISTRY if c.name == "sbom"]
    env = {"DDTREE_SBOM": str(tmp_path / "none.json")}
    (outcome,) = framework.run_checks([check], framework.Context(offline=True, environ=env))
    assert outcome.result.status == "skip"


def test_image_writes_the_sbom_into_the_context_and_beside_it(tmp_path: Path) -> None:
    ctx = render.build_context("pro6000", "nvidia")
    folder = tmp_path / "context"
    image.stage_context(folder, "FROM scratch\n", LOCK)
    args = image.build_args_for(ctx, image.OVERRIDE_LOCK, pip_check=False)
    kept = tmp_path / "kept" / "sbom.cdx.json"
    image.write_image_sbom(folder, image.OVERRIDE_LOCK, ctx, args, "ddtree:pro6000", kept)
    assert (folder / image.SBOM_CONTEXT).read_text() == kept.read_text()
    data = json.loads(kept.read_text())
    assert data["metadata"]["component"]["version"] == args["IMAGE_VERSION"]
    # The committed Dockerfile copies exactly that file into the image.
    assert f"COPY {image.SBOM_CONTEXT} {sbom.IMAGE_PATH}" in (REPO / "Dockerfile").read_text()


def test_a_lock_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    from ddtree_build.errors import UserError

    with pytest.raises(UserError, match=r"none.lock: not found"):
        sbom.make_sbom(_inputs(lock=tmp_path / "none.lock"))
