"""The trained pair's two networks in plain torch, with the math and weight names SGLang 0.5.13.post1 serves.

- `Target`: a Qwen3 decoder (models/qwen3.py): pre-norm blocks, per-head RMSNorm on q and k before
  neox-style RoPE, grouped-query attention, SiLU-gated MLP, final norm, untied LM head. Saved as
  `Qwen3ForCausalLM` (config.json + safetensors), so SGLang loads it as any Qwen3 checkpoint.
- `Drafter`: a DFlash draft model (models/dflash.py): no embedding and no LM head (the target's are used,
  frozen); the target's hidden states at `target_layer_ids` are concatenated, projected (fc, then
  hidden_norm) and turned into each draft layer's keys/values ("KV injection": k_norm(k_proj(h)) with
  RoPE at the context position, v_proj(h); no input norm), and a block of B tokens [last token,
  mask x (B-1)] attends to that context and bidirectionally to itself. Saved as `DFlashDraftModel`.

One forward serves training and offline evaluation: many blocks of one sequence at once (each anchor's
block sees only the context before its anchor, within the drafter's window), which is exactly what the
server computes one block at a time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class TargetConfig:
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 32
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 8192
    bos_token_id: int = 0
    eos_token_id: int = 0

    def hf_config(self) -> dict:
        """config.json as SGLang's Qwen3 loader (and transformers) read it."""
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            **asdict(self),
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_cache": True,
        }


@dataclass(frozen=True)
class DrafterConfig:
    num_hidden_layers: int = 2
    block_size: int = 16  # trained block; served with 8 (--speculative-num-draft-tokens)
    target_layer_ids: tuple[int, ...] = (1, 8, 15, 22, 29)
    mask_token_id: int = 2
    window: int = 2048  # the served --speculative-draft-window-size
    extra: dict = field(default_factory=dict)

    def hf_config(self, target: TargetConfig) -> dict:
        """The drafter's config.json: the target's shapes plus DFlash's keys (models/dflash.py)."""
        base = target.hf_config()
        dflash = {
            "block_size": self.block_size,
            "target_layer_ids": list(self.target_layer_ids),
            "mask_token_id": self.mask_token_id,
            "num_target_layers": target.num_hidden_layers,
        }
        return {
            **base,
            "architectures": ["DFlashDraftModel"],
            "num_hidden_layers": self.num_hidden_layers,
            "block_size": self.block_size,
            "num_target_layers": target.num_hidden_layers,
            "dflash_config": dflash,
            **self.extra,
        }


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (halves rotated), x [..., seq, heads, dim], positions [..., seq]."""
    dim = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = positions.float().unsqueeze(-1) * inv  # [..., seq, dim/2]
    cos = angles.cos().unsqueeze(-2)
    sin = angles.sin().unsqueeze(-2)
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        self.theta = cfg.rope_theta
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def project_q(self, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q = self.q_norm(self.q_proj(h).unflatten(-1, (self.heads, self.head_dim)))
        return rope(q, pos, self.theta)

    def project_kv(self, h: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.k_norm(self.k_proj(h).unflatten(-1, (self.kv_heads, self.head_dim)))
        v = self.v_proj(h).unflatten(-1, (self.kv_heads, self.head_dim))
        return rope(k, pos, self.theta), v

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool
    ):
        """q [b, s, H, d], k/v [b, t, KV, d] -> [b, s, H*d]; mask bool [b or 1, s, t] (True = may attend)."""
        rep = self.heads // self.kv_heads
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None if mask is None else mask.unsqueeze(1), is_causal=causal and mask is None
        )
        return self.o_proj(out.transpose(1, 2).flatten(2))


class MLP(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def mlp_residual(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(self.post_attention_layernorm(h))


class Target(nn.Module):
    """Qwen3ForCausalLM's math; `forward` returns logits and the residual stream after each layer."""

    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.apply(_init)

    def forward(
        self, ids: torch.Tensor, capture: tuple[int, ...] = (), cache: KVCache | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids [b, s] -> (logits [b, s, V], [hidden after layer i for i in capture]).

        With `cache`, ids continue the cached sequences (all rows the same length) and the cache grows.
        """
        start = 0 if cache is None else cache.length
        pos = torch.arange(start, start + ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
        h = self.embed_tokens(ids)
        captured = []
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = a.project_q(x, pos)
            k, v = a.project_kv(x, pos)
            if cache is not None:
                k, v = cache.extend(i, k, v)
            h = h + a.attend(q, k, v, None, causal=cache is None or ids.shape[1] > 1)
            h = layer.mlp_residual(h)
            if i in capture:
                captured.append(h)
        if cache is not None:
            cache.length += ids.shape[1]
        return self.lm_head(self.norm(h)), captured

    def features(self, ids: torch.Tensor, layer_ids: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, concatenated hidden states at layer_ids) — SGLang captures the same residual stream."""
        logits, captured = self.forward(ids, capture=layer_ids)
        return logits, torch.cat(captured, dim=-1)


class KVCache:
    """Preallocated per-layer keys/values for batched greedy generation (every row the same length)."""

    def __init__(self, cfg: TargetConfig, batch: int, max_len: int, device: torch.device, dtype: torch.dtype):
        shape = (cfg.num_hidden_layers, batch, max_len, cfg.num_key_value_heads, cfg.head_dim)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[1]
        self.k[layer, :, self.length : end] = k
        self.v[layer, :, self.length : end] = v
        return self.k[layer, :, :end], self.v[layer, :, :end]


@torch.no_grad()
def greedy_generate(target: Target, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The target's greedy continuations [b, new_tokens] of equal-length prompts [b, p]."""
    dtype = torch.bfloat16 if prompts.is_cuda else torch.float32  # what autocast computes in on the GPU
    cache = KVCache(target.cfg, prompts.shape[0], prompts.shape[1] + new_tokens, prompts.device, dtype)
    logits, _ = target(prompts, cache=cache)
    out = [logits[:, -1].argmax(-1)]
    for _ in range(new_tokens - 1):
        logits, _ = target(out[-1].unsqueeze(1), cache=cache)
        out.append(logits[:, -1].argmax(-1))
    return torch.stack(out, dim=1)


def block_mask(anchors: torch.Tensor, context_len: int, block: int, window: int) -> torch.Tensor:
    """bool [n*block, context_len + n*block]: anchor a's block sees context [a - window, a) and itself."""
    n = anchors.shape[0]
    t = torch.arange(context_len, device=anchors.device)
    a = anchors.repeat_interleave(block).unsqueeze(1)
    ctx = (t < a) & (t >= a - window)
    owner = torch.arange(n, device=anchors.device).repeat_interleave(block)
    own_block = owner.unsqueeze(1) == owner.unsqueeze(0)
    return torch.cat([ctx, own_block], dim=1)


class Drafter(nn.Module):
    """DFlashDraftModel's math. The target's embedding and LM head are passed in, never trained here."""

    def __init__(self, target_cfg: TargetConfig, cfg: DrafterConfig):
        super().__init__()
        self.cfg, self.target_cfg = cfg, target_cfg
        hidden = target_cfg.hidden_size
        self.layers = nn.ModuleList(Layer(target_cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(hidden, target_cfg.rms_norm_eps)
        self.fc = nn.Linear(len(cfg.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = RMSNorm(hidden, target_cfg.rms_norm_eps)
        self.apply(_init)

    def forward(
        self,
        embed: nn.Embedding,
        features: torch.Tensor,
        ids: torch.Tensor,
        anchors: torch.Tensor,
        block: int,
    ) -> torch.Tensor:
        """Final-normed hidden states [b, n, block, H] of the blocks at `anchors` [n] (shared by every row).

        features [b, T, K*H]: the target's captured hidden states of ids [b, T] (context token t's
        features are those computed when the target read t). Block of anchor a: position 0 holds ids[a]
        (the last verified token), positions 1..block-1 the mask token; positions a..a+block-1.
        """
        b, length = ids.shape
        n = anchors.shape[0]
        ctx = self.hidden_norm(self.fc(features))  # [b, T, H]
        ctx_pos = torch.arange(length, device=ids.device).expand(b, -1)
        block_pos = (anchors.unsqueeze(1) + torch.arange(block, device=ids.device)).flatten().expand(b, -1)
        block_ids = torch.full((b, n, block), self.cfg.mask_token_id, device=ids.device, dtype=ids.dtype)
        block_ids[:, :, 0] = ids[:, anchors]
        h = embed(block_ids.flatten(1))  # [b, n*block, H]
        mask = block_mask(anchors, length, block, self.cfg.window).unsqueeze(0)
        for layer in self.layers:
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = a.project_q(x, block_pos)
            k_blk, v_blk = a.project_kv(x, block_pos)
            k_ctx, v_ctx = a.project_kv(ctx, ctx_pos)
            k = torch.cat([k_ctx, k_blk], dim=1)
            v = torch.cat([v_ctx, v_blk], dim=1)
            h = h + a.attend(q, k, v, mask, causal=False)
            h = layer.mlp_residual(h)
        return self.norm(h).view(b, n, block, -1)


def _init(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)


# ---------------------------------------------------------------------------------------------- files


def save_model(module: nn.Module, config: dict, folder: Path, prefix: str, max_shard_mb: int = 15) -> None:
    """config.json + bf16 safetensors shards (each under max_shard_mb, so a device call can carry them back).

    Weight names: `prefix` + the module's own names (the target under "model." with lm_head at the top,
    as Qwen3 checkpoints are; the drafter's bare, which models/dflash.py resolves either way).
    """
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, tensor in module.state_dict().items():
        key = name if name.startswith("lm_head.") else prefix + name
        tensors[key] = tensor.detach().to(torch.bfloat16).contiguous().cpu()
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key in sorted(tensors):
        nbytes = tensors[key].numel() * 2
        if shards[-1] and size + nbytes > max_shard_mb * 1024 * 1024:
            shards.append({})
            size = 0
        shards[-1][key] = tensors[key]
        size += nbytes
    index = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / name), metadata={"format": "pt"})
        index.update(dict.fromkeys(shard, name))
    total = sum(t.numel() * 2 for t in tensors.values())
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1, sort_keys=True) + "\n"
    )
    (folder / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")


def load_weights(module: nn.Module, folder: Path, prefix: str) -> None:
    """The inverse of save_model (strict: every parameter present, nothing unknown)."""
    from safetensors.torch import load_file

    state = {}
    for shard in sorted(folder.glob("*.safetensors")):
        for key, tensor in load_file(str(shard)).items():
            state[key if key.startswith("lm_head.") else key.removeprefix(prefix)] = tensor
    module.load_state_dict(state, strict=True)


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def flops_per_token(cfg: TargetConfig) -> float:
    """Forward FLOPs per token of the target's matmuls (2 x parameters touched), for throughput lines."""
    per_layer = cfg.hidden_size * cfg.head_dim * (2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads)
    per_layer += 3 * cfg.hidden_size * cfg.intermediate_size
    return 2.0 * (cfg.num_hidden_layers * per_layer + cfg.hidden_size * cfg.vocab_size)
