"""Reproduction packages: `ddtree-build capture` records a serving host as one, `ddtree-build import` turns
one into env/ and patches/ (facts, patches, unit, manifest, smi are its readers)."""
