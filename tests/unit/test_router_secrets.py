"""The router's API key reaches the replicas and nothing else: the real sglang-router, on 127.0.0.1.

Real: `ddtree router` and the pinned sglang-router (requirements/dev.txt) it execs into; the replica is a
bench_double server (a TEST DOUBLE of SGLang: real HTTP, SGLang's JSON shapes), because a real replica
needs eight GPUs and the 600 GB model. While the router runs, its argv (/proc/PID/cmdline and `ps` over
every process), its environment (/proc/PID/environ) and its whole log are searched for the key.
The router itself needs no GPU, so this CPU test is where every run checks it; the device's `secrets` job
(tests/gpu/secrets_tiny.py) runs it in front of the real GPU server only when sglang-router was staged there
(tests/gpu/README.md, step 1), and said "the router part is not run" on the H200 on 2026-12-01.

TLS (test_router_reaches_an_https_replica_*): the replica double speaks https with a certificate from a
throwaway CA (tests/gpu/secrets_tiny.make_tls_files, the openssl command; its key encrypted with a
password), as the real server does with --ssl-keyfile/--ssl-keyfile-password. sglang-router 0.3.2 (rustls)
trusts it only when told: `--ca-cert-paths CA` covers its health checks and the requests it forwards, but
not its worker-metadata requests at registration (they fail "unknown ca" and the worker is registered with
no metadata: model "unknown"); SSL_CERT_FILE=CA in the router's environment covers every request it makes.
Without either, the replica is never registered.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from ddtree.bench.client import Client
from ddtree.bench.replicas import list_replicas
from ddtree.errors import UserError
from ddtree.router import cmd as router_cmd

from tests.gpu.secrets_tiny import make_tls_files
from tests.unit.bench_double import DoubleConfig, serve
from tests.unit.test_router import STARTUP_S, _env, _free_port, stop_process

KEY = "rk-live-7f3a9c0e5b1d2468ROUTERSECRET"


@pytest.mark.parametrize("given_as", ["DDTREE_API_KEY", "DDTREE_API_KEY_FILE"])
def test_router_key_reaches_the_replica_but_no_argv_environment_or_log(tmp_path: Path, given_as: str) -> None:
    key_file = tmp_path / "router-key"
    key_file.write_text(KEY + "\n")
    key_env = {given_as: str(key_file) if given_as.endswith("_FILE") else KEY}
    port = _free_port()
    with ExitStack() as stack:
        replica_url, replica = stack.enter_context(serve(DoubleConfig(speculative_algorithm="DDTREE")))
        env = _env(
            tmp_path,
            DDTREE_REPLICAS=replica_url,
            DDTREE_ROUTER_HOST="127.0.0.1",
            DDTREE_ROUTER_PORT=str(port),
            DDTREE_ROUTER_POLICY="round_robin",
            **key_env,
            DDTREE_ROUTER_EXTRA_ARGS=(
                f"--prometheus-host 127.0.0.1 --prometheus-port {_free_port()} --log-level debug "
                "--health-check-interval-secs 1 --request-timeout-secs 30"
            ),
        )
        log_path = tmp_path / "router.log"
        log = stack.enter_context(log_path.open("w"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddtree.cli", "router"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + STARTUP_S
            while not (list_replicas(Client(url, timeout=2.0, api_key=KEY)) or [None])[0]:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"router not ready (rc {proc.poll()}): {log_path.read_text()[-2000:]}")
                time.sleep(0.2)
            request = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
            Client(url, timeout=10.0, api_key=KEY).post_json("/generate", request)
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
            open_files = open_file_targets(proc.pid)
            ps = subprocess.run(["ps", "-eo", "pid,args", "--width", "99999"], capture_output=True, text=True)
        finally:
            stop_process(proc)
    assert "ddtree.router.launch" in cmdline or "sglang::router" in cmdline  # it is the router, after exec
    assert f"Bearer {KEY}" in replica.authorizations  # the router got the key and sent it on
    assert KEY not in cmdline and KEY not in ps.stdout
    assert KEY not in environ and "DDTREE_API_KEY" not in environ  # neither variable is inherited
    assert open_files and not [
        f for f in open_files if f.startswith("/memfd:")
    ]  # the key's memfd: read, closed
    assert KEY not in log_path.read_text()


def open_file_targets(pid: int) -> list[str]:
    """What the process's open descriptors point at; one closed between the listing and its readlink (the
    router opens and closes sockets all the time) is skipped, not an error."""
    targets = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            targets.append(os.readlink(fd))
        except FileNotFoundError:
            continue
    return targets


SPELLINGS = ["--api-key", "--api-k", "--api-key=x", "--control-plane-api", "--contr"]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_router_refuses_a_secret_option_in_any_spelling(spelling: str) -> None:
    environ = {"DDTREE_REPLICAS": "http://gpu-1:30000", "DDTREE_ROUTER_EXTRA_ARGS": f"{spelling} leak-1234"}
    with pytest.raises(UserError) as caught:
        router_cmd.router_command(environ)
    assert "DDTREE_API_KEY" in str(caught.value) and "leak-1234" not in str(caught.value)
    with pytest.raises(UserError):
        router_cmd.router_command({"DDTREE_REPLICAS": "http://gpu-1:30000"}, [spelling, "leak-1234"])


@pytest.mark.parametrize(
    ("spelling", "instead"),
    [("--oracle-password", "ATP_PASSWORD"), ("--oracle-passw=x", "ATP_PASSWORD"),
     ("--postgres-db-url", "POSTGRES_DB_URL"), ("--redis-u", "REDIS_URL")],
)  # fmt: skip
def test_the_history_backends_secrets_are_refused_naming_their_variable(spelling: str, instead: str) -> None:
    """sglang-router 0.3.2's own parser reads these from the router's environment, which only it sees."""
    with pytest.raises(UserError) as caught:
        router_cmd.router_command({"DDTREE_REPLICAS": "http://gpu-1:30000"}, [spelling, "pw-0123456789"])
    assert instead in str(caught.value) and "pw-0123456789" not in str(caught.value)


def test_the_refused_router_options_are_the_real_routers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each is an option of the pinned sglang-router's own parser; the history backends' take their default
    from the environment variable the refusal names."""
    from sglang_router.launch_router import parse_router_args

    urls = ["--worker-urls", "http://gpu-1:30000"]
    for flag, instead in router_cmd.ROUTER_SECRET_FLAGS.items():
        field = flag[2:].replace("-", "_")
        assert hasattr(parse_router_args(urls), field), flag
        variable = next(w for w in instead.split() if w.isupper() and "_" in w)
        if variable.startswith("DDTREE_"):
            continue  # the replicas' key: handed over in memory by ddtree.router.launch
        monkeypatch.setenv(variable, "from-the-environment")
        assert getattr(parse_router_args(urls), field) == "from-the-environment", flag


def test_a_replica_url_with_a_password_is_refused_without_printing_it() -> None:
    with pytest.raises(UserError) as caught:
        router_cmd.router_command(
            {"DDTREE_REPLICAS": "http://gpu-1:30000 http://admin:pw-0123456789@gpu-2:30000"}
        )
    assert "http://gpu-2:30000 carries user:password@" in str(caught.value)
    assert "pw-0123456789" not in str(caught.value) and "admin" not in str(caught.value)


TLS_PASSWORD = "tls-pass-0123456789ROUTERSECRET"


@pytest.mark.parametrize("trust", ["--ca-cert-paths", "SSL_CERT_FILE", None])
def test_router_reaches_an_https_replica_when_told_its_ca(tmp_path: Path, trust: str | None) -> None:
    """The real router in front of an https replica whose certificate a throwaway CA signed: the key reaches
    the replica over TLS with either way of trusting the CA (and shows on no argv, environment or log);
    without one the replica is never registered (the router refuses the certificate: unknown CA)."""
    tls = make_tls_files(tmp_path / "tls", TLS_PASSWORD)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.cert, tls.key, password=TLS_PASSWORD)
    port = _free_port()
    extra = (f"--prometheus-host 127.0.0.1 --prometheus-port {_free_port()} --log-level debug "
             "--health-check-interval-secs 1 --request-timeout-secs 30")  # fmt: skip
    trust_env = {"SSL_CERT_FILE": str(tls.ca)} if trust == "SSL_CERT_FILE" else {}
    if trust == "--ca-cert-paths":
        extra += f" --ca-cert-paths {tls.ca}"
    with ExitStack() as stack:
        replica_url, replica = stack.enter_context(
            serve(DoubleConfig(speculative_algorithm="DDTREE"), tls=context)
        )
        assert replica_url.startswith("https://")
        env = _env(tmp_path, DDTREE_REPLICAS=replica_url, DDTREE_ROUTER_HOST="127.0.0.1",
                   DDTREE_ROUTER_PORT=str(port), DDTREE_ROUTER_POLICY="round_robin", DDTREE_API_KEY=KEY,
                   DDTREE_ROUTER_EXTRA_ARGS=extra, **trust_env)  # fmt: skip
        log_path = tmp_path / "router.log"
        log = stack.enter_context(log_path.open("w"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddtree.cli", "router"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            client = Client(f"http://127.0.0.1:{port}", timeout=2.0, api_key=KEY)
            deadline = time.monotonic() + (STARTUP_S if trust else 10.0)  # unknown CA: seen within seconds
            replicas = None
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    replicas = list_replicas(client)
                except UserError:
                    replicas = None  # the router is not listening yet
                if replicas and replicas[0].healthy:
                    break
                time.sleep(0.2)
            assert proc.poll() is None, log_path.read_text()[-2000:]
            if trust is None:
                assert not replicas  # never registered
                assert any("UNKNOWN_CA" in e for e in replica.tls_errors), replica.tls_errors
                return
            assert replicas and replicas[0].healthy, log_path.read_text()[-2000:]
            request = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
            answer = Client(f"http://127.0.0.1:{port}", timeout=10.0, api_key=KEY).post_json(
                "/generate", request
            )
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
        finally:
            stop_process(proc)
    assert answer["text"] == "xxxx"  # the double's answer, through the router, over TLS
    assert f"Bearer {KEY}" in replica.authorizations  # the key went over the https connection
    assert KEY not in cmdline and KEY not in environ and KEY not in log_path.read_text()
    assert TLS_PASSWORD not in cmdline + environ + log_path.read_text()
    refused = [e for e in replica.tls_errors if "UNKNOWN_CA" in e]
    if trust == "SSL_CERT_FILE":
        assert not refused  # every request the router made trusted the CA
    else:  # the flag: the worker-metadata requests at registration still use only the system's roots
        assert refused and "Discovered 0 metadata labels" in log_path.read_text()
