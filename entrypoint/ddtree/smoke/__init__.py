"""Smoke: `ddtree selfcheck --smoke`, tiny target and drafter served by the patched SGLang on this GPU."""
