"""Tiny synthetic model folders for the weights checks, written by hand (no safetensors dependency).

A safetensors file is an 8-byte little-endian header length, a JSON header mapping tensor names to
dtype, shape and [start, end) data offsets, then the data. Here the data is zeros (or random bytes
when a hash benchmark needs incompressible files). Used by unit tests, the docker tier and
benchmarks/weights_bench.py.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

KIMI_LAYERS = 61


def write_shard(path: Path, tensors: dict[str, int], random_data: bool = False) -> int:
    """Write a shard with one uint8 tensor per entry (name -> byte count); returns the file size."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, nbytes in tensors.items():
        header[name] = {"dtype": "U8", "shape": [nbytes], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        remaining = offset
        block = 1 << 20
        while remaining:
            n = min(block, remaining)
            handle.write(os.urandom(n) if random_data else bytes(n))
            remaining -= n
    return 8 + len(raw) + offset


def write_target(
    folder: Path,
    shards: int = 3,
    tensor_bytes: int = 64,
    model_type: str = "kimi_k25",
    layers: int = KIMI_LAYERS,
    random_data: bool = False,
) -> list[Path]:
    """A Kimi-K2.6-shaped folder: config (layers under text_config), index, `shards` shards."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": model_type,
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {"model_type": "kimi_k2", "num_hidden_layers": layers},
    }
    (folder / "config.json").write_text(json.dumps(config))
    weight_map: dict[str, str] = {}
    paths = []
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {f"layers.{i}.w{j}": tensor_bytes for j in range(2)}
        write_shard(folder / name, tensors, random_data=random_data)
        weight_map.update(dict.fromkeys(tensors, name))
        paths.append(folder / name)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    return paths


def write_drafter(folder: Path, block_size: int = 8, target_layer_ids: list[int] | None = None) -> Path:
    """A DFlash-drafter-shaped folder: config with dflash_config, one model.safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = target_layer_ids if target_layer_ids is not None else [1, 15, 30, 45, 58]
    config = {
        "model_type": "qwen3",
        "architectures": ["DFlashDraftModel"],
        "num_hidden_layers": len(ids),
        "block_size": block_size,
        "dflash_config": {"target_layer_ids": ids, "mask_token": "<|MASK|>"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    write_shard(folder / "model.safetensors", {"fc.weight": 32})
    return folder


def write_hf_cache(cache: Path, repo: str, snapshots: dict[str, Path], main: str) -> Path:
    """A Hugging Face hub cache repository for `repo` (ORG/NAME) as huggingface_hub lays it out:
    models--ORG--NAME/blobs/SHA256 (the data), snapshots/COMMIT/PATH (relative links into ../../blobs),
    refs/main (a commit). `snapshots` maps each commit to a plain folder whose files it holds."""
    import hashlib

    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    for commit, source in snapshots.items():
        for path in sorted(source.rglob("*")):
            if not path.is_file():
                continue
            data = path.read_bytes()
            blob = root / "blobs" / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            rel = path.relative_to(source)
            link = root / "snapshots" / commit / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            up = "../" * (len(rel.parts) + 1)
            os.symlink(f"{up}blobs/{blob.name}", link)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(main)
    return root
