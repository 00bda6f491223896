"""The smoke's tiny Kimi-K2.6-shaped target (`ddtree selfcheck --smoke --arch mla`, ddtree.smoke.models_mla)
on CPU: what is written, and how the real patched sglang 0.5.13.post1 reads it.

The probe (tests/unit/mla_smoke_probe.py, in the CPU SGLang environment of test_ddtree_sglang.py) parses
the config with SGLang's ModelConfig and the smoke's server flags with its ServerArgs, builds
DeepseekV3ForCausalLM, loads the checkpoint through the model's own load_weights (every parameter NaN-filled
first, so an unwritten one shows), sets the DFlash aux-hidden capture, and builds Kimi K2.6's
KimiK25ForConditionalGeneration around the same text config. Its stand-ins are named in its docstring. The
GPU run: tests/gpu/device_ddtree.sh smoke with DDTREE_SMOKE_ARCH=mla.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ddtree
import pytest
from ddtree.errors import UserError
from ddtree.smoke import check as smoke
from ddtree.smoke import models as smoke_models
from ddtree.smoke import models_mla as smoke_models_mla

from tests.unit.test_ddtree_sglang import sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("mla_smoke_probe.py")
ENTRYPOINT = Path(ddtree.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    settings = smoke_models.SmokeSettings(arch="mla")
    return smoke_models.write_models(tmp_path_factory.mktemp("mla-models"), settings)


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str, models: tuple[Path, Path]) -> dict:  # noqa: F811
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([sglang_cpu_path, str(ENTRYPOINT)]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, str(PROBE), *map(str, models)], capture_output=True, text=True, env=env, timeout=900
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("MLA-SMOKE-PROBE ")]
    assert lines, f"probe printed no result (rc {done.returncode}):\n{done.stderr[-4000:]}"
    result = json.loads(lines[-1].removeprefix("MLA-SMOKE-PROBE "))
    assert "probe_error" not in result, result["probe_error"]
    return result


# ---------------------------------------------------------------------------------- what is written


def test_checkpoint_holds_exactly_the_named_shapes(models: tuple[Path, Path]) -> None:
    from safetensors import safe_open

    target, _ = models
    with safe_open(str(target / "model.safetensors"), framework="pt") as f:
        written = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    assert written == smoke_models_mla.mla_shapes()


def test_config_is_deepseek_v3_with_kimis_latent_attention_and_routing(models: tuple[Path, Path]) -> None:
    config = json.loads((models[0] / "config.json").read_text())
    assert config["architectures"] == ["DeepseekV3ForCausalLM"]
    assert (config["kv_lora_rank"], config["qk_rope_head_dim"], config["qk_nope_head_dim"]) == (512, 64, 128)
    assert (config["topk_method"], config["scoring_func"], config["first_k_dense_replace"]) == (
        "noaux_tc", "sigmoid", 1)  # fmt: skip
    assert config["rope_scaling"]["type"] == "yarn"
    factor = config["rope_scaling"]["factor"] * config["rope_scaling"]["original_max_position_embeddings"]
    assert config["max_position_embeddings"] == factor


def test_drafter_matches_the_mla_target(models: tuple[Path, Path]) -> None:
    target = json.loads((models[0] / "config.json").read_text())
    drafter = json.loads((models[1] / "config.json").read_text())
    assert drafter["hidden_size"] == target["hidden_size"] and drafter["vocab_size"] == target["vocab_size"]
    assert drafter["dflash_config"]["num_target_layers"] == target["num_hidden_layers"]
    # SGLang refuses a drafter whose derived context is shorter than the target's (the H200, 2026-12-01)
    assert drafter["max_position_embeddings"] == target["max_position_embeddings"] == 262144
    # DeepseekV2Model captures layer id + 1 inside its layer loop: the last layer's output would never come
    assert max(drafter["dflash_config"]["target_layer_ids"]) + 1 < target["num_hidden_layers"]


def test_greedy_walks_the_cycle_under_transformers_deepseek_v3(models: tuple[Path, Path]) -> None:
    """An independent implementation of the architecture (transformers' DeepseekV3ForCausalLM, CPU, fp32)
    reads the checkpoint: at every position the logits are the table's row for the current token."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(models[0]), dtype=torch.float32).eval()
    f = smoke_models.successor_cycle(smoke_models.SmokeSettings().seed)
    prompt = [5, 77, 200, 13, 13, 90, 1, 250]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0]
    table = torch.tensor(smoke_models.logit_table(f))[prompt]
    assert torch.allclose(logits, table, atol=0.1), float((logits - table).abs().max())
    assert logits.argmax(-1).tolist() == [f[t] for t in prompt]


def test_arch_is_checked_and_tp_must_divide_the_mla_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="smoke arch 'x'"):
        smoke_models.write_models(Path("/nonexistent"), smoke_models.SmokeSettings(arch="x"))
    monkeypatch.setenv("DDTREE_SMOKE_ARCH", "mla")
    assert smoke.smoke_arch(None) == "mla" and smoke.smoke_arch("gqa") == "gqa"
    monkeypatch.setenv("DDTREE_SMOKE_ARCH", "moe")
    with pytest.raises(UserError, match="DDTREE_SMOKE_ARCH"):
        smoke.smoke_arch(None)
    assert "8 attention heads; use 1, 2, 4, 8" in (smoke.gpu_problem(3, "mla") or "")
    assert smoke_models.arch_server_args("mla") == ("--disable-piecewise-cuda-graph",)
    assert smoke_models.arch_server_args("gqa") == ("--disable-piecewise-cuda-graph",)
    with pytest.raises(ValueError, match="smoke arch 'x'"):
        smoke_models.arch_server_args("x")


# ---------------------------------------------------------------------------------- how SGLang reads it


def test_model_config_reads_mla(facts: dict) -> None:
    mc = facts["model_config"]
    assert mc["mla"] and not mc["is_multimodal"]
    assert (mc["kv_lora_rank"], mc["qk_rope_head_dim"], mc["v_head_dim"]) == (512, 64, 128)
    assert mc["num_attention_heads"] == smoke_models_mla.MLA_HEADS


@pytest.mark.parametrize("mode", ["baseline", "dflash", "ddtree"])
def test_smoke_flags_resolve_to_triton_page_1_graphs_on_piecewise_off(facts: dict, mode: str) -> None:
    got = facts["args"][mode]
    assert (got["attention_backend"], got["page_size"], got["cuda_graph_disabled"]) == ("triton", 1, False)
    assert got["piecewise_disabled"], "piecewise CUDA graphs on: not the path Kimi K2.6's class takes"


def test_piecewise_flag_is_needed_for_the_bare_class_and_not_for_kimis(facts: dict) -> None:
    assert facts["args"]["ddtree_without_arch_flags"]["piecewise_disabled"] is False
    assert facts["kimi"]["piecewise_disabled_by_default"] is True


def test_load_weights_writes_every_parameter_from_our_names(facts: dict) -> None:
    model = facts["model"]
    assert model["unwritten"] == [] and model["load_warnings"] == []
    assert model["embed_equal"] and model["lm_head_equal"]
    assert model["output_projections"] == 17 and model["output_projections_zero"]  # 6 o_proj, 1 + 5 + 5 downs
    assert model["w_kc"] == [8, 128, 512] and model["w_vc"] == [8, 512, 128]
    assert (model["routed_experts"], model["top_k"], model["dense_layers"]) == (16, 8, [0])
    assert model["sliding_window"] is None


def test_dflash_capture_hook_on_the_target_class(facts: dict) -> None:
    assert facts["model"]["has_dflash_hook"] and facts["kimi"]["has_dflash_hook"]
    assert facts["model"]["capture"] == {"on": True, "layers": [2, 5]}
    assert facts["model"]["lm_head_vocab_parallel"]
    assert facts["model"]["input_embeddings"] == "VocabParallelEmbedding"


def test_kimis_class_wraps_the_same_language_model(facts: dict) -> None:
    kimi = facts["kimi"]
    assert kimi["language_model_class"] == "DeepseekV3ForCausalLM"
    assert kimi["same_parameters"], kimi["differences"]
    assert kimi["is_multimodal"] and kimi["attention_arch"] == "MLA"
