"""The trained target + DFlash drafter pair that measures DDTREE against DFLASH (see README.md here)."""
