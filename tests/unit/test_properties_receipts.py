"""Receipts and labels files as input (issue 30): `ddtree receipt verify` on generated documents, a valid
receipt with one field replaced by any JSON value (its digest recomputed, so the shape check is what
decides, or left stale), nested deeply, or bytes that are not UTF-8. Every run ends in exit 0, 1 or 2 with
a verdict line or one error line, never a traceback.

Real parts: receipts built by the real `receipt.build`, files on disk, the real CLI in process.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ddtree.cli import main
from ddtree.receipts import receipt
from hypothesis import given
from hypothesis import strategies as st

from tests.bad_input import assert_clean_outcome, run_cli
from tests.unit.test_properties_servers import json_values
from tests.unit.test_receipt import LABELS

FIELDS = ["schema", "kind", "digest", "verdict", "checks", "image", "checks.0", "checks.0.status",
          "checks.0.name", "image.labels", "image.key", "image.labels.io.ddtree.target"]  # fmt: skip


def _valid() -> dict:
    image = {"key": "k" * 64, "labels": dict(LABELS), "config_digest": "sha256:" + "f" * 64}
    checks = [receipt.check_row(name, "pass", "ok") for name in receipt.REQUIRED_CHECKS["live"]]
    return receipt.build(
        "live", server={}, figures={}, greedy={}, checks=checks, verdict="REPRODUCED", image=image, host={}
    )


def _replace(document: dict, field: str, value: object) -> None:
    """Set a dotted field (a label's dots belong to its name: `image.labels.NAME`)."""
    parts = field.split(".", 2) if field.startswith("image.labels.") else field.split(".")
    holder: object = document
    for part in parts[:-1]:
        holder = holder[int(part)] if isinstance(holder, list) else holder[part]  # type: ignore[index]
    last = parts[-1]
    if isinstance(holder, list):
        holder[int(last)] = value
    else:
        holder[last] = value  # type: ignore[index]


@st.composite
def receipt_files(draw) -> bytes:
    kind = draw(st.sampled_from(["field", "field", "deep", "bytes", "any"]))
    if kind == "bytes":
        return draw(st.binary(max_size=40)) + b"\xff"
    if kind == "any":
        return json.dumps(draw(json_values)).encode()
    document = _valid()
    if kind == "deep":
        levels = draw(st.sampled_from([65, 5000, 200_000]))
        return (json.dumps(document)[:-1] + ', "figures": ' + "[" * levels + "]" * levels + "}").encode()
    _replace(document, draw(st.sampled_from(FIELDS)), draw(json_values))
    if draw(st.booleans()):
        document["digest"] = receipt.content_digest(document)
    return json.dumps(document).encode()


@given(content=receipt_files(), with_labels=st.booleans())
def test_generated_receipts_end_in_a_verdict_or_one_line(content: bytes, with_labels: bool, capsys) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "receipt.json"
        path.write_bytes(content)
        labels = Path(folder) / "labels.json"
        labels.write_text(json.dumps(LABELS))
        argv = ["receipt", "verify", str(path)] + (["--labels", str(labels)] if with_labels else [])
        code, out, err = run_cli(main, capsys, argv)
    if code in (0, 1) and not err:
        assert out and (" VALID " in out[-1] or " REJECTED " in out[-1]), out
        return
    assert_clean_outcome(code, err)


@given(
    content=st.one_of(
        st.binary(max_size=30).map(lambda b: b + b"\xfe"), json_values.map(lambda v: json.dumps(v).encode())
    )
)
def test_generated_labels_files_end_in_one_line(content: bytes, capsys) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "receipt.json"
        receipt.write(path, _valid())
        labels = Path(folder) / "labels.json"
        labels.write_bytes(content)
        code, _, err = run_cli(main, capsys, ["receipt", "verify", str(path), "--labels", str(labels)])
    if code in (0, 1) and not err:
        return
    assert_clean_outcome(code, err)


def test_a_receipt_with_a_checks_object_is_named(capsys, tmp_path: Path) -> None:
    document = _valid()
    document["image"] = ["not", "an", "object"]
    document["digest"] = receipt.content_digest(document)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(document))
    code, _, err = run_cli(main, capsys, ["receipt", "verify", str(path)])
    assert code == 1 and err == [
        f"ddtree: error: {path}: not a well-formed receipt (image is a list, expected an object or null); "
        "give a receipt written by `ddtree selfcheck --live` or `ddtree bench`"
    ]


def test_a_deeply_nested_receipt_and_a_non_utf8_labels_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"schema": "ddtree-receipt/1", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    code, _, err = run_cli(main, capsys, ["receipt", "verify", str(path)])
    assert code == 1 and "JSON nested deeper than 64 levels" in err[0], err
    receipt.write(path, _valid())
    labels = tmp_path / "labels.json"
    labels.write_bytes(b'{"io.ddtree.target": "\xff"}')
    code, _, err = run_cli(main, capsys, ["receipt", "verify", str(path), "--labels", str(labels)])
    assert code == 1 and err == [f"ddtree: error: {labels}: not UTF-8 text (byte 22); give the text file"]


@given(
    content=st.one_of(
        st.binary(max_size=30).map(lambda b: b + b"\xff"),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.just(b'{"schema": "ddtree-bench/1", "cells": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ),
    which=st.sampled_from(["compare", "problems"]),
)
def test_generated_bench_inputs_end_in_one_line(content: bytes, which: str, capsys) -> None:
    """`bench compare` results files and `bench humaneval --problems` files of any content."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("results.json" if which == "compare" else "problems.jsonl")
        path.write_bytes(content)
        if which == "compare":
            argv = ["bench", "compare", str(path), str(path), "--no-reference"]
        else:
            argv = ["bench", "humaneval", "--url", "http://127.0.0.1:9", "--problems", str(path), "--quiet",
                    "--out", str(Path(folder) / "he")]  # fmt: skip
        code, _, err = run_cli(main, capsys, argv)
    assert_clean_outcome(code, err)
