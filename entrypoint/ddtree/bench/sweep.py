"""The context x concurrency sweep: warm-up, repeated rounds, results written as they come, resume.

Layout of an output directory (every file written atomically):
    run.json            settings + server fingerprint; a resume must match it
    cells/ctx{C}-conc{K}.json   one finished cell, with every request's record
    results.json        the summary of all finished cells (rewritten after each cell)
A cell file exists only once the cell is complete, so an interrupted run loses at most the cell in flight;
running the same command again skips the finished cells.

Per cell: `warmup` rounds (discarded; they trigger CUDA graph capture and JIT for the batch size),
then `repeats` rounds of K requests sent at once. A round's aggregate tok/s is all its output tokens
over the round's wall time (first send to last token); a request's tok/s is its decode rate
(tokens after the first over the time after the first); TTFT is send to first token.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddtree import __version__
from ddtree.bench.client import Client, GenerationRequest, run_concurrently
from ddtree.bench.progress import Progress
from ddtree.bench.prompts import PromptBuilder, corpus_version
from ddtree.bench.serverinfo import configuration_fingerprint, scrape_accept_length
from ddtree.bench.stats import describe
from ddtree.bench.stream import RequestResult
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write
from ddtree.jsontext import JsonProblem, load_file, parse

SCHEMA = "ddtree-bench/1"


@dataclass
class SweepSettings:
    """What a sweep measures. Everything except the axes must match for a resume."""

    api: str = "generate"
    contexts: list[int] = field(default_factory=lambda: [60, 1024, 4096, 8192])
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32, 64])
    max_tokens: int = 256
    repeats: int = 3
    warmup: int = 1
    warmup_tokens: int = 32
    temperature: float = 0.0
    ignore_eos: bool = True
    model: str = "default"
    extra_body: dict[str, Any] = field(default_factory=dict)
    label: str | None = None

    def fingerprint(self) -> dict[str, Any]:
        data = asdict(self)
        for axis in ("contexts", "concurrency", "label"):
            data.pop(axis)
        return data


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def cell_name(context: int, concurrency: int) -> str:
    return f"ctx{context}-conc{concurrency}"


def _complete_cell(path: Path) -> dict[str, Any] | None:
    """A finished cell's record; None when absent, damaged (measured again) or incomplete."""
    cell = _read_cell(path)
    return cell if cell is not None and cell.get("complete") else None


def _read_cell(path: Path) -> dict[str, Any] | None:
    """A cell file as an object; None when unreadable, damaged or not an object (it is measured again)."""
    try:
        cell = parse(path.read_bytes())
    except (OSError, JsonProblem):
        return None
    return cell if isinstance(cell, dict) else None


class RunStore:
    """The output directory of one sweep: refuses to mix settings or servers, keeps finished cells."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.cells_dir = self.out_dir / "cells"

    def open(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create run.json, or check that an existing one matches (resume). Returns the manifest in force."""
        path = self.out_dir / "run.json"
        if path.exists():
            old = load_file(path, "remove it or choose another --out")
            if not isinstance(old, dict):
                raise UserError(f"{path}: not a run manifest; remove it or choose another --out")
            for key in ("settings", "server_fingerprint", "prompt_method"):
                if old.get(key) != manifest.get(key):
                    raise UserError(
                        f"{path}: this run's {key.replace('_', ' ')} differ from the one in --out "
                        f"({json.dumps(old.get(key), sort_keys=True)[:200]} there); "
                        "use another --out, or the same settings to resume"
                    )
            old["resumed"] = [*old.get("resumed", []), now_iso()]
            manifest = old
        atomic_write(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        return manifest

    def cell_path(self, context: int, concurrency: int) -> Path:
        return self.cells_dir / f"{cell_name(context, concurrency)}.json"

    def load_cell(self, context: int, concurrency: int) -> dict[str, Any] | None:
        return _complete_cell(self.cell_path(context, concurrency))

    def save_cell(self, cell: dict[str, Any]) -> None:
        atomic_write(self.cell_path(cell["context"], cell["concurrency"]), json.dumps(cell, indent=1) + "\n")

    def all_cells(self) -> list[dict[str, Any]]:
        found = (_complete_cell(path) for path in sorted(self.cells_dir.glob("ctx*-conc*.json")))
        cells = [cell for cell in found if cell is not None]
        return sorted(cells, key=lambda c: (c["context"], c["concurrency"]))

    def incomplete_cells(self) -> list[dict[str, Any]]:
        """Cells measured with failed requests (kept out of `cells`, measured again on resume), counted."""
        found = []
        for path in sorted(self.cells_dir.glob("ctx*-conc*.json")):
            cell = _read_cell(path)
            if cell is None or cell.get("complete"):
                continue
            requests = cell.get("requests")
            failed = (
                [r for r in requests if isinstance(r, dict) and not r.get("ok")]
                if isinstance(requests, list)
                else []
            )
            found.append(
                {
                    "context": cell["context"],
                    "concurrency": cell["concurrency"],
                    "requests": cell["metrics"]["requests"],
                    "errors": cell["metrics"]["errors"],
                    "first_error": failed[0].get("error") if failed else None,
                }
            )
        return sorted(found, key=lambda c: (c["context"], c["concurrency"]))

    def write_summary(self, manifest: dict[str, Any]) -> dict[str, Any]:
        summary = {
            **{k: v for k, v in manifest.items() if k != "resumed"},
            "updated": now_iso(),
            "cells": [{k: v for k, v in cell.items() if k != "requests"} for cell in self.all_cells()],
            "incomplete": self.incomplete_cells(),
        }
        atomic_write(self.out_dir / "results.json", json.dumps(summary, indent=2) + "\n")
        return summary


def cell_metrics(results: list[tuple[int, RequestResult]], rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-cell figures from the measured rounds (warm-up excluded)."""
    good = [r for _, r in results if r.ok]
    verify = sum(r.verify_ct or 0 for r in good)
    weighted = sum(r.output_tokens for r in good if r.verify_ct) / verify if verify else None
    return {
        "requests": len(results),
        "errors": sum(1 for _, r in results if not r.ok),
        "per_request_tok_s": describe(r.decode_tok_s for r in good),
        "per_request_e2e_tok_s": describe(
            r.output_tokens / r.latency_s if r.latency_s > 0 else None for r in good
        ),
        "aggregate_tok_s": describe(rd["aggregate_tok_s"] for rd in rounds),
        "ttft_s": describe(r.ttft_s for r in good),
        "output_tokens": describe(r.output_tokens for r in good),
        "prompt_tokens": describe(r.prompt_tokens for r in good),
        "accept_length": describe(r.accept_length for r in good),
        "accept_length_weighted": weighted,
    }


def round_record(index: int, results: list[RequestResult]) -> dict[str, Any]:
    """One measured round. Besides the throughput: the decode span (first token of the first request to the
    last token of the last) and the server steps in it, so a round's time per step can be compared across
    rounds whose prompts differ (a speculative mode's tok/s varies with each prompt's acceptance; its step
    time should not)."""
    good = [r for r in results if r.ok]
    starts = [r.start for r in results]
    ends = [r.last_token_at or r.end for r in good]
    wall = (max(ends) - min(starts)) if good else None
    tokens = sum(r.output_tokens for r in good)
    firsts = [r.first_token_at for r in good if r.first_token_at is not None]
    lasts = [r.last_token_at for r in good if r.last_token_at is not None]
    verify = [r.verify_ct for r in good if r.verify_ct]
    # Steps after the first token: verify passes of the longest request (speculative), else its tokens - 1.
    steps = (
        max(verify)
        if verify and len(verify) == len(good)
        else max((r.output_tokens - 1 for r in good), default=0)
    )
    return {
        "round": index,
        "requests": len(results),
        "errors": len(results) - len(good),
        "output_tokens": tokens,
        "wall_s": wall,
        "aggregate_tok_s": tokens / wall if wall else None,
        "decode_s": (max(lasts) - min(firsts)) if firsts and lasts else None,
        "decode_steps": steps or None,
    }


class Sweep:
    """Runs the cells in order, skipping the ones already in the store."""

    def __init__(
        self,
        client: Client,
        settings: SweepSettings,
        builder: PromptBuilder,
        store: RunStore,
        progress_enabled: bool = True,
    ):
        self.client = client
        self.settings = settings
        self.builder = builder
        self.store = store
        self.progress_enabled = progress_enabled

    def manifest(self, server: dict[str, Any], image: dict[str, Any]) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "kind": "sweep",
            "tool": f"ddtree {__version__}",
            "created": now_iso(),
            "label": self.settings.label or server.get("mode"),
            "settings": self.settings.fingerprint(),
            "server": server,
            "server_fingerprint": configuration_fingerprint(server),
            "image": image,
            "prompt_method": {"tokenizer": self.builder.method, "corpus": corpus_version()},
        }

    def requests_for(
        self, context: int, concurrency: int, round_index: int, warm: bool
    ) -> list[GenerationRequest]:
        s = self.settings
        # Distinct numbers -> distinct prompts: no request reuses another's cached prefix.
        base = (context * 1000 + concurrency) * 100_000 + (50_000 if warm else 0) + round_index * concurrency
        with_text = s.api == "chat" or self.builder.tokenizer is None
        prompts = [self.builder.build(context, base + i, with_text) for i in range(concurrency)]
        return [
            GenerationRequest(
                prompt_ids=p.ids if s.api != "chat" else None,
                prompt_text=p.text,
                max_tokens=min(s.warmup_tokens, s.max_tokens) if warm else s.max_tokens,
                temperature=s.temperature,
                ignore_eos=s.ignore_eos,
                model=s.model,
                extra_body=s.extra_body,
            )
            for p in prompts
        ]

    def run_cell(self, context: int, concurrency: int, progress: Progress) -> dict[str, Any]:
        s = self.settings
        started = now_iso()
        where = f"ctx={context} conc={concurrency}"
        for w in range(s.warmup):
            progress.show(f"{where} warm-up {w + 1}/{s.warmup}")
            warm = run_concurrently(self.client, self.requests_for(context, concurrency, w, warm=True))
            self._check_round(warm, where)
            progress.update(f"{where} warm-up {w + 1}/{s.warmup}")
        rounds: list[dict[str, Any]] = []
        results: list[tuple[int, RequestResult]] = []
        for r in range(s.repeats):
            progress.show(f"{where} round {r + 1}/{s.repeats}")
            measured = run_concurrently(self.client, self.requests_for(context, concurrency, r, warm=False))
            self._check_round(measured, where)
            rounds.append(round_record(r, measured))
            results.extend((r, res) for res in measured)
            progress.update(f"{where} round {r + 1}/{s.repeats}")
        metrics = cell_metrics(results, rounds)
        source = "meta_info" if metrics["accept_length"] else None
        gauge = scrape_accept_length(self.client)
        if source is None and gauge is not None:
            source = "metrics"
        return {
            "context": context,
            "concurrency": concurrency,
            "complete": metrics["errors"] == 0,
            "started": started,
            "finished": now_iso(),
            "metrics": metrics,
            "accept_length_source": source,
            "server_gauge_accept_length": gauge,
            "rounds": rounds,
            "requests": [{"round": r, **res.summary()} for r, res in results],
        }

    @staticmethod
    def _check_round(results: list[RequestResult], where: str) -> None:
        if results and all(not r.ok for r in results):
            raise UserError(
                f"{where}: every request failed (first: {results[0].error}); "
                "fix the server, then run the same command again to resume"
            )

    def run(self, manifest: dict[str, Any]) -> dict[str, Any]:
        s = self.settings
        todo = [(c, k) for c in s.contexts for k in s.concurrency if self.store.load_cell(c, k) is None]
        skipped = len(s.contexts) * len(s.concurrency) - len(todo)
        progress = Progress(len(todo) * (s.warmup + s.repeats), "bench", enabled=self.progress_enabled)
        if skipped:
            progress.show(f"resuming: {skipped} finished cell(s) kept")
        for context, concurrency in todo:
            cell = self.run_cell(context, concurrency, progress)
            self.store.save_cell(cell)
            self.store.write_summary(manifest)
            if not cell["complete"]:
                progress.show(
                    f"ctx={context} conc={concurrency}: {cell['metrics']['errors']} request(s) failed; "
                    "saved as incomplete, measured again on resume"
                )
        progress.done()
        return self.store.write_summary(manifest)
