"""Device `live` mode: `ddtree bench` and `ddtree selfcheck --live` against one tiny DDTREE server.

Run by tests/gpu/device_ddtree.sh live (not collected by pytest: no test_ prefix). It writes smoke.py's tiny
target + drafter (and a byte-level tokenizer, so text prompts work), starts ONE DDTREE server with the smoke
test's flags and the pro6000 profile's DDTree settings (CUDA graphs on), then runs, as a user would:

    python3 -m ddtree.cli bench --url URL --api generate --tokenizer TARGET_DIR --contexts 128,1024
        --concurrency 1,4 --max-tokens 48 --repeats 1 --warmup 1 --no-plots --quiet --label tiny-ddtree
        --out OUT/bench
    python3 -m ddtree.cli selfcheck --live URL --max-tokens 128

The server loads the tokenizer (no --skip-tokenizer-init) so that selfcheck --live's text prompt is served;
if that server does not come up, it is started again exactly as the smoke test does (--skip-tokenizer-init):
bench still works (it sends token ids) and selfcheck --live then reports FAILED at its generation step.

What counts as a crash (this script's exit 1), per command:
- bench: any non-zero exit (1 = a bug's traceback, or incomplete cells; a UserError's one line and code,
  e.g. every request of a cell failed) or a traceback in its output: the sweep must run end to end.
- selfcheck --live: exit 0 = REPRODUCED, 1 = DEGRADED or FAILED (expected here: a tiny model on an H200
  is no Kimi K2.6 on 8 GPUs), 2 = COULD NOT RUN (server unreachable) or a UserError (e.g. no reference
  file). A crash is a traceback in its output (an uncaught exception also exits 1), any code other than
  0/1, or no "verdict:" line. Exit 2 counts as a failure too: the server was up when it ran.
Exit 2 of this script: the server never became ready (its log tail is printed and copied to OUT).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddtree.smoke import check as smoke
from ddtree.smoke import models as smoke_models
from ddtree.smoke import server as smoke_server

PROFILE = "pro6000"
CONTEXTS = "128,1024"
CONCURRENCY = "1,4"
BENCH_MAX_TOKENS = 48
LIVE_MAX_TOKENS = 128
STEP_TIMEOUT_S = 240
LAUNCH_TIMEOUT_S = 150.0
TRACEBACK = "Traceback (most recent call last)"


def bench_command(url: str, tokenizer_dir: Path, out: Path) -> list[str]:
    """`ddtree bench` with a small, fast sweep; token-id prompts built with the tiny byte tokenizer."""
    return [
        sys.executable, "-m", "ddtree.cli", "bench", "--url", url, "--api", "generate",
        "--tokenizer", str(tokenizer_dir), "--contexts", CONTEXTS, "--concurrency", CONCURRENCY,
        "--max-tokens", str(BENCH_MAX_TOKENS), "--repeats", "1", "--warmup", "1", "--no-plots", "--quiet",
        "--label", "tiny-ddtree", "--out", str(out),
    ]  # fmt: skip


def live_command(url: str, receipt: Path | None = None) -> list[str]:
    """`ddtree selfcheck --live` once, with the default reference (env/reference/results.yaml); its receipt
    goes to `receipt` (none when not given)."""
    return [
        sys.executable, "-m", "ddtree.cli", "selfcheck", "--live", url,
        "--max-tokens", str(LIVE_MAX_TOKENS), "--receipt", str(receipt or ""),
    ]  # fmt: skip


def bench_problem(rc: int, output: str) -> str | None:
    """Why the bench run counts as crashed, or None when it ran end to end."""
    if TRACEBACK in output:
        return f"bench printed a traceback (exit {rc})"
    if rc != 0:
        return f"bench exited {rc}"
    return None


def live_problem(rc: int, output: str) -> str | None:
    """Why selfcheck --live counts as crashed, or None when it judged the server (any verdict)."""
    if TRACEBACK in output:
        return f"selfcheck --live printed a traceback (exit {rc})"
    if rc == 2:
        return "selfcheck --live could not run (exit 2) although the server was up"
    if rc not in (0, 1):
        return f"selfcheck --live exited {rc}"
    if "verdict:" not in output:
        return f"selfcheck --live exited {rc} without a verdict line"
    return None


def run_step(name: str, cmd: list[str], log: Path) -> tuple[int, str]:
    """Run one command, echo its output, keep it in `log`; (exit code, output). A timeout is code 124."""
    start = time.monotonic()
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        rc, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:  # its partial output may be bytes even with text=True
        parts = [
            p.decode("utf-8", "replace") if isinstance(p, bytes) else p for p in (exc.stdout, exc.stderr)
        ]
        rc, output = 124, "".join(p or "" for p in parts) + f"\n{name}: timed out after {STEP_TIMEOUT_S} s\n"
    log.write_text(output)
    print(output, end="" if output.endswith("\n") else "\n")
    print(f"== {name}: exit {rc} after {time.monotonic() - start:.0f} s", flush=True)
    return rc, output


def start_server(
    target: Path, drafter: Path, settings: smoke_models.SmokeSettings, out: Path
) -> smoke_server.Server | None:
    """The DDTREE server, with the tokenizer if it comes up that way, else as the smoke test starts it.

    Its log is written straight into `out` (server-live-tokenizer.log / server-live-skip-tokenizer.log).
    """
    for skip in (False, True):
        log = out / f"server-live-{'skip-tokenizer' if skip else 'tokenizer'}.log"
        start = time.monotonic()
        try:
            server, ready = smoke_server.start_ddtree_server(
                target, drafter, settings, log, skip_tokenizer_init=skip
            )
        except (RuntimeError, OSError) as exc:
            print(f"server ({'--skip-tokenizer-init' if skip else 'with tokenizer'}) failed after "
                  f"{time.monotonic() - start:.0f} s: {exc}", flush=True)  # fmt: skip
            continue
        print(f"server ready after {ready:.0f} s: {server.url} ({' '.join(server.cmd[1:])})", flush=True)
        return server
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for logs and bench results")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    problem = smoke.gpu_problem()
    if problem:
        print(f"live: cannot run here: {problem}")
        return 2
    # A launch takes 40-65 s on the H200; fail sooner than the smoke test's 300 s so the fallback fits.
    settings = dataclasses.replace(smoke.settings_from_profile(PROFILE), launch_timeout_s=LAUNCH_TIMEOUT_S)
    work = Path(tempfile.mkdtemp(prefix="ddtree-live-"))
    server = None
    try:
        target, drafter = smoke_models.write_models(work / "models", settings)
        smoke_models.write_tokenizer(target)
        print(
            f"live: tiny models in {work} ({time.monotonic() - begin:.0f} s); DDTREE block "
            f"{settings.block_size}, budget {settings.budget}, top-k {settings.topk}, "
            f"window {settings.window}",
            flush=True,
        )
        server = start_server(target, drafter, settings, out)
        print(f"live: server step done at {time.monotonic() - begin:.0f} s", flush=True)
        if server is None:
            return 2
        rc, output = run_step("bench", bench_command(server.url, target, out / "bench"), out / "bench.txt")
        problems = [bench_problem(rc, output)]
        rc, output = run_step(
            "selfcheck --live", live_command(server.url, out / "receipt-live.json"), out / "live.txt"
        )
        problems.append(live_problem(rc, output))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
        print(f"live: server stopped, {time.monotonic() - begin:.0f} s in all; logs in {out}", flush=True)
    found = [p for p in problems if p]
    for p in found:
        print(f"live: CRASH {p}")
    print(f"live: {'FAIL' if found else 'ran end to end'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
