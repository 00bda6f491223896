"""Image build cost: cold build, rebuild after editing one patch, no-op rebuild; time and bytes downloaded.

    .venv/bin/python benchmarks/image_build_bench.py [--target pro6000] [--base bootstrap]
        [--lock env/requirements-ci.lock] [--skip-cold] [--json OUT]

Goal (issue 7): the patch-edit rebuild takes under 10% of the cold build and downloads nothing.

How each phase is made (all through `ddtree-build image`'s own code, on a staged copy; the checkout is
never edited):
  cold        the pip/apt cache mounts are pruned (`docker builder prune --filter type=exec.cachemount`)
              and the build runs with --no-cache, so every layer is rebuilt and every wheel downloaded.
              The base image itself (debootstrap) is not rebuilt: it is built once per recipe.
  (inputs)    env/, patches/ and the ddtree package are copied once at the start and every phase builds
              from that copy, so edits others make to the checkout meanwhile do not leak in.
  patch-edit  a comment line is appended to patches/series.yaml in the staged context. For the build
              cache that is what editing a diff is: `COPY patches/` and every step after it rerun.
  no-op       the same inputs again.
Bytes downloaded: pip's own "Downloading ... (N MB)" lines in the build log (what the build fetched), and
the receive counter of the host's default-route interface (everything, other users' traffic included).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ddtree_build import docker_build, engine, image
from ddtree_build.paths import CACHE_DIR, REPO_ROOT

UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}
_PIP_DOWNLOAD = re.compile(r"Downloading \S+ \(([\d.]+) ([kKMG]?B)\)")


@dataclass
class Phase:
    name: str
    seconds: float
    pip_download_bytes: int
    interface_rx_bytes: int
    steps: int
    cached_steps: int
    image_id: str
    size_bytes: int


def default_interface() -> str | None:
    """The interface of the default route (/proc/net/route: destination 00000000)."""
    try:
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 1 and fields[1] == "00000000":
                return fields[0]
    except OSError:
        return None
    return None


def rx_bytes(interface: str | None) -> int:
    if interface is None:
        return 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == interface:
            return int(rest.split()[0])
    return 0


def pip_downloaded(log_text: str) -> int:
    return int(sum(float(n) * UNITS[u] for n, u in _PIP_DOWNLOAD.findall(log_text)))


def snapshot_inputs(folder: Path) -> Path:
    """A copy of what enters the context, taken once: others editing the checkout meanwhile (a shared
    work tree) must not turn the no-op rebuild into a real one."""
    for rel in image.CONTEXT_DIRS:
        src = REPO_ROOT / rel
        if src.is_dir():
            shutil.copytree(src, folder / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return folder


def context_from(snapshot: Path, edit_token: str | None):
    """A context hook: replace the staged inputs with the snapshot, then (optionally) edit one patch."""

    def hook(context: Path) -> None:
        for rel in image.CONTEXT_DIRS:
            shutil.rmtree(context / rel, ignore_errors=True)
            if (snapshot / rel).is_dir():
                shutil.copytree(snapshot / rel, context / rel)
        if edit_token is not None:
            series = context / "patches" / "series.yaml"
            series.write_text(series.read_text() + f"# benchmark edit {edit_token}\n")

    return hook


def run_phase(name: str, args: argparse.Namespace, **kwargs) -> Phase:
    iface = default_interface()
    log = CACHE_DIR / "bench" / f"image-build-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    rx0 = rx_bytes(iface)
    start = time.monotonic()
    result = image.build(
        args.target,
        args.base,
        args.tag,
        lock=Path(args.lock) if args.lock else None,
        log=log,
        say=lambda msg: print(f"  {msg}", file=sys.stderr),
        **kwargs,
    )
    seconds = time.monotonic() - start
    text = log.read_text()
    # Build steps proper: not BuildKit's [internal] loads, not the FROM (never reported as CACHED).
    steps = {n for n, name in re.findall(r"^#(\d+) \[([^\]]+)\] (?!FROM )", text, re.M) if name != "internal"}
    cached = set(re.findall(r"^#(\d+) CACHED", text, re.M))
    phase = Phase(
        name=name,
        seconds=round(seconds, 1),
        pip_download_bytes=pip_downloaded(text),
        interface_rx_bytes=rx_bytes(iface) - rx0,
        steps=len(steps),
        cached_steps=len(cached & steps),
        image_id=result.image_id,
        size_bytes=result.size_bytes,
    )
    print(
        f"{name:<11} {phase.seconds:8.1f} s  pip {phase.pip_download_bytes / 1e6:9.1f} MB  "
        f"rx {phase.interface_rx_bytes / 1e6:9.1f} MB  cached {phase.cached_steps}/{phase.steps} steps  "
        f"image {phase.size_bytes / 1e9:.2f} GB",
        flush=True,
    )
    return phase


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", default="pro6000")
    parser.add_argument("--base", default="bootstrap", choices=image.BASE_CHOICES)
    parser.add_argument("--tag", default="ddtree-bench")
    parser.add_argument("--lock", help="a lock other than the base's (e.g. env/requirements-ci.lock)")
    parser.add_argument("--skip-cold", action="store_true", help="measure only the two rebuilds")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    engine.ensure()
    phases: list[Phase] = []
    lock = args.lock or "the base's lock"
    print(f"image build benchmark: target {args.target}, base {args.base}, lock {lock}")
    snapshot = snapshot_inputs(Path(tempfile.mkdtemp(prefix="image-bench-", dir=CACHE_DIR)))
    try:
        if not args.skip_cold:
            subprocess.run(
                [docker_build.docker_cli(), "builder", "prune", "-f", "--filter", "type=exec.cachemount"],
                check=True,
                capture_output=True,
            )
            phases.append(run_phase("cold", args, no_cache=True, context_hook=context_from(snapshot, None)))
        else:
            phases.append(run_phase("warm-up", args, context_hook=context_from(snapshot, None)))
        # One token per run: the patch-edit build sees a new edit, the no-op build exactly the same one.
        edited = context_from(snapshot, str(time.time_ns()))
        phases.append(run_phase("patch-edit", args, context_hook=edited))
        phases.append(run_phase("no-op", args, context_hook=edited))
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)
    patch = next(p for p in phases if p.name == "patch-edit")
    noop = next(p for p in phases if p.name == "no-op")
    cold = next((p for p in phases if p.name == "cold"), None)
    ratio = patch.seconds / cold.seconds if cold and cold.seconds else None
    goal = ratio is not None and ratio < 0.10 and patch.pip_download_bytes == 0
    if ratio is None:
        print("patch-edit / cold: needs the cold phase (run without --skip-cold)")
    else:
        print(
            f"patch-edit / cold: {ratio:.1%} of the time, {patch.pip_download_bytes} bytes by pip "
            f"-> goal (<10%, nothing downloaded) {'MET' if goal else 'NOT MET'}"
        )
    print(f"no-op: {noop.cached_steps}/{noop.steps} build steps from the cache")
    if args.json:
        args.json.write_text(
            json.dumps({"phases": [asdict(p) for p in phases], "ratio": ratio, "goal_met": goal}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT / "build"))
    sys.exit(main())
