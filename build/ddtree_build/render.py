"""`ddtree-build render`: env/ + the Dockerfile template -> a Dockerfile, byte for byte the same per commit.

Why a template and not a hand-kept Dockerfile: the image must be exactly the captured stack, so its
facts (base image and digest, Python, lock, target environment, SGLang version) are read from env/ and
never retyped. The render context holds only sorted data read from the work tree (no clock, no host
facts), so the same commit renders the same bytes; per-commit facts (revision, dates, digests) stay
ARGs that `ddtree-build image` fills at build time, which keeps the committed Dockerfile stable.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ddtree.fsutil import atomic_write, read_text
from ddtree.yamlfile import load_yaml

from ddtree_build.errors import UserError
from ddtree_build.paths import ENV_DIR, REPO_ROOT, TEMPLATES_DIR

TARGETS: tuple[str, ...] = ("b300", "pro6000")
BASES: tuple[str, ...] = ("bootstrap", "nvidia")
DEFAULT_TARGET = "pro6000"
DEFAULT_BASE = "nvidia"
TEMPLATE_NAME = "Dockerfile.j2"
COMMITTED_DOCKERFILE = REPO_ROOT / "Dockerfile"
# What the base stage needs from apt (Debian and Ubuntu share the names): Python with venv and headers, gcc
# for Triton's launcher stubs, g++ as nvcc's host compiler for flashinfer's JIT, NUMA and OpenMP runtimes.
# The registry-free base already carries them (base_image.PACKAGES); only what it lacks is installed there.
APT_PACKAGES: tuple[str, ...] = (
    "ca-certificates",
    "g++",
    "gcc",
    "libc6-dev",
    "libgomp1",
    "libnuma1",
    "python3",
    "python3-dev",
    "python3-venv",
)
VENV_DIR = "/opt/venv"
DEFAULT_PORT = 30000


@dataclass(frozen=True)
class RenderContext:
    """Everything the template sees. Plain sorted data, so equal contexts render equal bytes."""

    target: str
    base: str
    base_image: str
    base_digest: str
    cuda_version: str
    cuda_major: str
    python_version: str
    lock_file: str
    sglang_version: str
    ddtree_version: str
    venv: str
    port: int
    apt_packages: tuple[str, ...]
    target_env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...] = ()


def label_pairs(ctx: RenderContext) -> tuple[tuple[str, str], ...]:
    """The image labels, in a fixed order; `${ARG}` values are filled at build time (LABEL and RUN alike)."""
    pairs = [
        ("org.opencontainers.image.title", f"ddtree-{ctx.target}"),
        (
            "org.opencontainers.image.description",
            f"Kimi K2.6 on SGLang {ctx.sglang_version} with DFlash + DDTree, target {ctx.target}",
        ),
        ("org.opencontainers.image.created", "${IMAGE_CREATED}"),
        ("org.opencontainers.image.revision", "${VCS_REF}"),
        ("org.opencontainers.image.version", "${IMAGE_VERSION}"),
        ("org.opencontainers.image.licenses", "Apache-2.0"),
        ("org.opencontainers.image.base.name", "${BASE_IMAGE}"),
    ]
    if ctx.base == "nvidia":
        pairs.append(("org.opencontainers.image.base.digest", "${BASE_DIGEST}"))
    pairs += [
        ("io.ddtree.source-date-epoch", "${SOURCE_DATE_EPOCH}"),
        ("io.ddtree.freeze.sha256", "${FREEZE_SHA256}"),
        ("io.ddtree.patches.sha256", "${PATCHES_SHA256}"),
        ("io.ddtree.tree.sha256", "${TREE_SHA256}"),
        ("io.ddtree.sglang.version", ctx.sglang_version),
        ("io.ddtree.python.version", ctx.python_version),
        ("io.ddtree.cuda.version", ctx.cuda_version),
        ("io.ddtree.base", ctx.base),
        ("io.ddtree.target", ctx.target),
    ]
    return tuple(pairs)


# ---------------------------------------------------------------- reading env/


def _dig(data: Any, *keys: str) -> Any:
    """data[k1][k2]... or None when any level is missing (the env/ schemas own validation)."""
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


def _base_facts(system: Mapping[str, Any], base: str) -> Mapping[str, Any]:
    """env/system.yaml bases.<base>: image, tag, digest (or null), python, lock."""
    facts = _dig(system, "bases", base)
    missing = [key for key in ("image", "tag", "python", "lock") if not _dig(facts, key)]
    if missing:
        raise UserError(f"env/system.yaml: bases.{base} needs {', '.join(missing)}; add them")
    digest = facts.get("digest") or ""
    if digest and not re.fullmatch(r"sha256:[0-9a-f]{64}", str(digest)):
        raise UserError(f"env/system.yaml: bases.{base}.digest {digest!r} must be sha256:<64 hex> or null")
    return facts


def _cuda_version(system: Mapping[str, Any]) -> str:
    """The CUDA toolkit version of the original host (nvcc's, e.g. 13.0.88; else cuda.version)."""
    version = _dig(system, "cuda", "nvcc") or _dig(system, "cuda", "version")
    if not version:
        raise UserError("env/system.yaml: no CUDA version (cuda: {version, nvcc}); add it")
    return str(version)


def sglang_version_of(requirements: Path) -> str:
    """The pinned sglang version in a freeze or lock file, read by ddtree.lockfile (the one pin parser)."""
    from ddtree.lockfile import parse_pins

    try:
        text = requirements.read_text()
    except FileNotFoundError as exc:
        raise UserError(f"{requirements}: missing; run `make lock` (issue 3)") from exc
    for pin in parse_pins(text, str(requirements)):
        if pin.name == "sglang" and pin.version:
            return pin.version
    raise UserError(f"{requirements}: no `sglang==VERSION` pin; the image is built around one")


def _target_facts(target: str) -> tuple[int, tuple[tuple[str, str], ...]]:
    """(server port, sorted environment) of env/targets/<target>.yaml, validated by ddtree.targets."""
    from ddtree.targets import load_target

    profile = load_target(target, ENV_DIR / "targets")
    port = profile.server_args.get("port", DEFAULT_PORT)
    if isinstance(port, bool) or not isinstance(port, int):
        raise UserError(f"env/targets/{target}.yaml: server_args.port {port!r} must be an integer")
    return port, tuple(sorted(profile.environment.items()))


def bootstrap_base_image() -> str:
    """Tag of the registry-free base (a digest of its recipe, so renders stay stable); builds nothing."""
    from ddtree_build import base_image

    return base_image.base_tag()


def apt_packages_for(base: str) -> tuple[str, ...]:
    """Sorted apt packages the base stage installs: all of them on nvidia, the missing ones on bootstrap."""
    if base == "bootstrap":
        from ddtree_build import base_image

        return tuple(sorted(set(APT_PACKAGES) - set(base_image.PACKAGES)))
    return tuple(sorted(APT_PACKAGES))


def build_context(target: str, base: str) -> RenderContext:
    """Read env/ into the render context for one (target, base)."""
    from ddtree import __version__ as ddtree_version

    if target not in TARGETS:
        raise UserError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    if base not in BASES:
        raise UserError(f"unknown base {base!r}; choose one of {', '.join(BASES)}")
    system_path = ENV_DIR / "system.yaml"
    if not system_path.is_file():
        raise UserError(f"{system_path} is missing; it is part of env/ (issue 3)")
    system = load_yaml(system_path) or {}
    cuda_version = _cuda_version(system)
    facts = _base_facts(system, base)
    if base == "nvidia":
        base_image, base_digest = f"{facts['image']}:{facts['tag']}", str(facts.get("digest") or "")
    else:
        # The recipe-digest tag (base_image.py) rather than system.yaml's family tag: exactly one tree.
        base_image, base_digest = bootstrap_base_image(), ""
    python_version, lock_file = str(facts["python"]), f"env/{facts['lock']}"
    freeze = ENV_DIR / "freeze.txt"
    sglang_version = sglang_version_of(freeze if freeze.exists() else REPO_ROOT / lock_file)
    port, target_env = _target_facts(target)
    context = RenderContext(
        target=target,
        base=base,
        base_image=base_image,
        base_digest=base_digest,
        cuda_version=cuda_version,
        cuda_major=cuda_version.split(".")[0],
        python_version=python_version,
        lock_file=lock_file,
        sglang_version=sglang_version,
        ddtree_version=ddtree_version,
        venv=VENV_DIR,
        port=port,
        apt_packages=apt_packages_for(base),
        target_env=target_env,
    )
    return dataclasses.replace(context, labels=label_pairs(context))


# ---------------------------------------------------------------- rendering


def docker_quote(value: str) -> str:
    """A Dockerfile ENV value: bare when plain, else double-quoted with \\, " and $ escaped."""
    if value and all(ch.isalnum() or ch in "._-/:,=+@%" for ch in value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def env_pairs(pairs: tuple[tuple[str, str], ...]) -> str:
    """The body of one ENV instruction, a NAME=value per continued line (one layer, easy diffs)."""
    return " \\\n    ".join(f"{key}={docker_quote(value)}" for key, value in pairs)


def label_lines(pairs: tuple[tuple[str, str], ...]) -> str:
    """The body of the LABEL instruction, one key="value" per continued line."""
    return " \\\n      ".join(f'{key}="{value}"' for key, value in pairs)


def render_text(context: RenderContext, template_dir: Path = TEMPLATES_DIR) -> str:
    """Render the template; StrictUndefined so a missing fact fails instead of rendering empty."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["dockerquote"] = docker_quote
    env.filters["envpairs"] = env_pairs
    env.filters["labelpairs"] = label_lines
    text = env.get_template(TEMPLATE_NAME).render(**asdict(context))
    # One trailing newline, no trailing spaces: the committed file stays diff-clean whatever the template.
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines()) + "\n"


def render(target: str = DEFAULT_TARGET, base: str = DEFAULT_BASE) -> str:
    return render_text(build_context(target, base))


def check_file(path: Path, fresh: str) -> list[str]:
    """Unified diff lines between `path` and a fresh render; empty when they agree."""
    current = read_text(path) if path.exists() else ""
    if current == fresh:
        return []
    return list(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            fresh.splitlines(keepends=True),
            fromfile=f"{path.name} (committed)",
            tofile=f"{path.name} (fresh render)",
        )
    )


# ---------------------------------------------------------------- CLI


def _cmd_render(args: argparse.Namespace) -> int:
    text = render(args.target, args.base)
    if args.check:
        path = Path(args.out) if args.out else COMMITTED_DOCKERFILE
        diff = check_file(path, text)
        if diff:
            sys.stderr.writelines(diff[:80])
            raise UserError(
                f"{path} is stale: it differs from a fresh render of --target {args.target} "
                f"--base {args.base}; run `make render` and commit it"
            )
        print(f"{path}: up to date (target {args.target}, base {args.base})", file=sys.stderr)
        return 0
    if args.out:
        atomic_write(Path(args.out), text)
        print(f"wrote {args.out} (target {args.target}, base {args.base})", file=sys.stderr)
        return 0
    sys.stdout.write(text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "render", help="render the Dockerfile for a target from env/ and the template"
    )
    parser.add_argument("--target", choices=TARGETS, default=DEFAULT_TARGET)
    parser.add_argument("--base", choices=BASES, default=DEFAULT_BASE)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--out", metavar="FILE", help="write here (atomically)")
    mode.add_argument("--stdout", action="store_true", help="print the render (the default)")
    mode.add_argument(
        "--check",
        action="store_true",
        help="exit non-zero when the committed Dockerfile differs from a fresh render",
    )
    parser.set_defaults(func=_cmd_render)
