"""Receipts: written by `selfcheck --live` and `bench` against the loopback doubles (real HTTP, fake model),
verified by `ddtree receipt verify`: round trip, tampering, a missing or failed check, another image.

The image's labels come from a labels file (DDTREE_IMAGE_LABELS), as inside the image; `--image REF`'s
`docker image inspect` is replaced by a function returning labels (no engine in the unit tier: a mock).
The server's own identity is the real `image_identity.served()` over a baked labels file and tree identity
written into tmp_path (what the build bakes), reported in the stand-in's /server_info as the patch
ddtree-served-identity makes SGLang report it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ddtree import image_identity
from ddtree.bench.compare import compare
from ddtree.cli import main
from ddtree.errors import UserError
from ddtree.receipts import receipt, tree_identity

from tests.unit.bench_double import DoubleConfig, serve
from tests.unit.test_live import GOOD_INFO, Behaviour, fake_server

REPO = Path(__file__).resolve().parents[2]
LABELS = {
    "io.ddtree.target": "pro6000",
    "io.ddtree.sglang.version": "0.5.13.post1",
    "io.ddtree.patches.sha256": "a" * 64,
    "io.ddtree.freeze.sha256": "b" * 64,
    "io.ddtree.tree.sha256": "c" * 64,
    "org.opencontainers.image.revision": "0123456789ab",
    "org.opencontainers.image.title": "ddtree-pro6000",
}


@pytest.fixture
def image_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    labels = tmp_path / "image-labels.json"
    labels.write_text(json.dumps(LABELS))
    monkeypatch.setenv("DDTREE_IMAGE_LABELS", str(labels))
    # What the image bakes, where the server reads it: the labels and the build's tree digest.
    tree = tmp_path / "tree-identity.json"
    tree.write_text(json.dumps({"digest": "c" * 64}))
    monkeypatch.setattr(image_identity, "LABEL_FILES", (labels,))
    monkeypatch.setattr(tree_identity, "IDENTITY_FILE", tree)
    # an env/ of its own (the live reference, no weights lock): the checkout's cannot leak in
    (tmp_path / "env" / "reference").mkdir(parents=True)
    shutil.copy(REPO / "env" / "reference" / "results.yaml", tmp_path / "env" / "reference")
    monkeypatch.setenv("DDTREE_ENV_DIR", str(tmp_path / "env"))
    return labels


def served(measured: str = "c" * 64) -> dict:
    """The server's /server_info ddtree_image: the real image_identity.served() over the baked files."""
    identity = image_identity.served({image_identity.SERVED_TREE_ENV: measured})
    assert identity is not None
    return identity


@pytest.fixture
def live_receipt(image_env: Path, tmp_path: Path, capsys) -> Path:
    path = tmp_path / "receipt-live.json"
    with fake_server(Behaviour(server_info={**GOOD_INFO, "ddtree_image": served()})) as url:
        code = main(["selfcheck", "--live", url, "--max-tokens", "32", "--runs", "2", "--receipt", str(path)])
    printed = capsys.readouterr()
    assert code == 0 and path.is_file(), printed.out + printed.err
    return path


def verify(capsys, *args: str) -> tuple[int, str]:
    code = main(["receipt", "verify", *args])
    return code, capsys.readouterr().out


def test_live_receipt_round_trip(live_receipt: Path, image_env: Path, capsys) -> None:
    document = json.loads(live_receipt.read_text())
    assert document["schema"] == receipt.SCHEMA and document["kind"] == "live"
    assert document["verdict"] == "REPRODUCED"
    assert document["image"]["key"] == image_identity.identity_key(LABELS, with_tree=False)
    assert document["served_image"]["key"] == document["image"]["key"]
    assert document["served_image"]["tree_sha256_measured"] == "c" * 64
    assert document["image"]["tree_sha256"] == "c" * 64 and document["image"]["weights_lock"] is None
    assert document["server"]["speculative"]["speculative_ddtree_topk"] == 4
    assert document["figures"]["spread"]["decode_tok_s"]["n"] == 2
    assert document["greedy"]["output_sha256"] == receipt.sha256_text("x" * 32)
    assert "gpu_count" in document["host"]
    code, out = verify(capsys, str(live_receipt))  # inside "the image": compared with its own labels
    assert code == 0 and "VALID" in out and f"this image ({image_env})" in out
    code, out = verify(capsys, str(live_receipt), "--labels", str(image_env))
    assert code == 0, out


def test_edited_receipt_rejected(live_receipt: Path, capsys) -> None:
    document = json.loads(live_receipt.read_text())
    document["figures"]["decode_tok_s"] = 999.0
    live_receipt.write_text(json.dumps(document))
    code, out = verify(capsys, str(live_receipt))
    assert code == 1
    assert out.splitlines()[0].startswith("REJECTED: edited: content digest sha256:")


def test_receipt_from_another_image_rejected(live_receipt: Path, tmp_path: Path, capsys) -> None:
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(
            [
                {
                    "Id": "sha256:" + "d" * 64,
                    "Config": {"Labels": {**LABELS, "io.ddtree.tree.sha256": "e" * 64}},
                }
            ]
        )
    )
    code, out = verify(capsys, str(live_receipt), "--labels", str(other))
    assert code == 1
    assert "REJECTED: image: the server's tree cccccccccccc is not the expected image's eeeeeeeeeeee" in out


def test_image_ref_through_docker_inspect(
    live_receipt: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--image REF asks `docker image inspect`; here a mock answers with the same or another image."""
    answers = {"ddtree:pro6000": dict(LABELS), "ddtree:b300": {**LABELS, "io.ddtree.target": "b300"}}
    monkeypatch.setattr(image_identity, "docker_labels", lambda ref: (answers[ref], "sha256:" + "f" * 64))
    args = ["receipt", "verify", str(live_receipt), "--image"]
    assert main([*args, "ddtree:pro6000"]) == 0
    assert main([*args, "ddtree:b300"]) == 1
    assert "labels differ: io.ddtree.target" in capsys.readouterr().out


def test_missing_or_failed_required_check_rejected(live_receipt: Path) -> None:
    document = json.loads(live_receipt.read_text())
    dropped = {**document, "checks": [c for c in document["checks"] if c["name"] != "greedy_output"]}
    dropped["digest"] = receipt.content_digest(dropped)  # resealed: only the missing check is wrong
    assert receipt.problems(dropped) == ["checks: required check 'greedy_output' is missing"]
    failed = json.loads(json.dumps(document))
    next(c for c in failed["checks"] if c["name"] == "decode_tok_s")["status"] = "fail"
    failed["digest"] = receipt.content_digest(failed)
    assert receipt.problems(failed)[0].startswith("checks: check 'decode_tok_s' is fail")


def test_degraded_live_run_gives_a_receipt_verify_rejects(image_env: Path, tmp_path: Path, capsys) -> None:
    path = tmp_path / "slow.json"
    with fake_server(Behaviour(tok_s=50.0, server_info={**GOOD_INFO, "ddtree_image": served()})) as url:
        assert (
            main(["selfcheck", "--live", url, "--max-tokens", "32", "--runs", "1", "--receipt", str(path)])
            == 1
        )
    capsys.readouterr()
    code, out = verify(capsys, str(path))
    assert code == 1 and "REJECTED: checks: check 'decode_tok_s' is fail" in out


def test_weights_lock_recorded_when_present(image_env: Path, tmp_path: Path) -> None:
    lock = tmp_path / "env" / "weights.yaml"
    lock.write_text("schema: 1\n")
    recorded = image_identity.describe()["weights_lock"]
    assert recorded == {"path": str(lock), "identity": "sha256:" + receipt.sha256_text("schema: 1\n")}


def test_not_a_receipt(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(UserError, match="not a ddtree receipt"):
        receipt.load(path)


def test_bench_receipt_verifies_and_compare_accepts_it(image_env: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["bench", "--contexts", "60", "--concurrency", "1", "--max-tokens", "16", "--repeats", "2"]
    config = DoubleConfig(ttft_s=0.01, chunk_interval_s=0.002, extra_server_info={"ddtree_image": served()})
    with serve(config) as (url, _):
        assert main([*argv, "--url", url, "--out", str(out), "--no-plots", "--quiet"]) == 0
    capsys.readouterr()
    code, printed = verify(capsys, str(out / "receipt.json"))
    assert code == 0, printed
    from_receipt = compare([out / "receipt.json"], None, 0.1, use_reference=False)
    from_results = compare([out / "results.json"], None, 0.1, use_reference=False)
    assert from_receipt[1]["rows"] == from_results[1]["rows"] and from_receipt[2] == 0
    document = json.loads((out / "receipt.json").read_text())
    document["results"]["cells"][0]["metrics"]["per_request_tok_s"]["median"] = 1e6
    (out / "receipt.json").write_text(json.dumps(document))
    with pytest.raises(UserError, match="receipt edited: content digest"):
        compare([out / "receipt.json"], None, 0.1, use_reference=False)
