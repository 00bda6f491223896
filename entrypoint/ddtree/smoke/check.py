"""`ddtree selfcheck --smoke`: does the patched SGLang here serve DDTree correctly on this GPU? (~3 minutes)

Writes a tiny target and a tiny DFlash drafter whose weights are chosen on purpose, serves them three times
with the installed SGLang (no speculation, DFLASH, DDTREE with the target profile's block size, budget, top-k
and drafter window), sends the same greedy requests to each and checks:
- greedy outputs are identical across the three modes (speculative decoding must be lossless);
- acceptance is exercised: mean acceptance length strictly between 1 and the block size, and DDTree's at
  least DFLASH's on the same requests;
- CUDA graphs were used for decode/verify (the server log says "cuda graph: True");
- (a figure, not a check) each mode's tok/s over the greedy requests, timed after an untimed warm-up that
  sends the same requests with other tokens: a batch's first prefill with a cached prefix or of a new size
  compiles Triton kernels on first use (on the MLA target a prefix hit takes the absorbed-MLA extend kernel, a
  fresh prompt the MHA one), and Triton's disk cache then spares the later modes' servers that compile;
- temperature 1: the tokens that DDTree's tree verification emits follow the target's distribution (a
  chi-square test against the exact distribution the weights define, stated tolerance p >= 0.001), and so
  do the baseline's (a control that the test itself is sound).

The weights. Vocabulary V = 256 (token 255 is the drafter's mask token, 254 is EOS and never produced),
hidden size 256, every token embedding a scaled unit vector. The target's attention and MLP outputs are
zero, so its last hidden state is the current token's embedding and its next-token logits are a fixed table
Z[current, next]: 10 for f(current), 8 for f(f(current)), 6 for f^3, 4 for f^4, 0 for the other tokens
(f: one random cycle over the 254 real tokens). Greedy decoding therefore walks the cycle. The drafter's one
layer attends uniformly (zero queries and keys); only the block's first token (the bonus) has a non-zero
value, so at every block position its hidden state points at the bonus token's embedding, and through the
target's LM head it ranks f(b), f^2(b), f^3(b), f^4(b) first, at every depth, with scores scaled down by its
final norm (a less confident drafter). At depth d the right token is f^d(b): DFLASH's chain (f(b) at every
depth) is right at depth 1 only, while DDTree's tree also holds f^2(b) at depth 2 under f(b).

Runs on one GPU of any architecture the installed kernels support (Triton attention backend); says so and
exits 2 when there is no usable GPU or no SGLang. Imports torch, safetensors and SGLang only when run.

The jobs: ddtree.smoke.models writes the models and tokenizer, ddtree.smoke.server runs one server per
mode; this module sends the requests, judges the modes and is the command.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddtree.bench.client import Client
from ddtree.errors import UserError
from ddtree.smoke.dims import REAL_TOKENS
from ddtree.smoke.models import (
    ARCHES,
    LOGIT_LADDER,
    SmokeSettings,
    attention_heads,
    successor_cycle,
    target_class_probabilities,
    write_models,
)
from ddtree.smoke.server import Server, mode_args

CHI2_CRITICAL_DF4_P001 = 18.467  # chi-square critical value, 4 degrees of freedom, p = 0.001
EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN = 0, 1, 2
# Where a speculative greedy output first differs from plain decoding: the target's top-1 minus top-2 gap
# there. At or below, a bf16 near-tie that a verify pass and a decode step round differently; above, a bug.
NEAR_TIE_GAP = 0.25


@dataclass
class ModeResult:
    name: str
    outputs: list[list[int]] = field(default_factory=list)
    accept_lengths: list[float] = field(default_factory=list)
    verify_counts: list[int] = field(default_factory=list)
    tokens_per_s: float = 0.0
    warmup_s: float = 0.0
    cuda_graph: bool = False
    sampling_counts: list[int] = field(default_factory=list)
    log_tail: str = ""

    @property
    def mean_accept(self) -> float | None:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.name,
            "mean_accept_length": self.mean_accept,
            "verify_counts": self.verify_counts,
            "tokens_per_s": round(self.tokens_per_s, 1),
            "warmup_s": round(self.warmup_s, 1),
            "cuda_graph": self.cuda_graph,
            "sampling_class_counts": self.sampling_counts,
        }


# ---------------------------------------------------------------------------------------- the requests


def greedy_prompts(settings: SmokeSettings, seed_offset: int = 1) -> list[list[int]]:
    """The greedy requests' prompts; another `seed_offset` gives prompts of the same lengths, other tokens."""
    rng = random.Random(settings.seed + seed_offset)
    lengths = [*settings.prompt_lengths, settings.long_prompt]
    return [[rng.randrange(REAL_TOKENS) for _ in range(n)] for n in lengths]


def _generate(client: Client, prompt: list[int], params: dict[str, Any]) -> dict[str, Any]:
    return client.post_json("/generate", {"input_ids": prompt, "sampling_params": params})


def _greedy_pass(client: Client, prompts: list[list[int]], params: dict[str, Any]) -> list[dict[str, Any]]:
    """The first prompt alone (4 tokens), then every prompt at once; the answers of the second part."""
    _generate(client, prompts[0], {**params, "max_new_tokens": 4})
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(lambda p: _generate(client, p, params), prompts))


def run_greedy(
    client: Client,
    prompts: list[list[int]],
    settings: SmokeSettings,
    result: ModeResult,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Greedy outputs of `prompts` all at once, and their tok/s without first-use compiles.

    The same sequence of requests runs twice: first with other prompts of the same lengths (the warm-up,
    untimed: its prefills and batched decode compile whatever Triton kernels they need), then with `prompts`,
    the pass whose outputs are judged. In each pass the first prompt goes alone first, so the batch that
    follows holds one prompt with a cached prefix. Only the second pass's batch is timed.
    """
    params = {"max_new_tokens": settings.max_new_tokens, "temperature": 0.0, "ignore_eos": True}
    start = clock()
    _greedy_pass(client, greedy_prompts(settings, seed_offset=3), params)
    _generate(client, prompts[0], {**params, "max_new_tokens": 4})
    result.warmup_s = clock() - start
    start = clock()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(lambda p: _generate(client, p, params), prompts))
    elapsed = clock() - start
    result.outputs = [list(a["output_ids"]) for a in answers]
    result.tokens_per_s = sum(len(o) for o in result.outputs) / max(elapsed, 1e-9)
    for a in answers:
        meta = a.get("meta_info", {})
        if meta.get("spec_accept_length") is not None:
            result.accept_lengths.append(float(meta["spec_accept_length"]))
            result.verify_counts.append(int(meta.get("spec_verify_ct", 0)))


def transition_classes(output: list[int], f: list[int], skip_first: int = 1) -> list[int]:
    """Class of each transition (0: f, 1: f^2, 2: f^3, 3: f^4, 4: other), from output index skip_first on.

    The first generated token comes from the prefill pass (plain sampling in every mode); the ones after it
    come from speculative verification, which is what the test is about.
    """
    classes = []
    for prev, nxt in zip(output[skip_first - 1 : -1], output[skip_first:], strict=False):
        if prev >= REAL_TOKENS:
            classes.append(4)
            continue
        chain, cls = prev, 4
        for rank in range(len(LOGIT_LADDER)):
            chain = f[chain]
            if nxt == chain:
                cls = rank
                break
        classes.append(cls)
    return classes


def run_sampling(client: Client, settings: SmokeSettings, f: list[int], result: ModeResult) -> None:
    rng = random.Random(settings.seed + 2)
    prompts = [[rng.randrange(REAL_TOKENS) for _ in range(8)] for _ in range(settings.sampling_requests)]
    base = {"max_new_tokens": settings.sampling_tokens, "temperature": 1.0, "ignore_eos": True}
    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(
            pool.map(
                lambda ip: _generate(client, ip[1], {**base, "sampling_seed": ip[0]}), enumerate(prompts)
            )
        )
    counts = [0] * 5
    for prompt, answer in zip(prompts, answers, strict=True):
        for cls in transition_classes([prompt[-1], *answer["output_ids"]], f, skip_first=2):
            counts[cls] += 1
    result.sampling_counts = counts


def chi_square(counts: list[int], probs: list[float]) -> float:
    total = sum(counts)
    return sum((c - total * p) ** 2 / (total * p) for c, p in zip(counts, probs, strict=True) if p > 0)


# ---------------------------------------------------------------------------------------- the run


def run_mode(
    mode: str, target: Path, drafter: Path, settings: SmokeSettings, work: Path, f: list[int]
) -> ModeResult:
    result = ModeResult(name=mode)
    server = Server(target, mode_args(mode, drafter, settings), work / f"server-{mode}.log", settings)
    try:
        ready = server.wait_ready()
        print(f"  {mode}: ready after {ready:.0f} s", flush=True)
        run_greedy(server.client, greedy_prompts(settings), settings, result)
        run_sampling(server.client, settings, f, result)
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    result.cuda_graph = "cuda graph: True" in log
    result.log_tail = server.tail(12)
    return result


def judge(results: dict[str, ModeResult], settings: SmokeSettings) -> tuple[bool, list[str]]:
    """Every check of the module docstring; returns (all passed, report lines)."""
    lines: list[str] = []
    ok = True

    def check(passed: bool, text: str) -> None:
        nonlocal ok
        ok = ok and passed
        lines.append(f"{'ok  ' if passed else 'FAIL'} {text}")

    base = results["baseline"].outputs
    spec_modes = [m for m in ("dflash", "ddtree") if m in results]
    if len(results) < 3:
        check(False, f"only {', '.join(results)} ran (DDTREE_SMOKE_MODES)")
    for mode in spec_modes:
        same = results[mode].outputs == base
        diff = [i for i, (a, b) in enumerate(zip(results[mode].outputs, base, strict=False)) if a != b]
        check(same, f"{mode} greedy outputs identical to no speculation ({len(base)} prompts)" + (
            "" if same else f": prompts {diff} differ"))  # fmt: skip
    for mode, r in results.items():
        check(r.cuda_graph, f"{mode}: CUDA graphs used (server log says 'cuda graph: True')")
    for mode in spec_modes:
        acc = results[mode].mean_accept
        check(
            acc is not None and 1.0 < acc < settings.block_size,
            f"{mode}: mean acceptance length {acc if acc is None else round(acc, 3)} strictly between 1 and "
            f"{settings.block_size}",
        )
    if len(spec_modes) == 2:
        dd, df = results["ddtree"].mean_accept, results["dflash"].mean_accept
        check(dd is not None and df is not None and dd >= df, f"ddtree acceptance {dd} >= dflash {df}")
    probs = target_class_probabilities(1.0)
    for mode in [m for m in ("baseline", "dflash", "ddtree") if m in results]:
        counts = results[mode].sampling_counts
        stat = chi_square(counts, probs)
        check(
            sum(counts) > 0 and stat < CHI2_CRITICAL_DF4_P001,
            f"{mode}: temperature-1 transitions {counts} vs target {[round(p, 4) for p in probs]}: "
            f"chi2 {stat:.2f} (< {CHI2_CRITICAL_DF4_P001}, p >= 0.001)",
        )
    return ok, lines


def gpu_problem(tp: int = 1, arch: str = "gqa") -> str | None:
    """Why this machine cannot run the smoke test (on `tp` GPUs, the `arch` target), or None."""
    heads = attention_heads(arch)
    if tp < 1 or heads % tp:
        divisors = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
        return f"--smoke-tp {tp}: the tiny {arch} target has {heads} attention heads; use {divisors}"
    try:
        import torch
    except ImportError:
        return "torch is not installed here"
    try:
        import sglang  # noqa: F401
    except Exception as exc:  # an import that fails for any reason means: cannot run
        return f"sglang does not import here: {exc}"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
    if torch.cuda.device_count() < tp:
        return f"--smoke-tp {tp} needs {tp} GPUs; {torch.cuda.device_count()} visible"
    major, minor = torch.cuda.get_device_capability(0)
    arches = torch.cuda.get_arch_list()
    has_ptx = any(a.startswith("compute_") and int(a.split("_")[1]) <= major * 10 + minor for a in arches)
    if f"sm_{major}{minor}" not in arches and not has_ptx:
        return f"this torch has no kernels for the GPU's sm_{major}{minor} (it has {', '.join(arches)})"
    return None


def settings_from_profile(name: str | None) -> SmokeSettings:
    """The DDTREE settings of a target profile (DDTREE_TARGET, default pro6000), else the defaults."""
    from ddtree.targets import load_target

    profile = name or os.environ.get("DDTREE_TARGET") or "pro6000"
    try:
        target = load_target(profile)
    except UserError:
        return SmokeSettings()
    sa = target.server_args

    def as_int(key: str, default: int | None) -> int | None:
        value = sa.get(key)
        return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else default

    return SmokeSettings(
        block_size=as_int("speculative-num-draft-tokens", 8) or 8,
        budget=as_int("speculative-ddtree-budget", 8) or 8,
        topk=as_int("speculative-ddtree-topk", 4) or 4,
        window=as_int("speculative-draft-window-size", None),
    )


def run_smoke(settings: SmokeSettings, keep: Path | None = None, json_out: bool = False) -> int:
    problem = gpu_problem(settings.tp, settings.arch)
    if problem:
        print(f"smoke: cannot run here: {problem}")
        return EXIT_CANNOT_RUN
    work = Path(tempfile.mkdtemp(prefix="ddtree-smoke-"))
    try:
        target, drafter = write_models(work / "models", settings)
        f = successor_cycle(settings.seed)
        print(
            f"smoke: tiny {settings.arch} target + drafter in {work}; DDTREE block {settings.block_size}, "
            f"budget {settings.budget}, top-k {settings.topk}, window {settings.window}, TP {settings.tp}",
            flush=True,
        )
        results: dict[str, ModeResult] = {}
        modes = os.environ.get("DDTREE_SMOKE_MODES", "baseline,dflash,ddtree").split(",")
        for mode in modes:
            try:
                results[mode] = run_mode(mode, target, drafter, settings, work, f)
            except (RuntimeError, OSError) as exc:
                print(f"FAIL {mode}: {exc}")
                return EXIT_FAIL
        ok, lines = judge(results, settings)
        for mode, r in results.items():
            acc = "n/a" if r.mean_accept is None else f"{r.mean_accept:.3f}"
            print(
                f"  {mode:8s} accept length {acc:>6s}  verify counts {r.verify_counts}  "
                f"{r.tokens_per_s:7.1f} tok/s (after a {r.warmup_s:.1f} s warm-up)  cuda graph {r.cuda_graph}"
            )
        print("\n".join(lines))
        if json_out:
            print(json.dumps({"passed": ok, "modes": [r.as_dict() for r in results.values()]}, indent=1))
        print(f"smoke: {'PASS' if ok else 'FAIL'}")
        return EXIT_PASS if ok else EXIT_FAIL
    finally:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for log in work.glob("server-*.log"):
                shutil.copy2(log, keep / log.name)
        shutil.rmtree(work, ignore_errors=True)


def smoke_arch(given: str | None) -> str:
    """The target architecture: --arch, else DDTREE_SMOKE_ARCH, else gqa; anything else is a UserError."""
    arch = given or os.environ.get("DDTREE_SMOKE_ARCH") or "gqa"
    if arch not in ARCHES:
        raise UserError(
            f"smoke target architecture {arch!r} (--arch or DDTREE_SMOKE_ARCH): use {' or '.join(ARCHES)}"
        )
    return arch


def selfcheck_smoke(args: Any) -> int:
    """Entry point of `ddtree selfcheck --smoke` (argparse namespace from ddtree.selfcheck.cmd)."""
    settings = replace(
        settings_from_profile(getattr(args, "target", None)),
        tp=int(getattr(args, "smoke_tp", 1)),
        arch=smoke_arch(getattr(args, "arch", None)),
    )
    keep = os.environ.get("DDTREE_SMOKE_LOGS")
    return run_smoke(settings, keep=Path(keep) if keep else None, json_out=bool(getattr(args, "json", False)))


if __name__ == "__main__":
    sys.exit(run_smoke(SmokeSettings(), keep=Path(os.environ.get("DDTREE_SMOKE_LOGS", "/tmp/ddtree-smoke"))))
