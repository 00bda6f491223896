"""Which image this is: its labels, a short identity key over them, and the weights lock.

One answer for receipts (ddtree.receipts.receipt) and for the JIT cache folder (ddtree.serve.jit_cache).
Inside a container the OCI labels are not visible, so they come from the JSON the build bakes
(/opt/ddtree/image-labels.json, or $DDTREE_IMAGE_LABELS); on the host from `docker image inspect REF`.
Both give the same labels for the same image, so both give the same key.

The key is sha256 over the sorted `io.ddtree.*` labels plus the VCS revision: the target, SGLang, Python,
CUDA, the freeze, the patch series and the whole-tree digest (io.ddtree.tree.sha256). Labels a base image
brings along (an OCI label the build does not set) never enter it. Receipts use the key without the tree
label (`with_tree=False`) and compare tree digests on their own: a plain `docker build` labels the image
with TREE_SHA256's default "unknown" while the baked file holds the computed digest, and both must name
the same image.

The server's own identity (`served`): what the image it runs in baked (the labels file and the tree digest
the build wrote, never $DDTREE_IMAGE_LABELS) plus the tree digest `ddtree serve` measured before exec
(DDTREE_SERVED_TREE_SHA256). The patch `ddtree-served-identity` puts it in SGLang's /server_info as
`ddtree_image`, so a receipt records the server that was measured, not the client's view.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.fsutil import decode_text
from ddtree.jsontext import load_file, loads
from ddtree.weights.lock import default_lock_path, lock_identity

LABEL_FILES = (Path("/opt/ddtree/image-labels.json"), Path("/etc/ddtree/image-labels.json"))
KEY_PREFIX = "io.ddtree."
KEY_EXTRA = ("org.opencontainers.image.revision",)


def labels_from_json(data: Any, source: str) -> tuple[dict[str, str], str | None]:
    """(labels, image config id or None) from a labels dict or `docker image inspect` output."""
    image_id = None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        image_id = data[0].get("Id")
        config = data[0].get("Config")
        data = (config.get("Labels") if isinstance(config, dict) else None) or {}
    if not isinstance(data, dict):
        raise UserError(f"{source}: not a labels object or `docker image inspect` output")
    odd = next((k for k, v in data.items() if not isinstance(v, str)), None)
    if odd is not None:
        raise UserError(
            f"{source}: label {odd!r} is {type(data[odd]).__name__}, not a string; give the baked labels "
            "or `docker image inspect` output"
        )
    return dict(data), image_id if isinstance(image_id, str) else None


def read_labels_file(path: Path) -> tuple[dict[str, str], str | None]:
    data = load_file(Path(path), "give the baked labels or `docker inspect` output")
    return labels_from_json(data, str(path))


def local_labels(
    environ: Mapping[str, str] | None = None, labels_file: str | Path | None = None
) -> tuple[Path | None, dict[str, str], str | None]:
    """(source, labels, config id) of the image this runs in; (None, {}, None) outside any image."""
    environ = os.environ if environ is None else environ
    candidates = [Path(labels_file)] if labels_file else []
    if not labels_file and environ.get("DDTREE_IMAGE_LABELS"):
        candidates.append(Path(environ["DDTREE_IMAGE_LABELS"]))
    candidates += [] if labels_file else list(LABEL_FILES)
    for path in candidates:
        if path.is_file():
            labels, image_id = read_labels_file(path)
            return path, labels, image_id
    if labels_file:
        raise UserError(f"{labels_file}: no such file; give `docker image inspect IMAGE > FILE` output")
    return None, {}, None


def docker_labels(ref: str, docker: str = "docker") -> tuple[dict[str, str], str | None]:
    """(labels, config id) of a local image, through `docker image inspect` (on the host)."""
    try:
        done = subprocess.run([docker, "image", "inspect", ref], capture_output=True, timeout=60)
    except FileNotFoundError as exc:
        raise UserError(
            f"--image {ref}: no docker client here; run this on the host, or pass --labels with "
            "`docker image inspect` output",
            exit_code=2,
        ) from exc
    if done.returncode != 0:
        reason = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no answer"])[0]
        raise UserError(f"--image {ref}: docker image inspect failed ({reason})", exit_code=2)
    source = f"docker image inspect {ref}"
    text = decode_text(done.stdout, source)
    return labels_from_json(loads(text, source, "is the docker client a real one?"), source)


def identity_labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(labels.items()) if k.startswith(KEY_PREFIX) or k in KEY_EXTRA}


TREE_LABEL = "io.ddtree.tree.sha256"
SERVED_TREE_ENV = "DDTREE_SERVED_TREE_SHA256"


def identity_key(labels: Mapping[str, str], with_tree: bool = True) -> str | None:
    """sha256 hex over the identifying labels; None when there are none (not a ddtree image)."""
    chosen = {k: v for k, v in identity_labels(labels).items() if with_tree or k != TREE_LABEL}
    if not chosen:
        return None
    return hashlib.sha256(json.dumps(chosen, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def weights_lock(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The weights lock the server checks against ($DDTREE_WEIGHTS_LOCK, else env/weights.yaml): its path
    and ddtree.weights.lock's identity (`sha256:HEX`, as the SBOM records it); None when there is no lock.
    Receipts record it under image.weights_lock."""
    environ = os.environ if environ is None else environ
    path = default_lock_path(environ)
    if not path.is_file():
        return None
    return {"path": str(path), "identity": lock_identity(path)}


def known_tree(labels: Mapping[str, str]) -> str | None:
    """The tree digest a label set names; None when it is absent or the build's default "unknown"."""
    value = labels.get(TREE_LABEL)
    return value if value and value != "unknown" else None


def served(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The identity the server reports (see the module docstring); None outside a ddtree image."""
    from ddtree.receipts import tree_identity

    environ = os.environ if environ is None else environ
    path = next((p for p in LABEL_FILES if p.is_file()), None)
    if path is None:
        return None
    labels, _ = read_labels_file(path)
    baked = tree_identity.read_identity(tree_identity.IDENTITY_FILE)
    return {
        "key": identity_key(labels, with_tree=False),
        "labels": identity_labels(labels),
        "tree_sha256": (baked or {}).get("digest") or known_tree(labels),
        "tree_sha256_measured": environ.get(SERVED_TREE_ENV) or None,
    }


def describe(
    environ: Mapping[str, str] | None = None, labels_file: str | Path | None = None
) -> dict[str, Any]:
    """Everything a receipt records about the image: labels, key, config id, digests, the weights lock."""
    source, labels, image_id = local_labels(environ, labels_file)
    return {
        "key": identity_key(labels, with_tree=False),
        "config_digest": image_id,
        "labels_source": str(source) if source else None,
        "labels": labels,
        "target": labels.get("io.ddtree.target"),
        "patches_sha256": labels.get("io.ddtree.patches.sha256"),
        "freeze_sha256": labels.get("io.ddtree.freeze.sha256"),
        "tree_sha256": labels.get("io.ddtree.tree.sha256"),
        "weights_lock": weights_lock(environ),
    }
