"""What a streamed answer says: each dialect's event shape (ddtree.jsonshape) and the tracker that turns
its chunks into token counts, timestamps and acceptance metadata (RequestResult).

Why token counts come from the server and not from chunk counts: with speculative decoding one chunk
often carries several tokens (the accepted draft plus the bonus token).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ddtree.jsonshape import ANY, NONE

# The fields the stream tracker reads, per dialect (ddtree.jsonshape): anything else in an event is refused.
GENERATE_EVENT = {
    "text": (str, NONE),
    "output_ids": ([int], NONE),
    "meta_info": (
        {
            "completion_tokens": (int, NONE),
            "prompt_tokens": (int, NONE),
            "spec_verify_ct": (int, NONE),
            "spec_accept_length": (float, NONE),
            "finish_reason": ANY,
        },
        NONE,
    ),
}


OPENAI_EVENT = {
    "choices": (
        [
            {
                "text": (str, NONE),
                "delta": ({"content": (str, NONE), "reasoning_content": (str, NONE)}, NONE),
                "finish_reason": ANY,
            }
        ],
        NONE,
    ),
    "usage": ({"completion_tokens": (int, NONE), "prompt_tokens": (int, NONE)}, NONE),
}


@dataclass
class RequestResult:
    """What one streamed request measured. Times are seconds; `start` is time.perf_counter()."""

    ok: bool
    error: str | None = None
    start: float = 0.0
    end: float = 0.0
    ttft_s: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    chunks: int = 0
    accept_length: float | None = None
    verify_ct: int | None = None
    finish_reason: str | None = None
    text: str = ""

    @property
    def latency_s(self) -> float:
        return self.end - self.start

    @property
    def decode_tok_s(self) -> float | None:
        """Output tokens per second after the first token: (n - 1) / (last - first), i.e. 1 / mean TPOT."""
        if self.first_token_at is None or self.last_token_at is None or self.output_tokens < 2:
            return None
        span = self.last_token_at - self.first_token_at
        return (self.output_tokens - 1) / span if span > 0 else None

    def summary(self, keep_text: bool = False) -> dict[str, Any]:
        """A JSON-ready record (relative times, derived rates)."""
        record = asdict(self)
        if not keep_text:
            record.pop("text")
        record["latency_s"] = self.latency_s
        record["decode_tok_s"] = self.decode_tok_s
        return record


class StreamTracker:
    """Turns a dialect's chunks into token counts, timestamps and acceptance metadata."""

    def __init__(self, api: str, result: RequestResult):
        self.api = api
        self.result = result
        self.counted = 0  # tokens seen so far
        self.usage_seen = False
        self.text_parts: list[str] = []

    def _tokens_now(self, count: int, now: float) -> None:
        res = self.result
        if count > self.counted:
            if res.first_token_at is None:
                res.first_token_at = now
                res.ttft_s = now - res.start
            res.last_token_at = now
            self.counted = count

    def feed(self, event: dict[str, Any], now: float) -> None:
        res = self.result
        res.chunks += 1
        if self.api == "generate":
            meta = event.get("meta_info") or {}
            text = event.get("text")
            if isinstance(text, str):
                self.text_parts = [text]  # the native stream repeats the whole text by default
            count = meta.get("completion_tokens")
            if count is None:
                count = len(event.get("output_ids") or []) or self.counted
            self._tokens_now(int(count), now)
            res.output_tokens = self.counted
            if meta.get("prompt_tokens") is not None:
                res.prompt_tokens = int(meta["prompt_tokens"])
            if meta.get("spec_verify_ct"):
                res.verify_ct = int(meta["spec_verify_ct"])
            if meta.get("spec_accept_length") is not None:
                res.accept_length = float(meta["spec_accept_length"])
            finish = meta.get("finish_reason")
            if isinstance(finish, dict):
                res.finish_reason = str(finish.get("type"))
            return
        usage = event.get("usage") or None
        piece = ""
        for choice in event.get("choices") or []:
            if self.api == "chat":
                delta = choice.get("delta") or {}
                piece += (delta.get("reasoning_content") or "") + (delta.get("content") or "")
            else:
                piece += choice.get("text") or ""
            if choice.get("finish_reason"):
                res.finish_reason = str(choice["finish_reason"])
        if piece:
            self.text_parts.append(piece)
        if usage and usage.get("completion_tokens") is not None:
            self.usage_seen = True
            if usage.get("prompt_tokens") is not None:
                res.prompt_tokens = int(usage["prompt_tokens"])
            # A final usage-only chunk fixes the total but is not a token arrival.
            count = int(usage["completion_tokens"])
            if piece:
                self._tokens_now(count, now)
            else:
                self.counted = max(self.counted, count)
        elif piece:
            self._tokens_now(self.counted + 1, now)  # no usage: one chunk ~ one token, fixed at the end
        res.output_tokens = self.counted

    def finish(self) -> None:
        res = self.result
        res.text = "".join(self.text_parts)
        res.output_tokens = self.counted
        if res.accept_length is None and res.verify_ct:
            res.accept_length = res.output_tokens / res.verify_ct
