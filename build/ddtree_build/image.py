"""`ddtree-build image`: env/ + patches/ -> a tagged, labelled image, built with BuildKit.

Why a staged build context: only what the Dockerfile copies (env/, patches/, the ddtree runtime package)
enters it, so nothing else of the checkout (venvs, caches, credentials) can reach the builder, and the
context's bytes are exactly the inputs the labels describe. The per-commit facts (revision, commit time,
freeze and patch-series digests) go in as build arguments, consumed only by the last layer.
Secrets (the host CA bundle, an HF token) go in as BuildKit secrets: mounted for one step, never stored.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ddtree.fsutil import atomic_write, sha256_file

from ddtree_build import docker_build, engine, render
from ddtree_build.errors import UserError, one_line
from ddtree_build.paths import CACHE_DIR, ENV_DIR, PATCHES_DIR, REPO_ROOT

BASE_CHOICES: tuple[str, ...] = ("auto", *render.BASES)
DEFAULT_NAME = "ddtree"
REGISTRY_HOST = "registry-1.docker.io"
REGISTRY_PROBE_TIMEOUT_S = 3.0
# What the Dockerfile copies from the context; the staged context holds exactly these.
CONTEXT_DIRS: tuple[str, ...] = ("env", "patches", "entrypoint/ddtree")
# Where a lock given with --lock lands inside the context (LOCK_FILE points at it).
OVERRIDE_LOCK = "build-inputs/requirements.lock"
# The CycloneDX SBOM in the context (sbom.py); the Dockerfile copies it to /opt/ddtree/sbom.cdx.json.
SBOM_CONTEXT = "build-inputs/sbom.cdx.json"
LABEL_PREFIXES: tuple[str, ...] = ("org.opencontainers.image.", "io.ddtree.")
# The Dockerfile stage that writes the whole-tree identity, and where
# (ddtree.receipts.tree_identity.IDENTITY_FILE).
TREE_STAGE = "patches"
TREE_FILE = "/opt/ddtree/tree-identity.json"


@dataclass
class ImageResult:
    """What a build produced; printed as the summary and returned to tests and benchmarks."""

    tags: list[str]
    image_id: str
    size_bytes: int
    labels: dict[str, str]
    base: str
    seconds: float
    dockerfile: Path
    build_args: dict[str, str] = field(default_factory=dict)
    sbom: Path | None = None  # the CycloneDX SBOM written beside the kept Dockerfile


# ---------------------------------------------------------------- facts from git and the work tree


def _git(*args: str) -> str:
    out = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def commit_facts() -> tuple[str, int]:
    """(full sha or "unknown", commit time) of HEAD; "-dirty" when the inputs changed.

    Dirty means a tracked or untracked change under what enters the image (env/, patches/, entrypoint/,
    the template): such an image is not the commit's, and its tag and revision label say so.
    """
    sha = _git("rev-parse", "HEAD")
    if not sha:
        return "unknown", 0
    epoch = int(_git("log", "-1", "--format=%ct") or 0)
    paths = [*CONTEXT_DIRS, str(render.TEMPLATES_DIR.relative_to(REPO_ROOT))]
    dirty = bool(_git("status", "--porcelain", "--", *paths))
    return sha + ("-dirty" if dirty else ""), epoch


def tag_suffix(revision: str) -> str:
    """The short form of a VCS_REF for tags and IMAGE_VERSION: 12 hex digits, "-dirty" kept, so every
    short form comes from the one read of git per build."""
    if revision == "unknown":
        return "nogit"
    sha = revision.removesuffix("-dirty")
    return sha[:12] + revision[len(sha) :]


def rfc3339(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def patch_series_digest() -> str:
    """The patch engine's own digest of patches/series.yaml and its diffs ("none" without a series)."""
    series_file = PATCHES_DIR / "series.yaml"
    if not series_file.exists():
        return "none"
    from ddtree.patchset import series

    return series.load(series_file).digest()


def build_args_for(ctx: render.RenderContext, lock_file: str, pip_check: bool) -> dict[str, str]:
    """The per-commit ARGs of the Dockerfile (see its header); sorted so the command line is stable."""
    from ddtree import __version__

    revision, epoch = commit_facts()
    freeze = ENV_DIR / "freeze.txt"
    args = {
        "BASE_IMAGE": ctx.base_image,
        "FREEZE_SHA256": sha256_file(freeze) if freeze.exists() else "none",
        "IMAGE_CREATED": rfc3339(epoch),
        "IMAGE_VERSION": f"{__version__}+g{tag_suffix(revision)}",
        # The router's lock pins the full stack's versions: a subset lock (the same switch) goes without it.
        "INSTALL_ROUTER": "1" if pip_check else "0",
        "LOCK_FILE": lock_file,
        "PATCHES_SHA256": patch_series_digest(),
        "PIP_CHECK": "1" if pip_check else "0",
        "SOURCE_DATE_EPOCH": str(epoch),
        "VCS_REF": revision,
    }
    if ctx.base == "nvidia":
        args["BASE_DIGEST"] = ctx.base_digest
    return dict(sorted(args.items()))


# ---------------------------------------------------------------- base choice


def registry_reachable(host: str = REGISTRY_HOST, timeout: float = REGISTRY_PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to the registry opens within `timeout`; else the reason it did not."""
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return None
    except OSError as exc:
        return f"{host}:443: {exc.strerror or exc}"


def choose_base(requested: str, say: Callable[[str], None]) -> str:
    """auto -> nvidia when Docker Hub answers, else the registry-free base (said out loud)."""
    if requested != "auto":
        return requested
    reason = registry_reachable()
    if reason is None:
        say(f"image: {REGISTRY_HOST} answers; using the nvidia CUDA base")
        return "nvidia"
    say(f"image: no container registry reachable ({reason}); using the registry-free base (debootstrap)")
    return "bootstrap"


# ---------------------------------------------------------------- context and secrets


def stage_context(folder: Path, dockerfile_text: str, lock: Path | None) -> Path:
    """A fresh build context with the Dockerfile and exactly CONTEXT_DIRS (+ an override lock)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*.tmp")
    for rel in CONTEXT_DIRS:
        src = REPO_ROOT / rel
        if src.is_dir():
            shutil.copytree(src, folder / rel, ignore=ignore)
        else:
            (folder / rel).mkdir(parents=True)
    if lock is not None:
        if not lock.is_file():
            raise UserError(f"--lock {lock}: no such file; pass a lock written by `ddtree-build lock`")
        (folder / OVERRIDE_LOCK).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lock, folder / OVERRIDE_LOCK)
    atomic_write(folder / "Dockerfile", dockerfile_text)
    return folder / "Dockerfile"


@contextlib.contextmanager
def build_secrets(hf_token: str | None, ca_bundle: Path | None = None) -> Iterator[dict[str, Path]]:
    """id -> file for `--secret`: the CA bundle (default: the host's), and the HF token in a 0600 file
    deleted afterwards."""
    secrets: dict[str, Path] = {}
    ca = ca_bundle or docker_build.HOST_CA_BUNDLE
    if ca.is_file():
        secrets["ca"] = ca
    with tempfile.TemporaryDirectory(prefix="ddtree-secrets-") as tmp:
        if hf_token:
            token_file = Path(tmp) / "hf_token"
            token_file.touch(mode=0o600)
            token_file.write_text(hf_token)
            secrets["hf_token"] = token_file
        yield secrets


# ---------------------------------------------------------------- build and report


def inspect_image(tag: str) -> dict:
    """`docker image inspect` through the build client, so it asks the engine the build went to."""
    out = subprocess.run(
        [docker_build.docker_cli(), "image", "inspect", tag], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise UserError(f"docker image inspect {tag} failed: {one_line(out.stderr)}")
    return json.loads(out.stdout)[0]


def build(
    target: str,
    base: str = "auto",
    name: str = DEFAULT_NAME,
    *,
    lock: Path | None = None,
    pip_check: bool | None = None,
    hf_token: str | None = None,
    ca_bundle: Path | None = None,
    log: Path | None = None,
    extra_tags: tuple[str, ...] = (),
    no_cache: bool = False,
    context_hook: Callable[[Path], None] | None = None,
    say: Callable[[str], None] = print,
) -> ImageResult:
    """Set up the engine, render, build with BuildKit, tag `<name>:<target>` and `<name>:<target>-<sha>`."""
    engine.ensure(say)
    chosen = choose_base(base, say)
    if chosen == "bootstrap":
        from ddtree_build import base_image

        base_image.ensure_base_image(say)
    ctx = render.build_context(target, chosen)
    # The local image first: a probe of the registry (up to 3 s offline) is only needed when it is absent.
    if (
        chosen == "nvidia"
        and not docker_build.image_exists(ctx.base_image)
        and registry_reachable() is not None
    ):
        raise UserError(
            f"the nvidia base {ctx.base_image} is not here and {REGISTRY_HOST} cannot be reached; "
            "pull it on a connected host (docker save | docker load) or use --base bootstrap"
        )
    text = render.render_text(ctx)
    work = CACHE_DIR / "image"
    work.mkdir(parents=True, exist_ok=True)
    # A private context per build: concurrent builds (tests, benchmarks, make image) never share one.
    folder = Path(tempfile.mkdtemp(prefix=f"context-{target}-{chosen}-", dir=work))
    try:
        dockerfile = stage_context(folder, text, lock)
        if context_hook is not None:  # benchmarks edit the staged copy, never the checkout
            context_hook(folder)
        lock_file = OVERRIDE_LOCK if lock is not None else ctx.lock_file
        if not (folder / lock_file).is_file():
            raise UserError(f"{lock_file} is missing; run `make lock` (ddtree-build lock) first")
        build_args = build_args_for(ctx, lock_file, pip_check if pip_check is not None else lock is None)
        kept_sbom = work / f"sbom.{target}-{chosen}.cdx.json"
        write_image_sbom(folder, lock_file, ctx, build_args, f"{name}:{target}", kept_sbom)
        tags = [f"{name}:{target}", f"{name}:{target}-{tag_suffix(build_args['VCS_REF'])}", *extra_tags]
        iid_file = folder / "image-id"
        extra = ["--iidfile", str(iid_file), *(["--no-cache"] if no_cache else [])]
        for extra_tag in tags[1:]:
            extra += ["-t", extra_tag]
        say(f"image: building {', '.join(tags)} (target {target}, base {chosen})")
        start = time.monotonic()
        token = hf_token if hf_token is not None else os.environ.get("HF_TOKEN")
        with build_secrets(token, ca_bundle) as secrets:
            build_args["TREE_SHA256"] = tree_digest_of_stage(
                folder, dockerfile, build_args, secrets, log, f"{name}:{target}-tree-stage", no_cache
            )
            docker_build.build_image(
                folder,
                tags[0],
                dockerfile=dockerfile,
                build_args=build_args,
                secrets=secrets,
                log=log,
                extra_args=extra,
            )
        seconds = time.monotonic() - start
        image_id = iid_file.read_text().strip()
        # The Dockerfile this image was built from, kept for people (the context itself is removed).
        kept = work / f"Dockerfile.{target}-{chosen}"
        atomic_write(kept, dockerfile.read_text())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    info = inspect_image(image_id)  # by id: a concurrent build may have moved the tag meanwhile
    labels = {k: v for k, v in sorted((info.get("Config", {}).get("Labels") or {}).items())}
    return ImageResult(
        tags=tags,
        image_id=info["Id"],
        size_bytes=int(info.get("Size", 0)),
        labels=labels,
        base=chosen,
        seconds=seconds,
        dockerfile=kept,
        build_args=build_args,
        sbom=kept_sbom,
    )


def write_image_sbom(
    folder: Path,
    lock_file: str,
    ctx: render.RenderContext,
    build_args: dict[str, str],
    image: str,
    kept: Path,
) -> None:
    """The CycloneDX SBOM into the staged context (SBOM_CONTEXT, copied into the image) and to `kept`."""
    from ddtree_build import sbom

    inputs = sbom.SbomInputs(
        image_name=image,
        version=build_args["IMAGE_VERSION"],
        lock=folder / lock_file,
        base_image=ctx.base_image,
        base_digest=ctx.base_digest,
        series_digest=build_args["PATCHES_SHA256"],
        weights_lock=folder / "env" / "weights.yaml",
    )
    sbom.write_sbom(inputs, folder / SBOM_CONTEXT, kept)


def tree_digest_of_stage(
    folder: Path,
    dockerfile: Path,
    build_args: dict[str, str],
    secrets: dict[str, Path],
    log: Path | None,
    stage_tag: str,
    no_cache: bool,
) -> str:
    """Build the `patches` stage, read the tree digest it wrote, and drop the stage's tag.

    The digest depends on what pip and the patch engine put on disk, so only the build knows it; building
    that stage first (the full build then reuses it from the cache) lets the final LABEL carry it."""
    iid_file = folder / "stage-id"
    stage_log = log.with_name(log.name + ".tree-stage") if log else None
    docker_build.build_image(
        folder,
        stage_tag,
        dockerfile=dockerfile,
        build_args=build_args,
        secrets=secrets,
        log=stage_log,
        extra_args=[
            "--target",
            TREE_STAGE,
            "--iidfile",
            str(iid_file),
            *(["--no-cache"] if no_cache else []),
        ],
    )
    client = docker_build.docker_cli()
    done = subprocess.run(
        [
            client,
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "cat",
            iid_file.read_text().strip(),
            TREE_FILE,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    subprocess.run([client, "image", "rm", stage_tag], capture_output=True, check=False)
    if done.returncode != 0:
        raise UserError(f"reading {TREE_FILE} from the {TREE_STAGE} stage failed: {one_line(done.stderr)}")
    try:
        return str(json.loads(done.stdout)["digest"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UserError(
            f"{TREE_FILE} in the {TREE_STAGE} stage has no digest ({exc}); see the build log"
        ) from exc


def summary(result: ImageResult) -> str:
    lines = [
        f"image: built in {result.seconds:.0f} s on the {result.base} base",
        f"  tags:    {'  '.join(result.tags)}",
        f"  digest:  {result.image_id}  (config digest; a registry digest exists only after a push)",
        f"  size:    {result.size_bytes / 1e9:.2f} GB ({result.size_bytes} bytes)",
        f"  sbom:    {result.sbom} (also /opt/ddtree/sbom.cdx.json in the image)",
        "  labels:",
    ]
    lines += [f"    {key}={value}" for key, value in result.labels.items() if key.startswith(LABEL_PREFIXES)]
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI


def _cmd_image(args: argparse.Namespace) -> int:
    result = build(
        args.target,
        args.base,
        args.tag,
        lock=Path(args.lock) if args.lock else None,
        pip_check=None if args.pip_check is None else args.pip_check == "on",
        say=engine.say_stderr,
    )
    print(summary(result))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "image",
        help="render and build the image with BuildKit; tags <name>:<target> and <name>:<target>-<sha>",
    )
    parser.add_argument("--target", choices=render.TARGETS, default=render.DEFAULT_TARGET)
    parser.add_argument(
        "--base",
        choices=BASE_CHOICES,
        default="auto",
        help="auto: the nvidia CUDA base when Docker Hub answers, else the registry-free base",
    )
    parser.add_argument("--tag", default=DEFAULT_NAME, metavar="NAME", help="image name (default: ddtree)")
    parser.add_argument(
        "--lock",
        metavar="FILE",
        help="install this lock instead of the base's (e.g. env/requirements-ci.lock for a small test image)",
    )
    parser.add_argument(
        "--pip-check",
        choices=("on", "off"),
        help="run pip check after the install (default: on for the base's lock, off for --lock)",
    )
    parser.set_defaults(func=_cmd_image)
