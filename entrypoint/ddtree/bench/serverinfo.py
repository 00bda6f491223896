"""What the server is: SGLang version, speculative settings, model, Prometheus gauges.

Results are only comparable when they say what produced them, so every run records this next to its
numbers, and a resumed run refuses to mix cells from a different server configuration.
"""

from __future__ import annotations

import re
from typing import Any

from ddtree.bench.client import Client

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


def fetch_server_info(client: Client) -> Any | None:
    """The server's info dump: /server_info, else the deprecated /get_server_info (0.5.13.post1 has both)."""
    return client.get_json("/server_info") or client.get_json("/get_server_info")


def server_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """The kept SERVER_KEYS of an info dump, and the speculative/DFlash/DDTree settings."""
    kept = {key: raw[key] for key in SERVER_KEYS if key in raw}
    kept["speculative"] = {
        key: value
        for key, value in raw.items()
        if key.startswith("speculative_") or "ddtree" in key.lower() or "dflash" in key.lower()
    }
    return kept


def probe_server(client: Client) -> dict[str, Any]:
    """Ask the server who it is. Works against plain OpenAI servers too (then kind is 'openai')."""
    info: dict[str, Any] = {"url": client.url, "kind": "unknown"}
    raw = fetch_server_info(client)
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
    models = client.get_json("/v1/models")
    if isinstance(models, dict) and models.get("data"):
        info["model_id"] = models["data"][0].get("id")
        if info["kind"] == "unknown":
            info["kind"] = "openai"
    info["mode"] = speculative_mode(info)
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
