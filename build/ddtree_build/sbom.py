"""A CycloneDX SBOM of the image, made with cyclonedx-python-lib on the build host.

Provenance in one file: the Python distributions the image installs (the lock it is built from: name,
version, every sha256 the lock allows), the base image (tag, and digest where pinned), the patch series
(its engine digest), and the weights lock (env/weights.yaml: its sha256, and each model's repository and
revision as a machine-learning-model component). `ddtree-build image` writes it into the build context
(the Dockerfile copies it to /opt/ddtree/sbom.cdx.json, where `ddtree selfcheck --offline` summarises it)
and beside the kept Dockerfile. The library is a host tool (requirements/dev.in); the image never needs it.
The document is byte-stable for the same inputs: serial number and timestamp derive from the content.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from ddtree.lockfile import read_pins

from ddtree_build.errors import UserError

SBOM_NAME = "sbom.cdx.json"
IMAGE_PATH = "/opt/ddtree/" + SBOM_NAME
# Property names the in-image summary reads (ddtree/selfcheck/sbom.py); keep the two in step.
PROP_ROLE = "io.ddtree:role"
PROP_WEIGHTS_LOCK = "io.ddtree:weights-lock-sha256"
PROP_SERIES = "io.ddtree:patch-series-sha256"


@dataclass(frozen=True)
class SbomInputs:
    image_name: str  # e.g. ddtree:pro6000
    version: str  # the ddtree version + git suffix (IMAGE_VERSION)
    lock: Path  # the requirements lock the image installs
    base_image: str  # repository:tag
    base_digest: str  # sha256:... or ""
    series_digest: str  # the patch engine's digest, or "none"
    weights_lock: Path | None  # env/weights.yaml


def _hash_pairs(hashes: tuple[str, ...]) -> list[tuple[str, str]]:
    pairs = []
    for item in hashes:
        algorithm, _, value = item.partition(":")
        if algorithm == "sha256" and value:
            pairs.append(("SHA-256", value))
    return pairs


def make_sbom(inputs: SbomInputs) -> str:
    """The SBOM as CycloneDX 1.6 JSON text (validated against the schema before it is returned)."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    from packageurl import PackageURL

    def hashes(pairs: list[tuple[str, str]]) -> list[HashType]:
        return [HashType(alg=HashAlgorithm(alg), content=value) for alg, value in pairs]

    bom = Bom()
    root = Component(
        type=ComponentType.CONTAINER,
        name=inputs.image_name,
        version=inputs.version,
        bom_ref="image",
        properties=[Property(name=PROP_ROLE, value="image")],
    )
    bom.metadata.component = root
    try:
        pins = read_pins(inputs.lock)
    except OSError as exc:
        raise UserError(f"SBOM: the lock {inputs.lock} cannot be read ({exc.strerror})") from exc
    for pin in sorted(pins, key=lambda p: (p.name, p.version or "")):
        purl = PackageURL(type="pypi", name=pin.name, version=pin.version)
        bom.components.add(
            Component(
                type=ComponentType.LIBRARY,
                name=pin.name,
                version=pin.version,
                purl=purl,
                bom_ref=f"pypi:{pin.name}@{pin.version}",
                hashes=hashes(_hash_pairs(pin.hashes)),
                properties=[Property(name=PROP_ROLE, value="python-distribution")],
            )
        )
    repository, _, tag = inputs.base_image.rpartition(":")
    digest = inputs.base_digest.removeprefix("sha256:")
    bom.components.add(
        Component(
            type=ComponentType.CONTAINER,
            name=repository or inputs.base_image,
            version=tag or None,
            bom_ref="base-image",
            purl=PackageURL(
                type="docker", name=repository or inputs.base_image, version=inputs.base_digest or tag or None
            ),
            hashes=hashes([("SHA-256", digest)]) if digest else [],
            properties=[Property(name=PROP_ROLE, value="base-image")],
        )
    )
    bom.components.add(
        Component(
            type=ComponentType.FILE,
            name="patches/series.yaml",
            version=inputs.series_digest,
            bom_ref="patch-series",
            properties=[
                Property(name=PROP_ROLE, value="patch-series"),
                Property(name=PROP_SERIES, value=inputs.series_digest),
            ],
        )
    )
    if inputs.weights_lock is not None and inputs.weights_lock.is_file():
        _add_weights(bom, inputs.weights_lock, hashes)
    # The image contains every other component directly (the graph CycloneDX tools expect).
    bom.register_dependency(root, list(bom.components))
    text = JsonV1Dot6(bom).output_as_string(indent=2)
    # Reproducible: the serial number and timestamp come from the content, not the clock.
    data = json.loads(text)
    data.pop("serialNumber", None)
    data.get("metadata", {}).pop("timestamp", None)
    digest_all = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    data["serialNumber"] = f"urn:uuid:{uuid.UUID(digest_all[:32])}"
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise UserError(f"SBOM: the CycloneDX document does not validate: {error}")
    return text


def _add_weights(bom, lock_path: Path, hashes) -> None:
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType
    from ddtree.weights import lock as weights_lock
    from packageurl import PackageURL

    lock = weights_lock.load_lock(lock_path)
    digest = lock.identity.removeprefix("sha256:")
    bom.components.add(
        Component(
            type=ComponentType.DATA,
            name="env/weights.yaml",
            bom_ref="weights-lock",
            hashes=hashes([("SHA-256", digest)]),
            properties=[
                Property(name=PROP_ROLE, value="weights-lock"),
                Property(name=PROP_WEIGHTS_LOCK, value=digest),
            ],
        )
    )
    for role, model in lock.models.items():
        org, _, name = model.repo.partition("/")
        files = model.files or ()
        bom.components.add(
            Component(
                type=ComponentType.MACHINE_LEARNING_MODEL,
                name=model.repo,
                version=model.revision or weights_lock.UNKNOWN,
                bom_ref=f"model:{role}",
                purl=PackageURL(type="huggingface", namespace=org, name=name, version=model.revision),
                properties=[
                    Property(name=PROP_ROLE, value=f"{role}-weights"),
                    Property(
                        name="io.ddtree:files",
                        value=str(len(files)) if model.files is not None else "unknown",
                    ),
                    Property(name="io.ddtree:unknown", value=", ".join(model.unknowns()) or "none"),
                ],
            )
        )


def write_sbom(inputs: SbomInputs, *paths: Path) -> str:
    """Make the SBOM once and write it (atomically) to every path; returns its text."""
    from ddtree.fsutil import atomic_write

    text = make_sbom(inputs)
    for path in paths:
        atomic_write(path, text, mode=0o644)
    return text
