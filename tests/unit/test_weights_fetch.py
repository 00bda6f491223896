"""`ddtree weights fetch` with the real huggingface_hub against a local stand-in for the Hub.

The real Hugging Face Hub is not reachable from here: tests/fake_hub.py serves the Hub's file API on
127.0.0.1 and HF_ENDPOINT points huggingface_hub at it. The repositories are synthetic: a target at two
revisions (the lock pins the older one, refs/main the newer) and a gated drafter. The lock is written
by the real capture (weights_lock.capture_model) of the locked revision's files, so capture -> lock ->
fetch -> compare is one round trip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree import cli
from ddtree.weights import capture as weights_capture
from ddtree.weights import fetch as weights_fetch
from ddtree.weights import lock as weights_lock

from tests.fake_hub import FakeHub, FakeRepo
from tests.synthetic_weights import write_drafter, write_target

REPO = Path(__file__).resolve().parents[2]
REV_A = "a" * 40  # locked
REV_B = "b" * 40  # refs/main: a newer upload with another config
TOKEN = "hf_faketoken0123456789"


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    target_a = tmp_path / "src" / "target-a"
    write_target(target_a, shards=3, tensor_bytes=6_000_000)
    target_b = tmp_path / "src" / "target-b"
    write_target(target_b, shards=3, tensor_bytes=6_000_000)
    config_b = json.loads((target_b / "config.json").read_text())
    config_b["text_config"]["rope_theta"] = 1.0
    (target_b / "config.json").write_text(json.dumps(config_b))
    drafter = write_drafter(tmp_path / "src" / "drafter")
    fake = FakeHub(
        repos={
            "moonshotai/Kimi-K2.6": FakeRepo(
                revisions={REV_A: _folder_bytes(target_a), REV_B: _folder_bytes(target_b)}, main=REV_B
            ),
            "z-lab/Kimi-K2.6-DFlash": FakeRepo(
                revisions={REV_A: _folder_bytes(drafter)}, main=REV_A, gated=True, token=TOKEN
            ),
        }
    ).start()
    lock = tmp_path / "weights.yaml"
    weights_lock.write_lock(
        lock,
        {
            "target": weights_capture.capture_model(target_a, "target", "moonshotai/Kimi-K2.6", REV_A),
            "drafter": weights_capture.capture_model(
                drafter, "drafter", "z-lab/Kimi-K2.6-DFlash", REV_A, gated=True
            ),
        },
    )
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("DDTREE_WEIGHTS_LOCK", str(lock))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    fake.lock = lock  # type: ignore[attr-defined]
    fake.sources = {"target": target_a, "drafter": drafter}  # type: ignore[attr-defined]
    yield fake
    fake.stop()


def _fetch(*args: str) -> int:
    return cli.main(["weights", "fetch", *args])


def test_fetch_locked_revision(hub, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out = tmp_path / "models"
    assert _fetch("--to", str(out)) == 0
    printed = capsys.readouterr()
    for role in ("target", "drafter"):
        fetched = {k: v for k, v in _folder_bytes(out / role).items() if not k.startswith(".cache/")}
        assert fetched == _folder_bytes(hub.sources[role])
        assert f"ok   {role} {out / role}: " in printed.out
    # The locked revision, not refs/main: every file request named commit A.
    # (huggingface_hub also asks the endpoint for api/agent-harnesses, a best-effort lookup.)
    gets = [path for method, path, _, _ in hub.requests if method == "GET" and "/resolve/" in path]
    assert len(gets) == 7 and all(f"/resolve/{REV_A}/" in path for path in gets)
    # The fetched folder compares clean with the lock, every file hashed.
    lock = weights_lock.load_lock(hub.lock)
    assert weights_lock.compare(out / "target", lock.models["target"], hub.lock, full=True).ok
    assert TOKEN not in printed.out + printed.err


def test_resume_after_interrupted_download(hub, tmp_path: Path, capsys) -> None:
    """The Hub drops the connection 11 MiB into a 12 MB shard: huggingface_hub's retry asks for the rest
    (`Range: bytes=N-`, N = what it had written: whole 10 MiB chunks) and the file lands whole."""
    shard = "model-00002-of-00003.safetensors"
    hub.cut_once[shard] = 11 << 20
    out = tmp_path / "models"
    assert _fetch("--to", str(out), "--only", "target") == 0
    ranges = [rng for method, path, rng, _ in hub.requests if method == "GET" and path.endswith(shard)]
    assert ranges == [None, f"bytes={10 << 20}-"]
    assert (out / "target" / shard).read_bytes() == (hub.sources["target"] / shard).read_bytes()
    assert "sha256 verified" in capsys.readouterr().out


def test_resume_across_runs(hub, tmp_path: Path) -> None:
    """A partial file left by an interrupted run is continued with a Range request, not downloaded
    again from byte 0."""
    shard = "model-00003-of-00003.safetensors"
    out = tmp_path / "models"
    data = (hub.sources["target"] / shard).read_bytes()
    partial = weights_fetch.partial_path(out / "target", shard)
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(data[: len(data) // 3])
    assert _fetch("--to", str(out), "--only", "target") == 0
    ranges = [rng for method, path, rng, _ in hub.requests if method == "GET" and path.endswith(shard)]
    assert ranges == [f"bytes={len(data) // 3}-"]
    assert (out / "target" / shard).read_bytes() == data
    assert not partial.exists()


def test_corrupt_file_refused_by_name(hub, tmp_path: Path, capsys) -> None:
    shard = "model-00001-of-00003.safetensors"
    good = (hub.sources["target"] / shard).read_bytes()
    hub.corrupt[shard] = good[:-1] + bytes([good[-1] ^ 0xFF])
    out = tmp_path / "models"
    assert _fetch("--to", str(out), "--only", "target") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"ddtree: error: target: {out / 'target' / shard}: sha256 ")
    assert "the lock says" in err[0] and "good files kept" in err[0]
    assert not (out / "target" / shard).exists()
    for name in ("config.json", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"):
        assert (out / "target" / name).read_bytes() == (hub.sources["target"] / name).read_bytes()
    # The Hub serves the right bytes again: a second run fetches only the removed file.
    hub.corrupt.clear()
    hub.requests.clear()
    assert _fetch("--to", str(out), "--only", "target") == 0
    assert [p for m, p, _, _ in hub.requests if m == "GET" and "/resolve/" in p] == [
        f"moonshotai/Kimi-K2.6/resolve/{REV_A}/{shard}"
    ]


def test_a_bad_local_copy_is_replaced(hub, tmp_path: Path, capsys) -> None:
    """A file already in the folder but not what the lock says (same size, other bytes) is removed and
    fetched again; huggingface_hub alone would have kept it."""
    out = tmp_path / "models"
    assert _fetch("--to", str(out), "--only", "target") == 0
    shard = out / "target" / "model-00002-of-00003.safetensors"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert _fetch("--to", str(out), "--only", "target") == 0
    printed = capsys.readouterr().out
    assert f"bad  target {shard}: sha256 " in printed and "removed, fetching it again" in printed
    assert "(1 fetched, 4 already here)" in printed
    assert shard.read_bytes() == (hub.sources["target"] / shard.name).read_bytes()


def test_gated_without_token_one_line(hub, tmp_path: Path) -> None:
    """Through a real process: one line on stderr, exit 1, no file written."""
    out = tmp_path / "models"
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env["PYTHONPATH"] = f"{REPO / 'entrypoint'}:{REPO}"
    done = subprocess.run(
        [sys.executable, "-m", "ddtree.cli", "weights", "fetch", "--to", str(out), "--only", "drafter"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "ddtree: error: z-lab/Kimi-K2.6-DFlash is gated and refused config.json: give a token with access: "
        "HF_TOKEN or --token-file FILE"
    ]
    assert [p for p in (out / "drafter").rglob("*") if p.is_file() and ".cache" not in p.parts] == []


def test_token_file(hub, tmp_path: Path, capsys) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    out = tmp_path / "models"
    assert _fetch("--to", str(out), "--only", "drafter", "--token-file", str(token_file)) == 0
    assert {a for m, p, _, a in hub.requests if m == "GET" and "/resolve/" in p} == {f"Bearer {TOKEN}"}
    printed = capsys.readouterr()
    assert TOKEN not in printed.out + printed.err


def test_offline_complete_folder(hub, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out = tmp_path / "models"
    assert _fetch("--to", str(out)) == 0
    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    capsys.readouterr()
    assert _fetch("--to", str(out)) == 0
    assert "(0 fetched, 5 already here)" in capsys.readouterr().out
    # Offline with a file gone: named, exit 1, the rest untouched.
    (out / "target" / "config.json").unlink()
    assert _fetch("--to", str(out), "--only", "target") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"ddtree: error: target: {out / 'target' / 'config.json'} is missing (1 files) and the run is "
        "offline: "
        "fetch with the Hub reachable"
    ]


def test_unknown_lock_refused_before_writing(tmp_path: Path, monkeypatch, capsys) -> None:
    """The checkout's own lock (no capture yet) has nothing exact to fetch: one line, nothing created."""
    monkeypatch.setenv("DDTREE_WEIGHTS_LOCK", str(REPO / "env" / "weights.yaml"))
    out = tmp_path / "models"
    assert _fetch("--to", str(out)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "target (moonshotai/Kimi-K2.6) has revision, files unknown" in err[0]
    assert not out.exists()


def test_token_goes_to_the_hub_only_not_to_the_host_a_download_redirects_to(hub, tmp_path: Path) -> None:
    """The Hub sends LFS files to a CDN on another host with a signed URL: the token must stay with the
    Hub there (huggingface_hub's own download drops the Authorization header for another host). The CDN
    is a second stand-in on another port (another host to huggingface_hub: netloc differs)."""
    cdn = FakeHub(repos={name: FakeRepo(repo.revisions, repo.main) for name, repo in hub.repos.items()})
    cdn.start()
    try:
        hub.redirect_to = cdn.url
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        out = tmp_path / "models"
        assert _fetch("--to", str(out), "--only", "drafter", "--token-file", str(token_file)) == 0
    finally:
        cdn.stop()
    fetched = {k: v for k, v in _folder_bytes(out / "drafter").items() if not k.startswith(".cache/")}
    assert fetched == _folder_bytes(hub.sources["drafter"])
    asked = [a for m, p, _, a in hub.requests if "/resolve/" in p]
    assert asked and set(asked) == {f"Bearer {TOKEN}"}  # the gated Hub got the token
    downloads = [a for m, p, _, a in cdn.requests if m == "GET"]
    assert downloads and set(downloads) == {None}  # the CDN never did
