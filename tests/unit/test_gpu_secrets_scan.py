"""The device `secrets` mode's search (tests/gpu/secrets_tiny.py) finds what it must: a secret on a
process's argv, in its environment or in an in-memory file it holds open (memfd), anywhere in its session,
and in files; nothing in clean ones.
The processes are real (sleep, in a session of their own, as the server's workers are)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.gpu import secrets_tiny


def _session(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, start_new_session=True)


def test_the_search_finds_argv_environment_children_and_files(tmp_path: Path) -> None:
    key, token = secrets_tiny.SECRETS["user key"], secrets_tiny.SECRETS["HF token"]
    sleeper = "import time; time.sleep(30)"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {sleeper!r}, {key!r}])"
    leader = _session([sys.executable, "-c", child], {**os.environ, "HF_TOKEN": token})
    clean = _session(["sleep", "30"], {"PATH": os.environ["PATH"]})
    holds = f"import os, time; fd = os.memfd_create('server-config.yaml', 0); os.write(fd, {key.encode()!r})"
    holder = _session([sys.executable, "-c", holds + "; time.sleep(30)"],
                      {"PATH": os.environ["PATH"]})  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        found: dict[int, tuple[bytes, bytes]] = {}
        while time.monotonic() < deadline and len(found) < 2:
            found = secrets_tiny.session_processes([leader.pid])
            time.sleep(0.1)
        places = {}
        for pid, (cmdline, environ) in found.items():
            places[f"/proc/{pid}/cmdline"] = cmdline
            places[f"/proc/{pid}/environ"] = environ
        (tmp_path / "dumps").mkdir()
        (tmp_path / "dumps" / "requests.pkl").write_bytes(b"\x80\x04" + key.encode())
        places.update(secrets_tiny.file_places(tmp_path, "file"))
        lines = secrets_tiny.leaks(places)
        assert len(found) == 2  # the leader and its child (a sleeper with the key on its argv)
        assert sum("LEAK user key in /proc/" in ln and "cmdline" in ln for ln in lines) == 2  # both argv
        assert sum("LEAK HF token in /proc/" in ln and "environ" in ln for ln in lines) == 2  # both inherit
        assert "LEAK user key in file dumps/requests.pkl" in lines
        held: dict[str, bytes] = {}
        while time.monotonic() < deadline and not held:
            held = secrets_tiny.memfd_places([holder.pid])
            time.sleep(0.1)
        (line,) = secrets_tiny.leaks(held)
        assert (
            line.startswith(f"LEAK user key in /proc/{holder.pid}/fd/") and "memfd:server-config.yaml" in line
        )
        quiet = secrets_tiny.session_processes([clean.pid])
        assert quiet and secrets_tiny.leaks({f"/proc/{p}/environ": e for p, (_, e) in quiet.items()}) == []
    finally:
        for proc in (leader, clean, holder):
            os.killpg(proc.pid, 9)
            proc.wait()
