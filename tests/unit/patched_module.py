"""One module of the patched pinned sglang (the CPU tree of test_ddtree_sglang.py) loaded alone, under a name
of its own: for patched modules that need only the standard library or torch, so that a test reads the real
patched file without importing sglang's package (and its GPU-only imports) into the test process."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def loaded_alone(sglang_cpu_path: str, relative: str, name: str) -> Iterator[types.ModuleType]:
    """`relative` (e.g. "sglang/srt/speculative/step_graphs.py") of the patched tree as module `name`, kept
    in sys.modules while in use (dataclasses look their module up while a class is built)."""
    path = Path(sglang_cpu_path.split(os.pathsep)[0]) / relative
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
