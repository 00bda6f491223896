"""The smoke test's tiny target in Kimi K2.6's architecture: DeepSeek-V3 MLA attention and a routed MoE.

Kimi K2.6 is served as `KimiK25ForConditionalGeneration`, whose language model is SGLang's
`DeepseekV3ForCausalLM` built from the checkpoint's text_config (sglang/srt/models/kimi_k25.py). The wrapper
adds only a vision tower, and serving it needs Moonshot's remote-code HF processor (its mm processor reads
`_processor.media_processor.media_proc_cfg`, built even with --skip-tokenizer-init), which a tiny local model
does not have. So the tiny target is the language model itself: `DeepseekV3ForCausalLM` with Kimi's attention
and MoE settings (MLA with q_lora, kv_lora_rank 512, rope 64, nope 128, v 128; sigmoid noaux_tc routing,
one group, one shared expert, the first layer dense, YaRN rope scaling) and fewer heads, experts and layers.

The weights follow ddtree.smoke.check's recipe: attention and MLP/MoE outputs are zero (zero o_proj, zero down
projections), so the last hidden state is the current token's embedding and the logits are the fixed table
Z[current, next] through the LM head. The DFlash drafter is ddtree.smoke.models' (same hidden size).
"""

from __future__ import annotations

from typing import Any

from ddtree.smoke.dims import EOS_ID, HIDDEN, TARGET_LAYERS, VOCAB

MLA_HEADS = 8  # Kimi K2.6: 64, i.e. 8 per rank at TP 8
Q_LORA_RANK = 128  # Kimi: 1536
KV_LORA_RANK = 512  # as Kimi: the latent KV row is 512 + 64 wide, what the triton MLA kernels see
QK_NOPE_HEAD_DIM = 128
QK_ROPE_HEAD_DIM = 64
V_HEAD_DIM = 128
DENSE_INTERMEDIATE = 2 * HIDDEN
MOE_INTERMEDIATE = 128
ROUTED_EXPERTS = 16  # Kimi: 384 (a power of two keeps the fused routing-gate kernels, as 384 has its own)
EXPERTS_PER_TOKEN = 8  # as Kimi
SHARED_EXPERTS = 1
FIRST_DENSE_LAYERS = 1
ROPE_SCALING = {  # Kimi K2.6's YaRN settings
    "type": "yarn",
    "factor": 64.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 1.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


def mla_config() -> dict[str, Any]:
    """config.json of the tiny DeepseekV3ForCausalLM target."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": HIDDEN,
        "intermediate_size": DENSE_INTERMEDIATE,
        "moe_intermediate_size": MOE_INTERMEDIATE,
        "num_hidden_layers": TARGET_LAYERS,
        "num_attention_heads": MLA_HEADS,
        "num_key_value_heads": MLA_HEADS,
        "q_lora_rank": Q_LORA_RANK,
        "kv_lora_rank": KV_LORA_RANK,
        "qk_nope_head_dim": QK_NOPE_HEAD_DIM,
        "qk_rope_head_dim": QK_ROPE_HEAD_DIM,
        "v_head_dim": V_HEAD_DIM,
        "n_routed_experts": ROUTED_EXPERTS,
        "n_shared_experts": SHARED_EXPERTS,
        "num_experts_per_tok": EXPERTS_PER_TOKEN,
        "first_k_dense_replace": FIRST_DENSE_LAYERS,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.827,
        "num_nextn_predict_layers": 0,
        "vocab_size": VOCAB,
        "max_position_embeddings": 262144,  # Kimi K2.6: 4096 x YaRN factor 64
        "rope_theta": 50000.0,
        "rope_scaling": dict(ROPE_SCALING),
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": EOS_ID,
        "hidden_act": "silu",
    }


def mla_shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint (DeepSeek-V3's HF names) and its shape, embeddings and head included."""
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (VOCAB, HIDDEN),
        "lm_head.weight": (VOCAB, HIDDEN),
        "model.norm.weight": (HIDDEN,),
    }
    q_head = QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM
    for i in range(TARGET_LAYERS):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (HIDDEN,),
            p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_a_proj.weight": (Q_LORA_RANK, HIDDEN),
            p + "self_attn.q_a_layernorm.weight": (Q_LORA_RANK,),
            p + "self_attn.q_b_proj.weight": (MLA_HEADS * q_head, Q_LORA_RANK),
            p + "self_attn.kv_a_proj_with_mqa.weight": (KV_LORA_RANK + QK_ROPE_HEAD_DIM, HIDDEN),
            p + "self_attn.kv_a_layernorm.weight": (KV_LORA_RANK,),
            p + "self_attn.kv_b_proj.weight": (MLA_HEADS * (QK_NOPE_HEAD_DIM + V_HEAD_DIM), KV_LORA_RANK),
            p + "self_attn.o_proj.weight": (HIDDEN, MLA_HEADS * V_HEAD_DIM),
        })  # fmt: skip
        if i < FIRST_DENSE_LAYERS:
            shapes.update(_mlp_shapes(p + "mlp.", DENSE_INTERMEDIATE))
            continue
        shapes[p + "mlp.gate.weight"] = (ROUTED_EXPERTS, HIDDEN)
        shapes[p + "mlp.gate.e_score_correction_bias"] = (ROUTED_EXPERTS,)
        for e in range(ROUTED_EXPERTS):
            shapes.update(_mlp_shapes(p + f"mlp.experts.{e}.", MOE_INTERMEDIATE))
        shapes.update(_mlp_shapes(p + "mlp.shared_experts.", MOE_INTERMEDIATE * SHARED_EXPERTS))
    return shapes


def _mlp_shapes(prefix: str, intermediate: int) -> dict[str, tuple[int, ...]]:
    return {
        prefix + "gate_proj.weight": (intermediate, HIDDEN),
        prefix + "up_proj.weight": (intermediate, HIDDEN),
        prefix + "down_proj.weight": (HIDDEN, intermediate),
    }


def mla_target_tensors(embed: Any, lm_head: Any) -> dict[str, Any]:
    """The target's tensors: the given embedding and LM head, norms at one, every other matrix zero."""
    import torch

    tensors: dict[str, Any] = {}
    for name, shape in mla_shapes().items():
        if name == "model.embed_tokens.weight":
            tensors[name] = embed
        elif name == "lm_head.weight":
            tensors[name] = lm_head
        elif name.endswith("norm.weight"):  # every RMSNorm: layernorms, q_a/kv_a norms, the final norm
            tensors[name] = torch.ones(shape)
        else:
            tensors[name] = torch.zeros(shape)
    return tensors
