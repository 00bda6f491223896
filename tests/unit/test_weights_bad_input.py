"""Bad weights a careful user tried (issue 17, "Weights and drafter"): each is one line naming the file
and the fix, exit 1, and nothing written.

Real parts: synthetic weight folders (tests/synthetic_weights.py), the real `ddtree` CLI, and the real
safetensors library (the dev venv's) as the second opinion on every header the check refuses.
The read-only filesystem is real where this machine has one (/sys); one case fakes EROFS in mkstemp
(said in its docstring) so it runs everywhere.
"""

from __future__ import annotations

import errno
import json
import os
import struct
from pathlib import Path

import pytest
from ddtree import cli
from ddtree.errors import UserError
from ddtree.selfcheck import checks as framework
from ddtree.selfcheck import image as selfcheck_image
from ddtree.weights import folders as weights
from ddtree.weights import hashes as weights_hash

from tests.synthetic_weights import write_drafter, write_hf_cache, write_target

REPO = Path(__file__).resolve().parents[2]


def _cli(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err.strip().splitlines()


def _shapes(folder: Path, target: Path, **drafter_config) -> None:
    """Give the target Kimi's text-model facts and the drafter the given config fields."""
    config = json.loads((target / "config.json").read_text())
    config["text_config"].update(hidden_size=64, vocab_size=1000)
    (target / "config.json").write_text(json.dumps(config))
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=64, vocab_size=1000, num_attention_heads=8, num_key_value_heads=8)
    config.update(drafter_config)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "target"
    write_target(target)
    drafter = write_drafter(tmp_path / "drafter", target_layer_ids=[1, 30])
    return target, drafter


# ---------------------------------------------------------------- drafter shape facts


@pytest.mark.parametrize(
    ("config", "tp", "expected"),
    [
        ({"hidden_size": 96}, None, "has hidden_size 96 but the target's is 64"),
        ({"vocab_size": 999}, None, "has vocab_size 999 but the target's is 1000"),
        ({"dflash_config": {"target_layer_ids": [1, 30], "mask_token_id": 1000}}, None,
         "has mask_token_id 1000, outside the target's vocabulary of 1000"),
        ({"num_attention_heads": 6, "head_dim": 16}, 4, "has 6 attention heads, not divisible by TP 4"),
        ({"num_key_value_heads": 3}, 2, "has 3 KV heads, which neither divide nor are divided by TP 2"),
        ({"num_attention_heads": 5}, None, "has hidden_size 64 not divisible by num_attention_heads 5"),
    ],
)  # fmt: skip
def test_drafter_shape_facts_against_the_target(pair, capsys, config, tp, expected) -> None:
    target, drafter = pair
    _shapes(drafter, target, **config)
    argv = ["weights", "check", str(target), "--drafter", str(drafter)] + (["--tp", str(tp)] if tp else [])
    code, _, err = _cli(capsys, *argv)
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"ddtree: error: drafter config {drafter / 'config.json'} {expected}")


def test_drafter_fc_weight_must_fit_the_captured_layers(pair, capsys) -> None:
    """fc projects len(target_layer_ids) x hidden to hidden: a header holding another shape is a drafter
    whose weights and config disagree (SGLang: "target_hidden feature dim mismatch")."""
    target, drafter = pair
    _shapes(drafter, target)
    _write_raw_shard(drafter / "model.safetensors", {"fc.weight": ("BF16", [64, 192])})
    code, _, err = _cli(capsys, "weights", "check", str(target), "--drafter", str(drafter))
    assert code == 1
    assert err == [
        f"ddtree: error: drafter config {drafter / 'config.json'} captures 2 target layers, so fc.weight "
        "must be "
        "[64, 128], but the drafter's weights hold [64, 192]: config and weights belong to different drafters"
    ]
    _write_raw_shard(drafter / "model.safetensors", {"fc.weight": ("BF16", [64, 128])})
    assert _cli(capsys, "weights", "check", str(target), "--drafter", str(drafter))[0] == 0


def test_selfcheck_drafter_check_compares_shapes(pair, tmp_path: Path) -> None:
    target, drafter = pair
    _shapes(drafter, target, hidden_size=128)
    selfcheck_image._plan_cached.cache_clear()
    environ = {
        "DDTREE_TARGET": "pro6000", "DDTREE_ENV_DIR": str(REPO / "env"), "PATH": "/nonexistent",
        "DDTREE_MODEL_DIR": str(target), "DDTREE_DRAFTER_DIR": str(drafter),
    }  # fmt: skip
    checks = [c for c in framework.REGISTRY if c.name == "drafter"]
    (outcome,) = framework.run_checks(checks, framework.Context(offline=True, environ=environ))
    assert (
        outcome.result.status == "fail"
        and "has hidden_size 128 but the target's is 64" in outcome.result.detail
    )


# ---------------------------------------------------------------- safetensors header arithmetic


def _write_raw_shard(path: Path, tensors: dict[str, tuple[str, list[int]]], offsets=None) -> None:
    """A shard whose header says what the test wants; the file is exactly as long as its header's last
    offset, so the old size check passes and only the arithmetic can fail."""
    header: dict[str, object] = {}
    position = 0
    for name, (dtype, shape) in tensors.items():
        if offsets and name in offsets:
            begin, end = offsets[name]
        else:
            count = 1
            for x in shape:
                count *= x
            size = count * {"BF16": 2, "U8": 1, "F32": 4, "F4": 1}.get(dtype, 1)
            begin, end = position, position + size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
        position = max(position, end)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(position))


@pytest.mark.parametrize(
    ("tensors", "offsets", "expected"),
    [
        ({"w": ("F32", [4])}, {"w": [0, 8]},
         "tensor 'w' is F32 x [4] = 16 bytes but data_offsets [0, 8] hold 8"),
        ({"w": ("Q7", [4])}, None, "tensor 'w' has unknown dtype 'Q7'"),
        ({"a": ("U8", [4]), "b": ("U8", [4])}, {"b": [6, 10]},
         "tensor 'b' at data_offsets [6, 10] leaves a gap at byte 4"),
        ({"a": ("U8", [4]), "b": ("U8", [4])}, {"b": [2, 6]},
         "tensor 'b' at data_offsets [2, 6] overlaps the tensor before it"),
        ({"w": ("F4", [3])}, {"w": [0, 2]}, "tensor 'w' has F4 x [3], which does not fill whole bytes"),
        ({"w": ("U8", [-4])}, {"w": [0, 0]}, "tensor 'w' has shape [-4]"),
    ],
)  # fmt: skip
def test_header_arithmetic(tmp_path: Path, capsys, tensors, offsets, expected) -> None:
    folder = tmp_path / "t"
    write_target(folder, shards=1)
    shard = folder / "model-00001-of-00001.safetensors"
    _write_raw_shard(shard, tensors, offsets)
    index = {"weight_map": dict.fromkeys(tensors, shard.name)}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    code, _, err = _cli(capsys, "weights", "check", str(folder))
    assert code == 1 and len(err) == 1
    assert err[0] == f"ddtree: error: shard {shard} has a corrupt header: {expected}; copy it again"
    # The safetensors library refuses the same file.
    safetensors = pytest.importorskip("safetensors")
    with pytest.raises(Exception), safetensors.safe_open(str(shard), "np") as handle:  # noqa: B017 (types vary)
        for name in handle.keys():  # noqa: SIM118
            handle.get_tensor(name)


def test_good_synthetic_shards_pass_both_checks(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors")
    shard = tmp_path / "ok.safetensors"
    _write_raw_shard(shard, {"a": ("BF16", [2, 3]), "b": ("U8", [5]), "c": ("F32", [])})
    info = weights.check_shard(shard)
    assert info.tensors == 3
    with safetensors.safe_open(str(shard), "np") as handle:
        assert sorted(handle.keys()) == ["a", "b", "c"]


# ---------------------------------------------------------------- symlinked shards


def test_link_outside_the_mount_is_named_with_its_target(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "t"
    write_target(folder, shards=2)
    shard = folder / "model-00002-of-00002.safetensors"
    outside = tmp_path / "elsewhere" / "notes.txt"
    outside.parent.mkdir()
    outside.write_text("this is not a safetensors file, and it is outside the folder")
    shard.unlink()
    shard.symlink_to(outside)
    code, _, err = _cli(capsys, "weights", "check", str(folder))
    assert code == 1 and len(err) == 1
    assert err[0].startswith(f"ddtree: error: shard {shard} (a link to {outside}) has a corrupt header")


def test_dangling_link_to_a_host_path(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "t"
    write_target(folder, shards=2)
    shard = folder / "model-00001-of-00002.safetensors"
    shard.unlink()
    shard.symlink_to("/data/hf/model-00001-of-00002.safetensors")
    code, _, err = _cli(capsys, "weights", "check", str(folder))
    assert code == 1
    assert err == [
        f"ddtree: error: shard {shard} is a link to /data/hf/model-00001-of-00002.safetensors, which does "
        "not "
        "exist here (outside the mount, or absent on this machine): copy the file into the folder, or mount "
        "its target too"
    ]


def test_snapshot_mounted_without_its_blobs(tmp_path: Path, capsys) -> None:
    """What a container sees when only snapshots/COMMIT is mounted: every file a link into ../../blobs
    that is not there (simulated by copying the snapshot's links alone)."""
    source = tmp_path / "src"
    write_target(source)
    cache = write_hf_cache(tmp_path / "hub", "moonshotai/Kimi-K2.6", {"d" * 40: source}, main="d" * 40)
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for link in (cache / "snapshots" / ("d" * 40)).iterdir():
        (mounted / link.name).symlink_to(os.readlink(link))
    code, _, err = _cli(capsys, "weights", "check", str(mounted))
    assert code == 1 and len(err) == 1
    assert err[0].startswith(
        f"ddtree: error: target config {mounted / 'config.json'} is a link to ../../blobs/"
    )
    assert err[0].endswith(
        "which is absent here: a Hugging Face cache snapshot mounted without its blobs/; mount the "
        "repository "
        "folder (models--ORG--NAME, holding snapshots/ and blobs/) instead"
    )
    # The whole repository folder works, and so does the snapshot on the host (its links resolve).
    assert _cli(capsys, "weights", "check", str(cache / "snapshots" / ("d" * 40)))[0] == 0


# ---------------------------------------------------------------- mounts and the manifest writer


def test_read_only_mount_gives_no_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """statvfs is faked to report ST_RDONLY (a read-only bind mount needs privileges this test lacks);
    the read-write case is real (tmp_path), see test_weights_lock's serve test."""
    from ddtree.serve import preflight as serve_preflight
    from ddtree.weights import layout as weights_layout

    lines: list[str] = []
    serve_preflight.warn_read_write(tmp_path, lines.append)
    assert len(lines) == 1 and lines[0].startswith(f"warn mount    {tmp_path} is mounted read-write")

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(weights_layout.os, "statvfs", lambda _: ReadOnly())
    lines.clear()
    serve_preflight.warn_read_write(tmp_path, lines.append)
    assert lines == []


def test_hash_write_to_a_read_only_folder_fails_before_hashing(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mkstemp is faked to fail with EROFS, as on a `:ro` mount; the hasher must not even start."""
    folder = tmp_path / "t"
    write_target(folder)
    monkeypatch.setattr(
        weights_hash.tempfile,
        "mkstemp",
        lambda **_: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system")),
    )
    monkeypatch.setattr(
        weights_hash, "hash_files", lambda *a, **k: pytest.fail("hashed before checking --write")
    )
    code, out, err = _cli(capsys, "weights", "hash", str(folder), "--write", str(folder / "weights.sha256"))
    assert code == 1 and out == []
    assert err == [
        f"ddtree: error: --write {folder / 'weights.sha256'} cannot be written (Read-only file system): "
        "the folder "
        f"{folder} is read-only or absent (weights are mounted read-only); write it elsewhere, e.g. "
        "/tmp/weights.sha256"
    ]
    assert not (folder / "weights.sha256").exists()


@pytest.mark.skipif(os.access("/sys", os.W_OK) and os.geteuid() != 0, reason="needs an unwritable /sys")
def test_hash_write_into_a_real_unwritable_folder(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "t"
    write_target(folder)
    try:
        probe = Path("/sys/.ddtree-probe")
        probe.write_text("x")
        probe.unlink()
        pytest.skip("/sys is writable here")
    except OSError:
        pass
    code, _, err = _cli(capsys, "weights", "hash", str(folder), "--write", "/sys/weights.sha256")
    assert code == 1 and len(err) == 1 and "--write /sys/weights.sha256 cannot be written" in err[0]
    assert "sha256 [" not in "".join(err)


def test_missing_manifest_is_reported_before_hashing(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "t"
    write_target(folder)
    code, out, err = _cli(capsys, "weights", "hash", str(folder), "--manifest", str(tmp_path / "none.sha256"))
    assert code == 1 and out == []
    assert err == [
        f"ddtree: error: {tmp_path / 'none.sha256'}: not found; check --manifest (the weights manifest)"
    ]  # no progress line: nothing was hashed


def test_write_manifest_error_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match=r"manifest .* cannot be written \(Not a directory\)"):
        weights_hash.write_manifest({"a": "0" * 64}, blocker / "sub" / "m.sha256")
