"""Device `secrets` mode: no secret anywhere once the real server and the real router run.

Run by tests/gpu/device_ddtree.sh secrets (not collected by pytest: no test_ prefix). The CPU tiers cover
each piece (tests/unit/test_serve_secrets.py: the real patched SGLang's parsing, log line, /server_info,
internal states and dump, through `ddtree serve`; test_router_secrets.py: the real router); here the whole
path runs for real on the GPU, as a user starts it, over TLS:

    ddtree serve   (DDTREE_API_KEY_FILE = the user key, HF_TOKEN in its environment,
                    -- --admin-api-key ADMIN, --ssl-keyfile KEY --ssl-certfile CERT --ssl-ca-certs CA,
                    --config FILE holding ssl-keyfile-password, and the tiny models with the smoke test's
                    DDTREE flags): https on 127.0.0.1
    ddtree router  (DDTREE_REPLICAS = that https server, DDTREE_API_KEY_FILE = the user key, the CA given
                   with --ca-cert-paths and SSL_CERT_FILE), if sglang-router is installed here (it is in
                   the image; the device's staged wheels have it only when it was staged beside them,
                   tests/gpu/README.md step 1: otherwise said, not run, and the router is covered by
                   tests/unit/test_router_secrets.py on the CPU alone, its https replica included)

The TLS files are made here, at run time, by the openssl command (make_tls_files): a throwaway CA and a
server certificate it signed, whose key is ENCRYPTED with the SSL key password; the password reaches
SGLang only through the --config file, which `ddtree serve` folds into its in-memory config (no argv).
The server speaks TLS with that key, so SGLang opened it with the password: checked by plain http getting
no answer and a client without the test's CA being refused (tls_problems).

Then, with the keys: POST /configure_logging (admin key) turns request dumps on (threshold 1), one /generate
through the router (else the server), `ddtree selfcheck --live` writes a receipt. The keys must work: a
request without the key is refused (401), the admin route refuses the user key. Searched for each secret
(user key, admin key, HF token, SSL key password): /server_info and /get_server_info (both keys),
/proc/PID/cmdline, /proc/PID/environ and every open in-memory file (/proc/PID/fd, memfd) of every process
of the server's and the router's sessions, `ps` over the machine, the server, router and selfcheck logs,
the request dumps, the receipt and the checkout's Dockerfile. Not searched: the test's own temporary folder
(the key file, the password's config file: where the secrets belong), removed at the end.

Exit 0: no secret found anywhere, the keys were enforced and TLS was on; 1: a leak, an unenforced key or no
TLS (each printed as one line: `LEAK <secret> in <place>`); 2: the server never became ready (log tail
printed, logs in OUT), or no GPU here. Without the openssl command the TLS part is said and not run, and the
rest runs over plain http (three secrets searched instead of four), as the router part without sglang-router.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECRETS = {
    "user key": "sk-user-7d1c0b5e93a24f68GPUSECRET",
    "admin key": "adm-9f4e2a7c1b3d5e60GPUSECRET",
    "HF token": "hf_GpuSecretsTokenValue0123456789",
    "SSL key password": "sslpw-5c0e8a2f7b1d4963GPUSECRET",
}
LAUNCH_TIMEOUT_S = 240.0
# The throwaway certificates' openssl settings: our own config, so the system's openssl.cnf decides nothing.
# rustls (the router) refuses a CA certificate as a server's own and wants the address in subjectAltName, so
# the server's certificate is a leaf (CA:FALSE, IP:127.0.0.1) signed by a throwaway CA both clients trust.
OPENSSL_CONFIG = """\
[req]
distinguished_name = subject
prompt = no
[subject]
CN = ddtree secrets test
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """A throwaway CA, the server's certificate it signed, and the server's key encrypted with a password."""

    ca: Path
    cert: Path
    key: Path


def make_tls_files(folder: Path, password: str) -> TlsFiles:
    """Make the CA, the server's certificate and its ENCRYPTED key (AES-256, `password`) under `folder` with
    the openssl command (the pinned Python stack has no `cryptography`). The password goes to openssl on its
    stdin, never on its argv. P-256 keys: quick to make, and both OpenSSL and rustls take them."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is not installed: it makes the test's TLS certificates")
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "openssl.cnf"
    config.write_text(OPENSSL_CONFIG)
    files = TlsFiles(ca=folder / "ca.pem", cert=folder / "server.pem", key=folder / "server.key")
    ca_key, request = folder / "ca.key", folder / "server.csr"
    p256 = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    typed = (password + "\n").encode()
    steps: list[tuple[list[str], bytes | None]] = [
        (["genpkey", *p256, "-out", str(ca_key)], None),
        (["req", "-config", str(config), "-new", "-x509", "-key", str(ca_key), "-extensions", "ca",
          "-subj", "/CN=ddtree secrets test CA", "-days", "2", "-out", str(files.ca)], None),
        (["genpkey", *p256, "-aes-256-cbc", "-pass", "stdin", "-out", str(files.key)], typed),
        (["req", "-config", str(config), "-new", "-key", str(files.key), "-passin", "stdin",
          "-subj", "/CN=127.0.0.1", "-out", str(request)], typed),
        (["x509", "-req", "-in", str(request), "-CA", str(files.ca), "-CAkey", str(ca_key),
          "-set_serial", "2", "-days", "2", "-extfile", str(config), "-extensions", "leaf",
          "-out", str(files.cert)], None),
    ]  # fmt: skip
    for args, stdin in steps:
        done = subprocess.run(["openssl", *args], input=stdin, capture_output=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")
    os.chmod(files.key, 0o600)
    return files


def write_password_config(path: Path, password: str) -> Path:
    """The SSL key password in a `--config` YAML (mode 0600), the way to give it without any argv: `ddtree
    serve` folds this file into its in-memory config for SGLang, so neither it nor its path reaches the
    server's command line."""
    import yaml

    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump({"ssl-keyfile-password": password}))
    return path


def tls_server_args(tls: TlsFiles, config: Path) -> list[str]:
    """The server's TLS options (after `--`): SGLang's own self-requests (warm-up) verify against the CA."""
    return ["--ssl-keyfile", str(tls.key), "--ssl-certfile", str(tls.cert), "--ssl-ca-certs", str(tls.ca),
            "--config", str(config)]  # fmt: skip


def session_processes(session_ids: Iterable[int]) -> dict[int, tuple[bytes, bytes]]:
    """pid -> (cmdline, environ) of every process in the given sessions (the server's workers included)."""
    wanted = set(session_ids)
    found: dict[int, tuple[bytes, bytes]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) not in wanted:
                continue
            found[int(entry.name)] = ((entry / "cmdline").read_bytes(), (entry / "environ").read_bytes())
        except (OSError, ProcessLookupError):
            continue  # gone meanwhile, or not ours to read
    return found


def memfd_places(session_ids: Iterable[int]) -> dict[str, bytes]:
    """What each in-memory file (memfd) open in those sessions holds: `ddtree serve` hands the keys to the
    server in one, which the patch secret-args-repr closes once SGLang has read it."""
    found: dict[str, bytes] = {}
    for pid in session_processes(session_ids):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
                if target.startswith("/memfd:"):
                    with fd.open("rb") as held:  # a config or a key is small; other memfds may be large
                        found[f"{fd} ({target})"] = held.read(1 << 20)
            except OSError:
                continue  # closed meanwhile
    return found


def file_places(folder: Path, label: str) -> dict[str, bytes]:
    """Every file under `folder` as a place to search (dumps, logs)."""
    if not folder.is_dir():
        return {}
    return {
        f"{label} {p.relative_to(folder)}": p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def leaks(places: Mapping[str, bytes], secrets: Mapping[str, str] = SECRETS) -> list[str]:
    """`LEAK <secret> in <place>` for each secret found in each place."""
    return [
        f"LEAK {name} in {place}"
        for place, data in places.items()
        for name, value in secrets.items()
        if value.encode() in data
    ]


def _get(url: str, route: str, key: str | None, tls: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url + route, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30, context=tls) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(
    url: str, route: str, body: dict, key: str | None, tls: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(
        url + route, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120, context=tls) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def tls_problems(url: str, key: str, trust: ssl.SSLContext) -> list[str]:
    """The server speaks TLS with the certificate made here, so the encrypted key was opened with the
    password: plain http gets no answer, and a client that does not trust this test's CA is refused."""
    import http.client

    problems: list[str] = []
    try:
        status, _ = _get(url.replace("https://", "http://", 1), "/health", key)
        problems.append(f"the server answered plain http (HTTP {status}): TLS is not on")
    except (OSError, http.client.HTTPException):
        pass  # refused, reset or garbled: not an http server
    try:
        status, _ = _get(url, "/health", key, ssl.create_default_context())  # the system's roots only
        problems.append(f"a client without this test's CA got HTTP {status}: not the certificate made here")
    except (OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)  # urllib wraps the handshake's error in a URLError
        if not isinstance(reason, ssl.SSLCertVerificationError):
            problems.append(f"a client without this test's CA failed otherwise: {reason}")
    answered: object
    try:
        answered = _get(url, "/health", key, trust)[0]
    except (OSError, http.client.HTTPException) as exc:
        answered = exc
    if answered != 200:
        problems.append(f"the server did not answer /health over https with this test's CA: {answered}")
    return problems


def _arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def _free_port() -> int:
    from ddtree.smoke.server import free_port as free

    return free()


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(cmd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait(
    url: str, key: str, proc: subprocess.Popen[bytes], route: str, wait_s: float, tls: ssl.SSLContext | None
) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _get(url, route, key, tls)[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(1.0)
    return False


def main(argv: list[str] | None = None) -> int:
    from ddtree.smoke import check as smoke
    from ddtree.smoke import models as smoke_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for logs, dumps and the receipt")
    out: Path = parser.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    problem = smoke.gpu_problem()
    if problem:
        print(f"secrets: cannot run here: {problem}")
        return 2
    settings = dataclasses.replace(smoke.settings_from_profile("pro6000"), launch_timeout_s=LAUNCH_TIMEOUT_S)
    work = Path(tempfile.mkdtemp(prefix="ddtree-secrets-"))
    key_file = work / "api-key"
    key_file.write_text(SECRETS["user key"] + "\n")
    user, admin, password = SECRETS["user key"], SECRETS["admin key"], SECRETS["SSL key password"]
    server = router = None
    places: dict[str, bytes] = {}
    failures: list[str] = []
    searched = dict(SECRETS)
    try:
        tls: TlsFiles | None = None
        trust: ssl.SSLContext | None = None
        if shutil.which("openssl") is None:
            # The rest of the search still runs: the keys and the token are the secrets every server has.
            print("secrets: the openssl command is not installed here: the TLS and SSL key password part is "
                  "not run (plain http)", flush=True)  # fmt: skip
            searched.pop("SSL key password")
        else:
            tls = make_tls_files(work / "tls", password)
            trust = ssl.create_default_context(cafile=str(tls.ca))  # this test's CA only
        target, drafter = smoke_models.write_models(work / "models", settings)
        smoke_models.write_tokenizer(target)
        port = _free_port()
        url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith("DDTREE_")}
        base.update(PYTHONPATH=os.pathsep.join([str(REPO / "entrypoint"), base.get("PYTHONPATH", "")]),
                    PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")  # fmt: skip
        serve_env = {
            **base,
            "HF_TOKEN": SECRETS["HF token"],
            "DDTREE_TARGET": "pro6000",
            "DDTREE_ENV_DIR": str(REPO / "env"),
            "DDTREE_SKIP_CHECKS": "weights,drafter,gpu,shm",  # tiny models: not the locked Kimi K2.6
            "DDTREE_API_KEY_FILE": str(key_file),
            "DDTREE_MODEL_DIR": str(target),
            "DDTREE_DRAFTER_DIR": str(drafter),
            "DDTREE_HOST": "127.0.0.1",
            "DDTREE_PORT": str(port),
            "DDTREE_TP": "1",
            # the profile is pro6000's (sm_120): JIT builds must target this GPU instead
            "TORCH_CUDA_ARCH_LIST": _arch(),
        }
        # --grammar-backend none: the profile's kimi_k2 reasoning parser needs "</think>" as one token, which
        # the tiny byte-level tokenizer cannot have (SGLang refuses to start: seen on the H200, 2026-12-01)
        extra = ["--admin-api-key", admin, "--grammar-backend", "none",
                 "--mem-fraction-static", "0.2", "--cuda-graph-max-bs", "32",
                 "--max-running-requests", "32", "--random-seed", str(settings.seed),
                 "--speculative-num-draft-tokens", str(settings.block_size),
                 "--speculative-ddtree-budget", str(settings.budget),
                 "--speculative-ddtree-topk", str(settings.topk),
                 ]  # fmt: skip
        if tls is not None:
            extra += tls_server_args(tls, write_password_config(work / "server-tls.yaml", password))
        server = _start(
            [sys.executable, "-m", "ddtree.cli", "serve", "--", *extra], serve_env, out / "serve.log"
        )
        if not _wait(url, user, server, "/health", LAUNCH_TIMEOUT_S, trust):
            tail = (out / "serve.log").read_text(errors="replace").splitlines()[-30:]
            print("secrets: the server never became ready:\n" + "\n".join(tail))
            return 2
        print(f"secrets: server ready at {url}", flush=True)
        if tls is not None and trust is not None:
            failures += tls_problems(url, user, trust)
        front = url
        try:
            import sglang_router  # noqa: F401

            rport = _free_port()
            # The https replica's CA: the router's flag (health checks, requests) and SSL_CERT_FILE (its
            # worker-metadata requests trust only the system's roots: tests/unit/test_router_secrets.py)
            extra_router = f"--prometheus-host 127.0.0.1 --prometheus-port {_free_port()}"
            router_env = {**base, "DDTREE_REPLICAS": url, "DDTREE_ROUTER_HOST": "127.0.0.1",
                          "DDTREE_ROUTER_PORT": str(rport), "DDTREE_API_KEY_FILE": str(key_file)}  # fmt: skip
            if tls is not None:
                extra_router += f" --ca-cert-paths {tls.ca}"
                router_env["SSL_CERT_FILE"] = str(tls.ca)
            router_env["DDTREE_ROUTER_EXTRA_ARGS"] = extra_router
            router = _start([sys.executable, "-m", "ddtree.cli", "router"], router_env, out / "router.log")
            front = f"http://127.0.0.1:{rport}"
            if not _wait(front, user, router, "/workers", 120, trust):
                failures.append("the router never answered /workers")
                front = url
        except ImportError:
            print("secrets: sglang-router is not installed here: the router part is not run", flush=True)
        # The keys are enforced: no key and the user key on an admin route are refused.
        if _get(url, "/server_info", None, trust)[0] != 401:
            failures.append("the server answered /server_info without a key")
        dumps = out / "dumps"
        dumping = {"dump_requests_folder": str(dumps), "dump_requests_threshold": 1}
        status, _ = _post(url, "/configure_logging", dumping, user, trust)
        if status not in (401, 403):
            failures.append(f"/configure_logging took the user key (HTTP {status}): admin key not enforced")
        status, answer = _post(url, "/configure_logging", dumping, admin, trust)
        if status != 200:
            failures.append(f"/configure_logging with the admin key: HTTP {status} {answer[:200]!r}")
        request = {"text": "hello", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
        status, answer = _post(front, "/generate", request, user, trust)
        if status != 200:
            failures.append(f"/generate through {front}: HTTP {status} {answer[:200]!r}")
        for route in ("/server_info", "/get_server_info"):
            for name, key in (("user", user), ("admin", admin)):
                status, answer = _get(url, route, key, trust)
                places[f"{route} ({name} key, HTTP {status})"] = answer
        # the client's own key, and the CA for an https front (the server itself when no router runs)
        live_env = {**base, "DDTREE_API_KEY_FILE": str(key_file)}
        if tls is not None:
            live_env["SSL_CERT_FILE"] = str(tls.ca)
        done = subprocess.run(
            [sys.executable, "-m", "ddtree.cli", "selfcheck", "--live", front, "--max-tokens", "32",
             "--runs", "1", "--receipt", str(out / "receipt.json")],
            capture_output=True, env=live_env, timeout=600,
        )  # fmt: skip
        places["selfcheck --live output"] = done.stdout + done.stderr
        time.sleep(3)  # the dump is written by a background task
        sessions = [p.pid for p in (server, router) if p is not None]
        for pid, (cmdline, environ) in session_processes(sessions).items():
            places[f"/proc/{pid}/cmdline"] = cmdline
            places[f"/proc/{pid}/environ"] = environ
        places.update(memfd_places(sessions))
        places["ps -eo args"] = subprocess.run(["ps", "-eo", "pid,args", "--width", "99999"],
                                               capture_output=True).stdout  # fmt: skip
        if not list(dumps.rglob("*")):
            failures.append(f"no request dump was written to {dumps}")
    finally:
        _stop(router)
        _stop(server)
        shutil.rmtree(work, ignore_errors=True)
    places.update(file_places(out, "file"))  # logs (after stop: the whole of them), dumps, the receipt
    places["Dockerfile"] = (REPO / "Dockerfile").read_bytes()
    found = leaks(places, searched)
    for line in [*failures, *found]:
        print(f"secrets: {line}")
    print(f"secrets: searched {len(places)} places for {len(searched)} secrets: "
          f"{'FAIL' if found or failures else 'none found, keys enforced'}")  # fmt: skip
    return 1 if found or failures else 0


if __name__ == "__main__":
    sys.exit(main())
