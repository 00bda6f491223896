"""What the server is: SGLang version, speculative settings, model, Prometheus gauges.

Results are only comparable when they say what produced them, so every run records this next to its
numbers, and a resumed run refuses to mix cells from a different server configuration.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ddtree.bench.client import Client
from ddtree.bench.replicas import Replica, list_replicas
from ddtree.errors import UserError
from ddtree.jsonshape import ANY, NONE

# /server_info keys worth keeping (the full dump is large and holds paths and ports).
SERVER_KEYS = (
    "version",
    "model_path",
    "served_model_name",
    "tokenizer_path",
    "tp_size",
    "dp_size",
    "ep_size",
    "attention_backend",
    "cuda_graph_max_bs",
    "disable_cuda_graph",
    "max_running_requests",
    "mem_fraction_static",
    "context_length",
    "chunked_prefill_size",
    "disable_radix_cache",
)


# The fields read from /server_info and /v1/models (ddtree.jsonshape): another shape is "not SGLang".
SERVER_INFO = {"internal_states": ([ANY], NONE)}
MODELS = {"data": ([{"id": ANY}], NONE)}


def fetch_server_info(client: Client) -> Any | None:
    """The server's info dump: /server_info, else the deprecated /get_server_info (0.5.13.post1 has both)."""
    return server_info_answer(client)[0]


def server_info_answer(client: Client) -> tuple[Any | None, str]:
    """(the info dump or None, what /server_info answered): the reason names the status and body seen."""
    info, answer = client.get_json_answer("/server_info", schema=SERVER_INFO)
    if isinstance(info, dict):
        return info, answer
    if info is not None:
        answer = f"GET /server_info -> HTTP 200 JSON {type(info).__name__}, not an object"
    fallback = client.get_json("/get_server_info", schema=SERVER_INFO)
    return (fallback if isinstance(fallback, dict) else None), answer


SERVED_IMAGE_KEY = "ddtree_image"


def server_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """The kept SERVER_KEYS of an info dump, and the speculative/DFlash/DDTree settings."""
    kept = {key: raw[key] for key in SERVER_KEYS if key in raw}
    kept["speculative"] = {
        key: value
        for key, value in raw.items()
        if (key.startswith("speculative_") or "ddtree" in key.lower() or "dflash" in key.lower())
        and key != SERVED_IMAGE_KEY
    }
    # The image the server runs in, as it reports it (patch ddtree-served-identity); None when it does not.
    kept[SERVED_IMAGE_KEY] = raw.get(SERVED_IMAGE_KEY)
    return kept


def probe_server(client: Client) -> dict[str, Any]:
    """Ask the server who it is. Works against plain OpenAI servers too (then kind is 'openai'), and
    against SGLang's router, whose replicas say who they are (ddtree.bench.replicas)."""
    replicas = list_replicas(client)
    if replicas is not None:
        return probe_router(client, replicas)
    info: dict[str, Any] = {"url": client.url, "kind": "unknown"}
    raw, info_answer = server_info_answer(client)
    if isinstance(raw, dict):
        info["kind"] = "sglang"
        info.update(server_settings(raw))
        accept = [
            state.get("avg_spec_accept_length")
            for state in raw.get("internal_states") or []
            if isinstance(state, dict) and state.get("avg_spec_accept_length") is not None
        ]
        if accept:
            info["avg_spec_accept_length_since_start"] = accept
    model_info = client.get_json("/model_info") or client.get_json("/get_model_info")
    if isinstance(model_info, dict):
        info["model_info"] = {k: model_info.get(k) for k in ("model_path", "tokenizer_path", "model_type")}
    models, models_answer = client.get_json_answer("/v1/models", schema=MODELS)
    if isinstance(models, dict) and models.get("data"):
        info["model_id"] = models["data"][0].get("id")
        if info["kind"] == "unknown":
            info["kind"] = "openai"
    if info["kind"] == "unknown":
        info["answers"] = [info_answer, models_answer]
    info["mode"] = speculative_mode(info)
    return info


def probe_router(client: Client, replicas: list[Replica]) -> dict[str, Any]:
    """What a router's replicas are, asked directly; they must agree, or a sweep would mix results.

    The result is the first answering replica's info with the router's URL and a `router` entry:
    every replica's URL and health as the router sees it, whether it answered, and `probed`, the
    replica whose info stands for all."""
    urls = ", ".join(r.url for r in replicas) or "none"
    if not replicas:
        raise UserError(
            f"--url {client.url} is an SGLang router with no replica registered: check its worker URLs "
            "(DDTREE_REPLICAS for the compose router) and that each replica answers /health"
        )
    probes = [probe_server(client.at(replica.url)) for replica in replicas]
    answering = [p for p in probes if p["kind"] != "unknown"]
    if not answering:
        raise UserError(
            f"--url {client.url} is an SGLang router; none of its replicas ({urls}) answers /server_info "
            "from here: run the bench where the replica URLs resolve (e.g. inside the router container)"
        )
    prints = {json.dumps(configuration_fingerprint(p), sort_keys=True) for p in answering}
    if len(prints) > 1:
        differ = "; ".join(f"{p['url']}: {json.dumps(configuration_fingerprint(p))}" for p in answering)
        raise UserError(
            f"--url {client.url}: the replicas behind the router run different configurations ({differ}); "
            "start them from the same image and target, or bench each replica alone"
        )
    info = {**answering[0], "url": client.url}
    info["router"] = {
        "probed": answering[0]["url"],
        "replicas": [
            {"url": r.url, "healthy": r.healthy, "answered": p["kind"] != "unknown"}
            for r, p in zip(replicas, probes, strict=True)
        ],
    }
    return info


def speculative_mode(info: dict[str, Any]) -> str:
    """'baseline' (no speculation), 'ddtree', or the algorithm's name in lower case; 'unknown' if unsaid."""
    spec = info.get("speculative")
    if spec is None:
        return "unknown"
    for key, value in spec.items():
        if "ddtree" in key.lower() and value not in (None, False, 0, ""):
            return "ddtree"
    algorithm = spec.get("speculative_algorithm")
    if algorithm in (None, "", "NONE", "none"):
        return "baseline"
    return "ddtree" if "DDTREE" in str(algorithm).upper() else str(algorithm).lower()


def configuration_fingerprint(info: dict[str, Any]) -> dict[str, Any]:
    """The parts of the server that change what a cell measures (used to refuse mixed resumes)."""
    return {
        "version": info.get("version"),
        "model_path": info.get("model_path"),
        "tp_size": info.get("tp_size"),
        "speculative": info.get("speculative"),
        "mode": info.get("mode"),
    }


_PROM_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, list[float]]:
    """Prometheus text exposition -> {metric name: [values over label sets]} (comments skipped)."""
    values: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _PROM_LINE.match(line.strip())
        if not match:
            continue
        try:
            number = float(match.group(3))
        except ValueError:
            continue
        values.setdefault(match.group(1), []).append(number)
    return values


def scrape_accept_length(client: Client) -> float | None:
    """sglang:spec_accept_length from /metrics (only with --enable-metrics; the most recent interval).

    A coarse, server-wide figure: SGLang sets this gauge every decode_log_interval steps. The sweep
    prefers per-request `meta_info`; this is the fallback for OpenAI-only dialects.
    """
    status, body = client.get_text("/metrics")
    if status != 200:
        return None
    gauge = parse_prometheus(body).get("sglang:spec_accept_length")
    if not gauge:
        return None
    positive = [v for v in gauge if v > 0]
    return sum(positive) / len(positive) if positive else None
