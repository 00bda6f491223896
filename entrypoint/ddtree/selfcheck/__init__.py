"""Selfcheck: `ddtree selfcheck`, its check framework, the image/weights/SBOM/tree checks, and --live."""
