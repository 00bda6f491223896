"""`ddtree selfcheck --smoke`: does the patched SGLang here serve DDTree correctly on this GPU? (~3 minutes)

Writes a tiny target and a tiny DFlash drafter whose weights are chosen on purpose, serves them three times
with the installed SGLang (no speculation, DFLASH, DDTREE with the target profile's block size, budget, top-k
and drafter window), sends the same greedy requests to each and checks:
- greedy outputs are identical across the three modes (speculative decoding must be lossless);
- acceptance is exercised: mean acceptance length strictly between 1 and the block size, and DDTree's at
  least DFLASH's on the same requests;
- CUDA graphs were used for decode/verify (the server log says "cuda graph: True");
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
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddtree.bench.client import Client
from ddtree.errors import UserError

VOCAB = 256
HIDDEN = 256
HEADS = 4
HEAD_DIM = 64
EOS_ID = 254
MASK_ID = 255
REAL_TOKENS = 254
TARGET_LAYERS = 6
TARGET_LAYER_IDS = (1, 4)
LOGIT_LADDER = (10.0, 8.0, 6.0, 4.0)  # Z for f, f^2, f^3, f^4; 0 elsewhere
BLOCKED_LOGIT = -30.0  # EOS and the mask token: never produced
DRAFTER_NORM = 0.25  # scales the drafter's logits down: a less confident drafter, a bushier tree
CHI2_CRITICAL_DF4_P001 = 18.467  # chi-square critical value, 4 degrees of freedom, p = 0.001
EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN = 0, 1, 2


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
    tp: int = 1  # tensor-parallel size of every server (a divisor of HEADS)

    @property
    def long_prompt(self) -> int:
        """A prompt longer than the drafter window, so the compact drafter cache slides."""
        return (self.window or 512) + 64


@dataclass
class ModeResult:
    name: str
    outputs: list[list[int]] = field(default_factory=list)
    accept_lengths: list[float] = field(default_factory=list)
    verify_counts: list[int] = field(default_factory=list)
    tokens_per_s: float = 0.0
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
            "cuda_graph": self.cuda_graph,
            "sampling_class_counts": self.sampling_counts,
        }


# ---------------------------------------------------------------------------------------- the tiny models


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
    zeros_sq = torch.zeros(HIDDEN, HIDDEN)
    ones = torch.ones(HIDDEN)
    target: dict[str, torch.Tensor] = {
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
    save_file({k: v.to(dtype).contiguous() for k, v in target.items()}, str(target_dir / "model.safetensors"))
    (target_dir / "config.json").write_text(json.dumps(_config(), indent=1))

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


# ---------------------------------------------------------------------------------------- the server


def _free_port() -> int:
    """A free port below 45000: SGLang also opens port + 10000 (gRPC), which must stay <= 65535."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 45000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 45000")


def tp_args(settings: SmokeSettings) -> list[str]:
    """--tp-size for every server when the smoke runs tensor-parallel (each rank holds a vocab shard)."""
    return ["--tp-size", str(settings.tp)] if settings.tp > 1 else []


def mode_args(mode: str, drafter: Path, settings: SmokeSettings) -> list[str]:
    """SGLang flags of one mode (the common ones are added by Server)."""
    if mode == "baseline":
        return []
    args = [
        "--speculative-algorithm",
        mode.upper(),
        "--speculative-draft-model-path",
        str(drafter),
        "--speculative-num-draft-tokens",
        str(settings.block_size),
    ]
    if settings.window is not None:
        args += ["--speculative-draft-window-size", str(settings.window)]
    if mode == "ddtree":
        args += ["--speculative-ddtree-budget", str(settings.budget)]
        args += ["--speculative-ddtree-topk", str(settings.topk)]
    return args


class Server:
    """One SGLang server process on a free port; its log goes to a file that the report quotes."""

    def __init__(
        self,
        target: Path,
        args: list[str],
        log_path: Path,
        settings: SmokeSettings,
        skip_tokenizer_init: bool = True,
    ):
        self.port = settings.port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = Client(self.url, timeout=300)
        self.log_path = log_path
        cmd = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", str(target),
            *(["--skip-tokenizer-init"] if skip_tokenizer_init else []),
            "--attention-backend", "triton", "--mem-fraction-static", "0.2",
            "--cuda-graph-max-bs", "32", "--max-running-requests", "32", "--port", str(self.port),
            "--random-seed", str(settings.seed), *args, *tp_args(settings), *settings.extra_server_args,
        ]  # fmt: skip
        self.cmd = cmd
        self._log = open(log_path, "w")  # noqa: SIM115 (closed in stop)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.deadline = time.monotonic() + settings.launch_timeout_s

    def wait_ready(self) -> float:
        start = time.monotonic()
        while time.monotonic() < self.deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with code {self.proc.returncode}:\n{self.tail()}")
            status, _ = self.client.get_text("/health", timeout=2)
            if status == 200:
                return time.monotonic() - start
            time.sleep(1.0)
        raise RuntimeError(f"server not ready in time:\n{self.tail()}")

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def start_ddtree_server(
    target: Path, drafter: Path, settings: SmokeSettings, log_path: Path, skip_tokenizer_init: bool = True
) -> tuple[Server, float]:
    """One DDTREE server with the smoke test's flags, ready (seconds it took); stopped again if not ready.

    For tools run against a live tiny server (tests/gpu/live_tiny.py); the smoke test itself runs modes
    through run_mode.
    """
    server = Server(target, mode_args("ddtree", drafter, settings), log_path, settings, skip_tokenizer_init)
    try:
        return server, server.wait_ready()
    except BaseException:
        server.stop()
        raise


# ---------------------------------------------------------------------------------------- the requests


def greedy_prompts(settings: SmokeSettings) -> list[list[int]]:
    rng = random.Random(settings.seed + 1)
    lengths = [*settings.prompt_lengths, settings.long_prompt]
    return [[rng.randrange(REAL_TOKENS) for _ in range(n)] for n in lengths]


def _generate(client: Client, prompt: list[int], params: dict[str, Any]) -> dict[str, Any]:
    return client.post_json("/generate", {"input_ids": prompt, "sampling_params": params})


def run_greedy(client: Client, prompts: list[list[int]], settings: SmokeSettings, result: ModeResult) -> None:
    params = {"max_new_tokens": settings.max_new_tokens, "temperature": 0.0, "ignore_eos": True}
    _generate(client, prompts[0], {**params, "max_new_tokens": 4})  # warm-up
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(lambda p: _generate(client, p, params), prompts))
    elapsed = time.monotonic() - start
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


def gpu_problem(tp: int = 1) -> str | None:
    """Why this machine cannot run the smoke test (on `tp` GPUs), or None."""
    if tp < 1 or HEADS % tp:
        return f"--smoke-tp {tp}: the tiny models have {HEADS} attention heads; use 1, 2 or 4"
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
    problem = gpu_problem(settings.tp)
    if problem:
        print(f"smoke: cannot run here: {problem}")
        return EXIT_CANNOT_RUN
    work = Path(tempfile.mkdtemp(prefix="ddtree-smoke-"))
    try:
        target, drafter = write_models(work / "models", settings)
        f = successor_cycle(settings.seed)
        print(
            f"smoke: tiny target + drafter in {work}; DDTREE block {settings.block_size}, budget "
            f"{settings.budget}, top-k {settings.topk}, window {settings.window}, TP {settings.tp}",
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
                f"{r.tokens_per_s:7.1f} tok/s  cuda graph {r.cuda_graph}"
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


def selfcheck_smoke(args: Any) -> int:
    """Entry point of `ddtree selfcheck --smoke` (argparse namespace from ddtree.selfcheck)."""
    settings = replace(
        settings_from_profile(getattr(args, "target", None)), tp=int(getattr(args, "smoke_tp", 1))
    )
    keep = os.environ.get("DDTREE_SMOKE_LOGS")
    return run_smoke(settings, keep=Path(keep) if keep else None, json_out=bool(getattr(args, "json", False)))


if __name__ == "__main__":
    sys.exit(run_smoke(SmokeSettings(), keep=Path(os.environ.get("DDTREE_SMOKE_LOGS", "/tmp/ddtree-smoke"))))
