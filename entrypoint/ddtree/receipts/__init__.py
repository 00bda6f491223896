"""Receipts: what a verdict or benchmark says about the image, tree and host behind it; reference figures."""
