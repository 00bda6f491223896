"""Weight folder checks: catch a bad mount in a second instead of after a 600 GB load fails.

The fast check reads only small files: config.json, the safetensors index and each shard's header
(8-byte little-endian length, then that many bytes of JSON). A shard is whole when its size equals
8 + header length + the largest end offset of its tensors, so a truncated copy is found without reading
the data. `--full-hash` reads everything (hashes.py); `ddtree weights` is cmd.py.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.fsutil import require_regular_file
from ddtree.jsontext import JsonProblem, parse
from ddtree.weights import drafter_shapes
from ddtree.weights.layout import dangling_link_error, link_note
from ddtree.weights.safetensors_layout import check_layout

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
# A header longer than this is not a real safetensors header (the format caps it at 100 MB).
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class ShardInfo:
    """One checked shard: where it is, how many tensors, how many bytes."""

    path: Path
    tensors: int
    size: int
    # tensor name -> shape, as the header states them (the index and the drafter's fc are checked on them)
    shapes: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ModelSummary:
    """What the fast check learned about a weights folder."""

    path: Path
    model_type: str
    num_hidden_layers: int | None
    shards: tuple[ShardInfo, ...] = field(default=())
    # The shape facts a DFlash drafter must share (it borrows the target's embedding and LM head).
    hidden_size: int | None = None
    vocab_size: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(shard.size for shard in self.shards)


@dataclass(frozen=True)
class DrafterSummary:
    """What the fast check learned about the DFlash drafter."""

    path: Path
    block_size: int | None
    target_layer_ids: tuple[int, ...] | None
    shards: tuple[ShardInfo, ...] = field(default=())


def _mount_hint(role: str, env_var: str) -> str:
    return f"mount the {role} read-only there (compose: set {env_var}; docker run: -v HOST_DIR:PATH:ro)"


def require_folder(path: Path, role: str, env_var: str) -> None:
    """The folder exists, is a folder, and is not empty (an empty one is a mount of the wrong path)."""
    if not path.exists():
        raise UserError(f"{role} folder {path} does not exist: {_mount_hint(role, env_var)}")
    if not path.is_dir():
        raise UserError(f"{role} path {path} is not a folder: {_mount_hint(role, env_var)}")
    try:
        empty = next(path.iterdir(), None) is None
    except PermissionError as exc:
        raise UserError(f"{role} folder {path} cannot be read ({exc.strerror}): fix its permissions") from exc
    if not os.access(path, os.R_OK | os.X_OK):
        raise UserError(
            f"{role} folder {path} cannot be entered (no read and execute permission for this user): "
            "chmod a+rx it on the host"
        )
    if empty:
        raise UserError(
            f"{role} folder {path} is empty: the mount points at the wrong host folder; "
            f"{_mount_hint(role, env_var)}"
        )


def read_json(path: Path, what: str) -> dict[str, Any]:
    """Parse a JSON object file; every problem is one line naming the file (and its link target)."""
    dangling = dangling_link_error(path, what)
    if dangling is not None:
        raise dangling
    require_regular_file(path, what)
    try:
        data = parse(path.read_bytes())
    except FileNotFoundError as exc:
        raise UserError(
            f"{what} {path} is missing: the folder is not a complete Hugging Face checkout"
        ) from exc
    except OSError as exc:
        raise UserError(
            f"{what} {path}{link_note(path)} cannot be read ({exc.strerror}): fix its permissions"
        ) from exc
    except JsonProblem as exc:
        raise UserError(f"{what} {path}{link_note(path)}: {exc}; download it again") from exc
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} is not a JSON object: download it again")
    return data


def config_int(config: dict[str, Any], key: str) -> int | None:
    """An integer config field, top level or nested under text_config (Kimi K2.6 nests its text model)."""
    for holder in (config, config.get("text_config")):
        if isinstance(holder, dict):
            value = holder.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return int(value)
    return None


def num_hidden_layers(config: dict[str, Any]) -> int | None:
    """The layer count, top level or nested under text_config (Kimi K2.6 nests it)."""
    return config_int(config, "num_hidden_layers")


def read_header(path: Path) -> tuple[int, dict[str, Any]]:
    """Return (header length, header JSON) of a safetensors file, reading only the header."""
    dangling = dangling_link_error(path, "shard")
    if dangling is not None:
        raise dangling
    label = f"{path}{link_note(path)}"
    require_regular_file(path, "shard")
    try:
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise UserError(
                    f"shard {label} is truncated: {len(prefix)} bytes, shorter than the 8-byte header "
                    "length; copy it again"
                )
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len == 0 or header_len > MAX_HEADER_BYTES:
                raise UserError(
                    f"shard {label} has a corrupt header (length {header_len}); not a safetensors file, "
                    "copy it again"
                )
            raw = handle.read(header_len)
    except OSError as exc:
        raise UserError(
            f"shard {label} cannot be read ({exc.strerror}): fix the mount or permissions"
        ) from exc
    if len(raw) < header_len:
        raise UserError(
            f"shard {label} is truncated inside its header ({len(raw)} of {header_len} bytes); copy it again"
        )
    if not raw.lstrip(b" ").startswith(b"{"):
        raise UserError(
            f"shard {label} has a corrupt header (not JSON: it does not start with '{{'); copy it again"
        )
    try:
        header = parse(raw)
    except JsonProblem as exc:
        raise UserError(f"shard {label} has a corrupt header ({exc}); copy it again") from exc
    if not isinstance(header, dict):
        raise UserError(f"shard {label} has a corrupt header (not a JSON object); copy it again")
    return header_len, header


def check_shard(path: Path) -> ShardInfo:
    """Header parses, its tensors add up (safetensors_layout), and the file is exactly as long as it says."""
    header_len, header = read_header(path)
    label = f"{path}{link_note(path)}"
    tensors, data_end = check_layout(header, label)
    expected = 8 + header_len + data_end
    actual = path.stat().st_size
    if actual < expected:
        raise UserError(
            f"shard {label} is truncated: {actual} bytes, its header needs {expected}; copy it again "
            "(an interrupted download or a full disk)"
        )
    if actual > expected:
        raise UserError(
            f"shard {label} has {actual - expected} bytes after its last tensor ({actual} != {expected}); "
            "the file is corrupt, copy it again"
        )
    shapes = {name: entry["shape"] for name, entry in header.items() if name != "__metadata__"}
    return ShardInfo(path=path, tensors=tensors, size=actual, shapes=shapes)


def shard_paths(folder: Path) -> list[Path]:
    """The shards the index lists (sorted, unique), or the single model.safetensors.

    Raises when the index names a file that is not there: the whole list of missing names is too long
    for one line, so the first one and the count are given.
    """
    index_path = folder / INDEX_NAME
    if index_path.exists():
        index = read_json(index_path, "safetensors index")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise UserError(f"safetensors index {index_path} has no weight_map: download it again")
        bad = [
            repr(n)
            for n in weight_map.values()
            if not isinstance(n, str) or not n or n.startswith("/") or ".." in Path(n).parts
        ]
        if bad:
            raise UserError(
                f"safetensors index {index_path} names an unexpected shard {bad[0]}: download it again"
            )
        paths = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [p for p in paths if not p.is_file()]
        for path in missing:
            dangling = dangling_link_error(path, "shard")
            if dangling is not None:
                raise dangling
            require_regular_file(path, "shard")  # there, but a FIFO, a device or a folder
        if missing:
            raise UserError(
                f"shard {missing[0]} is missing ({len(missing)} of {len(paths)} shards listed in "
                f"{INDEX_NAME} are absent): finish the download or fix the mount"
            )
        return paths
    single = folder / SINGLE_NAME
    if single.exists():
        require_regular_file(single, "shard")
        return [single]
    loose = sorted(folder.glob("*.safetensors"))
    if loose:
        raise UserError(
            f"{index_path} is missing but {folder} holds {len(loose)} shards: download the index too"
        )
    raise UserError(
        f"no safetensors weights in {folder} (neither {INDEX_NAME} nor {SINGLE_NAME}): wrong folder?"
    )


def check_shards(paths: Iterable[Path]) -> tuple[ShardInfo, ...]:
    """Fast check of every shard; headers are small, so one thread is plenty. With an index beside
    them, every tensor it names must be in the shard it names (a loader looks it up there)."""
    shards = tuple(check_shard(p) for p in paths)
    if shards:
        check_index_against(shards[0].path.parent, shards)
    return shards


def check_index_against(folder: Path, shards: Iterable[ShardInfo]) -> None:
    """Each weight_map entry names a tensor its shard's header holds; one line for the first that does not."""
    index_path = folder / INDEX_NAME
    if not index_path.exists():
        return
    weight_map = read_json(index_path, "safetensors index").get("weight_map") or {}
    held = {shard.path.name: shard.shapes for shard in shards}
    for tensor, shard_name in weight_map.items():
        if shard_name in held and tensor not in held[shard_name]:
            raise UserError(
                f"safetensors index {index_path} puts tensor {tensor!r} in {shard_name}, whose header does "
                "not hold it: index and shards come from different downloads; download both again"
            )


def read_target_config(
    folder: Path, expected_model_type: str | None, env_var: str = "MODEL_DIR"
) -> ModelSummary:
    """The target's config facts (model type, layers, the drafter's shape facts), no shard read: what
    the drafter check needs, without reading every shard header again."""
    require_folder(folder, "target weights", env_var)
    config = read_json(folder / "config.json", "target config")
    model_type = config.get("model_type")
    if expected_model_type and model_type != expected_model_type:
        raise UserError(
            f"target config {folder / 'config.json'} has model_type {model_type!r}, the target expects "
            f"{expected_model_type!r}: mount the right model (Kimi K2.6 is kimi_k25)"
        )
    if config.get("text_config") is not None and not isinstance(config["text_config"], dict):
        raise UserError(
            f"target config {folder / 'config.json'} has text_config {config['text_config']!r}: expected an "
            "object; download the config again"
        )
    facts = {key: shape_fact(config, key, folder / "config.json") for key in SHAPE_FACTS}
    return ModelSummary(path=folder, model_type=str(model_type), **facts)


# The target's facts the drafter check compares: each absent, or a positive int.
SHAPE_FACTS = ("num_hidden_layers", "hidden_size", "vocab_size")


def shape_fact(config: dict[str, Any], key: str, config_path: Path) -> int | None:
    """A size from the target config (top level or text_config); present but not a positive int is an
    error, not a silently skipped check."""
    for holder in (config, config.get("text_config")):
        if isinstance(holder, dict) and holder.get(key) is not None:
            value = holder[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(
                    f"target config {config_path} has {key} {value!r}: expected a positive int; "
                    "download the config again"
                )
            return value
    return None


def check_target(folder: Path, expected_model_type: str | None, env_var: str = "MODEL_DIR") -> ModelSummary:
    """The target model folder: config, model type, index, every shard header and size."""
    summary = read_target_config(folder, expected_model_type, env_var)
    return replace(summary, shards=check_shards(shard_paths(folder)))


def _dflash_field(config: dict[str, Any], key: str) -> Any:
    """A DFlash field from dflash_config, falling back to the top level (as SGLang's dflash_utils does)."""
    nested = config.get("dflash_config")
    if isinstance(nested, dict) and nested.get(key) is not None:
        return nested[key]
    return config.get(key)


# What a folder mounted as the drafter is, by its config's architecture name (SGLang picks the model class
# by that name): DFlash's is DFlashDraftModel; an EAGLE-3 drafter's names Eagle3; anything else is a model.
DFLASH_ARCHITECTURE = "DFlashDraftModel"


def recognise_dflash(config: dict[str, Any], config_path: Path) -> None:
    """The drafter config names the DFlash architecture; otherwise say what the folder holds instead."""
    names = config.get("architectures")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise UserError(
            f"drafter config {config_path} has architectures {names!r}, not [{DFLASH_ARCHITECTURE!r}]: "
            "not a DFlash drafter; mount the DFlash drafter (z-lab/Kimi-K2.6-DFlash)"
        )
    if any("dflash" in n.lower() for n in names):
        return
    if any("eagle" in n.lower() for n in names):
        what = "an EAGLE drafter"
    else:
        what = f"a model of type {config.get('model_type')!r} (a target model?)"
    raise UserError(
        f"drafter config {config_path} has architectures {names}: {what}, not a DFlash drafter "
        f"({DFLASH_ARCHITECTURE}); mount the DFlash drafter (z-lab/Kimi-K2.6-DFlash) as the drafter"
    )


def check_drafter(
    folder: Path,
    block_size: int | None,
    target_layers: int | None,
    env_var: str = "DRAFTER_DIR",
    target: ModelSummary | None = None,
    tp: int | None = None,
) -> DrafterSummary:
    """The DFlash drafter: config, block size against the configured one, captured layers in range.

    SGLang itself only warns when the configured block size differs from the drafter's; a block larger
    than the drafter was trained for asks it for positions it never learnt, so that is an error here.
    A smaller block is allowed (the original deployment may have run that way) and reported.
    With the target's summary and the TP size, the shape facts SGLang fails on after loading are checked
    too (drafter_shapes.py).
    """
    require_folder(folder, "drafter", env_var)
    config_path = folder / "config.json"
    config = read_json(config_path, "drafter config")
    recognise_dflash(config, config_path)
    if config.get("dflash_config") is not None and not isinstance(config["dflash_config"], dict):
        raise UserError(
            f"drafter config {config_path} has dflash_config {config['dflash_config']!r}: expected an object "
            "(block_size, target_layer_ids, mask_token_id); download the config again"
        )
    raw_block = _dflash_field(config, "block_size")
    model_block: int | None = None
    if raw_block is not None:
        if not isinstance(raw_block, int) or isinstance(raw_block, bool) or raw_block < 1:
            raise UserError(
                f"drafter config {config_path} has block_size {raw_block!r}: expected a positive int"
            )
        model_block = raw_block
    if block_size is not None and model_block is not None and block_size > model_block:
        raise UserError(
            f"drafter config {config_path} has block_size {model_block} but the target profile sets "
            f"num-draft-tokens/block size {block_size}: use a drafter trained for {block_size} or lower "
            "--speculative-num-draft-tokens"
        )
    raw_ids = _dflash_field(config, "target_layer_ids")
    layer_ids: tuple[int, ...] | None = None
    if raw_ids is not None:
        if (
            not isinstance(raw_ids, list)
            or not raw_ids
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw_ids)
        ):
            raise UserError(
                f"drafter config {config_path} has target_layer_ids {raw_ids!r}: expected a list of "
                "layer numbers (ints >= 0)"
            )
        layer_ids = tuple(raw_ids)
        if target_layers is not None:
            outside = [x for x in layer_ids if x < 0 or x >= target_layers]
            if outside:
                raise UserError(
                    f"drafter config {config_path} captures target layer {outside[0]} but the target has "
                    f"{target_layers} layers (0..{target_layers - 1}): the drafter belongs to another model"
                )
    shards = check_shards(shard_paths(folder))
    if not any("fc.weight" in shard.shapes for shard in shards):
        raise UserError(
            f"drafter {folder} has no fc.weight in its weights: a DFlash drafter projects the target's "
            "hidden states through fc; the weights belong to another model, mount the DFlash drafter"
        )
    drafter_shapes.check_shapes(
        config,
        config_path,
        target_hidden=target.hidden_size if target else None,
        target_vocab=target.vocab_size if target else None,
        layer_ids=layer_ids,
        mask_token_id=_dflash_field(config, "mask_token_id"),
        tp=tp,
        shapes=[shard.shapes for shard in shards],
    )
    return DrafterSummary(path=folder, block_size=model_block, target_layer_ids=layer_ids, shards=shards)
