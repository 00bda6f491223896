"""Host-side tool: capture, lock, render, build and check the DDTree reproduction image."""

__version__ = "0.1.0"
