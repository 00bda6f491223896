"""Device `stress` mode: DDTREE under load and faults, compared token for token with plain decoding.

Run by tests/gpu/device_ddtree.sh stress (not collected by pytest: no test_ prefix). It writes smoke.py's tiny
target + drafter + byte tokenizer, adds seeded noise to the target's attention and MLP weights (so its logits
depend on the whole context through the KV cache while greedy margins stay wide: --noise 0.03 leaves top-1
minus top-2 >= 1.5 on CPU over 600 steps; 0.04 starts to flip tokens; on the --arch mla target 0.03 leaves
>= 1.03 over 600 greedy steps under transformers' DeepseekV3ForCausalLM, no token off the cycle), then serves
the same models twice, one server at a time, each with CUDA graphs on, a small KV pool (--max-total-tokens)
and

    SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=1   (SGLang asserts, every busy iteration, that no KV leaked)
    SGLANG_TEST_RETRACT=1                          (the scheduler retracts a request every third step)

first with DDTREE (the pro6000 profile's block size, budget, top-k and 2048-token drafter window), then
without speculation. Each server gets, in order:
- phase "mixed": 32 concurrent requests, prompts of 5..3000 tokens (8 past the drafter window), max_new_tokens
  1..300 (1, 2, 3, B-1, B, B+1 included: cuts inside an accepted path), greedy; 4 of them streamed and aborted
  through /abort_request after their second chunk;
- phase "stop": the same 32 again, 12 with a stop string taken from the middle of DDTREE's phase-mixed output
  (two printable bytes), so generation stops inside an accepted path (servers that only come up with
  --skip-tokenizer-init match no stop strings: then the second byte's id is a stop_token_ids entry);
- phase "long": 4 concurrent greedy requests of 2400 new tokens (one prompt past the window);
- phase "options": 9 concurrent greedy requests of up to 96 new tokens, one per case of
  options_target.OPTION_CASES (frequency, negative frequency, presence and repetition penalties,
  min_new_tokens with EOS and with stop ids, stop_token_ids, logit_bias, all at once), compared token for
  token (the gap at a divergence is asked with the same options, the prefix as output: penalties count output
  tokens, not the prompt). Under SGLANG_TEST_RETRACT this comparison is information only: a retracted request
  comes back in a new batch whose penalizers start from zero, in plain decoding too, and the two servers
  retract at different points; and on the ladder target most options change nothing (no token repeats in
  96, EOS is never near). `--options-only` runs this phase without forced retraction on the crafted options
  target instead (tests/gpu/options_target.py: the ladder with gadget rows, no noise, so logits are the table
  exactly) and judges it: DDTREE (or DFLASH) equal to plain decoding token for token, plain decoding equal to
  the table's exact greedy walk with the options, every case's output different from the same request
  without the option under test; then phase "chi": CHI_REQUESTS requests of 3 tokens at temperature 1 with
  every option (options_target.CHI_OPTIONS), whose output counts must pass a chi-square test (p = 0.001)
  against the exact distribution and fail it against the distribution without options (the test's power),
  on both servers. The servers keep SGLang's default KV pool there, and a retraction fails the run (two
  servers, 2-4 minutes). The plain server runs there with --disable-overlap-schedule, as the speculative
  server does (spec v1): with overlap scheduling on, SGLang 0.5.13.post1's plain decoding feeds its
  penalizers from req.output_ids in prepare_for_decode, which under overlap runs before the previous step's
  result is processed (and takes the prompt's last token on the first decode), so penalties count other
  tokens than the output so far: on the H200 on 2026-12-02 its frequency-penalty walk left the definition at
  the third token and its chi-square against the exact distribution was 28458 (limit 84), while DDTREE and
  DFLASH matched the definition (36.7, 46.8). With --baseline-url the caller's plain server decides;
- a streamed request with a custom_logit_processor: the speculative server (DDTREE or DFLASH) must answer
  HTTP 400 with its one-line refusal before the stream starts.
--budget 4 makes the DFlash block (8) larger than budget + 1, the case that once ran the drafter out of KV;
--algorithm DFLASH runs the same stress on upstream DFlash, to tell whose fault a failure is.
With --tp 2 every server is tensor-parallel and the odd requests sample (temperature 0.8, top-p 0.9): those
are checked for a clean finish only.

Verdict (exit 0 PASS, 1 FAIL, 2 could not run): both servers alive at the end, no traceback, leak assertion,
"DFLASH draft OOM" or greedy-fallback warning in their logs, retraction exercised on both, every request
finished (aborted ones excepted) and every greedy non-aborted output equal to plain decoding's. Where two
outputs differ, the plain server is asked for its top-2 log-probs at the first differing prefix: a top-1 minus
top-2 gap above 0.25 is a bug (FAIL); at or below, bf16 noise, counted and listed. Logs and summary.json go to
--out. With --baseline-url and --ddtree-url the same phases run against servers already up (no models, no
log checks), e.g. the real Kimi K2.6 pair.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ddtree.bench.client import Client
from ddtree.bench.wire import iter_sse
from ddtree.smoke import check as smoke
from ddtree.smoke import dims as smoke_dims
from ddtree.smoke import models as smoke_models
from ddtree.smoke import server as smoke_server

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: run as a script
from tests.gpu import options_target
from tests.unit.ddtree_sglang_probe import _chi_square, _chi_square_critical

PROFILE = "pro6000"
REQUESTS = 32
PAST_WINDOW = 8  # prompts longer than the drafter window
MIN_PROMPT, MAX_PROMPT = 5, 3000
MAX_NEW = 300
ABORTED = 4
ABORT_AFTER_EVENTS = 2  # chunks received before the abort: the request is mid-stream
STOPPED = 12
LONG_REQUESTS, LONG_NEW = 4, 2400
KV_POOL_TOKENS = 12288  # holds the largest request (about 4500 tokens) but not 32 at once: retraction
NOISE_GAP = smoke.NEAR_TIE_GAP  # a divergence at a wider top-1 minus top-2 gap is a bug, else bf16 noise
SAMPLED = {"temperature": 0.8, "top_p": 0.9}
LAUNCH_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 400.0
STRESS_ENV = {"SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1", "SGLANG_TEST_RETRACT": "1"}
# --options-only: plain decoding as the options define them (overlap scheduling shifts its penalizers: above)
PLAIN_EXACT_ARGS = ["--disable-overlap-schedule"]
LOG_PROBLEMS = (
    "Traceback (most recent call last)",
    "Mem Leak Detected",
    "DFLASH draft OOM",
    "falling back to greedy argmax verification",
)
RETRACTED = re.compile(r"#retracted_reqs: (\d+)")
REFUSAL = "speculative decoding does not support custom_logit_processor"
CHI_REQUESTS, CHI_BATCH = 6000, 240  # phase "chi": requests, prompts per /generate call (smoke's 240 at once)


@dataclasses.dataclass(frozen=True)
class StressRequest:
    """One request of a phase; `rid` is unique per server and phase (aborts name it)."""

    name: str
    prompt: list[int]
    max_new_tokens: int
    sampled: bool = False
    abort: bool = False
    stop: str | None = None  # a stop string, or with stop_as_token its last byte's token id
    stop_as_token: bool = False  # servers without a tokenizer (--skip-tokenizer-init) match no stop strings
    options: str = ""  # request options (phase "options"), JSON of the extra sampling parameters
    base_options: str = ""  # the options of the run that `options` must change (the option under test off)

    def payload(self, rid: str) -> dict[str, Any]:
        params: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "temperature": 0.0}
        if self.sampled:
            params.update(SAMPLED)
        if self.options:
            params.update(json.loads(self.options))
        if self.stop is not None and self.stop_as_token:
            params["stop_token_ids"] = [ord(self.stop[-1])]
        elif self.stop is not None:
            params["stop"] = [self.stop]
        return {"input_ids": self.prompt, "sampling_params": params, "rid": rid}


@dataclasses.dataclass
class Answer:
    """What the server returned for one request: output ids, finish reason, or the HTTP error."""

    output_ids: list[int] | None = None
    finish: str | None = None
    error: str | None = None
    accept_length: float | None = None

    @property
    def aborted(self) -> bool:
        return self.finish == "abort" or (self.error is not None and "abort" in self.error.lower())


def prompt_lengths(rng: random.Random, window: int) -> list[int]:
    """REQUESTS prompt lengths: MIN_PROMPT, MAX_PROMPT, PAST_WINDOW past `window`, the rest log-uniform."""
    past = [rng.randint(window + 1, MAX_PROMPT) for _ in range(PAST_WINDOW - 1)] + [MAX_PROMPT]
    rest = [MIN_PROMPT] + [
        round(MIN_PROMPT * (window / MIN_PROMPT) ** rng.random()) for _ in range(REQUESTS - PAST_WINDOW - 1)
    ]
    lengths = past + rest
    rng.shuffle(lengths)
    return lengths


def max_new_tokens_mix(rng: random.Random, block_size: int) -> list[int]:
    """REQUESTS values in [1, MAX_NEW]: 1, 2, 3, B-1, B, B+1 (a cut inside one verify step) and MAX_NEW."""
    fixed = [1, 2, 3, block_size - 1, block_size, block_size + 1, MAX_NEW]
    values = fixed + [rng.randint(1, MAX_NEW) for _ in range(REQUESTS - len(fixed))]
    rng.shuffle(values)
    return values


def mixed_requests(seed: int, window: int, block_size: int, vocab: int, tp: int) -> list[StressRequest]:
    """Phase "mixed": the 32 requests; the ABORTED with the most new tokens are aborted mid-stream."""
    rng = random.Random(seed)
    lengths = prompt_lengths(rng, window)
    news = max_new_tokens_mix(rng, block_size)
    by_size = sorted(range(REQUESTS), key=lambda i: -news[i])
    aborted = set(by_size[:ABORTED])
    out = []
    for i, (length, new) in enumerate(zip(lengths, news, strict=True)):
        out.append(
            StressRequest(
                name=f"r{i:02d}",
                prompt=[rng.randrange(vocab) for _ in range(length)],
                max_new_tokens=new,
                sampled=tp > 1 and i % 2 == 1,
                abort=i in aborted,
            )
        )
    return out


def stop_string_from(output_ids: list[int]) -> str | None:
    """Two adjacent printable ASCII tokens near the middle of an output (byte tokenizer: id = byte), or None.

    Searching from the middle outwards puts the stop well inside the output, i.e. inside some accepted path.
    """
    middle = len(output_ids) // 2
    order = sorted(range(len(output_ids) - 1), key=lambda i: abs(i - middle))
    for i in order:
        a, b = output_ids[i], output_ids[i + 1]
        if 0x21 <= a <= 0x7E and 0x21 <= b <= 0x7E:
            return chr(a) + chr(b)
    return None


def stop_requests(
    mixed: list[StressRequest], answers: dict[str, Answer], as_token: bool = False
) -> list[StressRequest]:
    """Phase "stop": the mixed requests again; STOPPED greedy unaborted ones get a stop from `answers`."""
    out, given = [], 0
    for req in mixed:
        answer = answers.get(req.name)
        stop = None
        if given < STOPPED and not req.sampled and not req.abort and answer and answer.output_ids:
            stop = stop_string_from(answer.output_ids)
            given += stop is not None
        out.append(dataclasses.replace(req, stop=stop, stop_as_token=as_token))
    return out


def long_requests(seed: int, window: int, vocab: int) -> list[StressRequest]:
    """Phase "long": LONG_REQUESTS greedy requests of LONG_NEW tokens; the first prompt is past the window."""
    rng = random.Random(seed + 7)
    lengths = [window + 52, 700, 64, 9][:LONG_REQUESTS]
    return [
        StressRequest(
            name=f"long{i}", prompt=[rng.randrange(vocab) for _ in range(n)], max_new_tokens=LONG_NEW
        )
        for i, n in enumerate(lengths)
    ]


def options_requests(
    mixed: list[StressRequest], with_tokenizer: bool = True, crafted: bool = False
) -> list[StressRequest]:
    """Phase "options": one greedy request per options_target.OPTION_CASES entry, on its gadget's prompt when
    the servers serve the crafted options target, else on the prompts of unaborted greedy mixed requests.

    Without a tokenizer (--skip-tokenizer-init) SGLang's min_new_tokens penalizer reads req.tokenizer (None)
    and fails, in plain decoding too: `with_tokenizer` False leaves those cases out."""
    prompts = iter(r.prompt for r in mixed if not r.abort and not r.sampled)
    out = []
    for name, entry, options, base in options_target.OPTION_CASES:
        prompt = [*options_target.PREFIX, entry] if crafted else next(prompts, None)
        if prompt is None or (not with_tokenizer and "min_new_tokens" in options):
            continue
        out.append(
            StressRequest(
                name=f"opt-{name}",
                prompt=prompt,
                max_new_tokens=options_target.OPTIONS_NEW,
                options=json.dumps(options),
                base_options=json.dumps(base) if base else "",
            )
        )
    return out


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (a length difference counts), None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top2_gap(meta: dict[str, Any], index: int = 0) -> float | None:
    """Top-1 minus top-2 log-prob of generated position `index`, from SGLang's meta_info."""
    tops = meta.get("output_top_logprobs") or []
    if len(tops) <= index or not tops[index] or len(tops[index]) < 2:
        return None
    return float(tops[index][0][0]) - float(tops[index][1][0])


def log_problems(text: str, speculative: bool) -> list[str]:
    """Lines naming what must never appear in a server log (the greedy-fallback warning: DDTREE only)."""
    found = []
    for needle in LOG_PROBLEMS:
        if needle.startswith("falling back") and not speculative:
            continue
        count = text.count(needle)
        if count:
            found.append(f"{count}x {needle!r}")
    return found


def retractions(text: str) -> int:
    return sum(int(n) for n in RETRACTED.findall(text))


# ---------------------------------------------------------------------------------------- talking to a server


def answer_from(data: dict[str, Any]) -> Answer:
    """An Answer from /generate's JSON (a whole answer, or a stream's last event)."""
    if "error" in data:
        return Answer(error=json.dumps(data["error"])[:300])
    meta = data.get("meta_info", {})
    finish = meta.get("finish_reason") or {}
    accept = meta.get("spec_accept_length")
    return Answer(
        output_ids=list(data.get("output_ids") or []),
        finish=finish.get("type") if isinstance(finish, dict) else str(finish),
        accept_length=float(accept) if accept is not None else None,
    )


def send(client: Client, req: StressRequest, rid: str) -> Answer:
    """One /generate call (streamed and aborted mid-stream when the request says so)."""
    if req.abort:
        return send_and_abort(client, req, rid)
    status, body = client.post_text("/generate", req.payload(rid), REQUEST_TIMEOUT_S)
    if status != 200:
        return Answer(error=f"HTTP {status}: {body[:300]}")
    return answer_from(json.loads(body))


def send_and_abort(client: Client, req: StressRequest, rid: str) -> Answer:
    """Stream the request; once ABORT_AFTER_EVENTS chunks have arrived, POST /abort_request for its rid and
    read the stream to its end (SGLang closes it with finish_reason abort)."""
    conn = client.endpoint.connect(REQUEST_TIMEOUT_S)
    last: dict[str, Any] = {}
    try:
        payload = json.dumps({**req.payload(rid), "stream": True})
        conn.request("POST", client.endpoint.path("/generate"), payload, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return Answer(error=f"HTTP {resp.status}: {resp.read()[:300].decode('utf-8', 'replace')}")
        for events, data in enumerate(iter_sse(resp), start=1):
            if data.strip() == "[DONE]":
                break
            last = json.loads(data)
            if events == ABORT_AFTER_EVENTS:
                client.post_text("/abort_request", {"rid": rid}, 30.0)
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
        return Answer(error=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
    return answer_from(last) if last else Answer(error="the stream ended without an event")


def run_phase(client: Client, label: str, phase: str, requests: list[StressRequest]) -> dict[str, Answer]:
    """All requests of a phase at once; answers by request name."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        answers = list(pool.map(lambda r: send(client, r, f"{label}-{phase}-{r.name}"), requests))
    done = dict(zip((r.name for r in requests), answers, strict=True))
    tokens = sum(len(a.output_ids or []) for a in answers)
    print(f"  {label} {phase}: {len(requests)} requests, {tokens} tokens in {time.monotonic() - start:.1f} s",
          flush=True)  # fmt: skip
    return done


def divergence_gap(client: Client, prompt: list[int], prefix: list[int]) -> float | None:
    """Plain decoding's top-1 minus top-2 log-prob after prompt + prefix (one greedy step)."""
    payload = {
        "input_ids": prompt + prefix,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_logprob": True,
        "top_logprobs_num": 2,
    }
    status, body = client.post_text("/generate", payload, REQUEST_TIMEOUT_S)
    if status != 200:
        return None
    return top2_gap(json.loads(body).get("meta_info", {}))


def options_gap(client: Client, req: StressRequest, at: int) -> float | None:
    """Plain decoding's top-1 minus top-2 log-prob at output index `at` of an options request: the request
    again, up to that token, with log-probs (its penalties need the prefix as output, not as prompt)."""
    payload = {**req.payload(f"gap-{req.name}"), "return_logprob": True, "top_logprobs_num": 2}
    payload["sampling_params"] = {**payload["sampling_params"], "max_new_tokens": at + 1}
    status, body = client.post_text("/generate", payload, REQUEST_TIMEOUT_S)
    if status != 200:
        return None
    return top2_gap(json.loads(body).get("meta_info", {}), at)


def sample_counts(client: Client, label: str) -> tuple[dict[tuple[int, ...], int], str | None]:
    """Phase "chi": CHI_REQUESTS requests after the chi gadget's prompt, CHI_BATCH prompts per /generate call;
    (counts per output, the first error or None). Outputs ended by EOS are counted with it."""
    prompt = [*options_target.PREFIX, options_target.P]
    params = {**options_target.CHI_OPTIONS, "max_new_tokens": options_target.CHI_NEW}
    counts: dict[tuple[int, ...], int] = {}
    start = time.monotonic()
    for first in range(0, CHI_REQUESTS, CHI_BATCH):
        n = min(CHI_BATCH, CHI_REQUESTS - first)
        payload = {"input_ids": [prompt] * n, "sampling_params": params}
        status, body = client.post_text("/generate", payload, REQUEST_TIMEOUT_S)
        try:
            answers = json.loads(body) if status == 200 else None
        except json.JSONDecodeError:
            answers = None
        if not isinstance(answers, list) or len(answers) != n:
            return counts, f"HTTP {status}, not a list of {n} answers: {body[:200]}"
        for data in answers:
            answer = answer_from(data)
            if answer.error is not None or answer.output_ids is None:
                return counts, f"an answer without output: {answer.error}"
            seq = tuple(options_target.with_stop_token(answer.output_ids, answer.finish))
            counts[seq] = counts.get(seq, 0) + 1
    print(f"  {label} chi: {CHI_REQUESTS} requests at temperature 1 in {time.monotonic() - start:.1f} s",
          flush=True)  # fmt: skip
    return counts, None


def chi_square_against(
    counts: dict[tuple[int, ...], int], table: list[list[float]], params: dict[str, Any]
) -> tuple[float, float]:
    """(Pearson's statistic, its critical value at p = 0.001) of the counts against the exact distribution of
    CHI_NEW tokens after the chi gadget under `params`; outputs below 1/N and their counts pooled as one."""
    total = sum(counts.values())
    exact = options_target.sequence_probabilities(
        table, options_target.P, params, options_target.CHI_NEW, 1.0 / total
    )
    expected: dict[Any, float] = {seq: total * p for seq, p in exact.items()}
    expected["rest"] = max(total - sum(expected.values()), 0.0)
    observed: dict[Any, int] = {}
    for seq, n in counts.items():
        key = seq if seq in exact else "rest"
        observed[key] = observed.get(key, 0) + n
    stat, df = _chi_square(observed, expected)
    return stat, _chi_square_critical(df)


# ---------------------------------------------------------------------------------------- the verdict


@dataclasses.dataclass
class Verdict:
    lines: list[str] = dataclasses.field(default_factory=list)
    ok: bool = True
    noise: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    bugs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def check(self, passed: bool, text: str) -> None:
        self.ok = self.ok and passed
        self.lines.append(f"{'ok  ' if passed else 'FAIL'} {text}")


GapKey = tuple[str, str]  # (phase, request name)


def divergent_prefixes(
    phases: dict[str, list[StressRequest]],
    ddtree: dict[str, dict[str, Answer]],
    plain: dict[str, dict[str, Answer]],
) -> dict[GapKey, tuple[list[int], list[int]]]:
    """(prompt, plain decoding's output before the first difference) of every compared pair that differs at a
    token both produced; a pair that only differs in length has no such prefix."""
    found = {}
    for phase, requests in phases.items():
        for req in requests:
            dd, pl = ddtree[phase][req.name], plain[phase][req.name]
            if req.abort or req.sampled or not dd.output_ids or not pl.output_ids:
                continue
            at = first_divergence(dd.output_ids, pl.output_ids)
            if at is not None and at < min(len(dd.output_ids), len(pl.output_ids)):
                found[(phase, req.name)] = (req.prompt, pl.output_ids[:at])
    return found


def compare_phase(
    verdict: Verdict,
    phase: str,
    requests: list[StressRequest],
    ddtree: dict[str, Answer],
    plain: dict[str, Answer],
    gaps: dict[GapKey, float | None],
    judged: bool = True,
) -> None:
    """Every request finished (aborts excepted); greedy outputs equal, else judged by the gap at the split
    (`judged` False: the comparison is an information line)."""
    unfinished, equal, compared, noise, bugs = [], 0, 0, [], []
    for req in requests:
        dd, pl = ddtree[req.name], plain[req.name]
        if req.abort:
            continue
        for server, answer in (("ddtree", dd), ("plain", pl)):
            if answer.error is not None or answer.finish not in ("length", "stop"):
                unfinished.append(f"{server} {req.name}: {answer.error or answer.finish}")
        if req.sampled or dd.output_ids is None or pl.output_ids is None:
            continue
        compared += 1
        at = first_divergence(dd.output_ids, pl.output_ids)
        if at is None:
            equal += 1
            continue
        gap = gaps.get((phase, req.name))
        record = {
            "phase": phase,
            "request": req.name,
            "prompt_tokens": len(req.prompt),
            "index": at,
            "ddtree_token": dd.output_ids[at] if at < len(dd.output_ids) else None,
            "plain_token": pl.output_ids[at] if at < len(pl.output_ids) else None,
            "gap": gap,
        }
        (noise if gap is not None and gap <= NOISE_GAP else bugs).append(record)
    verdict.check(not unfinished, f"{phase}: every request finished (aborted ones excepted)" + (
        f"; not: {unfinished[:6]}" if unfinished else ""))  # fmt: skip
    text = (
        f"{phase}: {equal}/{compared} greedy outputs identical to plain decoding; {len(noise)} differ at a "
        f"gap <= {NOISE_GAP} (bf16 noise), {len(bugs)} otherwise" + (f": {bugs[:3]}" if bugs else "")
    )
    if not judged:
        verdict.lines.append(f"info {text} (forced retraction resets penalizers: not judged)")
        return
    verdict.noise += noise
    verdict.bugs += bugs
    verdict.check(not bugs, text)


# ---------------------------------------------------------------------------------------- the run


def add_context_noise(target_dir: Path, sigma: float, seed: int) -> None:
    """Seeded N(0, sigma^2) added to the target's attention and MLP matrices (smoke.py writes zeros)."""
    if sigma <= 0:
        return
    import torch
    from safetensors.torch import load_file, save_file

    path = target_dir / "model.safetensors"
    weights = load_file(str(path))
    gen = torch.Generator().manual_seed(seed)
    for name, value in weights.items():
        if (".self_attn." in name and "_proj" in name) or ".mlp." in name:  # MLA: kv_a_proj_with_mqa too
            noisy = value.float() + sigma * torch.randn(value.shape, generator=gen)
            weights[name] = noisy.to(value.dtype).contiguous()
    scratch = path.with_suffix(".partial")
    save_file(weights, str(scratch))
    os.replace(scratch, path)


def write_logit_table(target_dir: Path, table: list[list[float]]) -> None:
    """The target's LM head for `table` (Z[current][next]), as smoke's write_models lays out its ladder:
    logits[s] = lm_head[s] . (16 e_t) = Z[t][s]; values that are multiples of 1/8 stay exact in bf16."""
    import torch
    from safetensors.torch import load_file, save_file

    path = target_dir / "model.safetensors"
    weights = load_file(str(path))
    head = weights["lm_head.weight"].float()
    z = torch.tensor(table)  # [real tokens, vocabulary]
    head[:, : z.shape[0]] = z.T / float(smoke_dims.HIDDEN) ** 0.5
    weights["lm_head.weight"] = head.to(weights["lm_head.weight"].dtype).contiguous()
    scratch = path.with_suffix(".partial")
    save_file(weights, str(scratch))
    os.replace(scratch, path)


@dataclasses.dataclass
class ServerRun:
    """One server's answers per phase, its answer to the custom-logit-processor request, and (launched
    servers) its log."""

    answers: dict[str, dict[str, Answer]]
    refusal: Answer
    log: str | None = None
    alive: bool = True
    skipped_tokenizer: bool = False


class Plan:
    """The phases every server gets, in order; DDTREE runs first and its outputs place the stop strings."""

    def __init__(
        self,
        seed: int,
        settings: smoke_models.SmokeSettings,
        tp: int,
        options_only: bool = False,
        crafted: bool = False,
    ):
        window = settings.window or 2048
        self.options_only = options_only
        # crafted: the servers serve options_target's table (gadget prompts, the exact reference, phase chi)
        self.table = options_target.options_table(settings.seed) if crafted else None
        self.mixed = mixed_requests(seed, window, settings.block_size, smoke_dims.REAL_TOKENS, tp)
        self.longs = long_requests(seed, window, smoke_dims.REAL_TOKENS)
        self.options: list[StressRequest] = []
        self.stops: list[StressRequest] = []
        self.chi: dict[str, tuple[dict[tuple[int, ...], int], str | None]] = {}  # label -> (counts, error)

    def phases(self) -> dict[str, list[StressRequest]]:
        if self.options_only:
            return {"options": self.options}
        return {"mixed": self.mixed, "stop": self.stops, "long": self.longs, "options": self.options}

    def run(
        self, client: Client, label: str, text_stops: bool = True
    ) -> tuple[dict[str, dict[str, Answer]], Answer]:
        got = {}
        if not self.options_only:
            got["mixed"] = run_phase(client, label, "mixed", self.mixed)
            if not self.stops:
                self.stops = stop_requests(self.mixed, got["mixed"], as_token=not text_stops)
            got["stop"] = run_phase(client, label, "stop", self.stops)
            got["long"] = run_phase(client, label, "long", self.longs)
        if not self.options:
            self.options = options_requests(self.mixed, text_stops, crafted=self.table is not None)
        got["options"] = run_phase(client, label, "options", self.options)
        if self.table is not None and text_stops:  # min_new_tokens needs the tokenizer (options_requests)
            self.chi[label] = sample_counts(client, label)
        payload = StressRequest("custom", self.mixed[0].prompt[:32], 8).payload(f"{label}-custom")
        payload.update(stream=True, custom_logit_processor='{"callable": "not-a-processor"}')
        status, body = client.post_text("/generate", payload, REQUEST_TIMEOUT_S)
        return got, Answer(finish="length" if status == 200 else None, error=None if status == 200 else
                           f"HTTP {status}: {body[:300]}")  # fmt: skip


def launched(
    label: str,
    mode_args: list[str],
    target: Path,
    settings: smoke_models.SmokeSettings,
    out: Path,
    work,
    skip_choices: tuple[bool, ...] = (False, True),
) -> ServerRun:
    """Start one server (with the tokenizer, else with --skip-tokenizer-init), run
    work(client, with_tokenizer) -> (answers, refusal) on it, stop it: a ServerRun with its log."""
    for skip in skip_choices:
        log_path = out / f"server-stress-{label}{'-skip-tokenizer' if skip else ''}.log"
        server = smoke_server.Server(target, mode_args, log_path, settings, skip_tokenizer_init=skip)
        try:
            ready = server.wait_ready()
        except RuntimeError as exc:
            server.stop()
            if skip == skip_choices[-1]:
                raise
            print(
                f"  {label}: not ready with the tokenizer, again with --skip-tokenizer-init: {exc}",
                flush=True,
            )
            continue
        try:
            print(
                f"  {label}: ready after {ready:.0f} s{' (--skip-tokenizer-init)' if skip else ''}",
                flush=True,
            )
            answers, refusal = work(server.client, not skip)
            alive = server.proc.poll() is None
        finally:
            server.stop()
        return ServerRun(answers, refusal, log_path.read_text(errors="replace"), alive, skip)
    raise RuntimeError(f"{label}: no way to start the server was given")


def judge(
    plan: Plan,
    ddtree: ServerRun,
    plain: ServerRun,
    gaps: dict[GapKey, float | None],
    algorithm: str = "DDTREE",
    plain_base: dict[str, Answer] | None = None,
) -> Verdict:
    """Every check of the module docstring. `ddtree` is the speculative server; under --algorithm DFLASH it
    gets no greedy-fallback checks (DFLASH may fall back). `plain_base`: plain decoding's answers to the
    option requests with their base options (the option under test off)."""
    verdict = Verdict()
    is_ddtree = algorithm == "DDTREE"
    for label, run, speculative in ((algorithm.lower(), ddtree, is_ddtree), ("plain", plain, False)):
        if run.log is None:
            continue
        verdict.check(run.alive, f"{label}: server alive after every phase")
        found = log_problems(run.log, speculative)
        what = "tracebacks, leak assertions, draft OOM" + (
            ", greedy-fallback warnings" if speculative else ""
        )
        verdict.check(not found, f"{label}: log free of {what}" + (f": {found}" if found else ""))
        count = retractions(run.log)
        if not plan.options_only:
            verdict.check(
                count > 0, f"{label}: {count} requests retracted (SGLANG_TEST_RETRACT, small KV pool)"
            )
        else:  # a retracted request's penalizers restart from zero: the comparisons would not hold
            verdict.check(count == 0, f"{label}: {count} requests retracted (none expected: default KV pool)")
    for phase, requests in plan.phases().items():
        # Forced retraction resets a request's penalizers (plain decoding's too) at server-specific points.
        judged = phase != "options" or plan.options_only
        compare_phase(verdict, phase, requests, ddtree.answers[phase], plain.answers[phase], gaps, judged)
    if not plan.options_only:
        stopped = sum(1 for r in plan.stops if r.stop is not None)
        verdict.check(
            stopped >= STOPPED // 2, f"stop: {stopped} requests carried a stop string from DDTREE's output"
        )
        cut = {r.name: ddtree.answers["mixed"][r.name] for r in plan.mixed if r.abort}
        missed = {n: (a.finish, a.error, len(a.output_ids or [])) for n, a in cut.items() if not a.aborted}
        verdict.check(
            not missed,
            f"mixed: {len(cut) - len(missed)}/{len(cut)} DDTREE requests aborted mid-stream"
            + (f"; not cut: {missed}" if missed else ""),
        )
    refused = ddtree.refusal.error or "HTTP 200"
    verdict.check(
        refused.startswith("HTTP 400") and f"{algorithm} {REFUSAL}" in refused,
        f"{algorithm.lower()} refuses a streamed custom_logit_processor before the stream: {refused[:160]}",
    )
    changed = [
        r.name
        for r in plan.options
        if r.name in (plain_base or {})
        and plain.answers["options"][r.name].output_ids != plain_base[r.name].output_ids
    ]
    text = f"options change plain output in {len(changed)}/{len(plan.options)} requests: {changed}"
    if plan.table is None:
        verdict.lines.append(f"info {text}")
    else:
        verdict.check(len(changed) == len(plan.options), text)
        crafted_checks(verdict, plan, plain, algorithm)
    for phase in ("long", "options"):
        if phase not in ddtree.answers:
            continue
        accepts = [a.accept_length for a in ddtree.answers[phase].values() if a.accept_length is not None]
        mean_accept = sum(accepts) / len(accepts) if accepts else 0.0
        verdict.lines.append(
            f"info {algorithm.lower()} mean accept length ({phase} phase): {mean_accept:.2f}"
        )
    verdict.lines.append(
        f"info divergences: {len(verdict.noise)} bf16 noise (gap <= {NOISE_GAP}), "
        f"{len(verdict.bugs)} otherwise"
    )
    return verdict


def crafted_checks(verdict: Verdict, plan: Plan, plain: ServerRun, algorithm: str) -> None:
    """On the crafted options target: plain decoding's greedy outputs are the table's exact walk with each
    request's options, and both servers' samples pass the chi-square test against the exact distribution and
    fail it against the distribution without options."""
    assert plan.table is not None
    off = []
    for req in plan.options:
        params = json.loads(req.options)
        want, _ = options_target.greedy(plan.table, req.prompt[-1], params, req.max_new_tokens)
        got = plain.answers["options"][req.name].output_ids or []
        if not options_target.same_output(got, want, params):
            off.append(f"{req.name}: {got[:12]} vs {want[:12]}")
    verdict.check(
        not off,
        f"options: plain decoding's {len(plan.options) - len(off)}/{len(plan.options)} outputs are the "
        "crafted table's exact greedy walk with the options" + (f"; not: {off[:3]}" if off else ""),
    )
    without = {"temperature": options_target.CHI_OPTIONS["temperature"]}
    for label in (algorithm.lower(), "plain"):
        counts, error = plan.chi.get(label, ({}, "not run (min_new_tokens needs the server's tokenizer)"))
        if error is not None or not counts:
            verdict.check(False, f"chi {label}: no samples: {error}")
            continue
        stat, critical = chi_square_against(counts, plan.table, options_target.CHI_OPTIONS)
        verdict.check(
            stat < critical,
            f"chi {label}: {sum(counts.values())} samples at temperature 1 with every option: chi-square "
            f"{stat:.1f} < {critical:.1f} (p = 0.001) against plain decoding's exact distribution",
        )
        stat, critical = chi_square_against(counts, plan.table, without)
        verdict.check(
            stat > critical,
            f"chi {label}: and {stat:.1f} > {critical:.1f} against the distribution without options (power)",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for server logs and summary.json")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size of both servers (1, 2 or 4)")
    parser.add_argument("--noise", type=float, default=0.03, help="std of the target's attention/MLP weights")
    parser.add_argument("--seed", type=int, default=2121)
    parser.add_argument(
        "--arch",
        choices=smoke_models.ARCHES,
        default="gqa",
        help="the tiny target: gqa (Qwen3) or mla (Kimi K2.6's DeepSeek-V3 MLA + MoE)",
    )
    parser.add_argument(
        "--algorithm",
        choices=("DDTREE", "DFLASH"),
        default="DDTREE",
        help="the speculative server (DFLASH: the same stress on upstream DFlash, to tell whose bug it is)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        help="DDTREE budget instead of the profile's (e.g. 4: block size 8 > budget + 1)",
    )
    parser.add_argument(
        "--options-only",
        action="store_true",
        help="only phase options and the refusal, without forced retraction (judged token for token)",
    )
    parser.add_argument(
        "--crafted-target",
        action="store_true",
        help="with the URLs and --options-only: the servers serve tests/gpu/options_target.py's table (a "
        "launched --options-only run serves it always)",
    )
    parser.add_argument("--baseline-url", help="a plain-decoding server already up (needs --ddtree-url)")
    parser.add_argument("--ddtree-url", help="a DDTREE server already up (needs --baseline-url)")
    args = parser.parse_args(argv)
    if bool(args.baseline_url) != bool(args.ddtree_url):
        parser.error("--baseline-url and --ddtree-url go together")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    if not args.ddtree_url:
        problem = smoke.gpu_problem(args.tp, args.arch)
        if problem:
            print(f"stress: cannot run here: {problem}")
            return 2
    profile = smoke.settings_from_profile(PROFILE)
    settings = dataclasses.replace(
        profile,
        budget=args.budget or profile.budget,
        tp=args.tp,
        arch=args.arch,
        launch_timeout_s=LAUNCH_TIMEOUT_S,
        # --options-only: SGLang's default KV pool (retraction would restart penalizers)
        extra_server_args=() if args.options_only else ("--max-total-tokens", str(KV_POOL_TOKENS)),
    )
    crafted = args.options_only and (args.crafted_target or not args.ddtree_url)
    plan = Plan(args.seed, settings, args.tp, options_only=args.options_only, crafted=crafted)
    # --options-only: no forced retraction (it resets penalizers); the leak check stays.
    server_env = {
        k: v for k, v in STRESS_ENV.items() if not (args.options_only and k == "SGLANG_TEST_RETRACT")
    }
    label = args.algorithm.lower()
    gaps: dict[GapKey, float | None] = {}
    plain_without_options: dict[str, Answer] = {}

    def plain_work(
        client: Client, with_tokenizer: bool = True
    ) -> tuple[dict[str, dict[str, Answer]], Answer]:
        """The plan, then the gap at every divergence from DDTREE's outputs, while this server is up."""
        answers, refusal = plan.run(client, "plain", with_tokenizer)
        by_name = {r.name: r for r in plan.options}
        for key, (prompt, prefix) in divergent_prefixes(plan.phases(), ddtree.answers, answers).items():
            if key[0] == "options":
                gaps[key] = options_gap(client, by_name[key[1]], len(prefix))
            else:
                gaps[key] = divergence_gap(client, prompt, prefix)
        # The option requests again with the option under test off: does it change plain decoding's output?
        bare = [dataclasses.replace(r, options=r.base_options) for r in plan.options]
        plain_without_options.update(run_phase(client, "plain", "options-off", bare))
        return answers, refusal

    if args.ddtree_url:
        ddtree = ServerRun(*plan.run(Client(args.ddtree_url), label))
        plain = ServerRun(*plain_work(Client(args.baseline_url)))
    else:
        os.environ.update(server_env)  # both servers inherit it
        work = Path(tempfile.mkdtemp(prefix="ddtree-stress-"))
        try:
            target, drafter = smoke_models.write_models(work / "models", settings)
            smoke_models.write_tokenizer(target)
            if plan.table is not None:  # no noise: logits are the table exactly (options_target's reference)
                write_logit_table(target, plan.table)
            else:
                add_context_noise(target, args.noise, args.seed)
            noise = "none (the crafted options target)" if plan.table is not None else args.noise
            print(f"stress: tiny {args.arch} models in {work}, noise {noise}, TP {args.tp}, DDTREE "
                  f"block {settings.block_size}, budget {settings.budget}, top-k {settings.topk}, window "
                  f"{settings.window}, KV pool {settings.extra_server_args or 'default'}, env {server_env}",
                  flush=True)  # fmt: skip
            ddtree_args = smoke_server.mode_args(label, drafter, settings)
            ddtree = launched(label, ddtree_args, target, settings, out, lambda c, t: plan.run(c, label, t))
            # the plain server the same way: stop strings need a tokenizer on both sides
            plain_args = PLAIN_EXACT_ARGS if args.options_only else []
            plain = launched(
                "plain", plain_args, target, settings, out, plain_work, (ddtree.skipped_tokenizer,)
            )
        except (RuntimeError, OSError) as exc:  # a server that never got ready: its log tail says why
            print(f"stress: FAIL: {exc}")
            return 1
        finally:
            shutil.rmtree(work, ignore_errors=True)

    verdict = judge(plan, ddtree, plain, gaps, args.algorithm, plain_without_options)
    print("\n".join(verdict.lines))
    summary = {
        "passed": verdict.ok,
        "tp": args.tp,
        "arch": args.arch,
        "algorithm": args.algorithm,
        "noise": args.noise,
        "block_size": settings.block_size,
        "budget": settings.budget,
        "options_only": args.options_only,
        "crafted_options_target": plan.table is not None,
        "seconds": round(time.monotonic() - begin),
        "checks": verdict.lines,
        "noise_divergences": verdict.noise,
        "bug_divergences": verdict.bugs,
    }
    scratch = out / "summary.json.partial"
    scratch.write_text(json.dumps(summary, indent=1))
    os.replace(scratch, out / "summary.json")
    print(f"stress: {'PASS' if verdict.ok else 'FAIL'} after {time.monotonic() - begin:.0f} s; logs in {out}")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
