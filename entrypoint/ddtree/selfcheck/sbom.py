"""Self-check summary of the image's CycloneDX SBOM (/opt/ddtree/sbom.cdx.json, DDTREE_SBOM to override).

`ddtree-build image` writes the SBOM on the build host with cyclonedx-python-lib (build/ddtree_build/sbom.py);
here it is only read, with the stdlib: how many Python distributions (and whether every one carries a
sha256), the base image, the patch series digest, the weights lock and the models it names. It fails when
the SBOM's weights-lock sha256 or patch series digest disagree with what is installed beside it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.jsontext import load_file
from ddtree.selfcheck.checks import CheckResult, Context, check, failed, passed, skipped
from ddtree.weights import lock as weights_lock

IMAGE_SBOM = Path("/opt/ddtree/sbom.cdx.json")
PROP_ROLE = "io.ddtree:role"  # the property names build/ddtree_build/sbom.py writes


def _props(component: dict[str, Any]) -> dict[str, str]:
    return {str(p.get("name")): str(p.get("value")) for p in component.get("properties") or []}


def read_sbom(path: Path) -> dict[str, Any]:
    data = load_file(path, "the SBOM cannot be read as JSON: rebuild the image")
    if not isinstance(data, dict) or data.get("bomFormat") != "CycloneDX":
        raise UserError(f"SBOM {path} is not a CycloneDX document: rebuild the image")
    return data


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    """The facts the check prints, from the components' ddtree role properties."""
    by_role: dict[str, list[dict[str, Any]]] = {}
    for component in data.get("components") or []:
        by_role.setdefault(_props(component).get(PROP_ROLE, "other"), []).append(component)
    dists = by_role.get("python-distribution", [])
    base = (by_role.get("base-image") or [{}])[0]
    series = (by_role.get("patch-series") or [{}])[0]
    lock = (by_role.get("weights-lock") or [{}])[0]
    models = [c for role, items in by_role.items() if role.endswith("-weights") for c in items]
    return {
        "spec": data.get("specVersion"),
        "distributions": len(dists),
        "unhashed": sorted(c.get("name", "?") for c in dists if not c.get("hashes")),
        "base": f"{base.get('name', '?')}:{base.get('version', '?')}",
        "series": series.get("version"),
        "weights_lock": _props(lock).get("io.ddtree:weights-lock-sha256"),
        "models": [f"{c.get('name')}@{str(c.get('version'))[:12]}" for c in models],
    }


@check("sbom")
def sbom_check(ctx: Context) -> CheckResult:
    path = Path(ctx.environ.get("DDTREE_SBOM") or IMAGE_SBOM)
    if not path.is_file():
        return skipped(f"no SBOM at {path} (not in the image? set DDTREE_SBOM to read another one)")
    facts = summarise(read_sbom(path))
    facts["file"] = str(path)
    lock_path = weights_lock.default_lock_path(ctx.environ)
    if facts["weights_lock"] and lock_path.is_file():
        installed = weights_lock.lock_identity(lock_path).removeprefix("sha256:")
        if installed != facts["weights_lock"]:
            return failed(
                f"SBOM {path} names weights lock sha256 {facts['weights_lock'][:16]}... but {lock_path} is "
                f"{installed[:16]}...: the image's env/ changed after the build; rebuild the image",
                **facts,
            )
    from ddtree.selfcheck.image import _manifest_json, site_packages_of

    root = site_packages_of()
    manifest = _manifest_json(root) if root else None
    if manifest and manifest.get("series_digest") and facts["series"] != manifest["series_digest"]:
        return failed(
            f"SBOM {path} names patch series {facts['series']} but the patched tree says "
            f"{manifest['series_digest']}: rebuild the image",
            **facts,
        )
    hashed = "all hashed" if not facts["unhashed"] else f"{len(facts['unhashed'])} without a hash"
    return passed(
        f"CycloneDX {facts['spec']}: {facts['distributions']} Python distributions ({hashed}), base "
        f"{facts['base']}, patch series {str(facts['series'])[:12]}, weights lock "
        f"{str(facts['weights_lock'])[:12]} ({', '.join(facts['models']) or 'no models'}); "
        f"{os.path.basename(path)}",
        **facts,
    )
