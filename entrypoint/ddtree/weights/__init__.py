"""Weights: the folders' checks, the lock (env/weights.yaml), fetch, full hash, capture; `ddtree weights`."""
