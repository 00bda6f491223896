"""The tiny smoke models' sizes and special token ids, shared by the Qwen3-shaped and the MLA targets."""

from __future__ import annotations

VOCAB = 256
HIDDEN = 256
HEADS = 4
HEAD_DIM = 64
EOS_ID = 254
MASK_ID = 255
REAL_TOKENS = 254
TARGET_LAYERS = 6
TARGET_LAYER_IDS = (1, 4)
