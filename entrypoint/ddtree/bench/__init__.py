"""Benchmark and correctness harness shipped in the image (`ddtree bench`).

One module one job: client (streaming HTTP; wire reads under a deadline, stream tracks the tokens), replicas
(is a URL SGLang's router, and which replicas),
serverinfo (what the server is), prompts (exact-length prompts), sweep (context x concurrency cells,
resumable), extract + sandbox + humaneval (coding correctness), report (JSON/Markdown/PNG), compare
(speedups and the verdict against receipts.reference), cmd (the `ddtree bench` command line).
Everything imports with the standard library only; matplotlib and transformers are used when present.
"""
