"""`ddtree router`: exec SGLang's router (sglang-router, env/router.lock) in front of the replicas.

The compose profile `router` and the k8s router Deployment run this; it only turns the environment into
the router's command line (one line per problem, exit 2, before anything starts) and execs it, so the
router keeps the process and its signals. Nothing here balances load: the router does.

    DDTREE_REPLICAS           replica URLs, separated by spaces or commas (http://gpu-1:30000 ...)
    DDTREE_ROUTER_SELECTOR    or: Kubernetes label selectors (k=v ...): the router watches those pods
    DDTREE_ROUTER_NAMESPACE   the pods' namespace for the selector (default: the router's own)
    DDTREE_REPLICA_PORT       the replicas' port for the selector (default 30000)
    DDTREE_ROUTER_HOST/PORT   where the router listens (default 0.0.0.0:30000)
    DDTREE_ROUTER_POLICY      cache_aware (default: requests sharing a prefix go to the same replica,
                              whose radix cache holds it), round_robin, power_of_two, random
    DDTREE_API_KEY            the replicas' API key (or DDTREE_API_KEY_FILE: a file holding it)
    DDTREE_ROUTER_EXTRA_ARGS  more router flags (shell-quoted); arguments after `--` come last and win

The API key never reaches the router's command line or environment: sglang-router 0.3.2 reads it only from
--api-key, so the router runs as `python -m ddtree.router.launch` (the router's own parser and launcher in
that process), which reads the key from a memfd this process hands across exec (see ddtree.router.launch).
--api-key, --control-plane-api-keys and the history backends' --oracle-password, --postgres-db-url and
--redis-url (or an abbreviation) in the router arguments are refused, naming where to give them instead.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import urllib.parse
from collections.abc import Mapping, Sequence

from ddtree.errors import UserError
from ddtree.router.launch import KEY_FD_ENV
from ddtree.serve.secret_args import SECRET_ENV, api_key_from, render_command

EXIT_CANNOT_RUN = 2
POLICIES = ("cache_aware", "round_robin", "power_of_two", "random")
DEFAULT_PORT = 30000
# A replica loads ~600 GB before it answers /health; the router waits that long (the compose and k8s
# start periods) before it gives up registering a replica it was given at start.
WORKER_STARTUP_TIMEOUT_S = 3600
# Kubernetes label selector term: key=value (the router's --selector form).
_SELECTOR = re.compile(r"^[A-Za-z0-9./_-]+=[A-Za-z0-9._-]*$")
# The router's options whose values are (or may hold) secrets: never on its command line (argparse also takes
# prefixes), each with where to give it instead. sglang-router 0.3.2's own parser reads the history backends'
# password and URLs from the router's environment (ATP_PASSWORD, POSTGRES_DB_URL, REDIS_URL).
_REPLICA_KEY = "give the replicas' key with DDTREE_API_KEY or DDTREE_API_KEY_FILE"
ROUTER_SECRET_FLAGS = {
    "--api-key": _REPLICA_KEY,
    "--control-plane-api-keys": _REPLICA_KEY,
    "--oracle-password": "set ATP_PASSWORD in the router's environment (sglang-router reads it there)",
    "--postgres-db-url": "set POSTGRES_DB_URL in the router's environment (sglang-router reads it there)",
    "--redis-url": "set REDIS_URL in the router's environment (sglang-router reads it there)",
}


def replica_urls(text: str) -> list[str]:
    """DDTREE_REPLICAS -> URLs; each must be http(s) with a host (a typo fails here, not in the router)."""
    urls = [u for u in re.split(r"[\s,]+", text.strip()) if u]
    for url in urls:
        parsed = urllib.parse.urlsplit(url)
        if parsed.username is not None or parsed.password is not None:
            shown = parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl()
            raise UserError(
                f"DDTREE_REPLICAS: {shown} carries user:password@, which would be printed and put on the "
                "router's command line: give the replicas' key with DDTREE_API_KEY or DDTREE_API_KEY_FILE",
                exit_code=EXIT_CANNOT_RUN,
            )
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise UserError(
                f"DDTREE_REPLICAS: {url!r} is not an http(s) URL with a host; "
                "give e.g. DDTREE_REPLICAS='http://gpu-1:30000 http://gpu-2:30000'",
                exit_code=EXIT_CANNOT_RUN,
            )
    if len(set(urls)) != len(urls):
        raise UserError(f"DDTREE_REPLICAS lists a URL twice: {text.strip()!r}", exit_code=EXIT_CANNOT_RUN)
    return urls


def _port(environ: Mapping[str, str], name: str, default: int) -> str:
    value = environ.get(name) or str(default)
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise UserError(f"{name}={value!r} is not a port number (1-65535)", exit_code=EXIT_CANNOT_RUN)
    return value


def router_command(environ: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
    """The router's full command line from the environment (see the module docstring)."""
    replicas = replica_urls(environ.get("DDTREE_REPLICAS", ""))
    selectors = (environ.get("DDTREE_ROUTER_SELECTOR") or "").split()
    if bool(replicas) == bool(selectors):
        raise UserError(
            "set DDTREE_REPLICAS to the replicas' URLs (e.g. 'http://gpu-1:30000 http://gpu-2:30000'), "
            "or DDTREE_ROUTER_SELECTOR to their pods' labels on Kubernetes; "
            + ("not both" if replicas else "neither is set"),
            exit_code=EXIT_CANNOT_RUN,
        )
    policy = environ.get("DDTREE_ROUTER_POLICY") or "cache_aware"
    if policy not in POLICIES:
        raise UserError(
            f"DDTREE_ROUTER_POLICY={policy!r} is not one of {', '.join(POLICIES)}", exit_code=EXIT_CANNOT_RUN
        )
    argv = [sys.executable, "-m", "ddtree.router.launch"]
    argv += ["--host", environ.get("DDTREE_ROUTER_HOST") or "0.0.0.0"]
    argv += ["--port", _port(environ, "DDTREE_ROUTER_PORT", DEFAULT_PORT)]
    argv += ["--policy", policy, "--worker-startup-timeout-secs", str(WORKER_STARTUP_TIMEOUT_S)]
    if replicas:
        argv += ["--worker-urls", *replicas]
    else:
        bad = [s for s in selectors if not _SELECTOR.match(s)]
        if bad:
            raise UserError(
                f"DDTREE_ROUTER_SELECTOR: {bad[0]!r} is not key=value (e.g. app.kubernetes.io/name=ddtree)",
                exit_code=EXIT_CANNOT_RUN,
            )
        argv += ["--service-discovery", "--selector", *selectors]
        argv += ["--service-discovery-port", _port(environ, "DDTREE_REPLICA_PORT", DEFAULT_PORT)]
        if environ.get("DDTREE_ROUTER_NAMESPACE"):
            argv += ["--service-discovery-namespace", environ["DDTREE_ROUTER_NAMESPACE"]]
    try:
        argv += shlex.split(environ.get("DDTREE_ROUTER_EXTRA_ARGS", ""))
    except ValueError as exc:
        raise UserError(f"DDTREE_ROUTER_EXTRA_ARGS: {exc}", exit_code=EXIT_CANNOT_RUN) from exc
    argv += list(extra)
    refuse_secret_flags(argv)
    return argv


def refuse_secret_flags(argv: Sequence[str]) -> None:
    """A secret router option (any prefix argparse would expand to one) is refused, naming the option only."""
    for arg in argv:
        flag = arg.partition("=")[0]
        if not flag.startswith("--") or len(flag) <= 2:
            continue
        meant = [s for s in ROUTER_SECRET_FLAGS if s.startswith(flag)]
        if meant:
            raise UserError(
                f"{flag} ({' or '.join(meant)}) is not taken on the router's command line, which any process "
                f"on the host can read: {ROUTER_SECRET_FLAGS[meant[0]]}",
                exit_code=EXIT_CANNOT_RUN,
            )


def key_fd(key: str) -> int:
    """A memfd holding `key` that survives exec (no copy on disk, nothing on argv or in the environment)."""
    fd = os.memfd_create("ddtree-router-key", 0)  # no MFD_CLOEXEC: the router's process reads it
    os.write(fd, key.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run(args: argparse.Namespace) -> int:
    extra = list(args.router_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    command = router_command(os.environ, extra)
    key = api_key_from(os.environ)
    print(("# ddtree router --dry-run" if args.dry_run else "ddtree router: launching"), flush=True)
    print(render_command(command, {}), flush=True)
    if key is not None:
        print("# the replicas' API key: handed to the router in memory (not on its command line)", flush=True)
    if args.dry_run:
        return 0
    sys.stderr.flush()
    for name in SECRET_ENV:  # consumed here: the router's process does not inherit them
        os.environ.pop(name, None)
    if key is not None:
        os.environ[KEY_FD_ENV] = str(key_fd(key))
    os.execv(command[0], command)
    return 1  # not reached: exec replaces this process


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "router",
        help="exec SGLang's router in front of the replicas (DDTREE_REPLICAS or DDTREE_ROUTER_SELECTOR)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit 0")
    parser.add_argument("router_args", nargs=argparse.REMAINDER, help="-- then extra router arguments")
    parser.set_defaults(func=run)
