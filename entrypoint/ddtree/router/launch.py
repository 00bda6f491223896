"""The router's own process: sglang-router 0.3.2 with the replicas' API key from an inherited memfd.

sglang-router 0.3.2 reads its API key only from `--api-key` (no environment variable, no config file),
and a process's argv is public on the host (/proc/PID/cmdline, `ps`, `docker top`). So `ddtree router`
execs this module instead: the router's own argv without the key, the key in a memfd whose number is in
DDTREE_ROUTER_KEY_FD (a number, not a secret). Here the router's own parser reads the argv, the key is read
from the fd (then closed) into RouterArgs.api_key, and sglang-router's launch_router runs in this process.
"""

from __future__ import annotations

import os
import sys

KEY_FD_ENV = "DDTREE_ROUTER_KEY_FD"


def read_key(environ: dict[str, str]) -> str | None:
    """The key in the fd DDTREE_ROUTER_KEY_FD names (the variable removed, the fd closed); None if unset."""
    number = environ.pop(KEY_FD_ENV, None)
    if not number:
        return None
    with os.fdopen(int(number), "rb") as held:
        return held.read().decode()


def main() -> None:
    from sglang_router.launch_router import launch_router, parse_router_args

    key = read_key(os.environ)  # type: ignore[arg-type]  (os.environ: pop removes it for children too)
    router_args = parse_router_args(sys.argv[1:])
    if key is not None:
        router_args.api_key = key
    launch_router(router_args)


if __name__ == "__main__":
    main()
