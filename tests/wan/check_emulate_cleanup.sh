#!/usr/bin/env bash
# scripts/wan/emulate.sh leaves nothing behind - no network namespace (and so no veth, tun device
# or qdisc, which live in them), no delay-line process - when its command succeeds, when it fails,
# and when it is interrupted (SIGINT, as Ctrl-C) mid-run. Exit 77 (ctest: skipped) where network
# namespaces cannot be made.
#   tests/wan/check_emulate_cleanup.sh [BUILD_DIR]
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PIPELANE="${1:-$repo/build}/pipelane" WAN_DELAY="${1:-$repo/build}/wan_delay"
cluster="$repo/configs/clusters/wan-emulated.ini"
id="t$$"
script=""
fail() { echo "FAIL: $*" >&2; exit 1; }
# A failing check must not leave the emulation it was watching running.
trap '[ -n "$script" ] && kill -TERM "$script" 2>/dev/null && wait "$script"' EXIT

# What the emulation with namespace prefix plw$id could leave: namespaces, their processes, and
# in this machine's own namespace any interface or qdisc it made by mistake.
leftovers() {
  ip netns list | grep -o "plw${id}[a-z0-9]*"
  pgrep -f "wan_delay --tun dl0" | while read -r pid; do
    [ "$(ip netns identify "$pid" 2>/dev/null)" = "plw${id}r" ] && echo "wan_delay pid $pid"
  done
  ip -o link show | grep -o 'dl0\|w[0-9]n[0-9]' 
  tc qdisc show | grep -w htb | grep -v "$before_qdiscs" 2>/dev/null
}
before_qdiscs=$(tc qdisc show | grep -w htb | head -1)
[ -n "$before_qdiscs" ] || before_qdiscs='^$'
check_clean() {
  local left
  left=$(leftovers)
  [ -z "$left" ] || fail "$1: left behind: $(echo $left)"
  echo "ok: $1: nothing left behind"
}

# Success (and the skip check: 77 when namespaces cannot be made).
"$repo/scripts/wan/emulate.sh" --name "$id" --cluster "$cluster" --nics 2 -- true
status=$?
[ $status -eq 77 ] && { echo "skipped: network namespaces cannot be made here"; exit 77; }
[ $status -eq 0 ] || fail "success case exited $status"
check_clean "command succeeded"

# Failure: the command's status comes back, and the namespaces go.
"$repo/scripts/wan/emulate.sh" --name "$id" --cluster "$cluster" --nics 2 -- false
status=$?
[ $status -ne 0 ] || fail "failure case exited 0"
check_clean "command failed (exit $status)"

# Ctrl-C while the ranks run: SIGINT to the script's whole process group (as a terminal sends it),
# once its namespaces exist and the ranks have started. Job control puts the script in a group of
# its own, and keeps SIGINT from being ignored in it (bash ignores it in background jobs otherwise).
set -m
"$repo/scripts/wan/emulate.sh" --name "$id" --cluster "$cluster" --nics 2 -- sleep 60 &
script=$!
for _ in $(seq 100); do
  pgrep -f "^sleep 60$" >/dev/null && ip netns list | grep -q "plw${id}r" && break
  sleep 0.1
done
ip netns list | grep -q "plw${id}r" || fail "interrupt case: the emulation never started"
kill -INT -- -$script
for _ in $(seq 100); do kill -0 $script 2>/dev/null || break; sleep 0.1; done
kill -0 $script 2>/dev/null && fail "interrupt case: emulate.sh still running 10 s after SIGINT"
wait $script
status=$?
[ $status -eq 130 ] || fail "interrupt case exited $status, expected 130"
check_clean "interrupted (SIGINT)"
