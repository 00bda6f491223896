"""Files that the patch series creates, read straight from patches/ so tests exercise the real patch text.

A module such as sglang/srt/speculative/ddtree_utils.py exists only as a new-file diff in the series
(`--- /dev/null`, `+++ b/PATH`). `new_file_text` finds the patch whose `files` list the path, takes that
file's single hunk and returns its '+' lines; `import_new_module` loads the text as a standalone module
(it must import only what the test environment has, e.g. torch and the standard library). The module is
written into a temporary package together with the series' other new files of its folder, so that its
lazy relative imports work (ddtree_utils loads ddtree_kernels on CUDA) and Triton can read kernel source.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
SERIES = REPO_ROOT / "patches" / "series.yaml"


def _patch_for(path: str, series: Path) -> Path:
    data = yaml.safe_load(series.read_text(encoding="utf-8")) or {}
    for patch in data.get("patches") or []:
        if any(spec.get("path") == path for spec in patch.get("files") or []):
            return series.parent / patch["diff"]
    raise LookupError(f"{series}: no patch lists {path} in its files")


def new_file_text(path: str, series: Path = SERIES) -> str:
    """The content of `path` as created by a `--- /dev/null` diff in the series."""
    diff = _patch_for(path, series)
    lines = diff.read_text(encoding="utf-8").splitlines(keepends=True)
    body: list[str] = []
    inside = False
    for number, line in enumerate(lines):
        if line.startswith("--- "):
            following = lines[number + 1] if number + 1 < len(lines) else ""
            inside = following.rstrip("\n") == f"+++ b/{path}"
            if inside and line.rstrip("\n") != "--- /dev/null":
                raise ValueError(f"{diff}: {path} is not created by this patch (--- is not /dev/null)")
            continue
        if not inside or line.startswith(("+++ ", "@@")):
            continue
        if line.startswith("+"):
            body.append(line[1:])
        elif line.startswith("\\"):  # "\ No newline at end of file"
            if body:
                body[-1] = body[-1].rstrip("\n")
        elif line.startswith("diff "):
            inside = False
        else:
            raise ValueError(f"{diff}: unexpected line in a new-file hunk for {path}: {line!r}")
    if not body:
        raise ValueError(f"{diff}: no content for {path}")
    return "".join(body)


def created_files(series: Path = SERIES) -> list[str]:
    """Paths of the files the series creates (`pre: new` in series.yaml), in series order."""
    data = yaml.safe_load(series.read_text(encoding="utf-8")) or {}
    return [
        spec["path"]
        for patch in data.get("patches") or []
        for spec in patch.get("files") or []
        if spec.get("pre") == "new"
    ]


def write_package(root: Path, folder: str, series: Path = SERIES) -> Path:
    """Make `root` a package holding every file the series creates in `folder` (e.g. the speculative one)."""
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("", encoding="utf-8")
    for created in created_files(series):
        if Path(created).parent == Path(folder):
            (root / Path(created).name).write_text(new_file_text(created, series), encoding="utf-8")
    return root


def import_new_module(path: str, name: str | None = None, series: Path = SERIES) -> ModuleType:
    """Import the created file as a module (cached in sys.modules under `name`).

    The file and its created siblings (same folder) are written into a temporary package `<name>_package`;
    only `path` is imported, so siblings that need SGLang are written but never loaded.
    """
    name = name or "series_" + Path(path).stem
    if name in sys.modules:
        return sys.modules[name]
    scratch = Path(tempfile.mkdtemp(prefix="ddtree-series-"))
    atexit.register(shutil.rmtree, scratch, True)
    package = f"{name}_package"
    root = write_package(scratch / package, str(Path(path).parent), series)
    spec = importlib.util.spec_from_file_location(
        package, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    assert spec is not None and spec.loader is not None
    sys.modules[package] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[package])
    try:
        module = importlib.import_module(f"{package}.{Path(path).stem}")
    except BaseException:
        del sys.modules[package]
        raise
    sys.modules[name] = module
    return module
