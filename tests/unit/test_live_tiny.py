"""The device's `live` mode (tests/gpu/live_tiny.py) and the ddtree.smoke pieces it uses, without a GPU.

Real here: the tiny byte tokenizer's files (loaded with transformers when it is installed), the SGLang
launch command (a real process: it exits at once because SGLang is not installed here, which is what
start_ddtree_server must then report), the bench and selfcheck command lines parsed by the real `ddtree`
parser, and both commands run as subprocesses against bench_double (a TEST DOUBLE of SGLang: real HTTP,
fake model) because the real tiny DDTREE server needs a GPU. The GPU run is `device_ddtree.sh live`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree.cli import build_parser
from ddtree.smoke import check as smoke
from ddtree.smoke import dims as smoke_dims
from ddtree.smoke import models as smoke_models
from ddtree.smoke import server as smoke_server

from tests.gpu import live_tiny
from tests.unit.bench_double import DoubleConfig, serve

REPO_ROOT = Path(__file__).resolve().parents[2]


URL = "http://127.0.0.1:31234"


def _tokenizer_dir(tmp_path: Path) -> Path:
    smoke_models.write_tokenizer(tmp_path)
    return tmp_path


def test_tokenizer_maps_every_byte_but_fe_ff_to_its_own_id_and_names_eos_and_mask(tmp_path: Path) -> None:
    folder = _tokenizer_dir(tmp_path)
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(smoke_dims.REAL_TOKENS))
    symbols = smoke_models._byte_symbols()
    assert len(set(symbols)) == 256
    assert all(vocab[chr(b)] == b for b in range(ord("!"), ord("~") + 1))  # printable ASCII is itself
    specials = {t["id"]: t["content"] for t in data["added_tokens"]}
    assert specials == {smoke_dims.EOS_ID: "<|endoftext|>", smoke_dims.MASK_ID: "<|MASK|>"}
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|endoftext|>" and config["model_max_length"] == 8192


def test_tokenizer_loads_with_transformers_and_encodes_utf8_bytes(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(_tokenizer_dir(tmp_path)))
    text = "def f(x):\n    return x  # é 中\n"
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == list(text.encode("utf-8"))
    assert tok.decode(ids) == text
    assert tok.eos_token_id == smoke_dims.EOS_ID
    assert tok.get_vocab()["<|MASK|>"] == smoke_dims.MASK_ID


@pytest.mark.parametrize("skip", [True, False])
def test_ddtree_server_is_the_smoke_ddtree_command_and_is_stopped_when_it_dies(
    tmp_path: Path, skip: bool
) -> None:
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is installed here: this test relies on its launch failing at once")
    settings = smoke_models.SmokeSettings(window=2048, launch_timeout_s=60)
    target, drafter, log = tmp_path / "target", tmp_path / "drafter", tmp_path / "server.log"
    server = smoke_server.Server(
        target, smoke_server.mode_args("ddtree", drafter, settings), log, settings, skip
    )
    server.stop()
    cmd = server.cmd
    assert ("--skip-tokenizer-init" in cmd) is skip
    assert cmd[cmd.index("--speculative-algorithm") + 1] == "DDTREE"
    for flag, value in [("--speculative-ddtree-budget", "8"), ("--speculative-draft-window-size", "2048"),
                        ("--attention-backend", "triton"), ("--model-path", str(target))]:  # fmt: skip
        assert cmd[cmd.index(flag) + 1] == value
    assert "--disable-cuda-graph" not in cmd
    with pytest.raises(RuntimeError, match="server exited with code 1"):
        smoke_server.start_ddtree_server(target, drafter, settings, log, skip_tokenizer_init=skip)
    assert "No module named 'sglang'" in log.read_text()


def test_bench_and_live_command_lines_parse_with_the_real_ddtree_parser(tmp_path: Path) -> None:
    bench = live_tiny.bench_command(URL, tmp_path / "target", tmp_path / "bench")
    assert bench[:3] == [sys.executable, "-m", "ddtree.cli"]
    args = build_parser().parse_args(bench[3:])
    assert args.func.__name__ == "run_sweep" and args.bench_command is None
    assert (args.url, args.api, args.tokenizer) == (URL, "generate", str(tmp_path / "target"))
    assert (args.contexts, args.concurrency) == ([128, 1024], [1, 4])
    assert (args.max_tokens, args.repeats, args.warmup, args.no_plots) == (48, 1, 1, True)
    assert args.out == tmp_path / "bench"
    live = build_parser().parse_args(live_tiny.live_command(URL)[3:])
    assert (live.live, live.max_tokens, live.json) == (URL, 128, False)


@pytest.mark.parametrize(
    ("rc", "output", "crashed"),
    [
        (0, "| ctx | conc |\nresults: x", False),
        (1, "Traceback (most recent call last):\n  ValueError", True),
        (1, "ddtree: error: ctx=128 conc=1: every request failed", True),
    ],
)
def test_bench_crash_rule(rc: int, output: str, crashed: bool) -> None:
    assert (live_tiny.bench_problem(rc, output) is not None) is crashed


@pytest.mark.parametrize(
    ("rc", "output", "crashed"),
    [
        (0, "verdict: REPRODUCED", False),
        (1, "verdict: DEGRADED", False),
        (1, "verdict: FAILED", False),
        (1, "Traceback (most recent call last):\n  KeyError", True),
        (2, "verdict: COULD NOT RUN", True),
        (1, "no verdict", True),
        (124, "timed out", True),
    ],
)
def test_live_crash_rule(rc: int, output: str, crashed: bool) -> None:
    assert (live_tiny.live_problem(rc, output) is not None) is crashed


def _run(cmd: list[str], tmp_path: Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "entrypoint")}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    return done.returncode, done.stdout + done.stderr


DDTREE_INFO = {
    "speculative_algorithm": "DDTREE",
    "speculative_ddtree_budget": 8,
    "speculative_ddtree_topk": 4,
    "speculative_draft_window_size": 2048,
}


def test_live_command_judges_a_ddtree_double_without_crashing(tmp_path: Path) -> None:
    with serve(DoubleConfig(speculative_algorithm="DDTREE", extra_server_info=DDTREE_INFO)) as (url, _):
        rc, output = _run(live_tiny.live_command(url), tmp_path)
    assert "verdict: DEGRADED" in output or "verdict: REPRODUCED" in output, output
    assert "128 tokens in" in output  # --max-tokens 128 reached the generation step
    assert live_tiny.live_problem(rc, output) is None, output


def test_live_command_against_a_dead_port_counts_as_a_failure(tmp_path: Path) -> None:
    with serve() as (url, _):
        pass  # the double is shut down: nothing answers on its port any more
    rc, output = _run(live_tiny.live_command(url), tmp_path)
    assert rc == 2, output
    assert live_tiny.live_problem(rc, output) is not None


def test_bench_command_sweeps_a_ddtree_double_with_the_byte_tokenizer(tmp_path: Path) -> None:
    pytest.importorskip("transformers")  # the bench loads --tokenizer PATH with transformers
    (tmp_path / "target").mkdir()
    tokenizer = _tokenizer_dir(tmp_path / "target")
    config = DoubleConfig(
        speculative_algorithm="DDTREE", extra_server_info=DDTREE_INFO, chunk_interval_s=0.002
    )
    with serve(config) as (url, double):
        rc, output = _run(live_tiny.bench_command(url, tokenizer, tmp_path / "bench"), tmp_path)
    assert live_tiny.bench_problem(rc, output) is None, output
    sent = [len(body["input_ids"]) for path, body in double.requests_seen if "input_ids" in body]
    assert sorted(set(sent)) == [128, 1024]  # exact contexts: token ids from the byte tokenizer
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert len(results["cells"]) == 4


class _DoubleAsServer:
    """Stands in for smoke_server.Server (which needs a GPU): the double's URL; stop() is recorded."""

    def __init__(self, url: str):
        self.url = url
        self.cmd = [sys.executable, "-m", "sglang.launch_server", "(test double)"]
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("algorithm", ["DDTREE", "DFLASH"])
def test_main_runs_both_commands_and_only_a_crash_fails_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], algorithm: str
) -> None:
    """main() end to end; mocked: the GPU check and the server start (a GPU server), nothing else.

    A DFLASH double makes selfcheck --live say FAILED (wrong algorithm): still exit 0, it did not crash.
    """
    pytest.importorskip("safetensors")  # write_models writes the real tiny weights
    pytest.importorskip("transformers")  # the bench loads the byte tokenizer
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT / "entrypoint"))
    monkeypatch.setattr(smoke, "gpu_problem", lambda: None)
    servers: list[_DoubleAsServer] = []
    config = DoubleConfig(
        speculative_algorithm=algorithm,
        extra_server_info={**DDTREE_INFO, "speculative_algorithm": algorithm},
        chunk_interval_s=0.002,
    )
    with serve(config) as (url, _):

        def start(target: Path, drafter: Path, settings: smoke_models.SmokeSettings, log: Path, **kw: bool):
            assert (target / "tokenizer.json").is_file() and (drafter / "config.json").is_file()
            assert settings.window == 2048 and kw == {"skip_tokenizer_init": False}
            servers.append(_DoubleAsServer(url))
            return servers[-1], 1.0

        monkeypatch.setattr(smoke_server, "start_ddtree_server", start)
        assert live_tiny.main(["--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert servers and servers[0].stopped
    assert "verdict: DEGRADED" in printed or "verdict: REPRODUCED" in printed or algorithm == "DFLASH"
    assert ("verdict: FAILED" in printed) is (algorithm == "DFLASH")
    assert "ran end to end" in printed
    assert (tmp_path / "out" / "bench" / "results.json").is_file()
    assert (tmp_path / "out" / "live.txt").read_text().count("verdict:") >= 1


def test_main_exits_2_when_no_server_comes_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mocked: the GPU check and the server start (both launches fail, as a broken SGLang would)."""
    pytest.importorskip("safetensors")
    monkeypatch.setattr(smoke, "gpu_problem", lambda: None)
    tries: list[bool] = []

    def start(*args: object, skip_tokenizer_init: bool) -> None:
        tries.append(skip_tokenizer_init)
        raise RuntimeError("server exited with code 1")

    monkeypatch.setattr(smoke_server, "start_ddtree_server", start)
    assert live_tiny.main(["--out", str(tmp_path)]) == 2
    assert tries == [False, True]  # with the tokenizer first, then exactly as the smoke test starts it
