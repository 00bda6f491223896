"""Self-check of the image itself: profile, lock, patches, labels, GPUs, /dev/shm, weights.

Registered into `ddtree selfcheck` (see cmd.py). Each check looks at one thing and says what it
saw in one line; a fix is named in every failure. What the checks read, and where it is in the image:

    target        the profile DDTREE_TARGET names (DDTREE_ENV_DIR/targets, /opt/ddtree/env/targets)
    lock          installed distributions versus the baked lock (DDTREE_LOCK, /opt/ddtree/requirements.lock)
                  and, for what is installed of it, the router's lock beside it (router.lock)
    patches       the patch engine's verify of site-packages against the manifest baked beside it
    patched-files every file the manifest lists byte-compiles (a .pyc built from its exact bytes counts)
    labels        the image's labels, baked as JSON (DDTREE_IMAGE_LABELS, /opt/ddtree/image-labels.json),
                  agree with the target, the running Python, SGLang, the freeze and the patch series
    gpu, shm      as `ddtree serve` checks them
    weights, drafter   the fast weights checks, on the folders the launch would use
    weights-hash  sha256 of every target shard, only with --full-hash; against --weights-manifest if given
                  (without one, when the weights lock lists the files, the weights-lock check hashes instead)

DDTREE_SKIP_CHECKS (the same list `ddtree serve` honours: weights, drafter, gpu, shm, port) turns a check
into "skip", for machines that cannot run it (no GPU on a build host).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from ddtree import gpu, image_identity, lockfile
from ddtree.errors import UserError
from ddtree.fsutil import sha256_file
from ddtree.jsontext import load_file
from ddtree.selfcheck.checks import CheckResult, Context, check, failed, passed, skipped
from ddtree.serve import launch as serve_launch
from ddtree.serve import preflight as serve_preflight
from ddtree.weights import hashes as weights_hash
from ddtree.weights import lock as weights_lock

IMAGE_LOCK = Path("/opt/ddtree/requirements.lock")
SGLANG = "sglang"


def _plan(environ: Mapping[str, str]) -> serve_launch.Launch:
    return _plan_cached(tuple(sorted(environ.items())))


@lru_cache(maxsize=4)
def _plan_cached(items: tuple[tuple[str, str], ...]) -> serve_launch.Launch:
    return serve_launch.plan(dict(items))


def _skip_list(ctx: Context) -> set[str]:
    try:
        return serve_preflight.skipped_checks(ctx.environ)
    except UserError:
        return set()


def _plan_or_none(ctx: Context) -> serve_launch.Launch | None:
    try:
        return _plan(ctx.environ)
    except UserError:
        return None


def site_packages_of(distribution: str = SGLANG) -> Path | None:
    """The folder holding the package, found without importing it (sglang's import is heavy)."""
    spec = importlib.util.find_spec(distribution)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


@check("target")
def target_check(ctx: Context) -> CheckResult:
    if not ctx.environ.get("DDTREE_TARGET"):
        return skipped("DDTREE_TARGET is not set (the image sets it); no profile to check against")
    if ctx.environ["DDTREE_TARGET"] == "auto" and _nvidia_smi(ctx) is None:
        return skipped("DDTREE_TARGET=auto and no GPU runtime here: the profile is chosen on the GPU host")
    launch = _plan(ctx.environ)  # UserError -> fail with its message
    t = launch.target
    return passed(
        f"{t.name}: {t.gpu.count} x {t.gpu.model} (sm {t.compute_capability}), TP {t.tensor_parallel}, "
        f"{t.interconnect} ({t.path})",
        name=t.name,
        path=str(t.path),
        compute_capability=t.compute_capability,
        tensor_parallel=t.tensor_parallel,
    )


@check("lock")
def lock_check(ctx: Context) -> CheckResult:
    path = Path(ctx.environ.get("DDTREE_LOCK") or IMAGE_LOCK)
    if not path.is_file():
        return skipped(f"no lock at {path} (not in the image? set DDTREE_LOCK to check another one)")
    expected = lockfile.read_lock(path)
    installed = lockfile.installed_versions()
    problems = lockfile.diff_installed(expected, installed)
    # The router's own lock beside it (the image adds sglang-router from it): what is installed of it must
    # be its version; an image built without the router (a subset lock) has none of it to check.
    router_lock = path.parent / "router.lock"
    if router_lock.is_file():
        router = {n: v for n, v in lockfile.read_lock(router_lock).items() if n in installed}
        problems += [p for p in lockfile.diff_installed(router, installed) if p not in problems]
    data = {"lock": str(path), "pinned": len(expected), "problems": problems}
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        return failed(
            f"{len(problems)} of {len(expected)} distributions differ from {path}: {shown}; "
            "rebuild the image (never pip install into it)",
            **data,
        )
    return passed(f"{len(expected)} distributions installed exactly as {path} pins them", **data)


def _manifest_json(root: Path) -> dict[str, Any] | None:
    from ddtree.patchset import manifest

    path = manifest.default_dir(root) / manifest.JSON_NAME
    if not path.is_file():
        return None
    data = load_file(path, "a damaged patch manifest: re-apply the series (rebuild the image)")
    return data if isinstance(data, dict) else None


@check("patches")
def patches_check(ctx: Context) -> CheckResult:
    root = site_packages_of()
    if root is None:
        return skipped("sglang is not installed in this interpreter (not the image?)")
    if _manifest_json(root) is None:
        return failed(
            f"no patch manifest in {root}/.ddtree-patchset: the image was built without the patch step"
        )
    from ddtree.patchset import verify

    result = verify(root)
    data = {"root": str(root), "files": result.files_checked, "series_digest": result.series_digest}
    if not result.ok:
        return failed(result.summary(), problems=result.problems, **data)
    return passed(result.summary(), **data)


@check("patched-files")
def patched_files_check(ctx: Context) -> CheckResult:
    """A file whose hash-based .pyc (written by apply) was compiled from exactly its bytes is known to
    compile; only the others are compiled here (compile parses, so no separate ast.parse)."""
    from ddtree.patchset.signatures import cached_code

    root = site_packages_of()
    data = _manifest_json(root) if root else None
    if root is None or data is None:
        return skipped("no patched tree here (see the patches check)")
    files = sorted(data.get("files") or {})
    broken = []
    for rel in files:
        path = root / rel
        if not rel.endswith(".py"):
            continue
        try:
            source = path.read_bytes()
            if cached_code(path, source) is None:
                compile(source, str(path), "exec")
        except FileNotFoundError:
            broken.append(f"{path}: missing")
        except SyntaxError as exc:
            broken.append(f"{path}:{exc.lineno}: {exc.msg}")
    if broken:
        return failed(
            f"{len(broken)} patched file(s) do not parse: {broken[0]}; rebuild the image", broken=broken
        )
    return passed(f"{len(files)} patched file(s) parse and compile", files=files)


def read_labels(environ: Mapping[str, str]) -> tuple[Path | None, dict[str, str]]:
    """The labels baked into the image as JSON (dict or `docker inspect` output), by ddtree.image_identity."""
    path, labels, _ = image_identity.local_labels(environ)
    return path, labels


def expected_labels(ctx: Context) -> dict[str, str]:
    """What the labels must say, from what is really here."""
    want: dict[str, str] = {"io.ddtree.python.version": f"{sys.version_info.major}.{sys.version_info.minor}"}
    target = ctx.environ.get("DDTREE_TARGET", "")
    if target == "auto":  # the image is still built for one target; it says which in DDTREE_IMAGE_TARGET
        target = ctx.environ.get("DDTREE_IMAGE_TARGET", "")
    if target:
        want["io.ddtree.target"] = target
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        want["io.ddtree.sglang.version"] = importlib.metadata.version(SGLANG)
    launch = _plan_or_none(ctx)
    env_dir = launch.target.path.parent.parent if launch else None
    if env_dir and (env_dir / "freeze.txt").is_file():
        want["io.ddtree.freeze.sha256"] = sha256_file(env_dir / "freeze.txt")
    root = site_packages_of()
    manifest = _manifest_json(root) if root else None
    if manifest and manifest.get("series_digest"):
        want["io.ddtree.patches.sha256"] = str(manifest["series_digest"])
    return want


@check("labels")
def labels_check(ctx: Context) -> CheckResult:
    path, labels = read_labels(ctx.environ)
    if path is None:
        return skipped(
            "no baked labels file (/opt/ddtree/image-labels.json); outside the image, pass "
            "`docker inspect IMAGE > labels.json` as DDTREE_IMAGE_LABELS"
        )
    want = expected_labels(ctx)
    wrong = [f"{k}={labels.get(k)!r}, here {v!r}" for k, v in want.items() if labels.get(k) != v]
    data = {"file": str(path), "checked": sorted(want), "labels": labels}
    if wrong:
        return failed(
            f"{len(wrong)} label(s) in {path} disagree with this container: {'; '.join(wrong)}; "
            "run the image built for this target, or rebuild it",
            **data,
        )
    return passed(f"{len(want)} labels agree ({', '.join(sorted(want))})", **data)


def _needs_plan(ctx: Context, name: str) -> serve_launch.Launch | CheckResult:
    if name in _skip_list(ctx):
        return skipped(f"skipped by DDTREE_SKIP_CHECKS={ctx.environ.get('DDTREE_SKIP_CHECKS')}")
    launch = _plan_or_none(ctx)
    if launch is None:
        return skipped("no target profile (see the target check)")
    return launch


def _mounted_plan(
    ctx: Context, name: str, folder_of: Callable[[serve_launch.Launch], Path]
) -> serve_launch.Launch | CheckResult:
    """The launch plan when its `folder_of` folder is there; a skip otherwise (see _needs_plan).

    A folder that does not exist at all is "not mounted here" (a build-host run), not a broken one.
    `ddtree serve` fails on it; the self-check reports what it could look at, and says what it could not.
    An existing but empty or incomplete folder is a failure (see weights/folders.py).
    """
    launch = _needs_plan(ctx, name)
    if isinstance(launch, CheckResult):
        return launch
    folder = folder_of(launch)
    if folder.exists():
        return launch
    return skipped(
        f"{folder} is not mounted here: nothing to check (`ddtree serve` refuses to start without it)"
    )


def _nvidia_smi(ctx: Context) -> str | None:
    """nvidia-smi on the context's PATH: its absence means no GPU runtime in this container."""
    return shutil.which("nvidia-smi", path=ctx.environ.get("PATH", os.defpath))


@check("gpu")
def gpu_check(ctx: Context) -> CheckResult:
    launch = _needs_plan(ctx, "gpu")
    if isinstance(launch, CheckResult):
        return launch
    exe = _nvidia_smi(ctx)
    if exe is None:
        return skipped(
            "no GPU runtime in this container (nvidia-smi absent): a build-host run; on the GPU host "
            "start it with GPUs (`ddtree serve` refuses to start without them)"
        )
    found = serve_preflight.check_gpu(launch, ctx.environ, lambda argv: gpu.run_nvidia_smi([exe, *argv[1:]]))
    return passed(
        gpu.describe(found, serve_launch.tp_of(launch)),
        count=len(found),
        gpus=[vars(g) for g in found],
    )


@check("shm")
def shm_check(ctx: Context) -> CheckResult:
    if "shm" in _skip_list(ctx):
        return skipped(f"skipped by DDTREE_SKIP_CHECKS={ctx.environ.get('DDTREE_SKIP_CHECKS')}")
    if _nvidia_smi(ctx) is None:
        size = gpu.shm_bytes()
        return skipped(
            f"/dev/shm {size / 2**20:.0f} MiB; no GPU runtime here, so no NCCL to feed "
            "(checked on the GPU host)",
            bytes=size,
        )
    size = gpu.check_shm(serve_preflight.shm_floor(ctx.environ))
    return passed(f"/dev/shm {size / 2**30:.1f} GiB", bytes=size)


@check("weights")
def weights_check(ctx: Context) -> CheckResult:
    launch = _mounted_plan(ctx, "weights", serve_launch.Launch.model_dir)
    if isinstance(launch, CheckResult):
        return launch
    summary = serve_preflight.check_weights(launch)
    return passed(
        f"{summary.path}: {summary.model_type}, {summary.num_hidden_layers} layers, "
        f"{len(summary.shards)} shards, {summary.total_bytes / 1e9:.1f} GB (headers and sizes)",
        path=str(summary.path),
        shards=len(summary.shards),
        bytes=summary.total_bytes,
    )


@check("drafter")
def drafter_check(ctx: Context) -> CheckResult:
    launch = _mounted_plan(ctx, "drafter", serve_launch.Launch.drafter_dir)
    if isinstance(launch, CheckResult):
        return launch
    target = None
    # A broken target is the weights check's finding; the drafter is still checked on its own. Its
    # shape facts come from the target's config: the weights check has read the shard headers already.
    with contextlib.suppress(UserError):
        target = serve_preflight.target_config(launch)
    summary = serve_preflight.check_drafter(launch, target)
    return passed(
        f"{summary.path}: block size {summary.block_size}, "
        f"captures target layers {list(summary.target_layer_ids or [])}",
        path=str(summary.path),
        block_size=summary.block_size,
    )


def _lock_pins_files(ctx: Context, role: str) -> bool:
    """Whether the weights lock lists the role's files (then weights-lock hashes against it)."""
    try:
        lock = weights_lock.load_lock(weights_lock.default_lock_path(ctx.environ))
    except UserError:
        return False
    return lock.models[role].files is not None


@check("weights-hash")
def weights_hash_check(ctx: Context) -> CheckResult:
    if not ctx.options.get("full_hash"):
        return skipped("run with --full-hash to hash every shard")
    launch = _needs_plan(ctx, "weights")
    if isinstance(launch, CheckResult):
        return launch
    folder = launch.model_dir()
    manifest = ctx.options.get("weights_manifest") or ctx.environ.get("DDTREE_WEIGHTS_MANIFEST")
    manifest_path = Path(manifest) if manifest else None
    if manifest_path is None and _lock_pins_files(ctx, "target"):
        return skipped("hashed against the weights lock by the weights-lock check (no --weights-manifest)")
    report = weights_hash.full_hash(folder, manifest=manifest_path, workers=os.cpu_count())
    rate = report.total_bytes / max(report.seconds, 1e-9) / 1e9
    data = {
        "folder": str(folder),
        "manifest": manifest,
        "seconds": round(report.seconds, 2),
        "digests": report.digests,
    }
    if manifest_path is None:
        return passed(
            f"{len(report.digests)} shards hashed in {report.seconds:.1f} s ({rate:.2f} GB/s); "
            "no manifest given (--weights-manifest), digests in the JSON report",
            **data,
        )
    if not report.ok:
        return failed(weights_hash.describe_hash_failure(report, folder, manifest_path), **data)
    return passed(
        f"{len(report.digests)} shards match {manifest_path} ({report.seconds:.1f} s, {rate:.2f} GB/s)",
        **data,
    )
