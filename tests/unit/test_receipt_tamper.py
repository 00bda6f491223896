"""Tampered receipts: each one rejected by `ddtree receipt verify` with one line naming what differs.

The receipt is a real `selfcheck --live` run against the loopback stand-in of SGLang (test_live.py), whose
/server_info reports the identity the real `image_identity.served()` reads from baked files in tmp_path
(tests/unit/test_receipt.py's fixtures). Each case changes what an attacker or a mix-up would change and,
where the digest would catch it first, reseals the digest, so the rule under test is the one that rejects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ddtree.cli import main
from ddtree.receipts import receipt

from tests.unit.test_receipt import LABELS, image_env, live_receipt  # noqa: F401 (pytest fixtures)
from tests.unit.test_tree_identity import site, wheel  # noqa: F401 (pytest fixtures)


def _resealed(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    document = json.loads(path.read_text())
    change(document)
    document["digest"] = receipt.content_digest(document)
    path.write_text(json.dumps(document))


def _rejected(capsys, path: Path, *args: str) -> str:
    """The one reason verify gives (exit 1): a REJECTED line, or the one-line error for an unreadable one."""
    code = main(["receipt", "verify", str(path), *args])
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    reasons = [ln for ln in captured.out.splitlines() if ln.startswith("REJECTED: ")]
    if not reasons:
        reasons = [ln for ln in captured.err.splitlines() if "REJECTED: " in ln]
    assert len(reasons) == 1, captured.out + captured.err
    return reasons[0]


def test_the_untampered_receipt_is_valid(live_receipt: Path, capsys) -> None:  # noqa: F811
    assert main(["receipt", "verify", str(live_receipt)]) == 0, capsys.readouterr().out


def test_relabelled_on_the_client_side(live_receipt: Path, capsys) -> None:  # noqa: F811
    """The client's labels (DDTREE_IMAGE_LABELS on any host) say another image: the server's decide."""

    def relabel(document: dict[str, Any]) -> None:
        document["image"]["key"] = "9" * 64

    _resealed(live_receipt, relabel)
    assert "image: the server ran image" in _rejected(capsys, live_receipt)


def test_a_failed_verdict_with_passing_checks(live_receipt: Path, capsys) -> None:  # noqa: F811
    """A router's FAILED (its replicas step failed) must not verify because the required rows passed."""
    _resealed(live_receipt, lambda d: d.update(verdict="FAILED"))
    assert "verdict: 'FAILED', not REPRODUCED" in _rejected(capsys, live_receipt)


def test_a_failed_check_outside_the_required_list(live_receipt: Path, capsys) -> None:  # noqa: F811
    _resealed(
        live_receipt,
        lambda d: d["checks"].append({"name": "replicas", "status": "fail", "detail": "1 of 2 FAILED"}),
    )
    assert "checks: check 'replicas' is fail: 1 of 2 FAILED" in _rejected(capsys, live_receipt)


def test_a_duplicate_key_hiding_the_real_verdict(live_receipt: Path, capsys) -> None:  # noqa: F811
    """`"verdict": "FAILED"` before the real one: one JSON reader sees FAILED, another REPRODUCED."""
    text = live_receipt.read_text()
    assert text.startswith("{\n")
    live_receipt.write_text('{\n  "verdict": "FAILED",\n' + text[2:])
    assert "schema: key 'verdict' is given twice" in _rejected(capsys, live_receipt)


def test_an_image_built_from_the_product_with_changed_files(live_receipt: Path, capsys) -> None:  # noqa: F811
    """It inherits the labels and the baked tree identity; the tree serve measured differs."""

    def derived(document: dict[str, Any]) -> None:
        document["served_image"]["tree_sha256_measured"] = "d" * 64

    _resealed(live_receipt, derived)
    reason = _rejected(capsys, live_receipt)
    assert "image: the server's files (tree dddddddddddd) are not its image's (cccccccccccc)" in reason


def test_replayed_against_another_image(live_receipt: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    other = tmp_path / "other-labels.json"
    other.write_text(json.dumps({**LABELS, "io.ddtree.patches.sha256": "f" * 64}))
    reason = _rejected(capsys, live_receipt, "--labels", str(other))
    assert "image: made by image" in reason and "(labels differ: io.ddtree.patches.sha256)" in reason


def test_a_server_that_reports_no_identity(live_receipt: Path, capsys) -> None:  # noqa: F811
    _resealed(live_receipt, lambda d: d.update(served_image=None))
    assert "image: the server reported no image identity" in _rejected(capsys, live_receipt)


@pytest.mark.parametrize("schema", ["ddtree-receipt/1", "ddtree-receipt/3"])
def test_another_schema_version(live_receipt: Path, capsys, schema: str) -> None:  # noqa: F811
    _resealed(live_receipt, lambda d: d.update(schema=schema))
    assert f"schema: {schema!r} is not {receipt.SCHEMA}" in _rejected(capsys, live_receipt)


def test_a_plain_docker_build_and_its_baked_labels_give_one_key() -> None:
    """`docker build` without TREE_SHA256 labels the image "unknown" while the baked file holds the digest:
    the receipt's key leaves the tree out (compared on its own), so both name one image."""
    from ddtree import image_identity

    inspected = {**LABELS, "io.ddtree.tree.sha256": "unknown"}
    assert image_identity.identity_key(inspected, with_tree=False) == image_identity.identity_key(
        LABELS, with_tree=False
    )
    assert image_identity.known_tree(inspected) is None and image_identity.known_tree(LABELS) == "c" * 64


def test_serve_measures_the_tree_and_a_changed_file_shows_in_the_served_identity(
    site: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ddtree serve`'s tree step over a real pip-installed folder standing in for the image's site-packages
    (tests/unit/test_tree_identity.py's fixture): the digest it exports is the build's until a file changes,
    as in an image built FROM the product; the served identity then fails verify's tree rule."""
    from ddtree import image_identity
    from ddtree.receipts import tree_identity
    from ddtree.serve import preflight as serve_preflight

    monkeypatch.setattr(tree_identity, "image_roots", lambda: (site, []))
    baked = tmp_path / "tree-identity.json"
    assert tree_identity._main(["write", "--root", str(site), "--out", str(baked)]) == 0
    monkeypatch.setattr(tree_identity, "IDENTITY_FILE", baked)
    labels = tmp_path / "image-labels.json"
    labels.write_text(json.dumps(LABELS))
    monkeypatch.setattr(image_identity, "LABEL_FILES", (labels,))
    lines: list[str] = []
    measured = serve_preflight.measured_tree(lines.append)
    assert "(the build's;" in lines[-1]
    identity = image_identity.served(measured)
    assert identity is not None and identity["tree_sha256_measured"] == identity["tree_sha256"]
    assert receipt.served_problems({"served_image": identity, "image": {}}) == []
    (site / "packaging" / "added_by_a_derived_image.py").write_text("X = 1\n")
    derived = image_identity.served(serve_preflight.measured_tree(lines.append))
    assert derived is not None and "NOT the build's" in lines[-1]
    (problem,) = receipt.served_problems({"served_image": derived, "image": {}})
    assert problem.startswith("image: the server's files (tree ")


def test_replicas_behind_a_router_must_run_one_image() -> None:
    """A router's receipt records one replica's served identity; replicas of two images fail its step."""
    from ddtree.selfcheck import live

    def replica(url: str, key: str) -> live.LiveReport:
        return live.LiveReport(url, live.REPRODUCED, server={"ddtree_image": {"key": key}})

    same = live.check_replicas([replica("http://a:1", "1" * 64), replica("http://b:1", "1" * 64)])
    assert same.status == "pass"
    mixed = live.check_replicas([replica("http://a:1", "1" * 64), replica("http://b:1", "2" * 64)])
    assert mixed.status == "fail"
    expected = "the replicas run different images: http://a:1 111111111111, http://b:1 222222222222"
    assert mixed.detail == expected


def test_bench_compare_still_reads_an_older_receipt() -> None:
    """verify wants this schema version; compare only needs a receipt's results and digest."""
    assert receipt.is_receipt({"schema": "ddtree-receipt/1"}) and not receipt.is_receipt({"schema": "x/1"})
