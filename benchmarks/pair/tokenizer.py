"""The pair's BPE tokenizer: byte-level BPE trained with `tokenizers` on the train split only.

Byte-level, so every string round-trips exactly (decode(encode(s)) == s) and nothing is unknown.
Special tokens, ids fixed by their order: 0 end-of-text (EOS/BOS, the corpus's file separator),
1 padding, 2 `<|MASK|>` (the DFlash drafter's mask token: DFlash's default name, so SGLang finds it in
the vocabulary instead of adding one past the target's embedding). Saved as tokenizer.json plus
tokenizer_config.json / special_tokens_map.json: the layout transformers.AutoTokenizer (SGLang's
tokenizer loader, and `ddtree bench --tokenizer DIR`) reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddtree.fsutil import atomic_write

EOT, PAD, MASK = "<|endoftext|>", "<|pad|>", "<|MASK|>"
SPECIALS = (EOT, PAD, MASK)
EOT_ID, PAD_ID, MASK_ID = 0, 1, 2


def train(text_files: list[Path], vocab_size: int, out_dir: Path):
    """Train on text_files, save into out_dir, return the `tokenizers.Tokenizer`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(p) for p in text_files], trainer)
    for token, want in zip(SPECIALS, (EOT_ID, PAD_ID, MASK_ID), strict=True):
        got = tok.token_to_id(token)
        if got != want:
            raise RuntimeError(f"special token {token} got id {got}, expected {want}")
    save(tok, out_dir)
    return tok


def save(tok, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "tokenizer.json", tok.to_str(pretty=False))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOT,
        "eos_token": EOT,
        "pad_token": PAD,
        "mask_token": MASK,
        "model_max_length": 8192,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }
    atomic_write(out_dir / "tokenizer_config.json", json.dumps(config, indent=1, sort_keys=True) + "\n")
    specials = {"bos_token": EOT, "eos_token": EOT, "pad_token": PAD, "mask_token": MASK}
    atomic_write(out_dir / "special_tokens_map.json", json.dumps(specials, indent=1, sort_keys=True) + "\n")


def load(folder: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def encode_file(tok, path: Path) -> list[int]:
    """Token ids of a split: each file encoded on its own, joined by EOT (no BPE merge across files)."""
    ids: list[int] = []
    for i, encoding in enumerate(tok.encode_batch(path.read_text().split(EOT))):
        if i:
            ids.append(EOT_ID)
        ids.extend(encoding.ids)
    return ids
