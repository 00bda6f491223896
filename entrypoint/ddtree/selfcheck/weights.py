"""Self-check of the weights against the weights lock (env/weights.yaml), registered into selfcheck.

weights-lock   the mounted target and drafter against their lock entries: file list, sizes and the
               small files' sha256 always; every file's sha256 with --full-hash (weights_lock.compare).
               A lock entry with `unknown` values passes and says what it could not compare;
               DDTREE_ALLOW_UNLOCKED_WEIGHTS=1 turns a difference into a pass that says so.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from ddtree.errors import UserError
from ddtree.selfcheck.checks import CheckResult, Context, check, failed, passed, skipped
from ddtree.selfcheck.image import _needs_plan
from ddtree.weights import lock as weights_lock


@check("weights-lock")
def weights_lock_check(ctx: Context) -> CheckResult:
    launch = _needs_plan(ctx, "weights")
    if isinstance(launch, CheckResult):
        return launch
    path = weights_lock.default_lock_path(ctx.environ)
    if not path.is_file():
        return skipped(f"no weights lock at {path} (an image built before the lock existed?)")
    folders: dict[str, Callable[[], Path]] = {"target": launch.model_dir, "drafter": launch.drafter_dir}
    lines: list[str] = []
    data: dict[str, object] = {"lock": str(path), "identity": weights_lock.lock_identity(path)}
    compared = 0
    for role, folder_of in folders.items():
        folder = launch.mounted_dir(role)
        if not folder.exists():
            lines.append(f"{role}: {folder} not mounted")
            continue
        log = io.StringIO()
        try:
            comparison = weights_lock.enforce(
                role,
                folder_of(),
                ctx.environ,
                log=lambda line, out=log: out.write(line + "\n"),
                full=bool(ctx.options.get("full_hash")),
                lock_path=path,
            )
        except UserError as exc:
            return failed(str(exc), **data)
        compared += 1
        said = log.getvalue().strip().split(None, 2)[-1] if log.getvalue().strip() else f"{role} compared"
        lines.append(said)
        if comparison is not None:
            data[role] = {"problems": comparison.problems, "files": comparison.compared_files}
    if not compared:
        return skipped("; ".join(lines) + " (nothing to compare on this machine)", **data)
    return passed("; ".join(lines), **data)
