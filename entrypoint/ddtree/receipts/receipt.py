"""Receipts: a verdict or a benchmark that says which image, host and server produced it.

`ddtree selfcheck --live` and `ddtree bench` write one (JSON). It names the image twice: `served_image`, what
the server reported in /server_info (patch ddtree-served-identity: its baked identity and the tree digest
`ddtree serve` measured), and `image`, the client's view (ddtree.image_identity: labels, identity key, config
id when known, patch series, freeze, tree digest, weights lock); then the host's
GPUs, the server's settings, the figures (median and spread over the runs), the sha256 of the greedy output
of the fixed prompt (PROMPT below, GREEDY_TOKENS tokens at temperature 0), the checks with their status,
and `digest`: sha256 over the canonical JSON of everything else.

`ddtree receipt verify FILE [--image REF | --labels FILE]` rejects (exit 1), one line per reason:
    schema       not this version's schema (ddtree-receipt/2), or a key given twice anywhere in the JSON
                 (a reader keeps one of them: `"verdict": "FAILED"` hidden before a second one)
    edited       the digest does not match the content (an edit after writing, or a damaged file)
    verdict      not a pass: a live receipt must say REPRODUCED, a bench receipt COMPLETE
    checks       a required check is missing, or any check did not pass
    image        the server reported no identity, or one other than the client's view, or files (measured
                 tree) other than its image's; or the served image differs from REF's (`docker image inspect`
                 on the host), from the --labels file, or, without either, from the image this runs in
The digest is integrity, not a signature: it catches edits and mix-ups, not someone who recomputes it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddtree import __version__, gpu, image_identity
from ddtree.errors import UserError
from ddtree.fsutil import atomic_write, read_text
from ddtree.jsonshape import NONE, MapOf, Required, problem
from ddtree.jsontext import JsonProblem, parse

SCHEMA = "ddtree-receipt/2"
# The verdict a receipt of each kind must carry for `verify` to accept it.
PASSING_VERDICT = {"live": "REPRODUCED", "bench": "COMPLETE"}
KINDS = ("live", "bench")
# Checks a receipt of each kind must carry, each with status "pass", for `verify` to accept it.
REQUIRED_CHECKS: dict[str, tuple[str, ...]] = {
    "live": (
        "health",
        "server_info",
        "settings",
        "generation",
        "decode_tok_s",
        "accept_length",
        "greedy_output",
    ),
    "bench": ("sweep", "greedy_output"),
}
# The fixed greedy prompt: the live check's own (a coding task, where DFlash drafts are accepted most).
PROMPT = (
    "Write a Python function `merge_intervals(intervals)` that merges overlapping closed intervals and "
    "returns them sorted. Include a docstring and three doctest examples, then explain its complexity.\n"
)
GREEDY_TOKENS = 256
# Greedy runs of PROMPT a bench receipt makes (identical outputs prove deterministic decoding).
GREEDY_RUNS = 2
EXIT_VALID, EXIT_REJECTED = 0, 1  # a receipt that cannot be read or an image that cannot be inspected: 2


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def canonical(document: Mapping[str, Any]) -> bytes:
    """The bytes the digest covers: sorted keys, no whitespace, the digest field left out."""
    body = {k: v for k, v in document.items() if k != "digest"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def content_digest(document: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical(document)).hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def greedy_record(
    texts: Sequence[str], max_tokens: int, output_tokens: int | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the receipt's `greedy` block, the greedy_output check) from the outputs of repeated greedy runs of
    PROMPT: identical texts are the proof that greedy decoding is deterministic here."""
    record = {
        "prompt_sha256": sha256_text(PROMPT),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "output_tokens": output_tokens,
        "output_sha256": sha256_text(texts[0]) if texts and texts[0] else None,
        "runs": len(texts),
    }
    if not texts or not texts[0]:
        return record, check_row(
            "greedy_output", "fail", "the server returned no text (started with --skip-tokenizer-init?)"
        )
    if len(set(texts)) > 1:
        shas = sorted({sha256_text(t)[:12] for t in texts})
        return record, check_row(
            "greedy_output", "fail", f"greedy output differs between {len(texts)} runs ({', '.join(shas)})"
        )
    return record, check_row(
        "greedy_output", "pass", f"sha256 {record['output_sha256'][:16]} ({len(texts)} identical run(s))"
    )


def check_row(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


def host_facts(runner: gpu.Runner = gpu.run_nvidia_smi) -> dict[str, Any]:
    """The GPUs nvidia-smi lists here (names, driver, count); the reason when it cannot answer."""
    facts: dict[str, Any] = {"machine": platform.machine(), "kernel": platform.release()}
    try:
        gpus = gpu.query_gpus(runner)
    except UserError as exc:
        return {**facts, "gpu_count": 0, "gpus": [], "driver": None, "gpu_error": str(exc)}
    return {
        **facts,
        "gpu_count": len(gpus),
        "gpus": sorted({g.name for g in gpus}),
        "compute_capabilities": sorted({g.compute_cap for g in gpus}),
        "driver": gpus[0].driver_version,
    }


def build(
    kind: str,
    *,
    server: Mapping[str, Any],
    figures: Mapping[str, Any],
    greedy: Mapping[str, Any],
    checks: Sequence[Mapping[str, str]],
    verdict: str,
    image: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A complete receipt with its digest; image and host default to what is here."""
    if kind not in KINDS:
        raise ValueError(f"receipt kind {kind!r} is not one of {KINDS}")
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": kind,
        "created": now_iso(),
        "tool": f"ddtree {__version__}",
        "image": dict(image if image is not None else image_identity.describe()),
        "host": dict(host if host is not None else host_facts()),
        "server": dict(server),
        "served_image": server.get("ddtree_image"),
        "figures": dict(figures),
        "greedy": dict(greedy),
        "checks": [dict(c) for c in checks],
        "verdict": verdict,
        **(extra or {}),
    }
    document["digest"] = content_digest(document)
    return document


def from_live(report: Any) -> dict[str, Any]:
    """The receipt of a `selfcheck --live` run (a ddtree.selfcheck.live.LiveReport)."""
    statuses = {"warn": "fail"}  # a degraded figure is a failed check in a receipt
    return build(
        "live",
        server={"url": report.url, **report.server},
        figures=report.figures,
        greedy=report.greedy,
        checks=[check_row(c.name, statuses.get(c.status, c.status), c.detail) for c in report.checks],
        verdict=report.verdict,
        extra={"expected": report.expected},
    )


def from_bench(
    summary: Mapping[str, Any],
    greedy: Mapping[str, Any],
    greedy_check: Mapping[str, str],
    missing: Sequence[str],
    labels_file: str | None = None,
) -> dict[str, Any]:
    """The receipt of a `ddtree bench` sweep: per cell median and spread, the results it summarises."""
    figures = {
        f"ctx{c['context']}-conc{c['concurrency']}": {
            metric: (c.get("metrics") or {}).get(metric)
            for metric in (
                "per_request_tok_s",
                "aggregate_tok_s",
                "ttft_s",
                "accept_length",
                "accept_length_weighted",
            )
        }
        for c in summary.get("cells") or []
    }
    incomplete = [
        f"ctx{c['context']}-conc{c['concurrency']}"
        for c in summary.get("cells") or []
        if not c.get("complete")
    ]
    gaps = [*missing, *incomplete]
    sweep = (
        check_row("sweep", "fail", f"cells not measured or incomplete: {', '.join(gaps)}")
        if gaps
        else check_row(
            "sweep",
            "pass",
            f"{len(figures)} cell(s) measured, {summary['settings']['repeats']} round(s) each",
        )
    )
    server = summary.get("server") or {}
    return build(
        "bench",
        server=server,
        figures=figures,
        greedy=greedy,
        checks=[sweep, dict(greedy_check)],
        verdict="COMPLETE" if not gaps else "INCOMPLETE",
        image=image_identity.describe(labels_file=labels_file),
        extra={"results": {k: v for k, v in summary.items() if not k.startswith("_")}},
    )


def write(path: Path, document: Mapping[str, Any]) -> Path:
    atomic_write(
        Path(path), json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n", mode=0o644
    )
    return Path(path)


class DuplicateKey(ValueError):
    """A JSON object names a key twice: readers disagree on which value counts."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen.add(key)
    return dict(pairs)


# The fields `verify` reads (ddtree.jsonshape); a receipt of another shape is refused, naming the field.
IMAGE_SHAPE = {"key": (str, NONE), "labels": (MapOf(str), NONE), "config_digest": (str, NONE)}
SHAPE = {
    "schema": Required(str),
    "kind": Required(str),
    "digest": Required(str),
    "verdict": (str, NONE),
    "checks": Required([{"name": Required(str), "status": Required(str), "detail": (str, NONE)}]),
    "image": (IMAGE_SHAPE, NONE),
    "served_image": (
        {**IMAGE_SHAPE, "tree_sha256": (str, NONE), "tree_sha256_measured": (str, NONE)},
        NONE,
    ),
}


def load(path: Path) -> dict[str, Any]:
    """The receipt: UTF-8 JSON (depth-limited) of SHAPE, read through fsutil (absent, FIFO, not UTF-8:
    one line, exit 2); a key given twice or another schema version is a one-line rejection (exit 1)."""
    hint = "give a receipt written by `ddtree selfcheck --live` or `ddtree bench`"
    try:
        text = read_text(Path(path), f"not found; {hint}")
    except UserError as exc:
        raise UserError(str(exc), 2) from exc
    try:
        data = parse(text, object_pairs_hook=_no_duplicates)
    except DuplicateKey as exc:
        raise UserError(
            f"{path}: REJECTED: schema: key {exc.args[0]!r} is given twice", EXIT_REJECTED
        ) from exc
    except JsonProblem as exc:
        raise UserError(f"{path}: not readable JSON ({exc}); {hint}") from exc
    schema = data.get("schema") if isinstance(data, dict) else None
    if isinstance(schema, str) and schema.startswith("ddtree-receipt/") and schema != SCHEMA:
        raise UserError(
            f"{path}: REJECTED: schema: {schema!r} is not {SCHEMA}, the version this ddtree verifies "
            "(an older receipt records no server identity: measure again)",
            EXIT_REJECTED,
        )
    if not is_receipt(data):
        raise UserError(f"{path}: not a ddtree receipt (no schema {SCHEMA})")
    misfit = problem(data, SHAPE)
    if misfit:
        raise UserError(f"{path}: not a well-formed receipt ({misfit}); {hint}")
    return data


def is_receipt(data: Any) -> bool:
    """A ddtree receipt of any schema version (`bench compare` reads older ones; `verify` wants SCHEMA)."""
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("ddtree-receipt/")


def problems(document: Mapping[str, Any], expected_labels: Mapping[str, str] | None = None) -> list[str]:
    """Every reason to reject the receipt, one line each (empty: valid). `expected_labels` are the labels
    of the image it must come from (None: the image is not compared)."""
    found = []
    if document.get("schema") != SCHEMA:
        found.append(f"schema: {document.get('schema')!r} is not {SCHEMA}")
    stated = document.get("digest")
    if stated != content_digest(document):
        found.append(
            f"edited: content digest {content_digest(document)[:23]} is not the recorded {str(stated)[:23]}"
        )
    kind = document.get("kind")
    if kind not in KINDS:
        found.append(f"checks: unknown receipt kind {kind!r}")
    else:
        if document.get("verdict") != PASSING_VERDICT[kind]:
            found.append(f"verdict: {document.get('verdict')!r}, not {PASSING_VERDICT[kind]}")
        rows = [row for row in document.get("checks") or [] if isinstance(row, dict)]
        names = {row.get("name") for row in rows}
        found += [f"checks: required check {n!r} is missing" for n in REQUIRED_CHECKS[kind] if n not in names]
        found += [
            f"checks: check {row.get('name')!r} is {row.get('status')}: {row.get('detail')}"
            for row in rows
            if row.get("status") != "pass"
        ]
    found += served_problems(document)
    if expected_labels is not None:
        found += expected_problems(document, expected_labels)
    return found


def served_problems(document: Mapping[str, Any]) -> list[str]:
    """The server's identity against the client's view and against its own measured files."""
    served = document.get("served_image")
    if not isinstance(served, dict) or not served.get("key"):
        return ["image: the server reported no image identity (/server_info has no ddtree_image)"]
    found = []
    client = (document.get("image") or {}).get("key")
    if client and client != served["key"]:
        found.append(f"image: the server ran image {served['key'][:12]}, the client saw {str(client)[:12]}")
    measured, baked = served.get("tree_sha256_measured"), served.get("tree_sha256")
    if not measured:
        found.append("image: the server's files were not measured (ddtree serve's tree check skipped)")
    elif baked and measured != baked:
        found.append(f"image: the server's files (tree {measured[:12]}) are not its image's ({baked[:12]})")
    return found


def expected_problems(document: Mapping[str, Any], expected_labels: Mapping[str, str]) -> list[str]:
    """The served image against the image the receipt must come from."""
    served = document.get("served_image") or {}
    want = image_identity.identity_key(expected_labels, with_tree=False)
    if want is None:
        return ["image: the expected image has no io.ddtree labels (not a ddtree image)"]
    found = []
    have = served.get("key")
    if have and have != want:
        mine = image_identity.identity_labels(served.get("labels") or {})
        theirs = image_identity.identity_labels(expected_labels)
        diff = sorted(
            k
            for k in set(mine) | set(theirs)
            if mine.get(k) != theirs.get(k) and k != image_identity.TREE_LABEL
        )
        found.append(
            f"image: made by image {str(have)[:12]}, not {want[:12]}"
            + (f" (labels differ: {', '.join(diff[:4])})" if diff else "")
        )
    tree = image_identity.known_tree(expected_labels)
    seen = served.get("tree_sha256")  # the measured one is held to it in served_problems
    if tree and seen and seen != tree:
        found.append(f"image: the server's tree {str(seen)[:12]} is not the expected image's {tree[:12]}")
    return found


# ---------------------------------------------------------------- CLI


def _cmd_verify(args: argparse.Namespace) -> int:
    document = load(Path(args.file))
    expected: dict[str, str] | None
    against: str
    if args.image:
        expected, image_id = image_identity.docker_labels(args.image)
        recorded = (document.get("image") or {}).get("config_digest")
        against = f"image {args.image}" + (f" ({image_id[:19]})" if image_id else "")
        if recorded and image_id and recorded != image_id:
            print(f"note: config digest {recorded[:19]} recorded, {image_id[:19]} now (the labels decide)")
    elif args.labels:
        expected, _ = image_identity.read_labels_file(Path(args.labels))
        against = f"labels {args.labels}"
    else:
        source, labels, _ = image_identity.local_labels()
        expected = labels if source else None
        against = f"this image ({source})" if source else "no image (pass --image REF to compare)"
    found = problems(document, expected)
    for line in found:
        print(f"REJECTED: {line}")
    verdict = "REJECTED" if found else "VALID"
    print(
        f"receipt {args.file}: {verdict} ({document.get('kind')}, verdict {document.get('verdict')}, "
        f"image {str((document.get('served_image') or {}).get('key'))[:12]}; compared with {against})"
    )
    return EXIT_REJECTED if found else EXIT_VALID


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("receipt", help="verify a receipt from `selfcheck --live` or `bench`")
    sub = parser.add_subparsers(dest="receipt_command", metavar="SUBCOMMAND", required=True)
    verify = sub.add_parser(
        "verify", help="reject a receipt edited after writing, missing a check, or from another image"
    )
    verify.add_argument("file", help="the receipt JSON")
    where = verify.add_mutually_exclusive_group()
    where.add_argument("--image", metavar="REF", help="the image it must come from (docker image inspect)")
    where.add_argument("--labels", metavar="FILE", help="that image's labels (`docker image inspect` output)")
    verify.set_defaults(func=_cmd_verify)
