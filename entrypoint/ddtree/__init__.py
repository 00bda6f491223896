"""In-image runtime: serve (the entrypoint), selfcheck, bench, and the patch engine."""

__version__ = "0.1.0"
