#!/bin/bash
# On the GPU device, after the parts staged by tests/gpu/stage_wheels.py were appended to /tmp/w.tar in order:
# check the tar against the checksum staged with it, unpack it and install the wheels into /tmp/site
# (no index, no dependencies: the lock already named every one). tests/gpu/README.md has the recipe.
# usage (device, repo root): bash tests/gpu/install_wheels.sh .device/w.tar.sha256 [/tmp/w.tar]
#   SITE_DIR (default /tmp/site), UNPACK_DIR (default /tmp/wx: the wheels stay there), PYTHON (default python3)
set -euo pipefail
sums=${1:?usage: install_wheels.sh CHECKSUM_FILE [TAR]}
tar_file=${2:-/tmp/w.tar}
site=${SITE_DIR:-/tmp/site}
unpack=${UNPACK_DIR:-/tmp/wx}
if [ ! -f "$tar_file" ]; then
  echo "error: $tar_file is missing: append the parts first (cat .device/parts/pNN >> $tar_file)" >&2
  exit 1
fi
got=$(sha256sum "$tar_file" | cut -c1-64)
want=$(head -c 64 "$sums")
if [ "$got" != "$want" ]; then
  echo "error: $tar_file has sha256 $got, $sums says $want: a part is missing, doubled or out of order;" \
    "remove $tar_file and append the parts again" >&2
  exit 1
fi
rm -rf "$unpack" && mkdir -p "$unpack" && tar -xf "$tar_file" -C "$unpack"
"${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$site" "$unpack"/wheels/*.whl
echo "installed $(ls "$unpack"/wheels | wc -l) wheels into $site (PYTHONPATH=$site)"
