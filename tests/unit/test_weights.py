"""Weights checks on tiny synthetic safetensors folders written by the tests (real files, no mocks)."""

from __future__ import annotations

import hashlib
import io
import json
import struct
from pathlib import Path

import pytest
from ddtree.errors import UserError
from ddtree.weights import folders as weights
from ddtree.weights import hashes as weights_hash

from tests.synthetic_weights import write_drafter, write_shard, write_target


def _error(call, *args, **kwargs) -> UserError:
    with pytest.raises(UserError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    assert info.value.exit_code == 1
    return info.value


def test_good_target_passes(tmp_path: Path) -> None:
    write_target(tmp_path, shards=4)
    summary = weights.check_target(tmp_path, "kimi_k25")
    assert summary.model_type == "kimi_k25"
    assert summary.num_hidden_layers == 61  # nested under text_config
    assert len(summary.shards) == 4 and all(s.tensors == 2 for s in summary.shards)


def test_missing_mount(tmp_path: Path) -> None:
    err = _error(weights.check_target, tmp_path / "target", "kimi_k25")
    assert f"target weights folder {tmp_path / 'target'} does not exist" in str(err)
    assert "MODEL_DIR" in str(err)


def test_empty_folder(tmp_path: Path) -> None:
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert f"target weights folder {tmp_path} is empty" in str(err)


def test_missing_config(tmp_path: Path) -> None:
    write_target(tmp_path)
    (tmp_path / "config.json").unlink()
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert f"target config {tmp_path / 'config.json'} is missing" in str(err)


def test_wrong_model_type(tmp_path: Path) -> None:
    write_target(tmp_path, model_type="deepseek_v3")
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert "model_type 'deepseek_v3', the target expects 'kimi_k25'" in str(err)


def test_missing_shard(tmp_path: Path) -> None:
    paths = write_target(tmp_path, shards=3)
    paths[1].unlink()
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert f"shard {paths[1]} is missing (1 of 3 shards" in str(err)


def test_truncated_shard(tmp_path: Path) -> None:
    paths = write_target(tmp_path, shards=2, tensor_bytes=4096)
    size = paths[1].stat().st_size
    with open(paths[1], "r+b") as handle:
        handle.truncate(size - 100)
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert f"shard {paths[1]} is truncated: {size - 100} bytes, its header needs {size}" in str(err)


def test_truncated_inside_header(tmp_path: Path) -> None:
    paths = write_target(tmp_path, shards=1)
    with open(paths[0], "r+b") as handle:
        handle.truncate(20)
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert f"shard {paths[0]} is truncated inside its header" in str(err)


def test_trailing_bytes(tmp_path: Path) -> None:
    paths = write_target(tmp_path, shards=1)
    with open(paths[0], "ab") as handle:
        handle.write(b"x" * 7)
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert "has 7 bytes after its last tensor" in str(err)


def test_corrupt_header_not_json(tmp_path: Path) -> None:
    paths = write_target(tmp_path, shards=2)
    with open(paths[0], "r+b") as handle:
        handle.seek(8)
        handle.write(b"\xff{garbage")
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert f"shard {paths[0]} has a corrupt header (not JSON" in str(err)


def test_corrupt_header_length(tmp_path: Path) -> None:
    paths = write_target(tmp_path, shards=1)
    with open(paths[0], "r+b") as handle:
        handle.write(struct.pack("<Q", 1 << 40))
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert f"shard {paths[0]} has a corrupt header (length {1 << 40})" in str(err)


def test_corrupt_offsets(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    raw = json.dumps({"w": {"dtype": "U8", "shape": [4], "data_offsets": [8, 4]}}).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(8))
    (tmp_path / "config.json").write_text('{"model_type": "kimi_k25"}')
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert "tensor 'w' has data_offsets [8, 4]" in str(err)


def test_shards_without_index(tmp_path: Path) -> None:
    write_target(tmp_path, shards=2)
    (tmp_path / weights.INDEX_NAME).unlink()
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert "is missing but" in str(err) and "holds 2 shards" in str(err)


def test_index_path_escape_rejected(tmp_path: Path) -> None:
    write_target(tmp_path, shards=1)
    (tmp_path / weights.INDEX_NAME).write_text(json.dumps({"weight_map": {"w": "../evil.safetensors"}}))
    err = _error(weights.check_target, tmp_path, "kimi_k25")
    assert "names an unexpected shard '../evil.safetensors'" in str(err)


def test_drafter_good(tmp_path: Path) -> None:
    write_drafter(tmp_path, block_size=8)
    summary = weights.check_drafter(tmp_path, block_size=8, target_layers=61)
    assert summary.block_size == 8 and summary.target_layer_ids == (1, 15, 30, 45, 58)
    assert len(summary.shards) == 1


def test_drafter_smaller_block_allowed(tmp_path: Path) -> None:
    write_drafter(tmp_path, block_size=16)
    assert weights.check_drafter(tmp_path, block_size=8, target_layers=61).block_size == 16


def test_drafter_block_size_mismatch(tmp_path: Path) -> None:
    write_drafter(tmp_path, block_size=4)
    err = _error(weights.check_drafter, tmp_path, block_size=8, target_layers=61)
    assert "has block_size 4 but the target profile sets num-draft-tokens/block size 8" in str(err)


def test_drafter_layer_out_of_range(tmp_path: Path) -> None:
    write_drafter(tmp_path, target_layer_ids=[1, 30, 61])
    err = _error(weights.check_drafter, tmp_path, block_size=8, target_layers=61)
    assert "captures target layer 61 but the target has 61 layers (0..60)" in str(err)


def test_drafter_missing_mount(tmp_path: Path) -> None:
    err = _error(weights.check_drafter, tmp_path / "drafter", 8, 61)
    assert f"drafter folder {tmp_path / 'drafter'} does not exist" in str(err) and "DRAFTER_DIR" in str(err)


def test_drafter_missing_config(tmp_path: Path) -> None:
    write_drafter(tmp_path)
    (tmp_path / "config.json").unlink()
    err = _error(weights.check_drafter, tmp_path, 8, 61)
    assert "drafter config" in str(err) and "is missing" in str(err)


def test_num_hidden_layers_both_shapes() -> None:
    assert weights.num_hidden_layers({"num_hidden_layers": 61}) == 61
    assert weights.num_hidden_layers({"text_config": {"num_hidden_layers": 7}}) == 7
    assert weights.num_hidden_layers({}) is None


def test_full_hash_matches_hashlib_and_manifest(tmp_path: Path) -> None:
    model = tmp_path / "m"
    paths = write_target(model, shards=5, tensor_bytes=300_000, random_data=True)
    expected = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    manifest = tmp_path / "weights.sha256"
    manifest.write_text("".join(f"{d}  ./{n}\n" for n, d in expected.items()) + f"{'0' * 64}  config.json\n")
    stream = io.StringIO()
    report = weights_hash.full_hash(model, manifest=manifest, workers=3, stream=stream)
    assert report.digests == expected
    assert report.ok
    assert "100.0%" in stream.getvalue()  # the progress reached the end


def test_full_hash_mismatch_named(tmp_path: Path) -> None:
    model = tmp_path / "m"
    paths = write_target(model, shards=2, tensor_bytes=1000)
    manifest = tmp_path / "weights.sha256"
    manifest.write_text("".join(f"{'a' * 64}  {p.name}\n" for p in paths))
    report = weights_hash.full_hash(model, manifest=manifest, stream=io.StringIO())
    assert not report.ok and report.mismatched == sorted(p.name for p in paths)
    line = weights_hash.describe_hash_failure(report, model, manifest)
    assert f"shard {paths[0]} does not match {manifest} (2 mismatched)" in line


def test_full_hash_absent_from_folder(tmp_path: Path) -> None:
    model = tmp_path / "m"
    paths = write_target(model, shards=1)
    digest = hashlib.sha256(paths[0].read_bytes()).hexdigest()
    manifest = tmp_path / "weights.sha256"
    manifest.write_text(f"{digest}  {paths[0].name}\n{'b' * 64}  model-extra.safetensors\n")
    report = weights_hash.full_hash(model, manifest=manifest, stream=io.StringIO())
    assert report.absent == ["model-extra.safetensors"]
    assert "lists model-extra.safetensors which is not in" in weights_hash.describe_hash_failure(
        report, model, manifest
    )


def test_bad_manifest_line(tmp_path: Path) -> None:
    manifest = tmp_path / "weights.sha256"
    manifest.write_text("nonsense\n")
    err = _error(weights_hash.read_manifest, manifest)
    assert f"weights manifest {manifest}:1 is not `sha256  path`" in str(err)


def test_write_shard_roundtrip(tmp_path: Path) -> None:
    size = write_shard(tmp_path / "x.safetensors", {"a": 10, "b": 6})
    info = weights.check_shard(tmp_path / "x.safetensors")
    assert info.size == size and info.tensors == 2


def test_cli_check_and_hash_roundtrip(tmp_path: Path, capsys) -> None:
    """`ddtree weights check|hash`: the manifest it writes is sha256sum's format and checks back."""
    from ddtree import cli

    paths = write_target(tmp_path / "t", shards=3, tensor_bytes=5000)
    write_drafter(tmp_path / "d")
    assert cli.main(["weights", "check", str(tmp_path / "t"), "--drafter", str(tmp_path / "d")]) == 0
    assert "ok   drafter" in capsys.readouterr().out
    manifest = tmp_path / "weights.sha256"
    assert cli.main(["weights", "hash", str(tmp_path / "t"), "--write", str(manifest)]) == 0
    lines = manifest.read_text().splitlines()
    assert lines == [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in paths]
    assert cli.main(["weights", "hash", str(tmp_path / "t"), "--manifest", str(manifest)]) == 0
    with open(paths[2], "r+b") as handle:
        handle.seek(-1, 2)
        handle.write(b"\x01")
    capsys.readouterr()
    assert cli.main(["weights", "hash", str(tmp_path / "t"), "--manifest", str(manifest)]) == 1
    assert f"shard {paths[2]} does not match {manifest} (1 mismatched)" in capsys.readouterr().err
    write_target(tmp_path / "bad", model_type="llama")
    assert cli.main(["weights", "check", str(tmp_path / "bad")]) == 1
