"""Where things are in a checkout. Every host command resolves paths from here."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(os.environ.get("DDTREE_REPO", Path(__file__).resolve().parents[2]))
ENV_DIR = REPO_ROOT / "env"
PATCHES_DIR = REPO_ROOT / "patches"
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
# Downloads (pristine wheels, debootstrap trees) are cached here, outside git.
CACHE_DIR = Path(os.environ.get("DDTREE_CACHE", REPO_ROOT / ".cache"))
