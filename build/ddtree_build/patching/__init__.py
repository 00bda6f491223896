"""Patching: the patch set from the host (`ddtree-build patches`): check against the pristine wheel,
edit and refresh."""
