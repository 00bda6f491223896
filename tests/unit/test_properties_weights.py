"""Bad weights as classes (issue 30): generated safetensors headers judged against the safetensors
library itself, generated weight folders through the real `ddtree weights check`, and a table of the
cases a probe found (each failed before: a traceback, a hang or a silent pass).

Real parts: the dev venv's safetensors library (`safetensors.deserialize`, its own header rules) as the
oracle; real files, links and FIFOs on disk; the real CLI in process.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import threading
from pathlib import Path

import pytest
import safetensors
from ddtree import cli
from ddtree.errors import UserError
from ddtree.weights import folders as weights
from ddtree.weights.safetensors_layout import DTYPE_BITS
from hypothesis import given
from hypothesis import strategies as st

from tests.bad_input import assert_clean_outcome, run_cli
from tests.synthetic_weights import write_drafter, write_shard, write_target

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.text(max_size=4),
    st.lists(st.integers(-2, 4), max_size=3),
)


@st.composite
def headers(draw) -> tuple[dict, int]:
    """(header, data length): mostly well-formed tensors, each field sometimes replaced by junk."""
    header: dict = {}
    offset = 0
    for name in draw(st.lists(st.text(min_size=1, max_size=6), max_size=4, unique=True)):
        if name == "__metadata__":
            continue
        dtype = draw(st.sampled_from(sorted(DTYPE_BITS)) | st.sampled_from(["X8", "f32"]))
        shape = draw(st.lists(st.integers(0, 6), max_size=3))
        bits = DTYPE_BITS.get(dtype, 8)
        count = 1
        for dim in shape:
            count *= dim
        size = bits * count // 8
        entry: dict = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        spoil = draw(st.sampled_from(["none"] * 6 + ["dtype", "shape", "offsets", "gap", "entry"]))
        if spoil == "dtype":
            entry["dtype"] = draw(JUNK)
        elif spoil == "shape":
            entry["shape"] = draw(JUNK | st.lists(st.integers(-3, 3), min_size=1, max_size=2))
        elif spoil == "offsets":
            entry["data_offsets"] = draw(JUNK | st.lists(st.integers(-2, offset + size + 2), max_size=3))
        elif spoil == "gap":
            entry["data_offsets"] = [offset + 1, offset + 1 + size]
        header[name] = draw(JUNK) if spoil == "entry" else entry
        offset += size
    metadata = draw(
        st.sampled_from(["absent", "strings", "null", "junk"]).flatmap(
            lambda kind: {
                "absent": st.just(None),
                "null": st.just("null"),
                "strings": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
                "junk": st.dictionaries(st.text(max_size=3), JUNK, min_size=1, max_size=2) | JUNK,
            }[kind]
        )
    )
    if metadata == "null":
        header["__metadata__"] = None
    elif metadata is not None:
        header["__metadata__"] = metadata
    extra = draw(st.sampled_from([0, 0, 0, 1, -1]))
    return header, max(offset + extra, 0)


def _shard_bytes(header: dict, data_length: int) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(data_length)


@given(headers())
def test_header_check_agrees_with_the_safetensors_library(case: tuple[dict, int]) -> None:
    """Whatever the header, our check accepts exactly what safetensors accepts, and refuses with one line."""
    header, length = case
    data = _shard_bytes(header, length)
    try:
        safetensors.deserialize(data)
        library_ok = True
    except Exception:  # the library's SafetensorError (and ValueError on some shapes)
        library_ok = False
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.safetensors"
        path.write_bytes(data)
        try:
            weights.check_shard(path)
            ours_ok = True
        except UserError as exc:
            ours_ok = False
            assert "\n" not in str(exc) and str(path) in str(exc)
    assert ours_ok == library_ok, (header, length)


# ---------------------------------------------------------------- generated folders through the CLI

CONFIG_VALUES = st.one_of(
    JUNK, st.integers(-1, 10**6), st.dictionaries(st.text(max_size=3), JUNK, max_size=2)
)


@st.composite
def drafter_folders(draw, root: Path) -> list[str]:
    """A target and a drafter folder, each part of them sometimes damaged; the CLI arguments."""
    target, drafter = root / "target", root / "drafter"
    write_target(target, shards=2)
    write_drafter(drafter, target_layer_ids=[1, 30])
    config = json.loads((drafter / "config.json").read_text())
    for key in draw(
        st.lists(
            st.sampled_from(
                [
                    "architectures",
                    "hidden_size",
                    "vocab_size",
                    "num_attention_heads",
                    "block_size",
                    "mask_token_id",
                    "dflash_config",
                    "num_key_value_heads",
                    "head_dim",
                ]
            ),
            max_size=3,
        )
    ):
        config[key] = draw(CONFIG_VALUES)
    (drafter / "config.json").write_text(json.dumps(config))
    target_config = json.loads((target / "config.json").read_text())
    for key in draw(
        st.lists(st.sampled_from(["hidden_size", "vocab_size", "num_hidden_layers"]), max_size=2)
    ):
        target_config["text_config"][key] = draw(CONFIG_VALUES)
    (target / "config.json").write_text(json.dumps(target_config))
    damage = draw(
        st.sampled_from(
            [
                "none",
                "no-drafter-weights",
                "drafter-index-only",
                "loose-drafter-shards",
                "no-fc",
                "index-extra-tensor",
                "index-junk",
                "config-bytes",
                "target-as-drafter",
                "metadata",
            ]
        )
    )
    if damage == "no-drafter-weights":
        (drafter / "model.safetensors").unlink()
    elif damage == "drafter-index-only":
        (drafter / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"fc.weight": "x.st"}})
        )
    elif damage == "loose-drafter-shards":
        (drafter / "model.safetensors").rename(drafter / "model-00001-of-00001.safetensors")
    elif damage == "no-fc":
        write_shard(drafter / "model.safetensors", {"layers.0.w": 32})
    elif damage == "index-extra-tensor":
        index = json.loads((target / "model.safetensors.index.json").read_text())
        index["weight_map"]["not.in.any.shard"] = sorted(index["weight_map"].values())[0]
        (target / "model.safetensors.index.json").write_text(json.dumps(index))
    elif damage == "index-junk":
        index = {"weight_map": draw(CONFIG_VALUES)}
        (target / "model.safetensors.index.json").write_text(json.dumps(index))
    elif damage == "config-bytes":
        (drafter / "config.json").write_bytes(draw(st.binary(max_size=12)) + b"\xff")
    elif damage == "target-as-drafter":
        drafter = target
    elif damage == "metadata":
        write_shard(drafter / "model.safetensors", {"fc.weight": 32})
        raw = (drafter / "model.safetensors").read_bytes()
        (drafter / "model.safetensors").write_bytes(raw.replace(b'"format":"pt"', b'"format":7   '))
    return ["weights", "check", str(target), "--drafter", str(drafter), "--tp", str(draw(st.integers(1, 8)))]


@given(data=st.data())
def test_generated_weight_folders_end_in_a_clean_outcome(data, capsys) -> None:
    with tempfile.TemporaryDirectory() as folder:
        argv = data.draw(drafter_folders(Path(folder)))
        code, _, err = run_cli(cli.main, capsys, argv)
    assert_clean_outcome(code, err)


# ---------------------------------------------------------------- the probe's cases, by name


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "target"
    write_target(target)
    return target, write_drafter(tmp_path / "drafter", target_layer_ids=[1, 30])


def _check(capsys, target: Path, drafter: Path) -> tuple[int, str]:
    code, _, err = run_cli(cli.main, capsys, ["weights", "check", str(target), "--drafter", str(drafter)])
    assert_clean_outcome(code, err)
    return code, err[0] if err else ""


def _edit_config(folder: Path, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))


def test_metadata_that_is_not_a_string_map_is_refused(pair, capsys) -> None:
    target, drafter = pair
    raw = (drafter / "model.safetensors").read_bytes().replace(b'"format":"pt"', b'"format":[1] ')
    (drafter / "model.safetensors").write_bytes(raw)
    code, err = _check(capsys, target, drafter)
    assert code == 1 and "__metadata__ is not a map of strings" in err


def test_index_naming_a_tensor_its_shard_lacks(pair, capsys) -> None:
    target, drafter = pair
    index = json.loads((target / "model.safetensors.index.json").read_text())
    index["weight_map"]["ghost"] = "model-00001-of-00003.safetensors"
    (target / "model.safetensors.index.json").write_text(json.dumps(index))
    code, err = _check(capsys, target, drafter)
    assert code == 1 and "puts tensor 'ghost' in model-00001-of-00003.safetensors" in err


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("no-weights", "no safetensors weights in"),
        ("loose-shards", "is missing but"),
        ("no-fc", "has no fc.weight"),
    ],
)
def test_drafter_weights_are_always_read(pair, capsys, change: str, expected: str) -> None:
    target, drafter = pair
    shard = drafter / "model.safetensors"
    if change == "no-weights":
        shard.unlink()
    elif change == "loose-shards":
        shard.rename(drafter / "model-00001-of-00002.safetensors")
    else:
        write_shard(shard, {"norm.weight": 32})
    code, err = _check(capsys, target, drafter)
    assert code == 1 and expected in err, err


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"hidden_size": -64}, "has hidden_size -64: expected a positive int"),
        ({"hidden_size": "64"}, "has hidden_size '64': expected a positive int"),
        ({"num_attention_heads": True}, "has num_attention_heads True"),
        ({"mask_token_id": "7"}, "has mask_token_id '7'"),
        ({"block_size": -8}, "has block_size -8"),
        ({"dflash_config": {"target_layer_ids": [-1, 3]}}, "has target_layer_ids [-1, 3]"),
        ({"architectures": ["LlamaForCausalLMEagle3"]}, "an EAGLE drafter, not a DFlash drafter"),
        ({"architectures": None}, "not a DFlash drafter"),
        ({"dflash_config": "x"}, "has dflash_config 'x': expected an object"),
    ],
)
def test_drafter_facts_of_the_wrong_type_or_model(pair, capsys, fields: dict, expected: str) -> None:
    target, drafter = pair
    _edit_config(drafter, **fields)
    code, err = _check(capsys, target, drafter)
    assert code == 1 and expected in err, err


def test_target_mounted_as_the_drafter_is_named(pair, capsys) -> None:
    target, _ = pair
    code, err = _check(capsys, target, target)
    assert code == 1 and "a model of type 'kimi_k25' (a target model?), not a DFlash drafter" in err


def test_target_shape_fact_of_the_wrong_type(pair, capsys) -> None:
    target, drafter = pair
    config = json.loads((target / "config.json").read_text())
    config["text_config"]["hidden_size"] = "7168"
    (target / "config.json").write_text(json.dumps(config))
    code, err = _check(capsys, target, drafter)
    assert code == 1 and "has hidden_size '7168': expected a positive int" in err


def test_a_config_that_is_a_fifo_is_refused_without_hanging(pair, capsys) -> None:
    target, drafter = pair
    (drafter / "config.json").unlink()
    os.mkfifo(drafter / "config.json")
    outcome: list = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            run_cli(cli.main, capsys, ["weights", "check", str(target), "--drafter", str(drafter)])
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():  # unblock the reader so the test process can end, then fail
        with open(drafter / "config.json", "w"):
            pass
        pytest.fail("weights check hung on a FIFO config.json")
    code, _, err = outcome[0]
    assert_clean_outcome(code, err)
    assert code == 1 and "is a FIFO, not a regular file" in err[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root enters any folder: the permission check cannot fail")
def test_a_folder_without_the_execute_bit(pair, capsys) -> None:
    target, drafter = pair
    drafter.chmod(0o644)
    try:
        code, err = _check(capsys, target, drafter)
    finally:
        drafter.chmod(0o755)
    assert code == 1 and "cannot be entered" in err


@pytest.mark.parametrize("where", ["single", "indexed"])
def test_a_shard_that_is_a_fifo_is_named(tmp_path: Path, capsys, where: str) -> None:
    """Before issue 30 a FIFO shard was "missing" (indexed) or "shards without an index" (single)."""
    folder = tmp_path / "target"
    paths = write_target(folder, shards=2)
    if where == "single":
        (folder / "model.safetensors.index.json").unlink()
        for path in paths:
            path.unlink()
        os.mkfifo(folder / "model.safetensors")
        fifo = folder / "model.safetensors"
    else:
        paths[0].unlink()
        os.mkfifo(paths[0])
        fifo = paths[0]
    code, _, err = run_cli(cli.main, capsys, ["weights", "check", str(folder)])
    assert_clean_outcome(code, err)
    assert code == 1 and f"shard {fifo}: is a FIFO, not a regular file" in err[0], err


def test_a_config_with_a_bom_or_a_list_text_config(pair, capsys) -> None:
    """Hugging Face opens config.json as strict UTF-8: a BOM fails there, so it fails here (json.loads on
    bytes used to accept it); a text_config that is not an object is named."""
    target, drafter = pair
    (drafter / "config.json").write_bytes(b"\xef\xbb\xbf" + (drafter / "config.json").read_bytes())
    code, err = _check(capsys, target, drafter)
    assert code == 1 and "config.json: not JSON (Unexpected UTF-8 BOM" in err, err
    write_drafter(drafter, target_layer_ids=[1, 30])
    config = json.loads((target / "config.json").read_text())
    config["text_config"] = [1]
    (target / "config.json").write_text(json.dumps(config))
    code, err = _check(capsys, target, drafter)
    assert code == 1 and "has text_config [1]: expected an object" in err, err


def test_fc_is_checked_against_the_target_when_the_drafter_omits_hidden_size(pair, capsys) -> None:
    target, drafter = pair
    config = json.loads((target / "config.json").read_text())
    config["text_config"].update(hidden_size=64, vocab_size=1000)
    (target / "config.json").write_text(json.dumps(config))
    from tests.unit.test_weights_bad_input import _write_raw_shard

    _write_raw_shard(drafter / "model.safetensors", {"fc.weight": ("BF16", [64, 192])})
    code, err = _check(capsys, target, drafter)
    assert code == 1 and "fc.weight must be [64, 128], but the drafter's weights hold [64, 192]" in err, err
