"""Train the pair from scratch: corpus, tokenizer, target, its continuations, drafter, offline evaluation.

    python -m benchmarks.pair.train --out DIR [--device cuda] [--preset h200|h200-long|toy|toy-long]

On the H200 (`--preset h200`, about 8 minutes) it writes into DIR:
  corpus/corpus.json         the corpus recipe's manifest (file counts, sha256 of both splits)
  target/                    Qwen3ForCausalLM: config.json, safetensors shards, the tokenizer files
  drafter/, drafter-weak/, drafter-mid/   DFlashDraftModel: the trained drafter and two early checkpoints
  eval_prompts.json          held-out prompts (token ids) and the target's greedy continuations
  metrics.json               settings, seeds, loss curves, held-out losses, offline acceptance, timings
  loss.png                   the loss curves
Everything is seeded; a retrained pair is checked against the committed metrics.json (held-out losses
and offline acceptance). `--preset toy` is a seconds-long CPU run of the same code (tests).
`--preset h200-long` trains the long-context pair (8192-token sequences, RoPE base 500000, the drafter on
long text windows; about 14 minutes on a shared H200) and adds to metrics.json the target's held-out loss
at 512 and 4096 tokens and offline acceptance at prompt lengths 512 and 4096 with their ratio; its retrains
are checked against results/long/metrics.json, those figures included; `toy-long` is its CPU twin.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from ddtree.fsutil import atomic_write

from benchmarks.pair import corpus, evaluate, tokenizer
from benchmarks.pair.modeling import (
    Drafter,
    DrafterConfig,
    Target,
    TargetConfig,
    flops_per_token,
    greedy_generate,
    load_weights,
    parameter_count,
    save_model,
)

SEED = 20261201


@dataclass(frozen=True)
class Preset:
    target: TargetConfig
    drafter: DrafterConfig
    target_steps: int  # the learning-rate schedule's length
    target_stop_at: (
        int  # steps actually run (the committed run's deadline cut it there; kept for reproduction)
    )
    target_batch: int
    seq_len: int
    target_lr: float
    continuation_prompts: int
    prompt_len: int
    continuation_len: int
    drafter_steps: int
    drafter_stop_at: int
    drafter_batch: int
    anchors_per_seq: int
    drafter_lr: float
    checkpoints: tuple[
        tuple[str, int], ...
    ]  # (folder, step): earlier, weaker drafters for the gain-vs-strength table
    loss_gamma: float
    eval_prompts: int
    eval_prompt_len: int
    eval_new_tokens: int
    served_block: int
    budgets: tuple[int, ...]
    topk: int
    target_deadline_s: float  # wall-clock guards: a loop past its deadline stops early and says so (the
    # metrics then record target_stopped_early_at and --expect says the run did not reproduce)
    drafter_deadline_s: float
    # Long-context presets: held-out loss at each of these sequence lengths and offline acceptance at each as
    # the prompt length, beside the single figures above (empty: those only, as the h200 pair was measured).
    eval_lengths: tuple[int, ...] = ()
    # What the drafter trains on. "continuations": the target's greedy continuations of `continuation_prompts`
    # train prompts, anchors from `prompt_len` on (the h200 pair). "text": windows of `seq_len` train tokens,
    # anchors from `prompt_len` (here: the first anchor) to the end, each block position labelled with the
    # target's greedy next token at that point of the text (teacher-forced, read off the logits of the forward
    # that gives the drafter its features): no generation pass, which at thousands of tokens of context would
    # cost more than the training itself.
    drafter_data: str = "continuations"


# The long-context pair, its 10-minute budget (the h200 run as the yardstick: about 120k tok/s while sharing
# the GPU, 273 ms per 32768-token step; 270 s target, 79 s continuations, 120 s drafter, 513 s in all):
# - target: 4 x 8192 = 32768 tokens per step, as the h200's 64 x 512. The dense matmuls and elementwise work
#   per step are the same; causal flash attention grows with the square of the length: per step about
#   4 x 4 heads x 8192^2 / 2 x 64 x 4 flops x 32 layers = 4.4 TFLOP forward, about 15 TFLOP with the backward,
#   against 1 at 512, so some 60-80 ms more a step at 200-250 TFLOP/s: about 350 ms. 900 steps (29.5 M
#   tokens, 11 epochs of the 2.7 M-token train split; the h200 target read 18) are about 315 s.
# - drafter on text: one 8192-token window per step (8192 target tokens in a no-grad forward, as the h200's
#   16 x 512 continuations), 512 anchors of block 16; the h200 drafter took 62 ms a step, so 1200 steps about
#   85 s. No continuation pass (79 s in the h200 run).
# - corpus, tokenizer and evaluation at two lengths: about 60 s. In all about 7.8 minutes; the guards (360 s,
#   130 s) bound the worst case near 9.5 minutes (a guard that cuts a loop is recorded, as in the h200 run).
LONG_TARGET = TargetConfig(
    # RoPE base 500000 (Llama 3's for its 8192-token training): the 32 rotary pairs of a 64-wide head turn at
    # wavelengths 2*pi*theta^(2i/64). At 10000 (the h200 pair) 25 of them turn fully within 8192 tokens, so
    # few pairs are left whose angle still orders distant positions; at 500000, 18 turn fully and the rest
    # sweep less than a turn over the trained length, distinct angles for every distance up to 8192 (the
    # "base bounds context length" argument: the base must grow with the context the model is to use). The
    # high-frequency pairs, which carry local order, are the same at any base.
    rope_theta=500000.0,
    # The served bench goes to context 8192 plus the generated tokens: SGLang takes its context length
    # from this, so it covers 8192 + 256 with room.
    max_position_embeddings=16384,
)
LONG_SEQ_LEN = 8192  # trained at the longest served context: no extrapolation in the bench (only its 256 new)


# The rig on a CPU in seconds (the tests).
TOY = Preset(
    target=TargetConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=1024,
    ),
    drafter=DrafterConfig(num_hidden_layers=1, block_size=8, target_layer_ids=(1, 2)),
    target_steps=30,
    target_stop_at=30,
    target_batch=8,
    seq_len=64,
    target_lr=3e-3,
    continuation_prompts=16,
    prompt_len=16,
    continuation_len=48,
    drafter_steps=20,
    drafter_stop_at=20,
    drafter_batch=4,
    anchors_per_seq=8,
    drafter_lr=3e-3,
    checkpoints=(("drafter-weak", 5),),
    loss_gamma=4.0,
    eval_prompts=2,
    eval_prompt_len=24,
    eval_new_tokens=24,
    served_block=4,
    budgets=(4, 8),
    topk=2,
    target_deadline_s=120.0,
    drafter_deadline_s=120.0,
)


PRESETS = {
    "h200": Preset(
        target=TargetConfig(),
        drafter=DrafterConfig(),
        target_steps=2400,
        target_stop_at=1504,
        target_batch=64,
        seq_len=512,
        target_lr=2e-3,
        continuation_prompts=4096,
        prompt_len=128,
        continuation_len=384,
        drafter_steps=2000,
        drafter_stop_at=1945,
        drafter_batch=16,
        anchors_per_seq=64,
        drafter_lr=1e-3,
        checkpoints=(("drafter-weak", 150), ("drafter-mid", 500)),
        loss_gamma=4.0,
        eval_prompts=32,
        eval_prompt_len=256,
        eval_new_tokens=256,
        served_block=8,
        budgets=(8, 16, 32),
        topk=4,
        # Guards only, far above the H200's time for the stop_at steps (about 270 s and 120 s alone): the step
        # counts, not the clock, decide the pair, so a GPU shared with other jobs trains the same pair slower.
        target_deadline_s=900.0,
        drafter_deadline_s=480.0,
    ),
    "toy": TOY,
    # The long-context pair (arithmetic above LONG_TARGET); its committed metrics: results/long/metrics.json.
    "h200-long": Preset(
        target=LONG_TARGET,
        drafter=DrafterConfig(),  # window 2048 as served: 3/4 of the anchors have a full window behind them
        target_steps=900,
        target_stop_at=900,
        target_batch=4,
        seq_len=LONG_SEQ_LEN,
        target_lr=2e-3,
        continuation_prompts=0,
        prompt_len=16,  # the first anchor: blocks from almost no context to a full window
        continuation_len=0,
        drafter_steps=1200,
        drafter_stop_at=1200,
        drafter_batch=1,
        anchors_per_seq=512,
        drafter_lr=1e-3,
        checkpoints=(),  # the gain-vs-strength table is the h200 pair's; here evaluation time goes to lengths
        loss_gamma=4.0,
        eval_prompts=32,
        eval_prompt_len=512,  # eval_prompts.json (the served greedy check) holds the 512-token prompts
        eval_new_tokens=256,
        served_block=8,
        budgets=(8, 16, 32),
        topk=4,
        # Guards only, as the h200 pair's: on 2026-12-02, beside two serving lanes, the old 130 s guard
        # stopped the drafter at step 301 of 1200 (a weak drafter, a pair no retrain could reproduce). The
        # training runs in the background of a sitting (setsid), so it need not fit one 10-minute call.
        target_deadline_s=900.0,
        drafter_deadline_s=900.0,
        eval_lengths=(512, 4096),
        drafter_data="text",
    ),
    # The long preset's code path on a CPU in seconds: sequences 4x the toy's, a drafter window shorter than
    # them so that anchors past the window are trained and evaluated too.
    "toy-long": replace(
        TOY,
        target=replace(TOY.target, rope_theta=500000.0),
        drafter=replace(TOY.drafter, window=64),
        target_steps=20,
        target_stop_at=20,
        target_batch=2,
        seq_len=256,
        continuation_prompts=0,
        prompt_len=4,
        continuation_len=0,
        drafter_steps=12,
        drafter_stop_at=12,
        drafter_batch=1,
        anchors_per_seq=32,
        checkpoints=(("drafter-weak", 4),),
        eval_prompt_len=32,
        eval_new_tokens=16,
        eval_lengths=(32, 128),
        drafter_data="text",
    ),
}


def say(msg: str) -> None:
    print(f"[pair {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def windows(data: torch.Tensor, count: int, length: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, data.numel() - length, (count,), generator=gen)
    return torch.stack([data[s : s + length] for s in starts.tolist()])


def lr_at(step: int, steps: int, peak: float) -> float:
    """Linear warm-up over 5% of the steps, then cosine to 10% of the peak."""
    warm = max(1, steps // 20)
    if step < warm:
        return peak * (step + 1) / warm
    frac = (step - warm) / max(1, steps - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def autocast(device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


@torch.no_grad()
def heldout_loss(target: Target, batches: torch.Tensor, device: torch.device) -> float:
    losses = []
    for ids in batches.split(8):
        ids = ids.to(device)
        with autocast(device):
            logits, _ = target(ids[:, :-1])
        losses.append(F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten()).item())
    return sum(losses) / len(losses)


def train_target(
    p: Preset, train: torch.Tensor, held: torch.Tensor, device: torch.device, log: dict
) -> Target:
    gen = torch.Generator().manual_seed(SEED)
    target = Target(p.target).to(device)
    opt = torch.optim.AdamW(
        target.parameters(), lr=p.target_lr, betas=(0.9, 0.95), weight_decay=0.1, fused=False
    )
    held_batches = windows(held, 64, p.seq_len + 1, torch.Generator().manual_seed(SEED + 1))
    curve, start = [], time.monotonic()
    step = 0
    for step in range(p.target_stop_at):
        if time.monotonic() - start > p.target_deadline_s:
            log["target_stopped_early_at"] = step
            say(f"target: deadline {p.target_deadline_s:.0f} s reached at step {step}/{p.target_steps}")
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, p.target_steps, p.target_lr)
        ids = windows(train, p.target_batch, p.seq_len + 1, gen).to(device)
        with autocast(device):
            logits, _ = target(ids[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == p.target_stop_at - 1:
            curve.append((step, loss.item()))
            rate = (step + 1) * p.target_batch * p.seq_len / (time.monotonic() - start)
            say(f"target step {step}: loss {loss.item():.3f} ({rate / 1e3:.0f}k tok/s)")
    target.eval()
    log["target_curve"] = curve
    log["target_train_s"] = round(time.monotonic() - start, 1)
    log["target_steps_done"] = step + 1
    log["target_heldout_loss"] = round(heldout_loss(target, held_batches, device), 4)
    say(f"target held-out loss {log['target_heldout_loss']}")
    if p.eval_lengths:
        log["target_heldout_loss_by_length"] = heldout_loss_by_length(p, target, held, device)
        row = ", ".join(f"{n} tokens {v}" for n, v in log["target_heldout_loss_by_length"].items())
        say(f"target held-out loss by sequence length: {row}")
    return target


def heldout_loss_by_length(p: Preset, target: Target, held: torch.Tensor, device: torch.device) -> dict:
    """{str(length): mean next-token loss over 64 held-out windows of that many tokens}: a target that uses
    long context scores lower at 4096 than at 512 (later positions see more); one out of its trained range
    scores higher."""
    return {
        str(n): round(
            heldout_loss(target, windows(held, 64, n + 1, torch.Generator().manual_seed(SEED + 1)), device), 4
        )
        for n in p.eval_lengths
    }


@torch.no_grad()
def continuations(p: Preset, target: Target, train: torch.Tensor, device: torch.device) -> torch.Tensor:
    """[prompts, prompt_len + continuation_len]: train-text prompts and the target's greedy continuations."""
    prompts = windows(train, p.continuation_prompts, p.prompt_len, torch.Generator().manual_seed(SEED + 2))
    out = []
    for chunk in prompts.split(1024):
        chunk = chunk.to(device)
        with autocast(device):
            out.append(torch.cat([chunk, greedy_generate(target, chunk, p.continuation_len)], dim=1))
    return torch.cat(out)


def block_labels(
    seqs: torch.Tensor, greedy: torch.Tensor | None, anchors: torch.Tensor, block: int
) -> torch.Tensor:
    """[b, n, block-1]: what positions 1.. of each anchor's block are trained to guess.

    Continuations (greedy None): the tokens after the anchor, which the target generated itself. Text:
    greedy [b, T] holds the target's argmax after each position, so token a + k's label is greedy[a + k - 1];
    where the target's guesses equal the text, both give the same labels.
    """
    if greedy is None:
        return seqs[:, anchors.unsqueeze(1) + torch.arange(1, block, device=seqs.device)]
    return greedy[:, anchors.unsqueeze(1) + torch.arange(0, block - 1, device=seqs.device)]


def drafter_loss(
    p: Preset, target: Target, drafter: Drafter, seqs: torch.Tensor, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weighted cross-entropy, per-position accuracy [B-1]) of blocks at random anchors in the sequences.

    Continuations: anchor a holds a token the target generated (a >= prompt_len); position k of its block is
    trained to guess token a + k, weighted exp(-(k-1)/gamma): early positions decide acceptance. Text (long
    presets): anchors anywhere from prompt_len on, the label of token a + k the target's argmax at a + k - 1.
    """
    block = p.drafter.block_size
    device = seqs.device
    with torch.no_grad(), autocast(device):
        logits, features = target.features(seqs, p.drafter.target_layer_ids)
        greedy = logits.argmax(-1) if p.drafter_data == "text" else None
    hi = seqs.shape[1] - block
    anchors = torch.randperm(hi - p.prompt_len, generator=gen)[: p.anchors_per_seq] + p.prompt_len
    anchors = anchors.sort().values.to(device)
    with autocast(device):
        hidden = drafter(target.embed_tokens, features, seqs, anchors, block)[:, :, 1:]
        logits = target.lm_head(hidden).float()  # [b, n, B-1, V]
    labels = block_labels(seqs, greedy, anchors, block)
    ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view(labels.shape)
    weights = torch.exp(-torch.arange(block - 1, device=device, dtype=torch.float32) / p.loss_gamma)
    loss = (ce.mean(dim=(0, 1)) * weights).sum() / weights.sum()
    accuracy = (logits.argmax(-1) == labels).float().mean(dim=(0, 1))
    return loss, accuracy


def train_drafter(
    p: Preset,
    target: Target,
    seqs: torch.Tensor,
    out: Path,
    device: torch.device,
    log: dict,
    held_text: torch.Tensor | None = None,
) -> Drafter:
    """seqs: the continuations, or for drafter_data "text" the train split's token stream (with held_text,
    the held-out split's, for the drafter's held-out loss)."""
    torch.manual_seed(SEED + 3)
    for param in target.parameters():
        param.requires_grad_(False)
    drafter = Drafter(p.target, p.drafter).to(device)
    opt = torch.optim.AdamW(drafter.parameters(), lr=p.drafter_lr, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator().manual_seed(SEED + 4)
    if p.drafter_data == "text":
        assert held_text is not None, "drafter_data 'text' needs the held-out token stream"
        held = windows(held_text, 4, p.seq_len, torch.Generator().manual_seed(SEED + 5)).to(device)

        def draw() -> torch.Tensor:
            return windows(seqs, p.drafter_batch, p.seq_len, gen).to(device)
    else:
        held = seqs[-64:][: p.drafter_batch]  # the last continuations are never trained on: held-out loss
        train = seqs[:-64] if seqs.shape[0] > 128 else seqs

        def draw() -> torch.Tensor:
            return train[torch.randint(0, train.shape[0], (p.drafter_batch,), generator=gen)]

    curve, start, step = [], time.monotonic(), 0
    for step in range(p.drafter_stop_at):
        if time.monotonic() - start > p.drafter_deadline_s:
            log["drafter_stopped_early_at"] = step
            say(f"drafter: deadline {p.drafter_deadline_s:.0f} s reached at step {step}/{p.drafter_steps}")
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, p.drafter_steps, p.drafter_lr)
        loss, accuracy = drafter_loss(p, target, drafter, draw(), gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == p.drafter_stop_at - 1:
            curve.append((step, loss.item()))
            say(f"drafter step {step}: loss {loss.item():.3f}, position-1 accuracy {accuracy[0].item():.2f}")
        for folder, at in p.checkpoints:
            if step + 1 == at:
                save_drafter(p, drafter, out / folder)
    drafter.eval()
    log["drafter_curve"] = curve
    log["drafter_train_s"] = round(time.monotonic() - start, 1)
    log["drafter_steps_done"] = step + 1
    with torch.no_grad():
        loss, accuracy = drafter_loss(p, target, drafter, held, torch.Generator().manual_seed(5))
    log["drafter_heldout_loss"] = round(loss.item(), 4)
    log["drafter_heldout_accuracy"] = [round(a, 3) for a in accuracy.tolist()]
    say(
        f"drafter held-out loss {log['drafter_heldout_loss']}, "
        f"accuracy by position {log['drafter_heldout_accuracy']}"
    )
    return drafter


def save_drafter(p: Preset, drafter: Drafter, folder: Path) -> None:
    save_model(drafter, p.drafter.hf_config(p.target), folder, prefix="")


def eval_sequences(
    p: Preset, target: Target, held: torch.Tensor, device: torch.device
) -> list[tuple[list, list]]:
    prompts = windows(held, p.eval_prompts, p.eval_prompt_len, torch.Generator().manual_seed(SEED + 6)).to(
        device
    )
    with autocast(device):
        cont = greedy_generate(target, prompts, p.eval_new_tokens)
    return list(zip(prompts.tolist(), cont.tolist(), strict=True))


def offline_table(p: Preset, target: Target, drafters: dict[str, Drafter], seqs, where: str = "") -> dict:
    how = evaluate.methods(p.budgets, p.topk)
    table = {}
    for name, drafter in drafters.items():
        with autocast(next(target.parameters()).device):
            table[name] = evaluate.acceptance(target, drafter, seqs, p.served_block, how)
        row = ", ".join(f"{m}: {v['accept_length']:.3f}" for m, v in table[name].items())
        say(f"offline acceptance ({name} drafter, block {p.served_block}{where}): {row}")
    return table


def acceptance_ratios(by_length: dict[str, dict], drafter: str = "trained") -> dict[str, float]:
    """Per method: accept length at the longest prompt length over that at the shortest (the issue's goal:
    at least 0.9 for the long-context pair, 4096 against 512)."""
    lengths = sorted(by_length, key=int)
    short, long = by_length[lengths[0]][drafter], by_length[lengths[-1]][drafter]
    return {m: round(long[m]["accept_length"] / short[m]["accept_length"], 4) for m in short}


def plot(log: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, key, title in ((axes[0], "target_curve", "target (next-token CE)"),
                           (axes[1], "drafter_curve", "drafter (weighted block CE)")):  # fmt: skip
        steps, losses = zip(*log[key], strict=True)
        ax.plot(steps, losses)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("train loss (nats)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def make_deterministic() -> None:
    """Seeds, and torch's deterministic algorithms in strict mode, so that a retrain from the seed on the same
    GPU model gives the committed pair within compare_metrics' bounds.

    Strict, not warn_only: with warn_only=True the H200 retrain of 2026-12-01 ran the cuDNN backward of
    scaled_dot_product_attention, which torch only warns is non-deterministic (the one such warning in that
    train.log), and drifted 2-4% from the committed metrics. In strict mode SDPA leaves cuDNN out and runs
    flash or memory-efficient attention with their deterministic backward; cuDNN's SDPA is switched off here
    as well, so the choice does not hang on the dispatcher. That log showed no other op without a
    deterministic one."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before the first cuBLAS call
    random.seed(SEED)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.enable_cudnn_sdp(False)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = True  # as in the committed run; fixed for a fixed GPU model


# How far a retrain may land from the committed run and still be the same pair. bf16 training on a GPU is
# not bit-reproducible: even in strict deterministic mode the H200 retrain of 2026-12-02 (sitting-2026-12-02d)
# followed the committed loss curve to three digits for 100 steps and then drifted, and the drafter, trained
# on the target's continuations, inherits the drift. Three H200 runs (committed, 2026-12-01, 2026-12-02d)
# spread by up to 2.8% in held-out loss (drafter 3.696 / 3.800 / 3.664), 3.7% in the trained drafter's offline
# acceptance (DFLASH 2.557 / 2.652 / 2.496) and 4.2% in the step-500 checkpoint's (DDTREE-32 2.509 / 2.423 /
# 2.404). A pair trained differently lands far outside: the step-150 drafter of the same run accepts 1.35.
LOSS_TOLERANCE = 0.03
ACCEPTANCE_TOLERANCE = 0.05


def compare_metrics(expected: dict, got: dict) -> list[str]:
    """Where a retrained pair differs from the committed run: held-out losses beyond LOSS_TOLERANCE, offline
    acceptance beyond ACCEPTANCE_TOLERANCE (relative; the run-to-run spread above, with a margin); for the
    long pair also the loss at each sequence length and the acceptance at each prompt length it committed."""
    problems = []
    if expected.get("preset", got.get("preset")) != got.get("preset"):
        problems.append(f"preset {got.get('preset')} vs committed {expected['preset']}: not the same pair")
    losses = [(key, expected[key], got.get(key)) for key in ("target_heldout_loss", "drafter_heldout_loss")]
    # the long pair's losses at each sequence length (512, 4096) and its acceptance at each prompt length
    for length, value in expected.get("target_heldout_loss_by_length", {}).items():
        new_loss = got.get("target_heldout_loss_by_length", {}).get(length)
        losses.append((f"target_heldout_loss at {length} tokens", value, new_loss))
    for key, value, new_loss in losses:
        if new_loss is None or abs(new_loss - value) > LOSS_TOLERANCE * abs(value):
            problems.append(f"{key} {new_loss} vs committed {value}")
    tables = [("", expected["offline_acceptance"], got.get("offline_acceptance", {}))]
    for length, table in expected.get("offline_acceptance_by_prompt_len", {}).items():
        tables.append(
            (f" at {length} tokens", table, got.get("offline_acceptance_by_prompt_len", {}).get(length, {}))
        )
    for where, want, have in tables:
        for drafter, table in want.items():
            for method, value in table.items():
                new = have.get(drafter, {}).get(method, {}).get("accept_length")
                if (
                    new is None
                    or abs(new - value["accept_length"]) > ACCEPTANCE_TOLERANCE * value["accept_length"]
                ):
                    problems.append(
                        f"offline {drafter}/{method}{where} {new} vs committed {value['accept_length']:.3f}"
                    )
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="h200")
    ap.add_argument("--stdlib", type=Path, default=None, help="corpus source (default: this Python's stdlib)")
    ap.add_argument(
        "--expect", type=Path, help="a committed metrics.json: say whether this run reproduced it"
    )
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    device = torch.device(args.device)
    make_deterministic()
    out: Path = args.out
    t0 = time.monotonic()
    import tokenizers

    log: dict = {
        "preset": args.preset,
        "seed": SEED,
        "settings": asdict(p),
        "torch": torch.__version__,
        "tokenizers": tokenizers.__version__,
        "python": sys.version.split()[0],
    }
    if device.type == "cuda":
        log["gpu"] = torch.cuda.get_device_name(device)

    manifest = corpus.build(args.stdlib or corpus.stdlib_root(), out / "corpus")
    log["corpus"] = asdict(manifest)
    say(f"corpus: train {manifest.train.files} files, held-out {manifest.heldout.files} files")
    tok = tokenizer.train([out / "corpus" / "train.txt"], p.target.vocab_size, out / "target")
    train_ids = torch.tensor(tokenizer.encode_file(tok, out / "corpus" / "train.txt"))
    held_ids = torch.tensor(tokenizer.encode_file(tok, out / "corpus" / "heldout.txt"))
    log["tokens"] = {"train": train_ids.numel(), "heldout": held_ids.numel()}
    say(f"tokens: train {train_ids.numel()}, held-out {held_ids.numel()} ({time.monotonic() - t0:.0f} s)")
    p = replace(p, drafter=replace(p.drafter, mask_token_id=tokenizer.MASK_ID))
    target = train_target(p, train_ids, held_ids, device, log)
    log["target_parameters"] = parameter_count(target)
    log["target_flops_per_token"] = flops_per_token(p.target)
    save_model(target, p.target.hf_config(), out / "target", prefix="model.")
    if p.drafter_data == "text":
        drafter = train_drafter(p, target, train_ids, out, device, log, held_text=held_ids)
    else:
        t = time.monotonic()
        seqs = continuations(p, target, train_ids, device)
        log["continuations_s"] = round(time.monotonic() - t, 1)
        say(f"continuations: {tuple(seqs.shape)} in {log['continuations_s']} s")
        drafter = train_drafter(p, target, seqs, out, device, log)
    save_drafter(p, drafter, out / "drafter")
    log["drafter_parameters"] = parameter_count(drafter)

    drafters = {"trained": drafter}
    for folder, at in p.checkpoints:
        if (out / folder).is_dir():
            early = Drafter(p.target, p.drafter).to(device)
            load_weights(early, out / folder, prefix="")
            drafters[f"step-{at}"] = early.eval()
    seqs_eval = eval_sequences(p, target, held_ids, device)
    atomic_write(
        out / "eval_prompts.json",
        json.dumps({"prompts": [s[0] for s in seqs_eval], "continuations": [s[1] for s in seqs_eval]}) + "\n",
    )
    by_length = {}
    for n in p.eval_lengths:  # long presets: the same table at each prompt length (eval_prompt_len's once)
        seqs_n = (
            seqs_eval
            if n == p.eval_prompt_len
            else eval_sequences(replace(p, eval_prompt_len=n), target, held_ids, device)
        )
        by_length[str(n)] = offline_table(p, target, drafters, seqs_n, f", prompts of {n} tokens")
    log["offline_acceptance"] = by_length.get(str(p.eval_prompt_len)) or offline_table(
        p, target, drafters, seqs_eval
    )
    if by_length:
        log["offline_acceptance_by_prompt_len"] = by_length
        log["offline_acceptance_ratio"] = acceptance_ratios(by_length)
        lengths = sorted(by_length, key=int)
        row = ", ".join(f"{m}: {v:.3f}" for m, v in log["offline_acceptance_ratio"].items())
        say(f"offline acceptance at {lengths[-1]} over {lengths[0]} (goal: at least 0.9): {row}")
    log["total_s"] = round(time.monotonic() - t0, 1)
    atomic_write(out / "metrics.json", json.dumps(log, indent=1) + "\n")
    plot(log, out / "loss.png")
    say(f"done in {log['total_s']} s: {out}")
    if args.expect is not None:
        problems = compare_metrics(json.loads(args.expect.read_text()), log)
        for line in problems:
            say(f"differs from {args.expect}: {line}")
        say(f"reproduced {args.expect}: {'no' if problems else 'yes'}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
