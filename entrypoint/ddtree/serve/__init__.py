"""Serve: `ddtree serve`, the image's entrypoint, in the order it runs.

launch (profile, argv assembled, values checked: argv, values, secret_args, server_flags), preflight (weights,
drafter, GPUs, shm, port, tree), cmd (print, exec); profiles (`ddtree profiles`, DDTREE_TARGET=auto) and
jit_cache (warm starts) beside them.
"""
