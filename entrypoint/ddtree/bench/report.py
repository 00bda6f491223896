"""Human-readable output of a run: a Markdown table and PNG plots.

matplotlib is imported only inside `plot_sweep` (Agg backend, no display): the runtime imports without
it. The pinned SGLang stack does not pull matplotlib in, so inside the image plots are skipped with a
message unless it is installed; `ddtree bench report DIR` redraws them anywhere from results.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.fsutil import atomic_write


def cell_median(cell: dict[str, Any], metric: str) -> float | None:
    """The median of one metric of a sweep cell (None when not measured); compare reads cells this way too."""
    stats = (cell.get("metrics") or {}).get(metric)
    return float(stats["median"]) if isinstance(stats, dict) else None


def accept_value(cell: dict[str, Any]) -> float | None:
    """A cell's acceptance length: token-weighted, else the per-request median, else the /metrics gauge."""
    metrics = cell.get("metrics") or {}
    if metrics.get("accept_length_weighted") is not None:
        return float(metrics["accept_length_weighted"])
    value = cell_median(cell, "accept_length")
    if value is not None:
        return value
    gauge = cell.get("server_gauge_accept_length")
    return float(gauge) if gauge is not None else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def sweep_markdown(summary: dict[str, Any]) -> str:
    server = summary.get("server") or {}
    settings = summary.get("settings") or {}
    image = summary.get("image") or {}
    lines = [
        f"# ddtree bench: {summary.get('label') or server.get('mode', '?')}",
        "",
        f"- server: {server.get('url')} sglang {server.get('version', '?')}, mode {server.get('mode', '?')}, "
        f"model {server.get('model_path') or server.get('model_id', '?')}",
        f"- speculative: {json.dumps(server.get('speculative') or {}, sort_keys=True)}",
        f"- settings: api {settings.get('api')}, max_tokens {settings.get('max_tokens')}, "
        f"repeats {settings.get('repeats')}, warm-up {settings.get('warmup')}, "
        f"temperature {settings.get('temperature')}, ignore_eos {settings.get('ignore_eos')}",
        f"- prompts: {json.dumps(summary.get('prompt_method') or {}, sort_keys=True)}",
        f"- image: {json.dumps(image.get('labels') or image, sort_keys=True)[:300]}",
        "",
        "Medians over requests (tok/s = decode rate after the first token; TTFT) and over rounds "
        "(aggregate).",
        "",
        "| context | concurrency | prompt tok | tok/s per request | p10-p90 | aggregate tok/s | TTFT ms "
        "| accept length | errors |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for cell in summary.get("cells", []):
        m = cell.get("metrics") or {}
        per = m.get("per_request_tok_s") or {}
        ttft = cell_median(cell, "ttft_s")
        spread = f"{_fmt(per.get('p10'))}-{_fmt(per.get('p90'))}" if per else "-"
        lines.append(
            f"| {cell['context']} | {cell['concurrency']} | {_fmt(cell_median(cell, 'prompt_tokens'), 0)} | "
            f"{_fmt(per.get('median'))} | {spread} | {_fmt(cell_median(cell, 'aggregate_tok_s'))} | "
            f"{_fmt(ttft * 1000 if ttft is not None else None, 0)} | {_fmt(accept_value(cell), 2)} | "
            f"{m.get('errors', 0)} |"
        )
    incomplete = summary.get("incomplete") or []
    if incomplete:
        lines += ["", "Incomplete cells (requests failed; not in the table, measured again on resume):", ""]
        lines += [
            f"- ctx {c['context']} conc {c['concurrency']}: {c['errors']} of {c['requests']} requests failed"
            + (f" (first: {c['first_error']})" if c.get("first_error") else "")
            for c in incomplete
        ]
    return "\n".join(lines) + "\n"


def humaneval_markdown(summary: dict[str, Any]) -> str:
    accept = summary.get("accept_length") or {}
    return "\n".join(
        [
            f"# HumanEval: pass@1 {_fmt(summary.get('pass@1'), 3)}",
            "",
            f"- problems answered: {summary.get('problems_answered')}/{summary.get('problems')}, "
            f"samples per problem {summary.get('samples_per_problem')}",
            f"- by status: {json.dumps(summary.get('by_status') or {}, sort_keys=True)}",
            f"- acceptance length (median): {_fmt(accept.get('median'), 2)}",
            f"- failed: {', '.join(summary.get('failed_tasks') or []) or 'none'}",
            "",
        ]
    )


def plot_sweep(summary: dict[str, Any], out_dir: Path) -> list[Path]:
    """tok_s.png (per-request and aggregate tok/s by context and concurrency) and accept_length.png."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UserError(
            "plots need matplotlib, which this environment lacks: `pip install matplotlib`, "
            "or run `ddtree bench report DIR` where it is installed"
        ) from exc
    cells = summary.get("cells") or []
    if not cells:
        raise UserError("no finished cells to plot")
    contexts = sorted({c["context"] for c in cells})
    concurrencies = sorted({c["concurrency"] for c in cells})
    index = {(c["context"], c["concurrency"]): c for c in cells}
    title = summary.get("label") or (summary.get("server") or {}).get("mode") or "run"
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for conc in concurrencies:
        xs = [ctx for ctx in contexts if (ctx, conc) in index]
        left.plot(
            xs,
            [cell_median(index[(x, conc)], "per_request_tok_s") for x in xs],
            marker="o",
            label=f"conc {conc}",
        )
    left.set(
        xscale="log",
        xlabel="context (tokens)",
        ylabel="output tok/s per request",
        title=f"{title}: per request",
    )
    for ctx in contexts:
        xs = [conc for conc in concurrencies if (ctx, conc) in index]
        right.plot(
            xs, [cell_median(index[(ctx, x)], "aggregate_tok_s") for x in xs], marker="o", label=f"ctx {ctx}"
        )
    right.set(
        xscale="log", xlabel="concurrency", ylabel="aggregate output tok/s", title=f"{title}: aggregate"
    )
    _ticks(left, contexts)
    _ticks(right, concurrencies)
    for axis in (left, right):
        axis.grid(True, alpha=0.3)
        axis.legend()
    fig.tight_layout()
    written.append(_save(fig, out_dir / "tok_s.png"))
    plt.close(fig)

    if any(accept_value(c) is not None for c in cells):
        fig, axis = plt.subplots(figsize=(6.5, 4.5))
        for conc in concurrencies:
            xs = [
                ctx
                for ctx in contexts
                if (ctx, conc) in index and accept_value(index[(ctx, conc)]) is not None
            ]
            axis.plot(xs, [accept_value(index[(x, conc)]) for x in xs], marker="o", label=f"conc {conc}")
        axis.set(xscale="log", xlabel="context (tokens)", ylabel="acceptance length (tokens / verify)")
        axis.set_title(f"{title}: acceptance length")
        _ticks(axis, contexts)
        axis.grid(True, alpha=0.3)
        axis.legend()
        fig.tight_layout()
        written.append(_save(fig, out_dir / "accept_length.png"))
        plt.close(fig)
    return written


def _ticks(axis: Any, values: list[int]) -> None:
    """Label the measured axis values (60, 1024, ...) instead of log decades."""
    axis.set_xticks(values, labels=[str(v) for v in values])
    axis.minorticks_off()


def _save(fig: Any, path: Path) -> Path:
    """Render to memory, then write atomically: a plot is never half a PNG."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    atomic_write(path, buffer.getvalue())
    return path


def write_report(summary: dict[str, Any], out_dir: Path, plots: bool = True) -> tuple[list[Path], str | None]:
    """report.md (+ PNGs). Returns the files written and, when plots were skipped, why."""
    out_dir = Path(out_dir)
    kind = summary.get("kind")
    text = humaneval_markdown(summary) if kind == "humaneval" else sweep_markdown(summary)
    name = "humaneval.md" if kind == "humaneval" else "report.md"
    atomic_write(out_dir / name, text)
    written = [out_dir / name]
    skipped = None
    if plots and kind == "sweep":
        try:
            written += plot_sweep(summary, out_dir)
        except UserError as exc:
            skipped = str(exc)
    return written, skipped
