"""`ddtree weights fetch`: download exactly the locked revision of the target and the drafter.

Every file env/weights.yaml lists for a role is fetched with huggingface_hub at the
locked commit into DIR/target or DIR/drafter (the image's mount points are /models/target and
/models/drafter, so `--to /models` fills both), through huggingface_hub's HTTP download (its token
handling, Hub errors, retries and progress bar). Partial files gather under DIR/ROLE/.cache/ddtree-fetch/
and are resumed with a Range request, within one run after a dropped connection and across runs.

Each file is checked against the lock (size, then sha256) as it lands: a good file is kept, a bad one
is removed and named, the others go on; the run exits 1 naming the first bad or missing file. A file
already present and matching the lock is not downloaded again, so an already-complete folder verifies
offline and exits 0 (HF_HUB_OFFLINE=1 or --offline: nothing is asked of the Hub).

The token comes from HF_TOKEN or --token-file FILE (the drafter, z-lab/Kimi-K2.6-DFlash, is gated); it is
never printed and never on a command line, and goes only to the Hub: a download the Hub redirects to
another host (its CDN) is asked for without it, as huggingface_hub does. HF_ENDPOINT points at another Hub
(a mirror, or the tests' local stand-in).
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ddtree.errors import UserError
from ddtree.fsutil import read_text, sha256_file
from ddtree.weights import lock as weights_lock

EXIT_INCOMPLETE = 1
PARTIAL_DIR = Path(".cache") / "ddtree-fetch"


@dataclass
class FetchReport:
    """What a run did per role: files already good, fetched and verified, bad (removed), missing."""

    present: list[str] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # one line each: "path: why"
    missing: list[str] = field(default_factory=list)


def read_token(token_file: str | None, environ: dict[str, str] | os._Environ[str]) -> str | None:
    """The Hub token from --token-file, else HF_TOKEN, else None (huggingface_hub's own login, if any)."""
    if token_file:
        token = read_text(Path(token_file), "not found; --token-file names the Hugging Face token's file")
        token = token.strip()
        if not token:
            raise UserError(f"--token-file {token_file} is empty: put the Hugging Face token in it")
        return token
    return environ.get("HF_TOKEN") or None


def verify_file(path: Path, entry: weights_lock.LockedFile) -> str | None:
    """None when `path` matches the lock entry, else why not (size first: it costs nothing)."""
    if not path.is_file():
        return "absent"
    size = path.stat().st_size
    if entry.size is not None and size != entry.size:
        return f"{size} bytes, the lock says {entry.size}"
    if entry.sha256 is not None:
        digest = sha256_file(path, 8 << 20)
        if digest != entry.sha256:
            return f"sha256 {digest[:16]}..., the lock says {entry.sha256[:16]}..."
    return None


def _hub_error(exc: Exception, model: weights_lock.LockedModel, filename: str, token: bool) -> UserError:
    """One line for what the Hub (or the network) answered."""
    from huggingface_hub import errors

    where = f"{model.repo}@{model.revision}"
    if isinstance(exc, errors.GatedRepoError):
        fix = (
            "the token given has no access: accept the repository's terms on the Hub with that account"
            if token
            else "give a token with access: HF_TOKEN or --token-file FILE"
        )
        return UserError(f"{model.repo} is gated and refused {filename}: {fix}")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return UserError(
            f"{model.repo} was not found on the Hub (or needs a token): check the lock's repo and HF_TOKEN"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return UserError(f"{where}: the Hub has no such revision; the lock names a commit that is gone")
    if isinstance(exc, errors.EntryNotFoundError):
        return UserError(f"{where} has no file {filename}: the lock does not match the repository")
    if isinstance(exc, errors.LocalEntryNotFoundError):
        return UserError(f"{filename} of {where} is not here and the Hub is not reachable (offline?)")
    detail = " ".join(str(exc).split())[:200]
    return UserError(f"downloading {filename} of {where} failed ({type(exc).__name__}: {detail})")


def require_hub_client() -> None:
    """huggingface_hub is in the image's lock; on another host it may be missing: say so, no traceback."""
    try:
        import huggingface_hub  # noqa: F401
    except ImportError as exc:
        raise UserError(
            "huggingface_hub is not installed here (the image has it): pip install huggingface-hub==1.20.1, "
            "or run the fetch in the image (docker compose run --rm ddtree-fetch)"
        ) from exc


def require_pinned(model: weights_lock.LockedModel, lock_path: Path) -> None:
    """A fetch needs the commit and the file list; unknown ones are refused before anything is written."""
    if model.revision is None or model.files is None:
        unknown = ", ".join(model.unknowns())
        raise UserError(
            f"{lock_path}: {model.role} ({model.repo}) has {unknown} unknown: nothing exact to fetch; "
            "a capture of the original host fills the lock "
            "(ddtree-build capture --weights-target/--weights-drafter)"
        )


def fetch_role(
    model: weights_lock.LockedModel,
    dest: Path,
    lock_path: Path,
    token: str | None,
    offline: bool,
    log: TextIO,
) -> FetchReport:
    """Fetch and verify every locked file of one role into `dest`; see the module docstring."""
    require_pinned(model, lock_path)
    report = FetchReport()
    assert model.files is not None
    for entry in model.files:
        path = dest / entry.path
        if path.exists() or path.is_symlink():
            why = verify_file(path, entry)
            if why is None:
                report.present.append(entry.path)
                continue
            # A bad local copy: huggingface_hub would trust its metadata and keep it; remove it first.
            path.unlink()
            print(f"bad  {model.role} {path}: {why}; removed, fetching it again", file=log)
        if offline:
            report.missing.append(entry.path)
            continue
        _download(model, entry, dest, token)
        why = verify_file(path, entry)
        if why is None:
            report.fetched.append(entry.path)
            print(f"ok   {model.role} {entry.path} ({entry.size} bytes, sha256 verified)", file=log)
        else:
            path.unlink(missing_ok=True)
            report.bad.append(f"{path}: {why}")
            print(f"bad  {model.role} {path}: {why}; removed (the good files are kept)", file=log)
    return report


def partial_path(dest: Path, rel: str) -> Path:
    """Where a file's bytes gather until verified (a hidden folder: the lock comparison skips it)."""
    return dest / PARTIAL_DIR / f"{rel}.incomplete"


def _download(
    model: weights_lock.LockedModel, entry: weights_lock.LockedFile, dest: Path, token: str | None
) -> None:
    """Append the missing bytes of one file to its partial file, then move it into place.

    huggingface_hub's `http_get` does the transfer (Range requests from the partial file's size, five
    retries on a dropped connection, the progress bar); `hf_hub_download` itself would throw a partial
    file away on failure, so it is not used: a 10 GB shard cut at 9 GB resumes at 9 GB on the next run.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    endpoint = os.environ.get("HF_ENDPOINT") or None
    partial = partial_path(dest, entry.path)
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        url = hf_hub_url(model.repo, entry.path, revision=model.revision, endpoint=endpoint)
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
        expected = entry.size if entry.size is not None else meta.size
        if partial.exists() and expected is not None and partial.stat().st_size > expected:
            partial.unlink()  # longer than the file: not a prefix of it
        with open(partial, "ab") as handle:
            http_get(
                meta.location,
                handle,
                resume_size=handle.tell(),
                headers=download_headers(url, meta.location, build_hf_headers(token=token)),
                expected_size=expected,
                displayed_filename=f"{model.role}/{entry.path}",
            )
    except Exception as exc:  # every Hub or network problem becomes one line
        raise _hub_error(exc, model, entry.path, token is not None) from exc
    target = dest / entry.path
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, target)


def download_headers(url: str, location: str, headers: dict[str, str]) -> dict[str, str]:
    """The headers for the GET of `location`: without Authorization when the Hub redirected to another
    host (its CDN, a signed URL), as huggingface_hub's own download does; the token stays with the Hub."""
    if urllib.parse.urlsplit(url).netloc != urllib.parse.urlsplit(location).netloc:
        return {k: v for k, v in headers.items() if k.lower() != "authorization"}
    return headers


def fetch(
    to: Path,
    roles: Sequence[str],
    lock_path: Path | None = None,
    token: str | None = None,
    offline: bool = False,
    log: TextIO | None = None,
) -> dict[str, FetchReport]:
    """Fetch the roles into to/ROLE; raises UserError naming the first bad or missing file at the end."""
    log = log if log is not None else sys.stdout
    lock = weights_lock.load_lock(lock_path)
    if not offline:
        require_hub_client()
    for role in roles:
        require_pinned(lock.models[role], lock.path)
    reports: dict[str, FetchReport] = {}
    for role in roles:
        dest = Path(to) / role
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"--to {to}: cannot create {dest} ({exc.strerror}); is the mount read-only?"
            ) from exc
        reports[role] = fetch_role(lock.models[role], dest, lock.path, token, offline, log)
    for role, report in reports.items():
        if report.bad:
            raise UserError(
                f"{role}: {report.bad[0]} ({len(report.bad)} bad, removed; "
                f"{len(report.present) + len(report.fetched)} good files kept): run the fetch again; "
                "if it repeats, the Hub's file differs from the lock",
                exit_code=EXIT_INCOMPLETE,
            )
        if report.missing:
            raise UserError(
                f"{role}: {Path(to) / role / report.missing[0]} is missing ({len(report.missing)} files) and "
                "the run is offline: fetch with the Hub reachable",
                exit_code=EXIT_INCOMPLETE,
            )
    return reports


def _cmd_fetch(args: argparse.Namespace) -> int:
    roles = [args.only] if args.only else list(weights_lock.ROLES)
    offline = args.offline or os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "TRUE", "yes")
    token = read_token(args.token_file, os.environ)
    lock_path = Path(args.lock) if args.lock else None
    reports = fetch(Path(args.to), roles, lock_path=lock_path, token=token, offline=offline)
    for role, report in reports.items():
        print(
            f"ok   {role} {Path(args.to) / role}: {len(report.present) + len(report.fetched)} files match "
            "the lock "
            f"({len(report.fetched)} fetched, {len(report.present)} already here)"
        )
    return 0


def register(sub: Any) -> None:
    """`ddtree weights fetch` (added to `ddtree weights` by weights_cmd.register)."""
    parser = sub.add_parser(
        "fetch",
        help="download exactly the locked revision (env/weights.yaml) of the target and the drafter",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--to", required=True, metavar="DIR", help="writes DIR/target and DIR/drafter")
    parser.add_argument("--only", choices=weights_lock.ROLES, help="fetch one role only")
    parser.add_argument("--token-file", metavar="FILE", help="file holding the Hub token (else HF_TOKEN)")
    parser.add_argument(
        "--lock", metavar="FILE", help="the weights lock (default: $DDTREE_ENV_DIR/weights.yaml)"
    )
    parser.add_argument(
        "--offline", action="store_true", help="only verify what is there (as HF_HUB_OFFLINE=1)"
    )
    parser.set_defaults(func=_cmd_fetch)
