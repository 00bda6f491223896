"""One SGLang server per smoke mode (baseline, DFLASH, DDTREE) on the tiny models: flags, start, log."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from ddtree.bench.client import Client
from ddtree.smoke.models import SmokeSettings, arch_server_args


def free_port(avoid: Collection[int] = ()) -> int:
    """A free port below 45000: SGLang also opens port + 10000 (gRPC), which must stay <= 65535. Neither it
    nor its + 10000 is a port of `avoid` or that port's + 10000 (a server started just before may not have
    bound them yet)."""
    taken = {p + shift for p in avoid for shift in (-10000, 0, 10000)}
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 45000)
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 45000")


def tp_args(settings: SmokeSettings) -> list[str]:
    """--tp-size for every server when the smoke runs tensor-parallel (each rank holds a vocab shard)."""
    return ["--tp-size", str(settings.tp)] if settings.tp > 1 else []


def mode_args(mode: str, drafter: Path, settings: SmokeSettings) -> list[str]:
    """SGLang flags of one mode (the common ones are added by Server)."""
    if mode == "baseline":
        return []
    args = [
        "--speculative-algorithm",
        mode.upper(),
        "--speculative-draft-model-path",
        str(drafter),
        "--speculative-num-draft-tokens",
        str(settings.block_size),
    ]
    if settings.window is not None:
        args += ["--speculative-draft-window-size", str(settings.window)]
    if mode == "ddtree":
        args += ["--speculative-ddtree-budget", str(settings.budget)]
        args += ["--speculative-ddtree-topk", str(settings.topk)]
    return args


# torch.cuda.set_sync_debug_mode("warn")'s warning as Python prints it: the caller's file:line, then its code
SYNC = re.compile(r"^(?P<where>\S+:\d+): UserWarning: (?P<what>called a synchronizing CUDA operation.*)$")


def sync_sites(log: str) -> dict[str, str]:
    """file:line -> message of each synchronising call that torch's sync debug mode warned about."""
    sites: dict[str, str] = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        match = SYNC.match(line.strip())
        if match:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            sites[match["where"]] = f"{match['what']}  [{code}]"
    return sites


class Server:
    """One SGLang server process on a free port; its log goes to a file that the report quotes."""

    def __init__(
        self,
        target: Path,
        args: list[str],
        log_path: Path,
        settings: SmokeSettings,
        skip_tokenizer_init: bool = True,
        env: Mapping[str, str] | None = None,
    ):
        """`env`: variables for this server's process alone (e.g. a mode's step switches), over os.environ."""
        self.port = settings.port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = Client(self.url, timeout=300)
        self.log_path = log_path
        cmd = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", str(target),
            *(["--skip-tokenizer-init"] if skip_tokenizer_init else []),
            "--attention-backend", "triton", "--mem-fraction-static", "0.2",
            "--cuda-graph-max-bs", "32", "--max-running-requests", "32", "--port", str(self.port),
            "--random-seed", str(settings.seed), *args, *tp_args(settings), *arch_server_args(settings.arch),
            *settings.extra_server_args,
        ]  # fmt: skip
        self.cmd = cmd
        self._log = open(log_path, "w")  # noqa: SIM115 (closed in stop)
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
                     "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=child_env, start_new_session=True
        )
        self.deadline = time.monotonic() + settings.launch_timeout_s

    def wait_ready(self) -> float:
        start = time.monotonic()
        while time.monotonic() < self.deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with code {self.proc.returncode}:\n{self.tail()}")
            status, _ = self.client.get_text("/health", timeout=2)
            if status == 200:
                return time.monotonic() - start
            time.sleep(1.0)
        raise RuntimeError(f"server not ready in time:\n{self.tail()}")

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def start_ddtree_server(
    target: Path, drafter: Path, settings: SmokeSettings, log_path: Path, skip_tokenizer_init: bool = True
) -> tuple[Server, float]:
    """One DDTREE server with the smoke test's flags, ready (seconds it took); stopped again if not ready.

    For tools run against a live tiny server (tests/gpu/live_tiny.py); the smoke test itself runs modes
    through run_mode.
    """
    server = Server(target, mode_args("ddtree", drafter, settings), log_path, settings, skip_tokenizer_init)
    try:
        return server, server.wait_ready()
    except BaseException:
        server.stop()
        raise
