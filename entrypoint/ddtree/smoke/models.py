"""The smoke test's tiny target and DFlash drafter, weights chosen on purpose, and their byte tokenizer.

The weights are described in ddtree.smoke.check's docstring: a logit table walking one random cycle f, and a
drafter that ranks f(b)..f^4(b) at every depth, so DDTree's tree holds tokens DFLASH's chain cannot.
Imports torch and safetensors only when writing.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddtree.smoke import models_mla
from ddtree.smoke.dims import (
    EOS_ID,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    MASK_ID,
    REAL_TOKENS,
    TARGET_LAYER_IDS,
    TARGET_LAYERS,
    VOCAB,
)

LOGIT_LADDER = (10.0, 8.0, 6.0, 4.0)  # Z for f, f^2, f^3, f^4; 0 elsewhere
BLOCKED_LOGIT = -30.0  # EOS and the mask token: never produced
DRAFTER_NORM = 0.25  # scales the drafter's logits down: a less confident drafter, a bushier tree


@dataclass(frozen=True)
class SmokeSettings:
    """What the DDTREE run uses (the target profile's values unless overridden) and the request mix."""

    block_size: int = 8
    budget: int = 8
    topk: int = 4
    window: int | None = 2048
    max_new_tokens: int = 48
    prompt_lengths: tuple[int, ...] = (6, 17, 40, 95, 300)
    sampling_requests: int = 240
    sampling_tokens: int = 12
    seed: int = 1234
    port: int = 0
    launch_timeout_s: float = 300.0
    extra_server_args: tuple[str, ...] = ()
    tp: int = 1  # tensor-parallel size of every server (a divisor of the target's attention heads)
    arch: str = "gqa"  # the target: "gqa" (Qwen3) or "mla" (Kimi K2.6's MLA + MoE: smoke.models_mla)

    @property
    def long_prompt(self) -> int:
        """A prompt longer than the drafter window, so the compact drafter cache slides."""
        return (self.window or 512) + 64


ARCHES = ("gqa", "mla")


def attention_heads(arch: str) -> int:
    """The target's attention heads (tensor parallelism must divide them)."""
    if arch == "mla":
        return models_mla.MLA_HEADS
    return HEADS


# SGLang disables piecewise CUDA graphs (a torch.compile'd prefill) for multimodal classes such as Kimi
# K2.6's KimiK25ForConditionalGeneration, but builds them for a bare Qwen3 or DeepseekV3ForCausalLM
# (server_args.py, _handle_piecewise_cuda_graph): this flag keeps every tiny target on the real one's path,
# and spares each server start the compile of 58 prefill sizes (seen in the H200 servers' logs, 2026-12-01).
KIMI_PATH_SERVER_ARGS = ("--disable-piecewise-cuda-graph",)


def arch_server_args(arch: str) -> tuple[str, ...]:
    """SGLang flags every tiny target's server takes, whatever its architecture (KIMI_PATH_SERVER_ARGS)."""
    if arch not in ("gqa", "mla"):
        raise ValueError(f"smoke arch {arch!r}: use gqa or mla")
    return KIMI_PATH_SERVER_ARGS


def successor_cycle(seed: int) -> list[int]:
    """f as a list: one random cycle through the real tokens 0..253 (f[t] is the token after t)."""
    order = list(range(REAL_TOKENS))
    random.Random(seed).shuffle(order)
    f = [0] * REAL_TOKENS
    for i, tok in enumerate(order):
        f[tok] = order[(i + 1) % REAL_TOKENS]
    return f


def logit_table(f: list[int]) -> list[list[float]]:
    """Z[current][next] for the real tokens (rows) over the whole vocabulary (columns)."""
    table = []
    for t in range(REAL_TOKENS):
        row = [0.0] * VOCAB
        row[EOS_ID] = row[MASK_ID] = BLOCKED_LOGIT
        nxt = t
        for value in LOGIT_LADDER:
            nxt = f[nxt]
            row[nxt] = value
        table.append(row)
    return table


def target_class_probabilities(temperature: float = 1.0) -> list[float]:
    """P(next is f, f^2, f^3, f^4, anything else) under the target at this temperature."""
    weights = [math.exp(v / temperature) for v in LOGIT_LADDER]
    others = (REAL_TOKENS - len(LOGIT_LADDER)) * 1.0 + 2 * math.exp(BLOCKED_LOGIT / temperature)
    total = sum(weights) + others
    return [w / total for w in weights] + [(REAL_TOKENS - len(LOGIT_LADDER)) / total]


def _config(**extra: Any) -> dict[str, Any]:
    base = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": TARGET_LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": VOCAB,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": EOS_ID,
        "hidden_act": "silu",
    }
    base.update(extra)
    return base


def _qwen3_target_tensors(embed: Any, lm_head: Any) -> dict[str, Any]:
    """The Qwen3-shaped target's tensors: the given embedding and LM head, attention and MLP matrices zero."""
    import torch

    zeros_sq = torch.zeros(HIDDEN, HIDDEN)
    ones = torch.ones(HIDDEN)
    target: dict[str, Any] = {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": lm_head,
        "model.norm.weight": ones,
    }
    for i in range(TARGET_LAYERS):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            target[p + f"self_attn.{name}.weight"] = zeros_sq
        target[p + "self_attn.q_norm.weight"] = torch.ones(HEAD_DIM)
        target[p + "self_attn.k_norm.weight"] = torch.ones(HEAD_DIM)
        target[p + "mlp.gate_proj.weight"] = torch.zeros(2 * HIDDEN, HIDDEN)
        target[p + "mlp.up_proj.weight"] = torch.zeros(2 * HIDDEN, HIDDEN)
        target[p + "mlp.down_proj.weight"] = torch.zeros(HIDDEN, 2 * HIDDEN)
        target[p + "input_layernorm.weight"] = ones
        target[p + "post_attention_layernorm.weight"] = ones
    return target


def write_models(folder: Path, settings: SmokeSettings) -> tuple[Path, Path]:
    """Write target/ and drafter/ (config.json + model.safetensors) under folder; return both paths."""
    import torch
    from safetensors.torch import save_file

    target_dir, drafter_dir = folder / "target", folder / "drafter"
    target_dir.mkdir(parents=True, exist_ok=True)
    drafter_dir.mkdir(parents=True, exist_ok=True)
    dtype = torch.bfloat16
    scale = math.sqrt(HIDDEN)  # embeddings scale * unit vector: RMSNorm leaves them unchanged
    embed = torch.zeros(VOCAB, HIDDEN)
    embed[:REAL_TOKENS, :REAL_TOKENS] = torch.eye(REAL_TOKENS) * scale  # mask token (255): zero vector
    z = torch.tensor(logit_table(successor_cycle(settings.seed)))  # [254, V]
    lm_head = torch.zeros(VOCAB, HIDDEN)
    lm_head[:, :REAL_TOKENS] = z.T / scale  # logits[s] = lm_head[s] . (scale * e_t) = Z[t, s]
    if settings.arch not in ARCHES:
        raise ValueError(f"smoke arch {settings.arch!r}: use one of {', '.join(ARCHES)}")
    if settings.arch == "mla":
        target = models_mla.mla_target_tensors(embed, lm_head)
        target_config = models_mla.mla_config()
    else:
        target = _qwen3_target_tensors(embed, lm_head)
        target_config = _config()
    save_file({k: v.to(dtype).contiguous() for k, v in target.items()}, str(target_dir / "model.safetensors"))
    (target_dir / "config.json").write_text(json.dumps(target_config, indent=1))

    zeros_sq = torch.zeros(HIDDEN, HIDDEN)
    ones = torch.ones(HIDDEN)
    drafter = {
        # zero queries and keys: uniform attention; values and output projection pass the token through
        "layers.0.self_attn.q_proj.weight": zeros_sq,
        "layers.0.self_attn.k_proj.weight": zeros_sq,
        "layers.0.self_attn.v_proj.weight": torch.eye(HIDDEN),
        "layers.0.self_attn.o_proj.weight": torch.eye(HIDDEN),
        "layers.0.self_attn.q_norm.weight": torch.ones(HEAD_DIM),
        "layers.0.self_attn.k_norm.weight": torch.ones(HEAD_DIM),
        "layers.0.mlp.gate_proj.weight": torch.zeros(2 * HIDDEN, HIDDEN),
        "layers.0.mlp.up_proj.weight": torch.zeros(2 * HIDDEN, HIDDEN),
        "layers.0.mlp.down_proj.weight": torch.zeros(HIDDEN, 2 * HIDDEN),
        "layers.0.input_layernorm.weight": ones,
        "layers.0.post_attention_layernorm.weight": ones,
        # context features contribute nothing (zero keys and values for the whole context)
        "fc.weight": torch.zeros(HIDDEN, len(TARGET_LAYER_IDS) * HIDDEN),
        "hidden_norm.weight": ones,
        "norm.weight": ones * DRAFTER_NORM,
    }
    save_file(
        {k: v.to(dtype).contiguous() for k, v in drafter.items()}, str(drafter_dir / "model.safetensors")
    )
    dflash = {
        "block_size": settings.block_size,
        "target_layer_ids": list(TARGET_LAYER_IDS),
        "mask_token_id": MASK_ID,
        "num_target_layers": TARGET_LAYERS,
    }
    drafter_config = _config(
        architectures=["DFlashDraftModel"],
        # the target's context: SGLang refuses a drafter whose derived context is shorter (the MLA target
        # says Kimi's 262144; seen on the H200, 2026-12-01)
        max_position_embeddings=target_config["max_position_embeddings"],
        num_hidden_layers=1,
        block_size=settings.block_size,
        num_target_layers=TARGET_LAYERS,
        dflash_config=dflash,
    )
    (drafter_dir / "config.json").write_text(json.dumps(drafter_config, indent=1))
    return target_dir, drafter_dir


def _byte_symbols() -> list[str]:
    """GPT-2's byte-level alphabet: byte b -> a printable character (what tokenizers' ByteLevel expects)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    extra = iter(range(0x100, 0x200))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def write_tokenizer(folder: Path) -> None:
    """A byte-level tokenizer for the tiny vocabulary (token id = UTF-8 byte), beside a model's config.

    The smoke test needs none (it sends token ids to servers started with --skip-tokenizer-init); tools
    that send text (`ddtree selfcheck --live`) or build prompts of an exact length (`ddtree bench`) need
    one. Bytes 0xFE and 0xFF never occur in UTF-8, so their ids are free for EOS (254) and the drafter's
    mask token (255, named "<|MASK|>", DFlash's default name, so SGLang's check that the tokenizer's id
    for it equals dflash_config.mask_token_id agrees). Plain JSON: writing it needs only the stdlib.
    """
    symbols = _byte_symbols()
    special = {EOS_ID: "<|endoftext|>", MASK_ID: "<|MASK|>"}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, text in special.items()
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {symbols[b]: b for b in range(REAL_TOKENS)},
            "merges": [],
        },
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": special[EOS_ID],
        "model_max_length": 8192,  # set: without it /v1/tokenize fails on 0.5.13.post1 (see bench.prompts)
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
