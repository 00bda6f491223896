"""Self-check `tree` (with `--full`): every installed file against RECORD, and the build's tree digest.

Registered into `ddtree selfcheck` (CHECK_MODULES in cmd.py); the scan is
ddtree.receipts.tree_identity's.
It compares the digest with the one the build baked (/opt/ddtree/tree-identity.json, DDTREE_TREE_IDENTITY
to point elsewhere) and with the io.ddtree.tree.sha256 label when the labels carry a real value.
"""

from __future__ import annotations

from pathlib import Path

from ddtree import image_identity
from ddtree.receipts import tree_identity
from ddtree.selfcheck.checks import CheckResult, Context, check, failed, passed, skipped

SHOWN = 3


@check("tree")
def tree_check(ctx: Context) -> CheckResult:
    if not ctx.options.get("full"):
        return skipped("run with --full to check every installed file against its RECORD (seconds)")
    site, extra = tree_identity.image_roots()
    report = tree_identity.scan(site, extra)
    baked_path = Path(ctx.environ.get("DDTREE_TREE_IDENTITY") or tree_identity.IDENTITY_FILE)
    baked = tree_identity.read_identity(baked_path)
    _, labels, _ = image_identity.local_labels(ctx.environ)
    label = labels.get(tree_identity.LABEL, "")
    data = {**report.to_json(), "baked": baked and baked.get("digest"), "label": label or None}
    problems = report.problems()
    if baked and baked["digest"] != report.digest:
        problems.append(f"tree digest {report.digest[:16]} differs from the build's {baked['digest'][:16]}")
    if label not in ("", "unknown") and label != report.digest:
        problems.append(
            f"tree digest {report.digest[:16]} differs from label {tree_identity.LABEL}={label[:16]}"
        )
    scanned = f"{report.files} files, {report.bytes / 1e9:.2f} GB, {report.distributions} distributions"
    if problems:
        shown = "; ".join(problems[:SHOWN]) + (
            f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        )
        return failed(
            f"{len(problems)} problem(s) in {site}: {shown} ({scanned}); rebuild the image, never edit it",
            **data,
        )
    if baked is None:
        return passed(
            f"{scanned} match their RECORDs ({report.patched} patched, by the manifest) in "
            f"{report.seconds:.1f} s; no baked digest to compare ({baked_path} absent: not the image?)",
            **data,
        )
    return passed(
        f"{scanned} match their RECORDs ({report.patched} patched) and the build's digest "
        f"{report.digest[:16]} in {report.seconds:.1f} s",
        **data,
    )
