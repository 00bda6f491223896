"""Device `warm` mode: does a keyed JIT cache make the second server start skip the compilation?

Run by tests/gpu/device_ddtree.sh warm (not collected by pytest: no test_ prefix). No Docker on the device, so
the image is stood in for by a labels file (what the build bakes at /opt/ddtree/image-labels.json) and the
compose volume by a folder: DDTREE_IMAGE_LABELS and DDTREE_JIT_CACHE_DIR, exactly the variables `ddtree
serve` reads in the image. ddtree.serve.jit_cache makes them the cache variables (Triton, flashinfer, torch
extensions, inductor, the driver's PTX cache, XDG_CACHE_HOME) for each start of smoke's tiny DDTREE server
(CUDA graphs on, the pro6000 profile's DDTree settings):

    start 1  image A, empty cache folder            (cold: everything compiles)
    start 2  image A, the same folder               (warm: should be faster, no new kernels)
    start 3  image B (one label differs), same volume   (a new key: cold again, A's kernels unused)

Each start: seconds from launch to /health 200, and the files in that key's folder afterwards. Results go to
OUT/warm_start.json and stdout. Exit 0 when all three servers came up, 2 when one did not (logs in OUT).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ddtree.serve import jit_cache
from ddtree.smoke import check as smoke
from ddtree.smoke import models as smoke_models
from ddtree.smoke import server as smoke_server

PROFILE = "pro6000"
LAUNCH_TIMEOUT_S = 600.0
IMAGE_A = {
    "io.ddtree.target": PROFILE,
    "io.ddtree.tree.sha256": "a" * 64,
    "org.opencontainers.image.revision": "warm",
}
IMAGE_B = {**IMAGE_A, "io.ddtree.tree.sha256": "b" * 64}


def files_in(folder: Path) -> int:
    return sum(len(names) for _, _, names in os.walk(folder))


def one_start(
    name: str,
    labels: dict[str, str],
    work: Path,
    models: tuple[Path, Path],
    settings: smoke_models.SmokeSettings,
    out: Path,
) -> dict:
    """Start the tiny DDTREE server once with the cache variables `labels` select; stop it; report."""
    labels_file = work / f"labels-{name}.json"
    labels_file.write_text(json.dumps(labels))
    environ = {
        **os.environ,
        "DDTREE_IMAGE_LABELS": str(labels_file),
        jit_cache.ROOT_ENV: str(work / "volume"),
    }
    for variable in jit_cache.FOLDERS:  # the device's own settings must not hide the keyed folders
        environ.pop(variable, None)
    cache_env = jit_cache.environment(environ)
    root = jit_cache.prepare(environ)
    saved = {k: os.environ.get(k) for k in cache_env}
    os.environ.update(cache_env)  # smoke_server.Server passes os.environ to the server
    try:
        launched = time.monotonic()
        server, ready = smoke_server.start_ddtree_server(*models, settings, out / f"server-warm-{name}.log")
        server.stop()
    except (RuntimeError, OSError) as exc:
        return {"start": name, "ok": False, "error": str(exc)[-2000:], "seconds": time.monotonic() - launched}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {
        "start": name,
        "ok": True,
        "key_folder": str(root),
        "seconds_to_ready": round(ready, 1),
        "cache_files": {sub: files_in(Path(root) / sub) for sub in jit_cache.FOLDERS.values()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for logs and warm_start.json")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    problem = smoke.gpu_problem()
    if problem:
        print(f"warm: cannot run here: {problem}")
        return 2
    settings = dataclasses.replace(smoke.settings_from_profile(PROFILE), launch_timeout_s=LAUNCH_TIMEOUT_S)
    work = Path(tempfile.mkdtemp(prefix="ddtree-warm-"))
    try:
        models = smoke_models.write_models(work / "models", settings)
        results = []
        for name, labels in (("1-cold", IMAGE_A), ("2-same-image", IMAGE_A), ("3-new-image", IMAGE_B)):
            results.append(one_start(name, labels, work, models, settings, args.out))
            print(json.dumps(results[-1]), flush=True)
            if not results[-1]["ok"]:
                break
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (args.out / "warm_start.json").write_text(json.dumps(results, indent=2) + "\n")
    if len(results) == 3 and all(r["ok"] for r in results):
        cold, warm, new = (r["seconds_to_ready"] for r in results)
        print(f"warm: time to ready cold {cold} s, same image {warm} s, new image {new} s")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
