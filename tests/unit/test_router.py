"""SGLang's router for real in front of SGLang test doubles, all on 127.0.0.1.

Real: the pinned sglang-router (requirements/dev.txt, the version of env/router.lock) started by
`ddtree router`, the command the compose profile and the k8s Deployment run; `ddtree bench` and
`ddtree selfcheck --live` as subprocesses through it. The replicas are bench_double servers (a TEST
DOUBLE of SGLang: real HTTP and SGLang's JSON shapes, fake tokens), because a real replica needs eight
GPUs and the 600 GB model. Every address is loopback; the router's tokenizer fetch (it asks the Hugging
Face Hub for the model path the replicas report) goes to HF_ENDPOINT, a closed port on 127.0.0.1.
Each wait is bounded; every process has a timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from ddtree.bench.client import Client
from ddtree.bench.replicas import list_replicas, parse_workers
from ddtree.errors import UserError
from ddtree.receipts import receipt
from ddtree.router import cmd as router_cmd

from tests.unit.bench_double import DoubleConfig, serve

REPO_ROOT = Path(__file__).resolve().parents[2]
DDTREE_INFO = {
    "speculative_algorithm": "DDTREE",
    "speculative_ddtree_budget": 8,
    "speculative_ddtree_topk": 4,
    "speculative_draft_window_size": 2048,
}
STARTUP_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A child environment that keeps everything on this machine (HOME for the router's caches)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    proxies = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}  # the router (reqwest) honours them
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DDTREE_", "HF_")) and k.lower() not in proxies
    }
    env.update(
        HOME=str(home),
        HF_ENDPOINT=f"http://127.0.0.1:{_free_port()}",  # nothing listens: no request leaves the machine
        PYTHONPATH=str(REPO_ROOT / "entrypoint"),
        **extra,
    )
    return env


@contextmanager
def running_router(replica_urls: list[str], tmp_path: Path, policy: str = "round_robin") -> Iterator[str]:
    """`ddtree router` (the real sglang-router) on 127.0.0.1 in front of `replica_urls`; yields its URL
    once it lists every replica as healthy."""
    port = _free_port()
    env = _env(
        tmp_path,
        DDTREE_REPLICAS=" ".join(replica_urls),
        DDTREE_ROUTER_HOST="127.0.0.1",
        DDTREE_ROUTER_PORT=str(port),
        DDTREE_ROUTER_POLICY=policy,
        DDTREE_ROUTER_EXTRA_ARGS=(
            f"--prometheus-host 127.0.0.1 --prometheus-port {_free_port()} --log-level warn "
            "--health-check-interval-secs 1 --request-timeout-secs 30"
        ),
    )
    log = (tmp_path / f"router-{port}.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddtree.cli", "router"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            replicas = list_replicas(Client(url, timeout=2.0))
            if replicas and len(replicas) == len(replica_urls) and all(r.healthy for r in replicas):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(
                    f"router not ready (rc {proc.poll()}): {log.name}: {Path(log.name).read_text()[-2000:]}"
                )
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)
        log.close()


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, 20 s to exit, then SIGKILL: a router that hangs on shutdown must not hang the test run."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _ddtree(args: list[str], tmp_path: Path, timeout: float = 120) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "ddtree.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _generates(server: Any) -> int:
    return sum(1 for path, _ in server.requests_seen if path == "/generate")


def _doubles(stack: ExitStack, count: int, **config: Any) -> list[tuple[str, Any]]:
    return [
        stack.enter_context(
            serve(DoubleConfig(speculative_algorithm="DDTREE", extra_server_info=DDTREE_INFO, **config))
        )
        for _ in range(count)
    ]


# ---------------------------------------------------------------- bench through the router


def test_bench_through_the_router_spreads_over_every_replica(tmp_path: Path) -> None:
    with ExitStack() as stack:
        doubles = _doubles(stack, 3)
        router = stack.enter_context(running_router([u for u, _ in doubles], tmp_path))
        out = tmp_path / "bench"
        rc, output = _ddtree(
            ["bench", "--url", router, "--contexts", "60", "--concurrency", "6", "--max-tokens", "32",
             "--repeats", "2", "--warmup", "0", "--timeout", "20", "--no-plots", "--quiet",
             "--out", str(out)],
            tmp_path,
        )  # fmt: skip
        assert rc == 0, output
        per_replica = [_generates(server) for _, server in doubles]
    assert all(n >= 2 for n in per_replica), per_replica  # round robin: 12 requests over 3 replicas
    assert sum(per_replica) == 12 + receipt.GREEDY_RUNS  # the sweep's, then the receipt's greedy runs
    results = json.loads((out / "results.json").read_text())
    (cell,) = results["cells"]
    assert cell["metrics"]["requests"] == 12 and cell["metrics"]["errors"] == 0
    assert cell["metrics"]["accept_length"]["mean"] == pytest.approx(4.0)  # meta_info came through
    server = results["server"]
    assert server["url"] == router and server["mode"] == "ddtree" and server["version"] == "0.5.13.post1"
    assert sorted(r["url"] for r in server["router"]["replicas"]) == sorted(u for u, _ in doubles)
    # The router has no tokenizer: prompts were tokenized by a replica (the double's /v1/tokenize).
    assert results["prompt_method"]["tokenizer"] == "server"
    assert cell["metrics"]["prompt_tokens"]["mean"] == 60


def test_bench_goes_on_when_a_replica_stops_mid_run_and_counts_the_failures(tmp_path: Path) -> None:
    """Replica 2 is killed while requests stream from it: those fail, the rest of the run goes through
    the other two, and the report counts the failures (the cell is saved as incomplete)."""
    with ExitStack() as stack:
        # 40 tokens one per chunk, 20 ms apart: each request streams for about a second.
        doubles = _doubles(stack, 3, tokens_per_chunk=1, chunk_interval_s=0.02)
        victim = doubles[1][1]
        router = stack.enter_context(running_router([u for u, _ in doubles], tmp_path))

        def stop_when_busy() -> None:
            deadline = time.monotonic() + 30
            while _generates(victim) < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)  # mid-stream
            victim.stop()

        killer = threading.Thread(target=stop_when_busy, daemon=True)
        killer.start()
        out = tmp_path / "bench"
        started = time.monotonic()
        rc, output = _ddtree(
            ["bench", "--url", router, "--contexts", "60", "--concurrency", "6", "--max-tokens", "40",
             "--repeats", "3", "--warmup", "0", "--timeout", "20", "--no-plots", "--quiet",
             "--out", str(out)],
            tmp_path,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        killer.join(timeout=5)
        assert victim.stopped.is_set()
        served = [_generates(server) for _, server in doubles]
    assert rc == 1 and "incomplete cells" in output, output  # resumable, not a crash
    assert elapsed < 60, f"the run took {elapsed:.0f} s: something waited for a dead replica"
    results = json.loads((out / "results.json").read_text())
    assert results["cells"] == []  # a cell with failures is not a measurement
    (counted,) = results["incomplete"]
    assert counted["requests"] == 18
    assert 1 <= counted["errors"] <= 4, counted  # the streams cut on replica 2 (round robin: 2 in flight)
    assert "ended early" in counted["first_error"]
    report = (out / "report.md").read_text()
    assert f"ctx 60 conc 6: {counted['errors']} of 18 requests failed" in report
    cell = json.loads((out / "cells" / "ctx60-conc6.json").read_text())
    assert [rd["errors"] for rd in cell["rounds"]][1:] == [0, 0], cell["rounds"]  # later rounds: all served
    assert served[1] <= 4 and served[0] + served[2] >= 18 - served[1], served


# ---------------------------------------------------------------- live check through the router


def test_live_check_through_the_router_gives_each_replica_its_verdict(tmp_path: Path) -> None:
    with ExitStack() as stack:
        good = _doubles(stack, 2)
        (plain_dflash,) = [stack.enter_context(serve(DoubleConfig(speculative_algorithm="DFLASH")))]
        urls = [good[0][0], plain_dflash[0], good[1][0]]
        router = stack.enter_context(running_router(urls, tmp_path))
        rc, output = _ddtree(["selfcheck", "--live", router, "--json", "--max-tokens", "64"], tmp_path)
    document, _ = json.JSONDecoder().raw_decode(output, output.index("{"))  # stderr follows: receipt: ...
    verdicts = {r["url"]: r["verdict"] for r in document["replicas"]}
    assert verdicts[plain_dflash[0]] == "FAILED"
    assert {verdicts[good[0][0]], verdicts[good[1][0]]} <= {"REPRODUCED", "DEGRADED"}
    rows = {c["name"]: c for c in document["checks"]}
    assert rows[f"live:replica {plain_dflash[0]}"]["status"] == "fail"
    assert "settings" in rows[f"live:replica {plain_dflash[0]}"]["detail"]
    assert rows["live:replicas"]["status"] == "fail"
    # The router's own run still measured a generation through it, with a replica's server info.
    assert rows["live:settings"]["status"] == "pass" and rows["live:generation"]["status"] == "pass"
    assert document["verdict"] == "FAILED" and rc == 1


def test_live_check_through_the_router_with_healthy_replicas(tmp_path: Path) -> None:
    with ExitStack() as stack:
        doubles = _doubles(stack, 2)
        router = stack.enter_context(running_router([u for u, _ in doubles], tmp_path))
        rc, output = _ddtree(["selfcheck", "--live", router, "--max-tokens", "64"], tmp_path)
        generated = [_generates(server) for _, server in doubles]
    # Each replica checked directly (warm-up + 3 measured runs, --runs' default), and the router's on top.
    assert sum(generated) == 2 * (1 + 3) + (1 + 3), generated
    assert f"live self-check of {doubles[0][0]}" in output and f"live self-check of {doubles[1][0]}" in output
    assert "live:replicas" in output and "2 replicas" in output
    assert rc in (0, 1) and ("verdict: REPRODUCED" in output or "verdict: DEGRADED" in output), output


# ---------------------------------------------------------------- `ddtree router` command line


def test_router_command_from_replica_urls() -> None:
    argv = router_cmd.router_command(
        {"DDTREE_REPLICAS": "http://gpu-1:30000, http://gpu-2:30000", "DDTREE_API_KEY": "k"}, ["--x", "1"]
    )
    assert argv[1:3] == ["-m", "ddtree.router.launch"]  # sglang-router's launcher, the key from a memfd
    assert argv[argv.index("--worker-urls") + 1 :][:2] == ["http://gpu-1:30000", "http://gpu-2:30000"]
    assert argv[argv.index("--policy") + 1] == "cache_aware"
    assert "--api-key" not in argv and "k" not in argv  # never on the router's command line
    assert argv[argv.index("--worker-startup-timeout-secs") + 1] == "3600"
    assert argv[-2:] == ["--x", "1"]  # arguments after -- come last


def test_router_command_from_a_kubernetes_selector() -> None:
    argv = router_cmd.router_command(
        {"DDTREE_ROUTER_SELECTOR": "app.kubernetes.io/name=ddtree", "DDTREE_ROUTER_NAMESPACE": "llm"}
    )
    assert "--service-discovery" in argv and "--worker-urls" not in argv
    assert argv[argv.index("--selector") + 1] == "app.kubernetes.io/name=ddtree"
    assert argv[argv.index("--service-discovery-port") + 1] == "30000"
    assert argv[argv.index("--service-discovery-namespace") + 1] == "llm"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "neither is set"),
        ({"DDTREE_REPLICAS": "http://a:1", "DDTREE_ROUTER_SELECTOR": "a=b"}, "not both"),
        ({"DDTREE_REPLICAS": "gpu-1:30000"}, "'gpu-1:30000' is not an http(s) URL"),
        ({"DDTREE_REPLICAS": "http://a:1 http://a:1"}, "lists a URL twice"),
        (
            {"DDTREE_REPLICAS": "http://a:1", "DDTREE_ROUTER_POLICY": "fastest"},
            "DDTREE_ROUTER_POLICY='fastest'",
        ),
        ({"DDTREE_REPLICAS": "http://a:1", "DDTREE_ROUTER_PORT": "99999"}, "DDTREE_ROUTER_PORT='99999'"),
        ({"DDTREE_ROUTER_SELECTOR": "app"}, "'app' is not key=value"),
        ({"DDTREE_REPLICAS": "http://a:1", "DDTREE_ROUTER_EXTRA_ARGS": "'open"}, "DDTREE_ROUTER_EXTRA_ARGS"),
    ],
)
def test_router_command_refuses_bad_settings_in_one_line(environ: dict[str, str], message: str) -> None:
    with pytest.raises(UserError) as err:
        router_cmd.router_command(environ)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2


def test_router_dry_run_keeps_the_api_key_off_the_command(tmp_path: Path) -> None:
    env = _env(tmp_path, DDTREE_REPLICAS="http://127.0.0.1:1", DDTREE_API_KEY="sk-secret-value")
    done = subprocess.run(
        [sys.executable, "-m", "ddtree.cli", "router", "--dry-run"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "sk-secret-value" not in done.stdout and "--api-key" not in done.stdout
    assert "API key: handed to the router in memory" in done.stdout
    assert "--worker-urls http://127.0.0.1:1" in done.stdout


def test_parse_workers_tells_a_router_from_a_server() -> None:
    answer = {"workers": [{"url": "http://a:1", "is_healthy": True}, {"url": "http://b:1"}], "total": 2}
    replicas = parse_workers(answer)
    assert replicas is not None and [(r.url, r.healthy) for r in replicas] == [
        ("http://a:1", True),
        ("http://b:1", None),
    ]
    assert parse_workers(None) is None  # SGLang answers 404 on /workers
    assert parse_workers({"error": "not found"}) is None
