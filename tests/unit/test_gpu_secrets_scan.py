"""The device `secrets` mode's search (tests/gpu/secrets_tiny.py) finds what it must: a secret on a
process's argv, in its environment or in an in-memory file it holds open (memfd), anywhere in its session,
and in files; nothing in clean ones.
The processes are real (sleep, in a session of their own, as the server's workers are).
Its TLS part: the certificates it makes (really, with openssl), the https checks it runs against a real
TLS server (the replica double), and the server options it gives `ddtree serve` (no password on argv)."""

from __future__ import annotations

import hashlib
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.gpu import secrets_tiny
from tests.unit import test_serve_secrets as serve_secrets
from tests.unit.bench_double import serve
from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401 (a pytest fixture)


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


def test_the_tls_files_serve_https_with_the_password_to_clients_trusting_the_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make_tls_files, really run (the openssl command): the key is encrypted and opens with the password
    only; a server using it passes tls_problems (a real handshake on loopback, the replica double over
    https), a plain http server does not; the password was never on openssl's argv (each call recorded)."""
    password = secrets_tiny.SECRETS["SSL key password"]
    calls: list[list[str]] = []
    real_run = subprocess.run

    def recording_run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        calls.append(list(args))
        return real_run(args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(secrets_tiny.subprocess, "run", recording_run)
    tls = secrets_tiny.make_tls_files(tmp_path / "tls", password)
    monkeypatch.undo()
    assert [c[:2] for c in calls] == [["openssl", s] for s in ("genpkey", "req", "genpkey", "req", "x509")]
    assert not [c for c in calls if password in " ".join(c)]
    assert tls.key.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    assert tls.key.stat().st_mode & 0o777 == 0o600
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with pytest.raises(ssl.SSLError):
        server_side.load_cert_chain(tls.cert, tls.key, password="not-the-password")
    server_side.load_cert_chain(tls.cert, tls.key, password=password)
    trust = ssl.create_default_context(cafile=str(tls.ca))
    with serve(tls=server_side) as (url, double):
        assert url.startswith("https://127.0.0.1:")
        assert secrets_tiny.tls_problems(url, "k", trust) == []
        assert any("UNKNOWN_CA" in e for e in double.tls_errors)  # the client without the CA refused it
    with serve() as (url, _):
        problems = secrets_tiny.tls_problems(url.replace("http://", "https://"), "k", trust)
    assert problems[0].startswith("the server answered plain http (HTTP 200)") and len(problems) == 3


PASSWORD_STAND_IN = '''\
"""STAND-IN for sglang.launch_server (tests/unit/test_gpu_secrets_scan.py): reads --config like SGLang."""
import hashlib, signal, sys, time
import yaml
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
config = yaml.safe_load(open(sys.argv[sys.argv.index("--config") + 1]))
for key in ("api-key", "admin-api-key", "ssl-keyfile-password"):
    print(key, "sha256", hashlib.sha256(str(config[key]).encode()).hexdigest(), flush=True)
print("READY", flush=True)
time.sleep(120)
'''


def test_the_servers_command_line_carries_no_password(tmp_path: Path) -> None:
    """The device test's server options (tls_server_args: the password in a --config file), through the real
    `ddtree serve` and its exec into a stand-in for SGLang (no GPU here): the server reads the password
    from its in-memory config; the password, the keys and the file's path are on no argv, environment or
    log line (the real SGLang's reading of such a config: tests/unit/test_serve_secrets.py)."""
    password, admin = secrets_tiny.SECRETS["SSL key password"], secrets_tiny.SECRETS["admin key"]
    tls = secrets_tiny.make_tls_files(tmp_path / "tls", password)
    config = secrets_tiny.write_password_config(tmp_path / "server-tls.yaml", password)
    assert config.stat().st_mode & 0o777 == 0o600
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(PASSWORD_STAND_IN)
    env = serve_secrets._serve_env(tmp_path, [str(fake)], "--log-level info")
    after = ("--admin-api-key", admin, *secrets_tiny.tls_server_args(tls, config))
    proc, log = serve_secrets._run_until_ready(env, timeout=120, after=after)
    try:
        digest = hashlib.sha256(password.encode()).hexdigest()
        assert f"ssl-keyfile-password sha256 {digest}" in log  # the server got it, from memory
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        assert f"--ssl-keyfile\0{tls.key}\0" in cmdline and str(config) not in cmdline
        serve_secrets._assert_no_secret_anywhere(proc, log, (serve_secrets.API_KEY, admin, password))
    finally:
        log += serve_secrets._stop(proc)
    assert not [line for line in log if password in line or admin in line]


UVICORN_SERVER = """\
import os, sys, uvicorn
async def app(scope, receive, send):  # a minimal ASGI app: the TLS layer is what is under test
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
key, cert, ca, port = sys.argv[1:]
# the call sglang/srt/entrypoints/http_server.py makes (one tokenizer process), password from memory
uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning", ssl_keyfile=key, ssl_certfile=cert,
            ssl_ca_certs=ca, ssl_keyfile_password=os.environ.pop("TEST_SSL_KEY_PASSWORD"))
"""


def test_sglangs_http_server_serves_the_tls_files_with_the_password(
    tmp_path: Path,
    sglang_cpu_path: str,  # noqa: F811
) -> None:
    """The pinned uvicorn (SGLang's HTTP server, from the CPU SGLang environment) run with the ssl_*
    arguments SGLang passes it opens the encrypted key with the password and passes tls_problems; with a
    wrong password it does not start. The GPU server itself runs only on the device (secrets_tiny.py)."""
    password = secrets_tiny.SECRETS["SSL key password"]
    tls = secrets_tiny.make_tls_files(tmp_path / "tls", password)
    trust = ssl.create_default_context(cafile=str(tls.ca))
    for given in ("not-the-password", password):
        port = secrets_tiny._free_port()
        env = {**os.environ, "PYTHONPATH": sglang_cpu_path, "TEST_SSL_KEY_PASSWORD": given}
        args = [sys.executable, "-c", UVICORN_SERVER, str(tls.key), str(tls.cert), str(tls.ca), str(port)]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            url, problems = f"https://127.0.0.1:{port}", ["not started"]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None and problems:
                problems = secrets_tiny.tls_problems(url, "k", trust)
                time.sleep(0.3)
            if given == password:
                assert problems == [], proc.stdout.read1().decode() if proc.poll() is not None else ""
            else:
                assert proc.wait(timeout=60) != 0 and problems
        finally:
            proc.kill()
            proc.wait()
