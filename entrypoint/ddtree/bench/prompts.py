"""Prompts of an exact context length, built with the served tokenizer.

A prompt is: a unique request tag (so no two requests share a cached prefix), a slice of real Python
source (the standard library's, so the image needs no data file and the drafter sees natural code,
not a repeated sentence that would inflate acceptance), and a fixed instruction at the end.

Tokenizers, best first (`--tokenizer auto`):
1. `hf`: transformers.AutoTokenizer from a local model directory (--tokenizer PATH, or the server's
   model_path when that exists here). The SGLang image has transformers.
2. `server`: the server's own /v1/tokenize and /v1/detokenize (SGLang), exact and needs nothing local.
3. `approx`: no tokenizer at all: text of about CHARS_PER_TOKEN * N characters, sent as text; the
   context is then only approximate and every record carries the server's prompt_tokens instead.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import importlib
import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ddtree.bench.client import Client
from ddtree.errors import UserError
from ddtree.jsonshape import Required

CHARS_PER_TOKEN = 3.6  # approx fallback only: typical for English prose + code with BPE vocabularies
INSTRUCTION = "\n\nExplain what the code above does, then write unit tests for it."
CORPUS_MODULES = (
    "argparse",
    "difflib",
    "textwrap",
    "heapq",
    "fractions",
    "statistics",
    "calendar",
    "csv",
    "dataclasses",
    "functools",
    "ipaddress",
    "shlex",
    "string",
    "pprint",
    "tokenize",
    "json.decoder",
)


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass
class Prompt:
    """A prompt to send. `ids` is set when the tokenizer was exact; `text` always (chat needs it)."""

    text: str
    ids: list[int] | None
    target_tokens: int
    exact: bool

    @property
    def digest(self) -> str:
        raw = ",".join(map(str, self.ids)) if self.ids is not None else self.text
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


class HFTokenizer:
    """transformers' AutoTokenizer (imported lazily: the runtime must import without it)."""

    def __init__(self, path: str):
        try:
            from transformers import AutoTokenizer  # type: ignore[import-not-found]
        except ImportError as exc:
            raise UserError("--tokenizer PATH needs transformers; use --tokenizer server instead") from exc
        try:
            self._tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
        except Exception as exc:  # transformers raises many kinds; all mean the path is unusable
            raise UserError(f"--tokenizer {path}: cannot load a tokenizer there ({exc})") from exc
        self.name = f"hf:{path}"
        self._prefix = list(self._tok("")["input_ids"])  # e.g. a BOS the model expects

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))

    @property
    def prefix(self) -> list[int]:
        return self._prefix


class ServerTokenizer:
    """The served tokenizer through SGLang's /v1/tokenize and /v1/detokenize.

    Seen on 0.5.13.post1 (H200 device): /v1/tokenize answers HTTP 500 "Integer exceeds 64-bit range"
    when the tokenizer has no model_max_length (transformers then reports 1e30, which orjson cannot
    encode). `auto` then falls back to approx; a local tokenizer (--tokenizer PATH) avoids it.
    """

    def __init__(self, client: Client, fallbacks: Sequence[Client] = ()):
        self.client = client
        # Behind SGLang's router: the other replicas (same model and tokenizer), asked when one stops.
        self.fallbacks = list(fallbacks)
        self.name = "server"
        self.prefix: list[int] = []

    def _post(self, route: str, payload: dict[str, Any], schema: Any) -> Any:
        """POST to the first server that answers in `schema`'s shape; the last one's error when none does."""
        *others, last = [self.client, *self.fallbacks]
        for client in others:
            try:
                return client.post_json(route, payload, min(120.0, client.timeout), schema)
            except (OSError, RuntimeError, http.client.HTTPException):
                continue
        return last.post_json(route, payload, min(120.0, last.timeout), schema)

    def encode(self, text: str) -> list[int]:
        answer = self._post(
            "/v1/tokenize", {"prompt": text, "add_special_tokens": False}, {"tokens": Required([int])}
        )
        return [int(t) for t in answer["tokens"]]

    def decode(self, ids: list[int]) -> str:
        return self._post("/v1/detokenize", {"tokens": ids}, {"text": Required(str)})["text"]

    @classmethod
    def problem(cls, client: Client) -> str | None:
        """None when /v1/tokenize works, else why not (for the error message)."""
        try:
            return None if cls(client).encode("hello") else "it returned no tokens"
        except Exception as exc:  # HTTP errors, bad JSON, missing keys: all mean "not usable"
            return " ".join(str(exc).split())[:200]


def resolve_tokenizer(
    choice: str, client: Client, model_path: str | None, fallbacks: Sequence[Client] = ()
) -> Tokenizer | None:
    """`auto`, `server`, `none` or a local path -> a tokenizer, or None for the approx fallback.

    `fallbacks`: more servers with the same tokenizer (a router's other replicas) for `server`."""
    if choice == "none":
        return None
    if choice == "server":
        problem = ServerTokenizer.problem(client)
        if problem:
            raise UserError(
                f"--tokenizer server: {client.url}/v1/tokenize does not work ({problem}); use auto or none"
            )
        return ServerTokenizer(client, fallbacks)
    if choice != "auto":
        return HFTokenizer(choice)
    if model_path and Path(model_path).is_dir():
        try:
            return HFTokenizer(model_path)
        except UserError:
            pass
    if ServerTokenizer.problem(client) is None:
        return ServerTokenizer(client, fallbacks)
    return None


@functools.cache
def corpus_text(index: int) -> str:
    """Source of the index-th corpus module (wrapping); stable for a given Python version."""
    name = CORPUS_MODULES[index % len(CORPUS_MODULES)]
    return f"# file: {name.replace('.', '/')}.py\n" + inspect.getsource(importlib.import_module(name))


def corpus_version() -> str:
    return f"python-{sys.version_info.major}.{sys.version_info.minor} stdlib: {','.join(CORPUS_MODULES)}"


class PromptBuilder:
    """Builds prompt number `n` of exactly `tokens` tokens; corpus ids are cached per module."""

    def __init__(self, tokenizer: Tokenizer | None):
        self.tokenizer = tokenizer
        self._ids: dict[int, list[int]] = {}
        self._instruction: list[int] | None = None

    @property
    def method(self) -> str:
        return self.tokenizer.name if self.tokenizer else "approx"

    def _corpus_ids(self, index: int) -> list[int]:
        if index not in self._ids:
            assert self.tokenizer is not None
            self._ids[index] = self.tokenizer.encode(corpus_text(index))
        return self._ids[index]

    def _filler_ids(self, n: int, count: int) -> list[int]:
        ids: list[int] = []
        module = n
        while len(ids) < count:
            ids.extend(self._corpus_ids(module))
            module += 1
        offset = (n // len(CORPUS_MODULES)) * 97 % max(1, len(ids) - count) if len(ids) > count else 0
        return ids[offset : offset + count]

    def build(self, tokens: int, n: int, with_text: bool = True) -> Prompt:
        """Prompt number `n` of exactly `tokens` tokens; `with_text=False` skips decoding (ids suffice)."""
        if tokens < 1:
            raise UserError(f"context length {tokens} must be at least 1 token")
        tag = f"Request {n}.\n"
        if self.tokenizer is None:
            chars = int(tokens * CHARS_PER_TOKEN)
            body, module = corpus_text(n), n + 1
            while len(body) < chars:
                body, module = body + corpus_text(module), module + 1
            head = tag + body
            text = (head[: max(0, chars - len(INSTRUCTION))] + INSTRUCTION)[-chars:]
            return Prompt(text=text, ids=None, target_tokens=tokens, exact=False)
        prefix = list(getattr(self.tokenizer, "prefix", []))
        if self._instruction is None:
            self._instruction = self.tokenizer.encode(INSTRUCTION)
        tag_ids = self.tokenizer.encode(tag)
        head = prefix + tag_ids
        room = tokens - len(head) - len(self._instruction)
        if room >= 0:
            ids = head + self._filler_ids(n, room) + self._instruction
        else:  # very short contexts: the tag, then as much of the instruction's end as fits
            ids = head[:tokens]
            missing = tokens - len(ids)
            ids += self._instruction[len(self._instruction) - missing :] if missing else []
        assert len(ids) == tokens, (len(ids), tokens)
        text = self.tokenizer.decode(ids[len(prefix) :]) if with_text else ""
        return Prompt(text=text, ids=ids, target_tokens=tokens, exact=True)
