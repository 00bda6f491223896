"""Freeze parsing: exact pins only, names normalized, extras and markers kept, a clear error per bad line."""

from __future__ import annotations

from pathlib import Path

import pytest
from ddtree.errors import UserError
from ddtree.lockfile import diff_installed, parse_pins, read_lock
from ddtree_build.freeze import read_freeze, read_header, render_freeze

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_names_normalized_and_extras_markers_kept() -> None:
    pins = parse_pins(
        "# comment\nPyYAML==6.0.3\nSome_Package.Name[Extra_One,b]==1.0 ; python_version >= '3.11'  # note\n",
        "f.txt",
    )
    assert [p.name for p in pins] == ["pyyaml", "some-package-name"]
    second = pins[1]
    assert second.extras == ("b", "extra-one")
    assert second.marker == 'python_version >= "3.11"'
    assert second.requirement_line() == 'some-package-name[b,extra-one]==1.0 ; python_version >= "3.11"'


def test_hashes_and_continuations() -> None:
    text = "torch==2.11.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\nsix==1.17.0 --hash=sha256:cc\n"
    pins = parse_pins(text, "x.lock")
    assert pins[0].hashes == ("sha256:aa", "sha256:bb") and pins[0].lineno == 1
    assert pins[1].hashes == ("sha256:cc",)


def test_vcs_url_with_commit_accepted() -> None:
    (pin,) = parse_pins(f"foo @ git+https://example.org/foo.git@{COMMIT}\n", "f")
    assert pin.version is None and pin.url.endswith(COMMIT)


def test_same_pin_twice_is_merged_and_marker_split_allowed() -> None:
    pins = parse_pins("a==1\na==1\nb==1 ; python_version < '3.12'\nb==2 ; python_version >= '3.12'\n", "f")
    assert [(p.name, p.version) for p in pins] == [("a", "1"), ("b", "1"), ("b", "2")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("torch==2.11.0\nTorch==2.10.0\n", "f.txt:2: duplicate 'torch' with a different version"),
        ("torch>=2.11\n", "f.txt:1: unpinned requirement 'torch>=2.11'; pin one exact version"),
        ("torch\n", "f.txt:1: unpinned requirement 'torch'"),
        ("torch==2.*\n", "f.txt:1: unpinned requirement 'torch==2.*'"),
        ("-e git+https://example.org/x.git#egg=x\n", "f.txt:1: editable install"),
        ("--editable ./src\n", "f.txt:1: editable install"),
        ("./dist/foo-1.0-py3-none-any.whl\n", "f.txt:1: local path './dist/foo-1.0-py3-none-any.whl'"),
        ("/opt/src/foo\n", "f.txt:1: local path '/opt/src/foo'"),
        ("foo @ file:///opt/src/foo\n", "f.txt:1: local path 'file:///opt/src/foo'"),
        ("foo @ git+https://example.org/foo.git\n", "f.txt:1: VCS URL without a commit"),
        ("foo @ git+https://example.org/foo.git@main\n", "f.txt:1: VCS URL without a commit"),
        ("foo==1.0 ; python_version >>> '3'\n", "f.txt:1: malformed requirement"),
        ("foo bar==1\n", "f.txt:1: malformed requirement 'foo bar==1'"),
        ("foo==1 --hash=md5:zz\n", "f.txt:1: malformed hash 'md5:zz'"),
        ("--index-url https://example.org/simple\n", "f.txt:1: option line"),
        # A direct reference is judged as a URL, never called a local path.
        ("foo @ https://example.org/foo-1.0-py3-none-any.whl\n", "f.txt:1: direct URL without a hash"),
        ("foo[x] @ https://example.org/foo-1.0.tar.gz\n", "f.txt:1: direct URL without a hash"),
        ("foo @ /opt/src/foo-1.0.whl\n", "f.txt:1: local path '/opt/src/foo-1.0.whl'"),
    ],
)
def test_bad_lines_have_clear_errors(text: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        parse_pins(text, "f.txt")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_direct_url_with_a_hash_is_a_pin() -> None:
    url = "https://example.org/foo-1.0-py3-none-any.whl#sha256=" + "ab" * 32
    (pin,) = parse_pins(f"foo @ {url}\n", "f.txt")
    assert pin.name == "foo" and pin.url == url and pin.version is None


def test_read_lock_requires_hashes_and_evaluates_markers(tmp_path: Path) -> None:
    lock = tmp_path / "r.lock"
    lock.write_text("a==1 --hash=sha256:aa\nb==2 ; python_version < '3.0' --hash=sha256:bb\n")
    assert read_lock(lock) == {"a": "1"}
    lock.write_text("a==1\n")
    with pytest.raises(UserError, match=r"r.lock:1: a has no --hash"):
        read_lock(lock)


def test_diff_installed_lists_missing_and_different() -> None:
    problems = diff_installed({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "9", "extra": "1"})
    assert problems == ["b: installed 9, lock pins 2", "c: missing (lock pins 3)"]
    same = {"torch": "2.11.0+cu130", "sglang": "0.5.13-post1", "x": "1.0.0"}
    assert diff_installed({"torch": "2.11.0", "sglang": "0.5.13.post1", "x": "1.0"}, same) == []
    assert diff_installed({"torch": "2.11.0+cu128"}, {"torch": "2.11.0+cu130"}) == [
        "torch: installed 2.11.0+cu130, lock pins 2.11.0+cu128"
    ]


def test_header_round_trip() -> None:
    pins = parse_pins("b==2\na==1 ; sys_platform == 'linux'\n", "f")
    text = render_freeze(pins, {"source": "resolved", "why-this-date": "x"}, "Title")
    assert read_header(text) == {"source": "resolved", "why-this-date": "x"}
    assert text.splitlines()[3:] == ['a==1 ; sys_platform == "linux"', "b==2"]


def test_committed_freeze_is_the_pinned_stack(repo_root: Path) -> None:
    freeze = read_freeze(repo_root / "env" / "freeze.txt")
    versions = freeze.versions()
    assert versions["sglang"] == "0.5.13.post1"
    assert versions["torch"] == "2.11.0"
    assert versions["sglang-kernel"] == "0.4.3"
    assert versions["flashinfer-python"] == "0.6.12"
    assert freeze.header["exclude-newer"] == "2026-06-20" and freeze.header["why-this-date"]
    assert freeze.header["source"].startswith("resolved") and "uv pip compile" in freeze.header["resolved-by"]
    assert int(freeze.header["distributions"]) == len(freeze.pins) == 191
