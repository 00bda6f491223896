"""`ddtree-build patches check|apply|verify|edit|refresh|list`: the patch set, from the host."""

from __future__ import annotations

import argparse
from pathlib import Path

from ddtree_build.errors import UserError

# The patch engine and workflow are imported by each action, not here: `ddtree-build --help` and every
# other command load this module to register it, and the engine costs ~70 ms to import.


def _series_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--series",
        type=Path,
        default=None,
        help="series file (default: patches/series.yaml of this checkout)",
    )


def _check(args: argparse.Namespace) -> int:
    from ddtree_build.patching import check as patch_check

    print(patch_check.check(args.series, against=args.against).summary())
    return 0


def _apply(args: argparse.Namespace) -> int:
    from ddtree.patchset import engine, series

    from ddtree_build.patching import check as patch_check

    loaded = series.load(args.series or patch_check.series_path())
    reference = patch_check.pristine_reference(loaded)
    print(engine.apply(args.root, loaded, reference=reference).summary())
    return 0


def _verify(args: argparse.Namespace) -> int:
    from ddtree.patchset.verify import verify

    from ddtree_build.patching import check as patch_check

    result = verify(args.root, args.series or patch_check.series_path())
    if not result.ok:
        raise UserError(result.summary())
    print(result.summary())
    return 0


def _edit(args: argparse.Namespace) -> int:
    from ddtree_build.patching import edit as patch_edit

    tree = patch_edit.edit(args.name, new=args.new, after=args.after, force=args.force)
    what = "the series up to " + (args.after or "its end") if args.new else f"the series up to {args.name}"
    print(f"work tree: {tree} (pristine sglang + {what})")
    print(f"edit files there (new files too), then: ddtree-build patches refresh {args.name}")
    return 0


def _refresh(args: argparse.Namespace) -> int:
    from ddtree_build.patching import edit as patch_edit

    report = patch_edit.refresh(
        args.name, purpose=args.purpose, signature_args=args.signatures, new=args.new, after=args.after
    )
    print(f"wrote patches/{report.patch.diff}: {len(report.changed)} file(s): {', '.join(report.changed)}")
    if report.rebased:
        print(f"rebased later patches (same change, new line numbers): {', '.join(report.rebased)}")
    if report.rehashed:
        print(f"re-hashed later patches: {', '.join(report.rehashed)}")
    for spec in report.patch.files:
        if not spec.signatures:
            print(f"warning: {spec.path} has no signatures; add identifiers to series.yaml (or --signatures)")
    if report.problems:
        raise UserError("; ".join(report.problems))
    if report.check:
        print(report.check.summary())
    return 0


def _list(args: argparse.Namespace) -> int:
    from ddtree_build.patching import edit as patch_edit

    print("\n".join(patch_edit.list_patches()))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "patches", help="check, apply, verify and maintain the SGLang patch series"
    )
    sub = parser.add_subparsers(dest="patches_command", required=True, metavar="ACTION")

    p = sub.add_parser(
        "check", help="apply the series to the pristine pinned wheel (cached) and verify; no Docker"
    )
    _series_arg(p)
    p.add_argument(
        "--against",
        metavar="VERSION",
        help="try the series on another sglang version's wheel (to see what moved)",
    )
    p.set_defaults(func=_check)

    p = sub.add_parser("apply", help="apply the series strictly to a tree (no-op when already applied)")
    p.add_argument("--root", type=Path, required=True, help="folder holding sglang/ (site-packages)")
    _series_arg(p)
    p.set_defaults(func=_apply)

    p = sub.add_parser("verify", help="verify a patched tree: hashes, parse, compile, signatures, manifests")
    p.add_argument("--root", type=Path, required=True, help="folder holding sglang/ (site-packages)")
    _series_arg(p)
    p.set_defaults(func=_verify)

    p = sub.add_parser("edit", help="make .work/patches/NAME/tree: pristine + series up to NAME")
    p.add_argument("name")
    p.add_argument("--new", action="store_true", help="NAME is a new patch (placed at the end, or --after)")
    p.add_argument("--after", metavar="OTHER", help="with --new: insert NAME right after patch OTHER")
    p.add_argument("--force", action="store_true", help="discard an existing work tree for NAME")
    p.set_defaults(func=_edit)

    p = sub.add_parser("refresh", help="write NAME's diff and all hashes back from its work tree; check all")
    p.add_argument("name")
    p.add_argument("--purpose", help="one line; required for a new patch")
    p.add_argument("--new", action="store_true", help="confirm NAME is new (as `edit NAME --new` made it)")
    p.add_argument("--after", metavar="OTHER", help="confirm the place `edit NAME --new --after OTHER` made")
    p.add_argument(
        "--signatures",
        action="append",
        default=[],
        metavar="PATH=ID1,ID2",
        help="add signatures for a file (PATH or its file name); repeatable",
    )
    p.set_defaults(func=_refresh)

    p = sub.add_parser("list", help="show the series")
    p.set_defaults(func=_list)
