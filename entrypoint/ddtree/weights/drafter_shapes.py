"""Shape facts a DFlash drafter must share with its target, checked from the configs and one header.

SGLang's DFlash drafter (models/dflash.py in 0.5.13.post1) has no embedding or LM head of its own: it
takes the target's embeddings as input and drafts through the target's vocab-parallel LM head, and its
`fc` projects the concatenated hidden states of len(target_layer_ids) target layers to its own width.
So, after 600 GB have loaded, SGLang fails (or drafts garbage) when:

    hidden_size differs from the target's          embeddings and LM head do not fit the drafter
    vocab_size differs from the target's           a drafter trained on another tokenizer
    mask_token_id >= the target's vocab size       "outside the target vocab size" (dflash_worker)
    fc.weight is not [hidden, K x hidden]          "target_hidden feature dim mismatch"
    attention heads not divisible by TP            DFlashAttention's asserts
    KV heads neither divide nor are divided by TP
    hidden_size not divisible by the heads (no head_dim given)

Each is checked only when both sides state the fact; a config that leaves one out is SGLang's default.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ddtree.errors import UserError


def _fail(config_path: Path, problem: str) -> UserError:
    return UserError(f"drafter config {config_path} {problem}")


def _positive(config: dict[str, Any], key: str, config_path: Path) -> int | None:
    """A shape fact: absent (None, SGLang's default) or a positive int; anything else is an error, since
    SGLang would build layers of that size (a string, a bool or a negative number is a broken config)."""
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _fail(config_path, f"has {key} {value!r}: expected a positive int; download the config again")
    return value


def check_shapes(
    config: dict[str, Any],
    config_path: Path,
    target_hidden: int | None,
    target_vocab: int | None,
    layer_ids: tuple[int, ...] | None,
    mask_token_id: Any,
    tp: int | None,
    shapes: Iterable[dict[str, list[int]]] = (),
) -> None:
    """Raise a one-line UserError at the first fact SGLang would fail on; see the module docstring.
    `shapes` are the shards' tensor name -> shape maps."""
    hidden = _positive(config, "hidden_size", config_path)
    vocab = _positive(config, "vocab_size", config_path)
    heads = _positive(config, "num_attention_heads", config_path)
    kv_heads = _positive(config, "num_key_value_heads", config_path) or heads
    head_dim = _positive(config, "head_dim", config_path)
    if mask_token_id is not None and (
        not isinstance(mask_token_id, int) or isinstance(mask_token_id, bool) or mask_token_id < 0
    ):
        raise _fail(config_path, f"has mask_token_id {mask_token_id!r}: expected a token id (an int >= 0)")
    if hidden is not None and target_hidden is not None and hidden != target_hidden:
        raise _fail(
            config_path,
            f"has hidden_size {hidden} but the target's is {target_hidden}: the drafter uses the target's "
            "embeddings and LM head, so it belongs to another model; mount the drafter trained for this "
            "target",
        )
    if vocab is not None and target_vocab is not None and vocab != target_vocab:
        raise _fail(
            config_path,
            f"has vocab_size {vocab} but the target's is {target_vocab}: a drafter for another tokenizer; "
            "mount the drafter trained for this target",
        )
    if isinstance(mask_token_id, int) and target_vocab is not None and mask_token_id >= target_vocab:
        raise _fail(
            config_path,
            f"has mask_token_id {mask_token_id}, outside the target's vocabulary of {target_vocab}: "
            "SGLang refuses it after loading; use the drafter trained for this target",
        )
    if heads and hidden is not None and head_dim is None and hidden % heads:
        raise _fail(
            config_path,
            f"has hidden_size {hidden} not divisible by num_attention_heads {heads} and no head_dim",
        )
    if heads and tp and heads % tp:
        raise _fail(
            config_path,
            f"has {heads} attention heads, not divisible by TP {tp}: SGLang's DFlash attention asserts "
            "on it; use a TP that divides both models' heads",
        )
    if kv_heads and tp and (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
        raise _fail(
            config_path,
            f"has {kv_heads} KV heads, which neither divide nor are divided by TP {tp}: SGLang's DFlash "
            "attention asserts on it",
        )
    width = hidden if hidden is not None else target_hidden  # the drafter's width is the target's
    if width is None or not layer_ids:
        return
    want = [width, len(layer_ids) * width]
    for held in shapes:
        shape = held.get("fc.weight")
        if shape is not None and shape != want:
            raise _fail(
                config_path,
                f"captures {len(layer_ids)} target layers, so fc.weight must be {want}, but the drafter's "
                f"weights hold {shape}: config and weights belong to different drafters",
            )
