"""Run inside the CPU SGLang environment (tests/unit/test_smoke_mla.py): the patched sglang 0.5.13.post1 reads
the smoke's tiny MLA + MoE target (ddtree.smoke.models_mla) as the server would, and prints one JSON object
of facts: how ModelConfig and ServerArgs read it, DeepseekV3ForCausalLM built from it with the checkpoint
loaded through the model's own load_weights, the DFlash aux-hidden capture hook, and Kimi K2.6's class
(KimiK25ForConditionalGeneration) built around the same text config.

Stand-ins, where the real part needs a GPU:
- vllm._custom_ops is a placeholder module: on a host without CUDA, SGLang's rotary embedding constructor
  imports its fallback kernel from there (never called here: no forward pass runs);
- the model runner handed to ddtree_worker.target_sliding_window is a namespace holding the real model.

usage: python mla_smoke_probe.py TARGET_DIR DRAFTER_DIR
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import traceback
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ddtree_sglang_probe import _init_single_process_groups, _server_args


def _stub_vllm_rotary() -> None:
    ops = types.ModuleType("vllm._custom_ops")

    def rotary_embedding(*_args, **_kwargs):
        raise RuntimeError("vllm._custom_ops is a CPU test stand-in")

    ops.rotary_embedding = rotary_embedding
    vllm = types.ModuleType("vllm")
    vllm._custom_ops = ops
    sys.modules.setdefault("vllm", vllm)
    sys.modules.setdefault("vllm._custom_ops", ops)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _smoke_argv(target: str, drafter: str, mode: str) -> list[str]:
    """The smoke server's flags for one mode (ddtree.smoke.server), on the CPU device."""
    from ddtree.smoke.models import SmokeSettings, arch_server_args
    from ddtree.smoke.server import mode_args

    settings = SmokeSettings(arch="mla")
    return [
        "--model-path", target, "--skip-tokenizer-init", "--device", "cpu", "--attention-backend", "triton",
        "--cuda-graph-max-bs", "32", "--max-running-requests", "32",
        *mode_args(mode, Path(drafter), settings), *arch_server_args("mla"),
    ]  # fmt: skip


def _args_facts(target: str, drafter: str) -> dict:
    out = {}
    for mode in ("baseline", "dflash", "ddtree"):
        a = _server_args(_smoke_argv(target, drafter, mode))
        out[mode] = {
            "attention_backend": a.attention_backend,
            "page_size": a.page_size,
            "algorithm": a.speculative_algorithm,
            "num_draft_tokens": a.speculative_num_draft_tokens,
            "window": a.speculative_draft_window_size,
            "piecewise_disabled": a.disable_piecewise_cuda_graph,
            "cuda_graph_disabled": a.disable_cuda_graph,
        }
    bare = [f for f in _smoke_argv(target, drafter, "ddtree") if f != "--disable-piecewise-cuda-graph"]
    out["ddtree_without_arch_flags"] = {"piecewise_disabled": _server_args(bare).disable_piecewise_cuda_graph}
    return out


def _model_config_facts(target: str) -> dict:
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig

    mc = ModelConfig(model_path=target)
    return {
        "architectures": list(mc.hf_config.architectures),
        "mla": mc.attention_arch == AttentionArch.MLA,
        "kv_lora_rank": mc.kv_lora_rank,
        "qk_rope_head_dim": mc.qk_rope_head_dim,
        "qk_nope_head_dim": mc.qk_nope_head_dim,
        "v_head_dim": mc.v_head_dim,
        "num_attention_heads": mc.num_attention_heads,
        "num_hidden_layers": mc.num_hidden_layers,
        "is_multimodal": mc.is_multimodal,
        "context_len": mc.context_len,
    }


def _loaded_model_facts(target: str) -> dict:
    import torch
    from safetensors.torch import load_file
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
    from sglang.srt.speculative.ddtree_worker import target_sliding_window

    mc = ModelConfig(model_path=target)
    model = DeepseekV3ForCausalLM(mc.hf_config, quant_config=None)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))  # whatever load_weights leaves unwritten stays NaN
    checkpoint = load_file(os.path.join(target, "model.safetensors"))
    warnings = _Warnings()
    logging.getLogger().addHandler(warnings)
    try:
        model.load_weights(iter(checkpoint.items()))
    finally:
        logging.getLogger().removeHandler(warnings)
    params = dict(model.named_parameters())
    unwritten = [n for n, p in params.items() if torch.isnan(p.float()).any()]
    outputs = [n for n in params if n.endswith(("o_proj.weight", "down_proj.weight", "w2_weight"))]
    attn = model.model.layers[1].self_attn
    mlp = model.model.layers[1].mlp
    facts = {
        "parameters": len(params),
        "unwritten": unwritten,
        "load_warnings": warnings.messages,
        "embed_equal": torch.equal(model.model.embed_tokens.weight, checkpoint["model.embed_tokens.weight"]),
        "lm_head_equal": torch.equal(model.lm_head.weight, checkpoint["lm_head.weight"]),
        "output_projections": len(outputs),
        "output_projections_zero": all(not params[n].any() for n in outputs),
        "w_kc": list(attn.w_kc.shape) if getattr(attn, "w_kc", None) is not None else None,
        "w_vc": list(attn.w_vc.shape) if getattr(attn, "w_vc", None) is not None else None,
        "routed_experts": int(mlp.experts.num_experts) if hasattr(mlp.experts, "num_experts") else None,
        "top_k": int(mlp.topk.topk_config.top_k) if hasattr(mlp, "topk") else None,
        "dense_layers": [
            i for i, layer in enumerate(model.model.layers) if not hasattr(layer.mlp, "experts")
        ],
        "embed_and_head": [list(t.shape) for t in model.get_embed_and_head()],
        # what DFlashWorker asks of the target (dflash_worker.py: a vocab-parallel lm_head, input embeddings)
        "lm_head_vocab_parallel": all(hasattr(model.lm_head, a) for a in ("weight", "shard_indices")),
        "input_embeddings": type(model.get_input_embeddings()).__name__,
        "sliding_window": target_sliding_window(types.SimpleNamespace(sliding_window_size=None, model=model)),
        "has_dflash_hook": hasattr(model, "set_dflash_layers_to_capture"),
    }
    model.set_dflash_layers_to_capture([1, 4])
    facts["capture"] = {"on": model.capture_aux_hidden_states, "layers": list(model.model.layers_to_capture)}
    return facts


def _kimi_class_facts(target: str) -> dict:
    """KimiK25ForConditionalGeneration around the tiny text config (a tiny vision tower): its language model
    must be the same DeepseekV3ForCausalLM with the same parameters, and it must be a multimodal class."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
    from sglang.srt.models.kimi_k25 import KimiK25ForConditionalGeneration

    text = json.loads(Path(target, "config.json").read_text())
    # the vision tower's sizes as the real checkpoint spells them (vt_*), scaled down
    vision = {
        "num_attention_heads": 2, "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128,
        "vt_hidden_size": 64, "text_hidden_size": text["hidden_size"], "mm_hidden_size": 64,
    }  # fmt: skip
    kimi = {
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": text,
        "vision_config": vision, "torch_dtype": "bfloat16", "encoder_only": False, "language_only": False,
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "config.json").write_text(json.dumps(kimi))
        mc = ModelConfig(model_path=folder)
        model = KimiK25ForConditionalGeneration(mc.hf_config, quant_config=None)
        kimi_multimodal, kimi_mla = mc.is_multimodal, mc.attention_arch.name
        piecewise = _server_args(["--model-path", folder, "--skip-tokenizer-init", "--device", "cpu"])
    bare = DeepseekV3ForCausalLM(ModelConfig(model_path=target).hf_config, quant_config=None)
    lang = {n: list(p.shape) for n, p in model.language_model.named_parameters()}
    ours = {n: list(p.shape) for n, p in bare.named_parameters()}
    return {
        "language_model_class": type(model.language_model).__name__,
        "same_parameters": lang == ours,
        "differences": sorted(set(lang.items()) ^ set(ours.items()), key=str)[:10] if lang != ours else [],
        "is_multimodal": kimi_multimodal,
        "attention_arch": kimi_mla,
        "piecewise_disabled_by_default": piecewise.disable_piecewise_cuda_graph,
        "has_dflash_hook": hasattr(model, "set_dflash_layers_to_capture"),
    }


def main() -> None:
    target, drafter = sys.argv[1], sys.argv[2]
    facts: dict = {}
    try:
        import torch

        _stub_vllm_rotary()
        facts["model_config"] = _model_config_facts(target)
        facts["args"] = _args_facts(target, drafter)
        _init_single_process_groups(_server_args(_smoke_argv(target, drafter, "ddtree")))
        torch.set_default_dtype(torch.bfloat16)
        facts["model"] = _loaded_model_facts(target)
        facts["kimi"] = _kimi_class_facts(target)
    except Exception:
        facts["probe_error"] = traceback.format_exc()
    print("MLA-SMOKE-PROBE " + json.dumps(facts, default=str))


if __name__ == "__main__":
    main()
