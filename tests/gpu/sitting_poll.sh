#!/bin/bash
# One poll of a device sitting: wait, print where the queues are, and pack every result so far into $OUT,
# which the device brings back with every call. Why: a hold that is lost (30 s with no call in flight, or
# the session's time spent) takes everything on the machine with it; on 2026-12-02 a lost hold took a whole
# sitting's logs and figures. With this as the poll, the last poll's snapshot is what survives.
#   usage (device, repo root): bash tests/gpu/sitting_poll.sh [SECONDS]   (default 90: wait that long first)
#   SNAP_DIRS   folders to pack (default "/tmp/out /tmp/runs"; missing ones are skipped)
#   SNAP_LIMIT  bytes the snapshot may take (default 15 MiB: a call brings back files of at most 16 MiB);
#               over it, files above SNAP_BIG (default 1 MiB) are left out and named in snapshot-left-out.txt
# Left out always: profiler traces (*.trace.json*), pair tars and model weights (their own transfers).
# Exit 0 with a snapshot, 2 when $OUT is unset.
set -u
[[ -n ${OUT:-} ]] || { echo "sitting_poll.sh: OUT is not set (the device sets it for each call)" >&2; exit 2; }
sleep "${1:-90}"
dirs=()
for dir in ${SNAP_DIRS:-/tmp/out /tmp/runs}; do [[ -d $dir ]] && dirs+=("$dir"); done
limit=${SNAP_LIMIT:-15728640} big=${SNAP_BIG:-1048576}
# Nothing to read yet (or a fresh machine after a lost hold): without this, find would search the checkout.
((${#dirs[@]})) || { echo "sitting_poll.sh: nothing to pack yet (${SNAP_DIRS:-/tmp/out /tmp/runs})"; exit 0; }
# Every queue's status lines, newest last: what to read between polls.
for status in $(find "${dirs[@]}" -name status.txt 2> /dev/null | sort); do
  echo "== ${status}"
  grep -v 'stopped the servers' "$status"
done
for marker in $(find "${dirs[@]}" -maxdepth 1 \( -name '*.done' -o -name 'timing-start.txt' \) 2> /dev/null | sort); do
  echo "== ${marker}: $(head -c 200 "$marker")"
done
mkdir -p "$OUT"
excludes=(--exclude='*.trace.json*' --exclude='pair.tar*' --exclude='*.safetensors' --exclude='*.pt')
tar -czf "$OUT/snapshot.tgz.tmp" "${excludes[@]}" "${dirs[@]}" 2> /dev/null
if (($(stat -c %s "$OUT/snapshot.tgz.tmp") > limit)); then
  find "${dirs[@]}" -type f -size +"${big}"c -printf '%p %s\n' > "$OUT/snapshot-left-out.txt"
  tar -czf "$OUT/snapshot.tgz.tmp" "${excludes[@]}" --exclude-from=<(cut -d' ' -f1 "$OUT/snapshot-left-out.txt") \
    "${dirs[@]}" 2> /dev/null
fi
mv "$OUT/snapshot.tgz.tmp" "$OUT/snapshot.tgz"
echo "snapshot: $(stat -c %s "$OUT/snapshot.tgz") bytes of ${dirs[*]}"
