"""The registry-free base image: debootstrap (minbase) + `docker import`, tagged by what went into it.

No container registry is reachable from the build hosts we target, so the image is made from Debian's
mirror. The tag is a digest of the recipe (suite, variant, architecture, mirror, sorted package list,
recipe revision): the same recipe gives the same tag, so it is built once (minutes) and then reused
(seconds). Other builders call `ensure_base_image()` and put the returned tag in their FROM line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ddtree.fsutil import sha256_bytes

from ddtree_build import docker_build, engine, host
from ddtree_build.errors import UserError, one_line
from ddtree_build.paths import CACHE_DIR

IMAGE_NAME = "ddtree-base"
# Bump when the build steps change in a way the recipe fields do not show (cleanup, import changes).
RECIPE_REVISION = 1

# What the image carries beyond minbase, and why. Kept small: the image builder adds its own layers.
PACKAGES: Mapping[str, str] = {
    "ca-certificates": "TLS to PyPI and Debian from inside builds",
    "python3": "bookworm's CPython 3.11, the interpreter the lock is compiled for",
    "python3-venv": "an isolated venv for the pinned stack (ensurepip)",
    "python3-pip": "pip for hash-checked installs",
    "python3-dev": "Python.h: Triton compiles its launcher stubs against it at run time",
    "gcc": "Triton's run-time C compiler for those stubs",
    "g++": "host compiler for flashinfer's JIT (nvcc calls it) on sm_120",
    "libc6-dev": "C headers and crt files for the two compilers",
    "libgomp1": "OpenMP runtime used by CPU kernels of the torch stack",
    "libnuma1": "NUMA library that SGLang's kernels link against",
}


def _host_arch() -> str:
    out = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or os.uname().machine


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the base image's content; its digest names the tag."""

    suite: str = "bookworm"
    variant: str = "minbase"
    mirror: str = field(
        default_factory=lambda: os.environ.get("DDTREE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    )
    arch: str = field(default_factory=_host_arch)
    packages: tuple[str, ...] = tuple(sorted(PACKAGES))
    revision: int = RECIPE_REVISION

    def canonical(self) -> str:
        """The recipe as stable JSON (sorted keys, sorted packages): what the digest covers."""
        return json.dumps(
            {
                "suite": self.suite,
                "variant": self.variant,
                "mirror": self.mirror.rstrip("/"),
                "arch": self.arch,
                "packages": sorted(set(self.packages)),
                "revision": self.revision,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    def digest(self) -> str:
        return sha256_bytes(self.canonical().encode())[:12]

    def tag(self) -> str:
        return f"{IMAGE_NAME}:{self.suite}-{self.digest()}"


def base_tag(recipe: Recipe | None = None) -> str:
    """The tag the base image has (or will have) for `recipe`; builds nothing."""
    return (recipe or Recipe()).tag()


# ---------------------------------------------------------------- building


def _require_debootstrap(say: Callable[[str], None]) -> str:
    for found in (shutil.which("debootstrap"), "/usr/sbin/debootstrap"):
        if found and Path(found).exists():
            return found
    if not (host.is_root() and host.is_debian()):
        raise UserError("debootstrap is missing: install it (Debian: apt-get install debootstrap) and rerun")
    log = CACHE_DIR / "logs" / "apt-debootstrap.log"
    say(f"base-image: installing debootstrap from Debian (log: {log})")
    host.apt_install(["debootstrap"], log)
    return shutil.which("debootstrap") or "/usr/sbin/debootstrap"


def _run_debootstrap(recipe: Recipe, rootfs: Path, log: Path, say: Callable[[str], None]) -> None:
    """debootstrap with a progress line on each stage change and every 15 s; full output in `log`."""
    cmd = [
        _require_debootstrap(say),
        f"--variant={recipe.variant}",
        f"--arch={recipe.arch}",
        f"--include={','.join(sorted(recipe.packages))}",
        recipe.suite,
        str(rootfs),
        recipe.mirror,
    ]
    start = time.monotonic()
    last_print = start
    last_stage = ""
    with open(log, "w") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            text = line.strip()
            if not text.startswith("I: "):
                continue
            # Per-package lines alternate Retrieving/Validating: count them as one stage.
            stage = text[3:].split(" ", 1)[0].replace("Validating", "Retrieving")
            now = time.monotonic()
            if stage != last_stage or now - last_print >= 15:
                say(f"base-image: debootstrap {now - start:4.0f}s  {text[3:][:90]}")
                last_stage, last_print = stage, now
        code = proc.wait()
    if code != 0:
        raise UserError(f"debootstrap failed (exit {code}); log {log}: {host.log_tail(log, 10)}")


def _trim_rootfs(rootfs: Path) -> None:
    """Drop what only served the bootstrap or belongs to this host (apt caches, resolv.conf, hostname)."""
    for folder in ("var/cache/apt/archives", "var/lib/apt/lists", "var/log"):
        target = rootfs / folder
        if target.is_dir():
            for child in target.iterdir():
                if child.is_file() or child.is_symlink():
                    child.unlink()
    for name in ("etc/resolv.conf", "etc/hostname"):
        path = rootfs / name
        if path.is_file() and not path.is_symlink():
            path.write_text("")


def _docker_import(recipe: Recipe, rootfs: Path, tag: str) -> None:
    """`tar -C rootfs -c . | docker import - tag` with the recipe recorded as labels."""
    changes = [
        "ENV LANG=C.UTF-8",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        'CMD ["/bin/bash"]',
        f"LABEL org.ddtree.base.recipe-digest={recipe.digest()}",
        f"LABEL org.ddtree.base.suite={recipe.suite}",
        f"LABEL org.ddtree.base.packages={','.join(sorted(recipe.packages))}",
    ]
    cmd = [docker_build.docker_cli(), "import"]
    for change in changes:
        cmd += ["--change", change]
    cmd += ["-", tag]
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    imported = subprocess.run(cmd, stdin=tar.stdout, capture_output=True, text=True, check=False)
    tar.stdout.close()
    tar_code = tar.wait()
    if tar_code != 0 or imported.returncode != 0:
        raise UserError(
            f"docker import of {rootfs} as {tag} failed: tar exit {tar_code}; {one_line(imported.stderr)}"
        )


def _smoke_test(tag: str) -> None:
    """The interpreter runs and can make a venv: what every image built on top relies on."""
    probe = "import ensurepip, ssl, venv; import sys; print(sys.version.split()[0])"
    out = subprocess.run(
        [docker_build.docker_cli(), "run", "--rm", "--network=none", tag, "python3", "-c", probe],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        subprocess.run([docker_build.docker_cli(), "image", "rm", tag], capture_output=True, check=False)
        detail = one_line(out.stderr.strip()[-300:])
        raise UserError(f"base image {tag} fails its smoke test (removed): {detail}")


def build_base_image(recipe: Recipe, say: Callable[[str], None]) -> str:
    """Build the base image for `recipe` from scratch (needs root for debootstrap)."""
    tag = recipe.tag()
    if not host.is_root():
        raise UserError(f"building {tag} needs root (debootstrap); run `make base-image` as root")
    work = CACHE_DIR / "base-image"
    rootfs = work / f"rootfs-{recipe.digest()}"
    log = work / f"debootstrap-{recipe.digest()}.log"
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(rootfs, ignore_errors=True)
    say(
        f"base-image: building {tag} ({recipe.suite} {recipe.variant}, "
        f"{len(recipe.packages)} packages; log: {log})"
    )
    start = time.monotonic()
    try:
        _run_debootstrap(recipe, rootfs, log, say)
        _trim_rootfs(rootfs)
        say("base-image: importing the tree into Docker")
        _docker_import(recipe, rootfs, tag)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    _smoke_test(tag)
    say(f"base-image: {tag} built in {time.monotonic() - start:.0f} s")
    return tag


def ensure_base_image(say: Callable[[str], None] = print, recipe: Recipe | None = None) -> str:
    """Return the base image's tag, building it first when the engine does not have it yet."""
    recipe = recipe or Recipe()
    tag = recipe.tag()
    if docker_build.image_exists(tag):
        return tag
    with host.host_lock("base-image"):
        if docker_build.image_exists(tag):
            return tag
        return build_base_image(recipe, say)


# ---------------------------------------------------------------- CLI


def _cmd_base_image(args: argparse.Namespace) -> int:
    recipe = Recipe()
    if args.tag_only:
        print(recipe.tag())
        return 0
    engine.ensure_engine(engine.say_stderr)
    tag = ensure_base_image(engine.say_stderr, recipe)
    if not args.quiet:
        print(tag)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "base-image", help="the registry-free Debian base image (debootstrap + docker import), built once"
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing when the image already exists")
    parser.add_argument(
        "--tag-only", action="store_true", help="print the tag the recipe gives; build nothing"
    )
    parser.set_defaults(func=_cmd_base_image)
