"""series.yaml: the writer round-trips any purpose/signature text; the reader refuses malformed entries."""

from __future__ import annotations

from pathlib import Path

import pytest
from ddtree.errors import UserError
from ddtree.patchset import series as series_mod

from tests.unit.patchset_kit import standard_series

ODD_TEXT = [
    "DDTree core: best-first tree, mask # not a comment",
    "--speculative-ddtree-budget",
    "a, b [c] {d}",
    'it\'s "quoted"',
    "yes",
    "0.5",
    "- dash",
    "null",
]


def test_writer_round_trips_odd_text(tmp_path: Path) -> None:
    series = standard_series(tmp_path / "patches")
    for text in ODD_TEXT:
        series.patches[0].purpose = text
        series.patches[0].files[0].signatures = [text, "plain_name"]
        series_mod.write(series)
        again = series_mod.load(series.path)
        assert again.patches[0].purpose == text
        assert again.patches[0].files[0].signatures == [text, "plain_name"]


def test_empty_series_file_is_what_the_writer_writes(repo_root: Path) -> None:
    empty = series_mod.Series(repo_root / "patches" / "series.yaml", "sglang", "0.5.13.post1", [])
    text = series_mod.dump(empty)
    assert text.startswith("# Ordered patch series")
    assert "base: {distribution: sglang, version: 0.5.13.post1}\npatches: []\n" in text


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("id: ddtree-core", "id: DDTree_Core", "must be kebab-case"),
        ("id: graph-fix", "id: ddtree-core", "id is used twice"),
        ("    purpose: test patch ddtree-core\n", "", "missing key(s) purpose"),
        (
            "    diff: 0001-ddtree-core.diff",
            "    diff: 0001-ddtree-core.diff\n    owner: me",
            "unknown key(s) owner",
        ),
        ("diff: 0002-graph-fix.diff", "diff: 0009-nope.diff", "0009-nope.diff does not exist"),
        (
            "path: sglang/srt/speculative/ddtree_utils.py",
            "path: ../ddtree_utils.py",
            "normalized relative path",
        ),
        ("version: 0.5.13.post1}", "version: 0.5.13.post1, extra: 1}", "unknown key(s) extra"),
        ("pre: new", "pre: 1234", "is not 'new' or a sha256"),
    ],
)
def test_malformed_entries_are_refused(tmp_path: Path, old: str, new: str, message: str) -> None:
    series = standard_series(tmp_path / "patches")
    text = series.path.read_text()
    assert old in text
    series.path.write_text(text.replace(old, new, 1))
    with pytest.raises(UserError) as err:
        series_mod.load(series.path)
    assert message in str(err.value)
    assert str(series.path) in str(err.value)


def test_lenient_load_accepts_missing_hashes(tmp_path: Path) -> None:
    """An entry written by hand (no hashes yet) loads for refresh, and is refused by the strict reader."""
    series = standard_series(tmp_path / "patches")
    lines = [line for line in series.path.read_text().splitlines(keepends=True) if "post:" not in line]
    series.path.write_text("".join(lines))
    assert series_mod.load(series.path, strict=False).patches[0].files[0].post is None
    with pytest.raises(UserError, match="post is missing; run `ddtree-build patches refresh`"):
        series_mod.load(series.path)
