"""Benchmark and correctness harness shipped in the image (`ddtree bench`).

One module one job: client (streaming HTTP), serverinfo (what the server is), prompts (exact-length
prompts), sweep (context x concurrency cells, resumable), extract + sandbox + humaneval (coding
correctness), report (JSON/Markdown/PNG), reference + compare (speedups and the verdict).
Everything imports with the standard library only; matplotlib and transformers are used when present.
"""
