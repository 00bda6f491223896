"""Request options per verify row (patch ddtree-request-options) in the real patched sglang on CPU.

tree_penalties.adjust_verify_logits adjusts every row of a DDTREE tree (or a DFLASH chain) for the output it
would follow; the reference (tests/unit/request_options_probe.py) is plain decoding one token at a time:
SGLang's own penalizers fed the request's output and then the row's root-to-node path, token by token, and
the scheduler's forward copy of SamplingBatchInfo applying them. Frequency, presence and repetition penalties,
min_new_tokens (EOS and a stop id, with the boundary inside the tree) and logit_bias, five requests with
different settings in one batch, random trees with repeated tokens (the root's too) and padding nodes.
advance_penalties is checked over several verify steps against plain decoding's one-token-per-step feeding.
Stand-ins are named in the probe's docstring. The GPU side (crafted models, DDTREE/DFLASH vs plain decoding
through the server) is tests/gpu/stress_ddtree.py.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddtree_build.paths import REPO_ROOT

from tests.sglang_sources import write_package
from tests.unit.test_ddtree_kernels import run_script, target_archs
from tests.unit.test_ddtree_sglang import run_probe, sglang_cpu_path  # noqa: F401  (fixture)

PROBE = Path(__file__).with_name("request_options_probe.py")
TREE_PENALTIES = "sglang/srt/speculative/tree_penalties.py"


@pytest.fixture(scope="module")
def facts(sglang_cpu_path: str) -> dict:  # noqa: F811
    return run_probe(PROBE, "REQUEST-OPTIONS-PROBE", sglang_cpu_path)


@pytest.mark.parametrize("case", ["tree_n9", "tree_n17", "tree_fresh", "chain_b8"])
def test_every_row_equals_plain_decoding_fed_its_path_one_token_at_a_time(facts: dict, case: str) -> None:
    got = facts[case]
    assert got["same_inf"], f"{case}: the banned (-inf) entries differ from plain decoding's"
    assert got["max_abs_diff"] == 0.0 and got["bit_equal_fraction"] == 1.0, got
    assert got["argmax_equal"], got


@pytest.mark.parametrize("case", ["tree_n9", "tree_n17", "chain_b8"])
def test_cases_need_per_row_adjustment(facts: dict, case: str) -> None:
    """The cases tell per-row adjustment apart: one adjustment per request (what verify did before) differs
    from the reference, and min_new_tokens' boundary falls inside the tree (EOS banned on some rows only)."""
    got = facts[case]
    assert not got["per_request_matches_reference"], got
    assert got["min_new_boundary_inside"], got
    assert got["changed_rows"] > got["rows"] // 2, got


def test_min_new_tokens_without_a_tokenizer_holds_back_the_models_eos_and_the_stop_ids(facts: dict) -> None:
    """Patch min-new-tokens-without-tokenizer: on a --skip-tokenizer-init server the penalizer read
    req.tokenizer (None) and the scheduler died on the first request with min_new_tokens; now it holds back
    the request's stop ids and the model's EOS ids (req.eos_token_ids), and nothing once min_new_tokens are
    out."""
    got = facts["no_tokenizer"]
    assert got["before"] == [sorted({3, 5, 9}), [3, 9], []], got
    assert got["after_3"] == [[], [], []], got


def test_advancing_by_committed_rows_equals_plain_decodings_feeding(facts: dict) -> None:
    got = facts["advance"]
    assert got["same_inf"] and got["max_abs_diff"] == 0.0 and got["argmax_equal"], got
    assert min(got["output_lens"]) > 4, "the steps should commit several tokens per request"


@pytest.mark.parametrize("mode", ["ddtree", "dflash"])
def test_speculative_greedy_decoding_equals_plain_decoding_with_every_option(facts: dict, mode: str) -> None:
    """Whole decodes through DDTreeVerifyInput.verify / DFlashVerifyInput.verify on a Markov target (a logit
    table: a 7 <-> 9 loop that penalties break, EOS right after 11 that min_new_tokens bans), six requests
    with different options in one batch, finished ones filtered out as the scheduler does."""
    got = facts["decode"][mode]
    assert all(got["equal"]), (
        f"{mode} differs from plain decoding: {got['outputs']} vs {facts['decode']['plain']}"
    )
    assert got["accepted"] > got["steps"], (
        f"{mode}: too few drafts accepted to exercise multi-token steps: {got}"
    )


def test_decode_options_change_the_greedy_output(facts: dict) -> None:
    """Each option's request decodes differently from the same request without options (the last has none)."""
    changed = facts["decode"]["options_change_output"]
    assert changed == [True] * (len(changed) - 1) + [False], changed
    assert len(facts["decode"]["plain"][2]) > 14, "min_new_tokens 14 must keep EOS away for 14 tokens"


def test_sampling_at_temperature_1_with_every_option_keeps_plain_decodings_distribution(facts: dict) -> None:
    """20000 requests, two DDTREE sampling verify steps: the first two tokens' joint counts against plain
    decoding's exact distribution (chi-square, p = 0.001), and against the distribution without each row's
    path (the old per-request adjustment), which must be rejected. min_new_tokens 2 bans EOS first."""
    got = facts["chi_square"]
    assert got["stat"] < got["critical"], got
    assert got["without_path_stat"] > got["without_path_critical"], got
    assert got["first_is_eos"] == 0, got


def test_the_device_script_runs_its_equality_check_on_cpu(sglang_cpu_path: str) -> None:  # noqa: F811
    """tests/gpu/request_options_gpu.py --device cpu: the script's own path (batches, trees, the step, the
    verdict) works before it meets the H200; the CUDA parts run only there (device_ddtree.sh options)."""
    script = Path(__file__).resolve().parents[1] / "gpu" / "request_options_gpu.py"
    env = {**os.environ, "PYTHONPATH": sglang_cpu_path, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(script), "--device", "cpu"], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "ok   cpu equals CPU" in done.stdout and "request-options: PASS" in done.stdout, done.stdout
    # the drafter's option pass (patch 0031) ran and moved every draft row (every request has an option)
    assert "draft options (ms per call, bs 4 x 7 draft rows, vocab 4096" in done.stdout, done.stdout
    assert "rows changed 28 of 28" in done.stdout, done.stdout


KERNEL_CHECK = r"""
import itertools, json, random, sys
import torch
sys.path.insert(0, sys.argv[1])  # the repository root: the probe's batches
from ddt import tree_penalties as tp
from tests.unit import request_options_probe as probe

NAMES = ("frequency", "presence", "min_new", "repetition", "logit_bias")


def grid_values(gen, shape, step, low, high):
    # Multiples of `step`: many ties, exact zeros of both signs where a product or sum gives them.
    return torch.randint(low, high, shape, generator=gen).to(torch.float32) * step


def inputs(seed, bs, size, vocab, row_stride):
    gen = torch.Generator().manual_seed(seed)
    storage = torch.randn(bs * size, row_stride, generator=gen) * 3
    logits = storage[:, :vocab]  # rows wider than the vocabulary when row_stride > vocab
    ties = torch.rand(bs * size, vocab, generator=gen) < 0.5
    logits[ties] = grid_values(gen, (int(ties.sum()),), 0.25, -8, 9)
    special = torch.rand(bs * size, vocab, generator=gen)
    logits[special < 0.01] = float("-inf")
    logits[(special >= 0.01) & (special < 0.02)] = -0.0
    logits[(special >= 0.02) & (special < 0.03)] = 0.0
    presence_on = torch.rand(bs, vocab, generator=gen) < 0.3
    tables = {
        "frequency": grid_values(gen, (bs, vocab), 0.35, 0, 4),
        "presence": torch.where(presence_on, grid_values(gen, (bs, 1), 0.5, -3, 4), torch.zeros(())),
        "too_short": torch.rand(bs, size, generator=gen) < 0.5,
        "stop_penalties": torch.where(torch.rand(bs, vocab, generator=gen) < 0.05, float("-inf"), 0.0),
        "repetition": torch.where(torch.rand(bs, vocab, generator=gen) < 0.4,
                                  torch.tensor([1.1, 0.9, 1.3, 1.05])[torch.randint(0, 4, (bs, vocab),
                                                                                     generator=gen)], 1.0),
        "logit_bias": torch.where(torch.rand(bs, vocab, generator=gen) < 0.2,
                                  torch.randn(bs, vocab, generator=gen) * 2, 0.0),
    }
    return logits, tables


def bits(t):
    return t.contiguous().view(torch.int32)


result = {}
for case, (bs, size, vocab, row_stride) in {
    "two_tiles_short_last": (3, 5, 2 * tp._RUNNING_BLOCK + 77, 2 * tp._RUNNING_BLOCK + 77),
    "strided_rows": (2, 4, 1000, 1040),
}.items():
    for combo in itertools.product((False, True), repeat=len(NAMES)):
        on = dict(zip(NAMES, combo))
        logits, tables = inputs(sum(combo) * 7 + len(case), bs, size, vocab, row_stride)
        chosen = {
            "frequency": tables["frequency"] if on["frequency"] else None,
            "presence": tables["presence"] if on["presence"] else None,
            "too_short": tables["too_short"] if on["min_new"] else None,
            "stop_penalties": tables["stop_penalties"] if on["min_new"] else None,
            "repetition": tables["repetition"] if on["repetition"] else None,
            "logit_bias": tables["logit_bias"] if on["logit_bias"] else None,
        }
        want, got = logits.clone(), logits.clone()
        tp.apply_running_torch(want, size, **chosen)
        tp.apply_running_kernel(got, size, **chosen)
        key = case + ":" + (",".join(n for n in NAMES if on[n]) or "none")
        result[key] = {
            "bit_equal": bool(torch.equal(bits(want), bits(got))),
            "changed": int((bits(want) != bits(logits)).sum()),
            "negative_zeros": int(((want == 0) & torch.signbit(want)).sum()),
            "neg_inf": int(torch.isneginf(want).sum()),
        }

# The whole adjust_verify_logits with the kernel forced on (on CUDA it is chosen by _kernel_applies) against
# the torch path, on the probe's requests (every option, different per request) and random trees.
rng = random.Random(5)
bs, size, vocab = 5, 9, 3000
pairs = [probe.random_tree(rng, size, padding=b % 3) for b in range(bs)]
tokens, mask = torch.stack([t for t, _ in pairs]), torch.stack([m for _, m in pairs])
settings = [probe.REQUEST_SETTINGS[b % len(probe.REQUEST_SETTINGS)] for b in range(bs)]
logits = torch.randn(bs * size, vocab, generator=torch.Generator().manual_seed(6)) * 3
outs = {}
for forced in (False, True):
    batch = probe._batch([probe._request(**s) for s in settings], vocab=vocab)
    for step in range(3):
        batch.sampling_info.penalizer_orchestrator.cumulate_output_tokens(torch.tensor([7, 9, 3, 5, 7][:bs]))
    tp._kernel_applies = (lambda logits, tables: True) if forced else (lambda logits, tables: False)
    outs[forced] = logits.clone()
    tp.adjust_verify_logits(outs[forced], batch.sampling_info, tokens, mask)
result["adjust_verify_logits"] = {
    "bit_equal": bool(torch.equal(bits(outs[False]), bits(outs[True]))),
    "changed_rows": int((outs[False] != logits).any(dim=1).sum()),
    "rows_with_options": size * sum(1 for s in settings if s),
}
print("RUNNING-KERNEL " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def kernel_facts(tmp_path_factory: pytest.TempPathFactory, sglang_cpu_path: str) -> dict:  # noqa: F811
    """KERNEL_CHECK in Triton's interpreter (TRITON_INTERPRET=1: the real kernel source from the patch text,
    run on CPU tensors), the series' speculative files as package `ddt`."""
    package = write_package(tmp_path_factory.mktemp("penalties") / "ddt", str(Path(TREE_PENALTIES).parent))
    return run_script(KERNEL_CHECK, "RUNNING-KERNEL", package, sglang_cpu_path, interpret=True, timeout=900,
                      args=[str(REPO_ROOT)])  # fmt: skip


OPTION_COMBOS = [
    ",".join(
        name
        for name, on in zip(
            ("frequency", "presence", "min_new", "repetition", "logit_bias"), combo, strict=True
        )
        if on
    )
    or "none"
    for combo in itertools.product((False, True), repeat=5)
]


@pytest.mark.parametrize("case", ["two_tiles_short_last", "strided_rows"])
def test_running_kernel_is_bit_identical_to_the_torch_path_for_every_option_combination(
    kernel_facts: dict, case: str
) -> None:
    """_running_penalties_kernel vs apply_running_torch, all 32 present/absent combinations: ties, negative
    logits, zeros of both signs, -inf logits, negative presence penalties; every bit equal (signs of zeros
    too), and each option changes logits (the combination is really exercised)."""
    unequal = [combo for combo in OPTION_COMBOS if not kernel_facts[f"{case}:{combo}"]["bit_equal"]]
    assert not unequal, {combo: kernel_facts[f"{case}:{combo}"] for combo in unequal}
    assert kernel_facts[f"{case}:none"]["changed"] == 0
    for combo in OPTION_COMBOS[1:]:
        assert kernel_facts[f"{case}:{combo}"]["changed"] > 0, combo
    every = kernel_facts[f"{case}:frequency,presence,min_new,repetition,logit_bias"]
    assert every["neg_inf"] > every["changed"] // 100, every  # -inf logits and min_new_tokens' bans
    assert kernel_facts[f"{case}:repetition"]["negative_zeros"] > 0  # -0.0 logits reach the sign rule


def test_adjust_verify_logits_with_the_kernel_equals_the_torch_path(kernel_facts: dict) -> None:
    got = kernel_facts["adjust_verify_logits"]
    assert got["bit_equal"], got
    assert got["changed_rows"] == got["rows_with_options"], got


KERNEL_COMPILE = r"""
import itertools, json, re, sys
import torch
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from ddt import tree_penalties as tp

class RecordingDriver:
    # Stands in for the CUDA driver (no GPU here), as in test_ddtree_kernels.py's COMPILE: the launcher runs
    # as on the device, Triton's JIT binder specialises each launch, the hook records it instead.
    def __init__(self):
        self.target = GPUTarget("cuda", 90, 32)
    def is_active(self):
        return True
    def get_current_target(self):
        return self.target
    def get_current_device(self):
        return 0
    def get_current_stream(self, device=None):
        return 0

recorded = {}
launch_keys = []

def record(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
    # Called for every launch here (nothing is compiled into the JIT cache): `key` is the cache key, so
    # distinct keys are the variants the device would compile.
    launch_keys.append(key)
    recorded.setdefault(key, (fn.jit_function, compile))
    return True

triton.runtime.driver.set_active(RecordingDriver())
knobs.runtime.jit_cache_hook = record
# Kimi K2.6's shapes (vocabulary 163840, bs 32, budget 16: 17 rows a request), the penalizers' dtypes.
bs, size, vocab = 32, 17, 163840
logits = torch.zeros(bs * size, vocab)
table = torch.zeros(bs, vocab)
too_short = torch.zeros(bs, size, dtype=torch.bool)
for combo in itertools.product((False, True), repeat=5):  # the 31 combinations served, and none at all
    frequency, presence, min_new, repetition, bias = combo
    tp.apply_running_kernel(
        logits, size, frequency=table if frequency else None, presence=table if presence else None,
        too_short=too_short if min_new else None, stop_penalties=table if min_new else None,
        repetition=table if repetition else None, logit_bias=table if bias else None)
served = set(launch_keys)
tp.launch_warm_up("cpu", vocab, size)  # the server-start launch: it must compile the variant served
warm_up_key = launch_keys[-1]
knobs.runtime.jit_cache_hook = None

result = {"launches": len(launch_keys), "variants": len(recorded), "warm_up_is_served": warm_up_key in served,
          "failed": {}, "checked": {}, "flags": {}}
for number, (fn, spec) in enumerate(recorded.values()):
    constants = {fn.arg_names[path[0]] for path in spec["constants"]}
    for flag in tp._RUNNING_FLAGS:
        result["flags"][flag] = {"type": spec["signature"][flag], "constant": flag in constants}
    for arch in sys.argv[1:]:
        source = ASTSource(fn=fn, signature=spec["signature"], constexprs=spec["constants"],
                           attrs=spec["configs"][0])
        options = {"num_warps": spec["num_warps"], "num_stages": spec["num_stages"],
                   "enable_fp_fusion": spec["enable_fp_fusion"]}
        label = f"sm_{arch} variant {number}"
        try:
            compiled = triton.compile(source, target=GPUTarget("cuda", int(arch), 32), options=options)
        except Exception as exc:
            result["failed"][label] = f"{type(exc).__name__}: {str(exc)[-300:]}"
            continue
        ptx = compiled.asm["ptx"]
        result["checked"][label] = {
            "cubin": len(compiled.asm["cubin"]),
            "enable_fp_fusion": spec["enable_fp_fusion"],
            "fma": len(re.findall(r"\bfma\.", ptx)),
            "div_rn": len(re.findall(r"\bdiv\.rn\.f32\b", ptx)),
            "div_other": len(re.findall(r"\bdiv\.(?:full|approx)\.", ptx)) + len(re.findall(r"\brcp\.", ptx)),
        }
print("RUNNING-COMPILE " + json.dumps(result))
"""


@pytest.fixture(scope="module")
def kernel_compiled(tmp_path_factory: pytest.TempPathFactory, sglang_cpu_path: str) -> dict:  # noqa: F811
    package = write_package(
        tmp_path_factory.mktemp("penalties-compile") / "ddt", str(Path(TREE_PENALTIES).parent)
    )
    return run_script(KERNEL_COMPILE, "RUNNING-COMPILE", package, sglang_cpu_path, interpret=False,
                      timeout=1800, args=target_archs())  # fmt: skip


def test_running_kernel_is_one_compiled_variant_for_every_option_combination(kernel_compiled: dict) -> None:
    """The option flags are runtime arguments Triton does not specialise on: the 32 present/absent
    combinations at Kimi's shapes and warm_up_running_penalties' launch bind to one JIT cache key, so no
    request compiles the kernel inside a serving step once the server has warmed it."""
    assert kernel_compiled["launches"] == 33, kernel_compiled["launches"]
    assert kernel_compiled["variants"] == 1, kernel_compiled["variants"]
    assert kernel_compiled["warm_up_is_served"]
    for flag, facts in kernel_compiled["flags"].items():
        assert facts == {"type": "i32", "constant": False}, (flag, facts)


def test_running_kernel_compiles_for_every_target_arch_without_contraction(kernel_compiled: dict) -> None:
    """Triton's compiler (LLVM + its bundled ptxas, no GPU) builds the one launched variant for every target
    arch, with fp fusion off: no fma in the PTX (each add and multiply rounded alone, as torch's separate ops
    do) and the repetition division as div.rn.f32 (no approximate division or reciprocal)."""
    assert not kernel_compiled["failed"], kernel_compiled["failed"]
    checked = kernel_compiled["checked"]
    assert sorted(label.split()[0] for label in checked) == [f"sm_{arch}" for arch in target_archs()], checked
    for label, facts in checked.items():
        assert facts["cubin"] > 1000 and facts["enable_fp_fusion"] is False, (label, facts)
        assert facts["fma"] == 0 and facts["div_other"] == 0, (label, facts)
        assert facts["div_rn"] > 0, (label, facts)
