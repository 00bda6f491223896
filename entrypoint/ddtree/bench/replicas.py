"""SGLang's router (sglang-router) in front of several replicas: is a URL a router, and which replicas.

Seen on sglang-router 0.3.2 (env/router.lock): GET /workers answers {"workers": [{"url", "is_healthy",
...}], "total": N}, which an SGLang server answers with 404. The router proxies /generate and the OpenAI
routes, but its /get_server_info describes the router ({"router_manager": true}), it has no /server_info
or /model_info, and its /v1/tokenize needs a tokenizer registered with the router. So whoever asks what
the server is (bench, selfcheck --live) asks a replica directly, at the URL the router lists, and sends
the measured requests through the router.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddtree.bench.client import Client


@dataclass(frozen=True)
class Replica:
    """One server the router sends requests to, as the router lists it."""

    url: str
    healthy: bool | None


def parse_workers(answer: Any) -> list[Replica] | None:
    """The router's GET /workers answer -> its replicas; None when the answer is not a router's."""
    if not isinstance(answer, dict) or not isinstance(answer.get("workers"), list):
        return None
    replicas = []
    for worker in answer["workers"]:
        if isinstance(worker, dict) and isinstance(worker.get("url"), str):
            healthy = worker.get("is_healthy")
            replicas.append(Replica(worker["url"], healthy if isinstance(healthy, bool) else None))
    return replicas


def list_replicas(client: Client) -> list[Replica] | None:
    """The replicas behind `client`'s URL when it is an SGLang router; None for a plain server."""
    return parse_workers(client.get_json("/workers"))
