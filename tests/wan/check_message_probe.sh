#!/usr/bin/env bash
# build/wan_message_probe over the emulated WAN (configs/clusters/wan-emulated.ini: 10 ms one way,
# 25 Mbit/s a connection) measures what the link does to one pipeline message: a 200 KB message
# goes by rendezvous (request, answer, data: three crossings), so no message can take less than
# 3 x 10 ms; both ways are reported. Exit 77 (ctest: skipped) where network namespaces cannot be made.
#   tests/wan/check_message_probe.sh [BUILD_DIR]
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$repo/build}"
export WAN_DELAY="$build/wan_delay"
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(timeout 120 "$repo/scripts/wan/emulate.sh" --cluster "$repo/configs/clusters/wan-emulated.ini" --nics 1 -- \
  "$build/wan_message_probe" --bytes 200000 --rounds 5 2>&1)
status=$?
[ $status -eq 77 ] && { echo "skipped: network namespaces cannot be made here"; exit 77; }
[ $status -eq 0 ] || { echo "$out" | tail -5; fail "the probe failed (exit $status)"; }
line=$(echo "$out" | grep '^{"bytes"') || { echo "$out" | tail -5; fail "no JSON line from the probe"; }
python3 - "$line" <<'PY' || exit 1
import json, sys
d = json.loads(sys.argv[1])
ms = d["message_ms"]
# 5 rounds, the first 2 left out, both ways: 6 messages.
assert d["bytes"] == 200000 and d["bidirectional"] and len(ms) == 6, d
# Three crossings of 10 ms: a faster message did not cross the emulated link. (The wire time is
# no bound: the first 64 KiB ride with the request and a window's worth leaves at once, so one
# message beats the connection's steady 25 Mbit/s; 200 kB at 25 Mbit/s is 64 ms.) Slower than
# 30 + 4 x 64 ms would be a link far off its configuration.
assert min(ms) >= 30, f"a message took {min(ms)} ms: less than the emulated link's three crossings"
assert d["median_ms"] <= 30 + 4 * 64, f"median {d['median_ms']} ms: the emulated link is far slower than configured"
assert d["p10_ms"] <= d["median_ms"] <= d["p90_ms"], d
print(f"ok: median {d['median_ms']} ms for 200 kB over 1 connection (p10 {d['p10_ms']}, p90 {d['p90_ms']})")
PY
