"""Run untrusted generated code in a child Python with time and memory limits.

Limits set inside the child before the program runs (no preexec_fn, which is unsafe with threads):
RLIMIT_AS (memory), RLIMIT_CPU (CPU seconds), RLIMIT_FSIZE (file size), RLIMIT_NOFILE, no core dumps.
A wall-clock timeout kills the child's whole process group. The child gets an empty temporary working
directory, a minimal environment, `python -I` (no user site, no PYTHON* variables), no stdin, and
destructive helpers (os.system, subprocess, shutil.rmtree, os.kill, ...) replaced by stubs.
Network isolation is not enforceable from here (no namespaces without privileges): run the harness in
a container without a route out if the model is not trusted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_BOOT = r"""
import json, os, resource, sys
limits = json.loads(sys.argv[1])
mem, cpu = limits["memory_bytes"], limits["cpu_s"]
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
source = open(sys.argv[2], encoding="utf-8").read()
code = compile(source, "solution.py", "exec")
import builtins, shutil, subprocess
def _blocked(*args, **kwargs):
    raise PermissionError("blocked in the HumanEval sandbox")
for mod, names in (
    (os, ("system", "kill", "killpg", "fork", "forkpty", "execv", "execve", "execvp", "remove",
          "unlink", "rmdir", "removedirs", "rename", "renames", "truncate", "chmod", "chown", "putenv")),
    (shutil, ("rmtree", "move", "chown")),
    (subprocess, ("Popen", "run", "call", "check_call", "check_output")),
):
    for name in names:
        if hasattr(mod, name):
            setattr(mod, name, _blocked)
sys.modules["resource"] = None
exec(code, {"__name__": "__sandbox__", "__builtins__": builtins})
"""


@dataclass
class SandboxResult:
    """passed | failed | timeout | memory | error; output tails for the report."""

    status: str
    returncode: int | None
    duration_s: float
    stdout: str = ""
    stderr: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def summary(self) -> dict[str, Any]:
        return asdict(self)


def classify(returncode: int, stderr: str) -> str:
    """Name why the child ended: signals from the limits, MemoryError, or a plain failure."""
    if returncode == 0:
        return "passed"
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL) and "MemoryError" not in stderr:
        return "timeout"
    if "MemoryError" in stderr or returncode in (-signal.SIGSEGV, -signal.SIGABRT):
        return "memory"
    return "failed"


def run_sandboxed(
    program: str,
    timeout_s: float = 10.0,
    memory_bytes: int = 2 << 30,
    file_bytes: int = 16 << 20,
    python: str = sys.executable,
) -> SandboxResult:
    """Run `program` to completion or its limit; exit status 0 means passed."""
    limits = {"memory_bytes": memory_bytes, "cpu_s": max(1, int(timeout_s + 0.999)), "file_bytes": file_bytes}
    with tempfile.TemporaryDirectory(prefix="ddtree-sandbox-") as work:
        source = Path(work) / "solution.py"
        source.write_text(program, encoding="utf-8")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": work,
            "TMPDIR": work,
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
        }
        started = time.monotonic()
        proc = subprocess.Popen(
            [python, "-I", "-B", "-c", _BOOT, json.dumps(limits), str(source)],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            duration = time.monotonic() - started
            return SandboxResult("timeout", proc.returncode, duration, _tail(out), _tail(err))
        duration = time.monotonic() - started
        stderr = _tail(err)
        return SandboxResult(classify(proc.returncode, stderr), proc.returncode, duration, _tail(out), stderr)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (its own session: start_new_session), while it is unreaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(raw: bytes, limit: int = 2000) -> str:
    return raw.decode("utf-8", "replace")[-limit:]
