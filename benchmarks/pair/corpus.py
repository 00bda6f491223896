"""The pair's corpus: the Python standard library's sources on the machine that trains, split by file.

Recipe (deterministic for a given stdlib): every `*.py` under `sysconfig`'s stdlib folder, outside
site-packages/dist-packages, decoded as UTF-8 (files that are not are skipped and counted), in sorted
relative-path order. A file is held out when it is one of the modules `ddtree bench` builds its prompts
from (ddtree.bench.prompts.CORPUS_MODULES: the served benchmark then measures text the pair never
trained on) or when sha256(relative path) falls in the held-out share; everything else is train text.
Files are joined with the end-of-text token between them. The manifest records each split's file count,
characters and sha256, so a retrained pair can be checked to have read the same text.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path

from ddtree.bench.prompts import CORPUS_MODULES
from ddtree.fsutil import atomic_write

EOT = "<|endoftext|>"
HELDOUT_PER_MILLE = 50  # 5% of the remaining files, by path hash


@dataclass(frozen=True)
class Split:
    files: int
    chars: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    stdlib: str
    skipped_files: int
    train: Split
    heldout: Split
    heldout_modules: list[str]


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def bench_module_paths() -> set[str]:
    """Relative paths of the modules the bench's prompts come from (json.decoder -> json/decoder.py)."""
    return {name.replace(".", "/") + ".py" for name in CORPUS_MODULES}


def is_heldout(relpath: str, forced: set[str]) -> bool:
    if relpath in forced:
        return True
    return int(hashlib.sha256(relpath.encode()).hexdigest(), 16) % 1000 < HELDOUT_PER_MILLE


def source_files(root: Path) -> list[Path]:
    skip = {"site-packages", "dist-packages", "__pycache__"}
    return sorted(
        (p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts)),
        key=lambda p: p.relative_to(root).as_posix(),
    )


def build(root: Path, out_dir: Path) -> Manifest:
    """Write out_dir/train.txt, heldout.txt and corpus.json; return the manifest."""
    forced = bench_module_paths()
    texts: dict[str, list[str]] = {"train": [], "heldout": []}
    files = {"train": 0, "heldout": 0}
    skipped = 0
    for path in source_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_bytes().decode("utf-8")
        except (UnicodeDecodeError, OSError):
            skipped += 1
            continue
        split = "heldout" if is_heldout(rel, forced) else "train"
        texts[split].append(text)
        files[split] += 1
    out_dir.mkdir(parents=True, exist_ok=True)
    splits = {}
    for name, parts in texts.items():
        joined = EOT.join(parts)
        atomic_write(out_dir / f"{name}.txt", joined)
        splits[name] = Split(files[name], len(joined), hashlib.sha256(joined.encode()).hexdigest())
    present = sorted(m for m in forced if (root / m).is_file())
    manifest = Manifest(str(root), skipped, splits["train"], splits["heldout"], present)
    atomic_write(out_dir / "corpus.json", json.dumps(asdict(manifest), indent=1) + "\n")
    return manifest
