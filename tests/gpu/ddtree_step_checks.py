"""Device checks of one served DDTREE step: no first-request JIT, and where the step still synchronises.

Run by tests/gpu/device_ddtree.sh steps (not collected by pytest: no test_ prefix), after the series
is applied to the device's SGLang. It writes smoke.py's tiny target + drafter, starts ONE DDTREE server
(the smoke test's flags, the pro6000 profile's DDTree settings, CUDA graphs on) with
SGLANG_DDTREE_SYNC_DEBUG=1 (and SGLANG_DDTREE_TRITON_SAMPLING=1, the sampling kernels' served default,
unless the environment sets it), then sends, one at a time, two requests of each kind: greedy; temperature 1
with top-p 0.95; temperature 0.8 with top-k 40, top-p 0.9 and min-p 0.05. It prints each request's latency
(first vs second of its kind: the kernels were compiled when the worker started, so the two should agree
within noise) and every distinct host-device synchronisation that torch's sync debug mode reported inside
DDTREE steps (file:line and message, from the server log), then exits 0; 1 when a request failed, 2 when
the server never became ready. The server log stays in OUT.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ddtree.smoke import check as smoke
from ddtree.smoke import models as smoke_models
from ddtree.smoke import server as smoke_server
from ddtree.smoke.server import sync_sites

PROFILE = "pro6000"
KINDS = {
    "greedy": {"temperature": 0.0},
    "top_p": {"temperature": 1.0, "top_p": 0.95},
    "top_k_top_p_min_p": {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.05},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the server log")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    problem = smoke.gpu_problem()
    if problem:
        print(f"steps: cannot run here: {problem}")
        return 2
    os.environ["SGLANG_DDTREE_SYNC_DEBUG"] = "1"  # inherited by the server process
    # The sampling kernels are opt-in in the served path; this check is for them unless told =0.
    os.environ.setdefault("SGLANG_DDTREE_TRITON_SAMPLING", "1")
    print(f"steps: SGLANG_DDTREE_TRITON_SAMPLING={os.environ['SGLANG_DDTREE_TRITON_SAMPLING']}")
    settings = dataclasses.replace(smoke.settings_from_profile(PROFILE), launch_timeout_s=240.0)
    work = Path(tempfile.mkdtemp(prefix="ddtree-steps-"))
    log_path = args.out / "server-steps.log"
    server = None
    failed = False
    try:
        target, drafter = smoke_models.write_models(work / "models", settings)
        try:
            server, ready = smoke_server.start_ddtree_server(target, drafter, settings, log_path)
        except (RuntimeError, OSError) as exc:
            print(f"steps: server did not come up: {exc}")
            return 2
        print(f"steps: server ready after {ready:.0f} s", flush=True)
        prompt = smoke.greedy_prompts(settings)[0]
        print(f"{'kind':<20} {'first s':>9} {'second s':>9} {'tokens':>7} {'accept len':>10}")
        for kind, params in KINDS.items():
            times, tokens, accept = [], 0, 0.0
            for _ in range(2):
                start = time.monotonic()
                try:
                    sampling = {**params, "max_new_tokens": args.max_tokens}
                    payload = {"input_ids": prompt, "sampling_params": sampling}
                    reply = server.client.post_json("/generate", payload)
                except Exception as exc:  # report every kind, then fail
                    print(f"{kind:<20} request failed: {exc}")
                    failed = True
                    break
                times.append(time.monotonic() - start)
                tokens = len(reply.get("output_ids", []))
                accept = float(reply.get("meta_info", {}).get("spec_accept_length", 0.0))
            if len(times) == 2:
                print(f"{kind:<20} {times[0]:>9.3f} {times[1]:>9.3f} {tokens:>7} {accept:>10.2f}", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    sites = sync_sites(log_path.read_text(errors="replace")) if log_path.is_file() else {}
    print(f"steps: {len(sites)} distinct synchronising call sites in DDTREE steps (server log {log_path}):")
    for where, what in sorted(sites.items()):
        print(f"  {where}: {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
