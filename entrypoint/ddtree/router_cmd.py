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
    DDTREE_API_KEY            the replicas' API key (--api-key; masked when printed)
    DDTREE_ROUTER_EXTRA_ARGS  more router flags (shell-quoted); arguments after `--` come last and win
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
from ddtree.serve import render_command

EXIT_CANNOT_RUN = 2
POLICIES = ("cache_aware", "round_robin", "power_of_two", "random")
DEFAULT_PORT = 30000
# A replica loads ~600 GB before it answers /health; the router waits that long (the compose and k8s
# start periods) before it gives up registering a replica it was given at start.
WORKER_STARTUP_TIMEOUT_S = 3600
# Kubernetes label selector term: key=value (the router's --selector form).
_SELECTOR = re.compile(r"^[A-Za-z0-9./_-]+=[A-Za-z0-9._-]*$")


def replica_urls(text: str) -> list[str]:
    """DDTREE_REPLICAS -> URLs; each must be http(s) with a host (a typo fails here, not in the router)."""
    urls = [u for u in re.split(r"[\s,]+", text.strip()) if u]
    for url in urls:
        parsed = urllib.parse.urlsplit(url)
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
    argv = [sys.executable, "-m", "sglang_router.launch_router"]
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
    if environ.get("DDTREE_API_KEY"):
        argv += ["--api-key", environ["DDTREE_API_KEY"]]
    try:
        argv += shlex.split(environ.get("DDTREE_ROUTER_EXTRA_ARGS", ""))
    except ValueError as exc:
        raise UserError(f"DDTREE_ROUTER_EXTRA_ARGS: {exc}", exit_code=EXIT_CANNOT_RUN) from exc
    return argv + list(extra)


def run(args: argparse.Namespace) -> int:
    extra = list(args.router_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    command = router_command(os.environ, extra)
    print(("# ddtree router --dry-run" if args.dry_run else "ddtree router: launching"), flush=True)
    print(render_command(command, {}), flush=True)
    if args.dry_run:
        return 0
    sys.stderr.flush()
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
