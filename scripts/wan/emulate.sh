#!/usr/bin/env bash
# Emulates a cluster file's sites on this machine, joined by its WAN links, and runs a command's
# ranks inside them under mpirun over TCP (see scripts/wan/README.md).
#
#   scripts/wan/emulate.sh --cluster FILE [options] -- PROGRAM [ARGS...]
#   scripts/wan/emulate.sh --cluster FILE --probe        measure the emulated WAN, run nothing
#
# Every site is a network namespace; a router namespace joins them with veth pairs. Between sites:
#   delay      each packet is held for the link's one-way latency by a user-space program on a
#              tun device in the router (build/wan_delay; this kernel has no netem);
#   capacity   an htb class per pair of sites, on the way into that device, caps the link;
#   streams    each TCP connection's window is capped (the sites' tcp_wmem), so one stream gets
#              about the link's per-connection bandwidth: window / round trip, as over a real WAN.
# The ranks of site i are the i-th app context of mpirun (ranks in the cluster file's order), run
# with `ip netns exec`; Open MPI is forced onto TCP (btl tcp,self: it would otherwise use shared
# memory on one host) over the sites' interfaces, with its TCP progress thread so that transfers
# move while ranks compute. With --nics N each site has N interfaces (own subnets) and Open MPI
# opens a connection per interface pair and stripes a large message over them: the several TCP
# connections of a cross-site transfer. mpirun itself runs in the router namespace: nothing is
# added to this machine's own network. Everything is torn down on exit, failure or Ctrl-C.
#
# options:
#   --nics N         interfaces per site = TCP connections per pair of ranks across the WAN (default 1)
#   --no-window      leave TCP windows alone (no per-connection limit; the capacity still holds)
#   --mpi "ARGS"     more mpirun arguments (--mca NAME VALUE overrides the settings below)
#   --probe          measure the round trip and the throughput of 1 and of N connections
#   --name ID        namespace names start with plw<ID> (default: this script's PID)
# The ranks see PIPELANE_WAN_CONNECTIONS=N (pipelane train warns when [wan] connections differs).
# Exit status: the command's; 77 when network namespaces or a tun device cannot be made here (tests skip);
# 2 on bad usage.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

cluster="" nics=1 window=1 probe=0 extra_mpi="" id=$$
command=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cluster) cluster=$2; shift 2 ;;
    --nics) nics=$2; shift 2 ;;
    --no-window) window=0; shift ;;
    --mpi) extra_mpi=$2; shift 2 ;;
    --probe) probe=1; shift ;;
    --name) id=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    --) shift; command=("$@"); break ;;
    *) echo "emulate.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$cluster" ] || { echo "emulate.sh: give --cluster FILE (see --help)" >&2; exit 2; }
[ $probe -eq 1 ] || [ ${#command[@]} -gt 0 ] || { echo "emulate.sh: give -- PROGRAM [ARGS...] or --probe" >&2; exit 2; }
[[ "$nics" =~ ^[1-8]$ ]] || { echo "emulate.sh: --nics $nics: expected 1 to 8" >&2; exit 2; }

skip() { echo "emulate.sh: skipped: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, tc)"
command -v ip >/dev/null && command -v tc >/dev/null || "$repo/scripts/setup.sh"
pipelane=${PIPELANE:-$repo/build/pipelane}
delay_bin=${WAN_DELAY:-$repo/build/wan_delay}
[ -x "$pipelane" ] || { echo "emulate.sh: $pipelane not built (scripts/build.sh)" >&2; exit 2; }
[ -x "$delay_bin" ] || cmake --build "$repo/build" --target wan_delay >/dev/null ||
  { echo "emulate.sh: cannot build wan_delay" >&2; exit 2; }

# The cluster's sites and links: "site I NAME RANKS" and "link A B LATENCY_US BW CONNS CAPACITY".
layout=$("$pipelane" sites --cluster "$cluster" --shell) || exit 2
mapfile -t site_lines < <(grep '^site ' <<<"$layout")
mapfile -t link_lines < <(grep '^link ' <<<"$layout")
sites=${#site_lines[@]}
[ "$sites" -ge 2 ] || { echo "emulate.sh: $cluster names $sites site(s); the emulation needs 2 or more" >&2; exit 2; }
[ "$sites" -le 31 ] || { echo "emulate.sh: at most 31 sites" >&2; exit 2; }

# Site i, interface k: subnet 10.213.(8i + k).0/24, the site .2, the router .1; site i's block is
# 10.213.8i.0/21 (wan_delay tells sites apart by the third octet / 8).
subnet() { echo "10.213.$((8 * $1 + $2))"; }
router="plw${id}r"
site_ns() { echo "plw${id}s$1"; }
delay_pid="" run_pid=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
    kill -TERM "$run_pid" 2>/dev/null  # mpirun ends its ranks
    for _ in $(seq 50); do kill -0 "$run_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  if [ -n "$delay_pid" ] && kill -0 "$delay_pid" 2>/dev/null; then
    kill -TERM "$delay_pid" 2>/dev/null
    wait "$delay_pid" 2>/dev/null
  fi
  for ((i = 0; i < sites; ++i)); do ip netns pids "$(site_ns $i)" 2>/dev/null | xargs -r kill -KILL 2>/dev/null; done
  ip netns pids "$router" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  for ((i = 0; i < sites; ++i)); do ip netns del "$(site_ns $i)" 2>/dev/null; done
  ip netns del "$router" 2>/dev/null
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$router" 2>/dev/null || skip "cannot create network namespaces here (ip netns add failed)"
R() { ip netns exec "$router" "$@"; }
R sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
ip -n "$router" link set lo up
ip -n "$router" tuntap add dev dl0 mode tun || skip "cannot create a tun device here (the delay line needs /dev/net/tun)"
ip -n "$router" link set dl0 mtu 9000 up
ip -n "$router" route add 10.213.0.0/16 dev dl0 table 100

# Per pair of sites: latency, per-connection bandwidth, capacity (bytes/s).
declare -A latency_us bandwidth capacity
for line in "${link_lines[@]}"; do
  read -r _ a b lat bw conns cap <<<"$line"
  [ "$cap" = 0 ] && cap=$((bw * conns))
  for key in "$a $b" "$b $a"; do latency_us[$key]=$lat; bandwidth[$key]=$bw; capacity[$key]=$cap; done
done

for ((i = 0; i < sites; ++i)); do
  ns=$(site_ns $i)
  ip netns add "$ns" || exit 1
  ip -n "$ns" link set lo up
  for ((k = 0; k < nics; ++k)); do
    net=$(subnet $i $k)
    ip link add "w${i}n$k" netns "$router" type veth peer name "n$k" netns "$ns" || exit 1
    ip -n "$router" addr add "$net.1/24" dev "w${i}n$k"
    ip -n "$router" link set "w${i}n$k" mtu 9000 up
    R sysctl -qw "net.ipv4.conf.w${i}n$k.rp_filter=0"
    ip -n "$router" rule add iif "w${i}n$k" lookup 100
    ip -n "$ns" addr add "$net.2/24" dev "n$k"
    ip -n "$ns" link set "n$k" mtu 9000 up
  done
  ip -n "$ns" route add default via "$(subnet $i 0).1"
  # Each interface reaches the same interface of the other sites: one connection per interface.
  for ((j = 0; j < sites; ++j)); do
    [ $i -eq $j ] && continue
    for ((k = 0; k < nics; ++k)); do ip -n "$ns" route add "$(subnet $j $k).0/24" via "$(subnet $i $k).1" dev "n$k"; done
  done
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
  if [ $window -eq 1 ]; then
    # The window of one connection: bandwidth x round trip (the slowest of this site's links).
    # tcp_wmem bounds what a connection has sent and not had acknowledged (plus what waits to be
    # sent): its rate is at most that over the round trip. The kernel counts buffer overhead
    # against it, hence the factor (measured: scripts/wan/README.md).
    win=0
    for ((j = 0; j < sites; ++j)); do
      [ $i -eq $j ] && continue
      w=$(( ${bandwidth["$i $j"]} * 2 * ${latency_us["$i $j"]} / 1000000 ))
      if [ $win -eq 0 ] || [ $w -lt $win ]; then win=$w; fi
    done
    win=$((win * 13 / 10))
    [ $win -lt 8192 ] && win=8192
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_wmem="4096 $win $win"
  fi
done

# Capacity: on the way into the delay line, an htb class per (from, to) pair of sites at that
# link's capacity, with a byte fifo of a round trip of data (a WAN router's buffer).
R tc qdisc add dev dl0 root handle 1: htb default 1
R tc class add dev dl0 parent 1: classid 1:1 htb rate 10gbit quantum 18000
pairs=()
for ((i = 0; i < sites; ++i)); do
  for ((j = 0; j < sites; ++j)); do
    [ $i -eq $j ] && continue
    class=$(printf '%x' $((16 + 32 * i + j)))
    rate=$(( ${capacity["$i $j"]} * 8 ))
    buffer=$(( ${capacity["$i $j"]} * 2 * ${latency_us["$i $j"]} / 1000000 ))
    [ $buffer -lt 65536 ] && buffer=65536
    R tc class add dev dl0 parent 1: classid "1:$class" htb rate "${rate}bit" ceil "${rate}bit" quantum 18000
    R tc qdisc add dev dl0 parent "1:$class" bfifo limit "$buffer"
    R tc filter add dev dl0 parent 1: protocol ip prio 1 u32 match ip src "$(subnet $i 0).0/21" \
      match ip dst "$(subnet $j 0).0/21" flowid "1:$class"
    pairs+=(--pair "$i:$j:${latency_us["$i $j"]}")
  done
done

# The delay line, at real-time priority where allowed (it must not wait behind the ranks).
rt=()
chrt -f 20 true 2>/dev/null && rt=(chrt -f 20)
R "${rt[@]}" "$delay_bin" --tun dl0 --site-octet-divisor 8 "${pairs[@]}" &
delay_pid=$!
for _ in $(seq 100); do
  ip -n "$router" link show dl0 | grep -q NO-CARRIER || break
  sleep 0.02
done
ip -n "$router" link show dl0 | grep -q NO-CARRIER && { echo "emulate.sh: wan_delay did not attach" >&2; exit 1; }

for line in "${link_lines[@]}"; do
  read -r _ a b lat bw conns cap <<<"$line"
  echo "emulate.sh: sites $a <-> $b: ${lat} us one way, $((bw * 8 / 1000000)) Mbit/s a connection," \
       "capacity $((${capacity["$a $b"]} * 8 / 1000000)) Mbit/s; $nics connection(s) per pair of ranks" \
       "$([ $window -eq 1 ] || echo '(windows not limited)')" >&2
done

if [ $probe -eq 1 ]; then
  ip netns exec "$(site_ns 1)" python3 "$repo/scripts/wan/probe.py" serve 5213 &
  server=$!
  read -r _ a b lat bw conns cap <<<"${link_lines[0]}"
  ip netns exec "$(site_ns 0)" python3 "$repo/scripts/wan/probe.py" rtt "$(subnet 1 0).2" 5213 --count 40
  mb=$(( (${capacity["0 1"]} + 999999) / 1000000 * 2 ))  # about two seconds at capacity
  [ $mb -lt 2 ] && mb=2
  ip netns exec "$(site_ns 0)" python3 "$repo/scripts/wan/probe.py" stream "$(subnet 1 0).2" 5213 "$mb" 1
  ip netns exec "$(site_ns 0)" python3 "$repo/scripts/wan/probe.py" stream "$(subnet 1 0).2" 5213 "$mb" "$conns"
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  exit 0
fi

apps=()
first=1
for line in "${site_lines[@]}"; do
  read -r _ index name ranks <<<"$line"
  [ $first -eq 1 ] || apps+=(:)
  first=0
  apps+=(-np "$ranks" ip netns exec "$(site_ns "$index")" "${command[@]}")
done
# mpirun's PMIx server listens on the router's addresses, which every site reaches directly.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=10.213.0.0/16
# Open MPI's settings as environment, so that --mpi "--mca NAME VALUE" overrides any of them:
# TCP only, over the sites' interfaces; a progress thread (transfers move while a rank computes);
# the send protocol with equal weights per interface (its rendezvous stripes a large message over
# the interfaces' connections; the default RDMA-put path and zero weights keep it on the first);
# fragments of up to 4 MiB, so that once the receiver has answered, the rest of a message goes to
# the sockets at once (with the default 128 KiB, each next fragment waits for the rank's next MPI
# call, which a computing rank does not make: measured, scripts/wan/README.md).
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=10.213.0.0/16 OMPI_MCA_oob_tcp_if_include=10.213.0.0/16
export OMPI_MCA_btl_tcp_progress_thread=1 OMPI_MCA_btl_tcp_flags=send OMPI_MCA_btl_tcp_bandwidth=100
export OMPI_MCA_btl_tcp_max_send_size=4194304
export PIPELANE_WAN_CONNECTIONS=$nics
# In the background, so that a signal reaches the traps at once (bash runs them only between
# foreground commands) and the cleanup stops mpirun first.
# shellcheck disable=SC2086
R mpirun --oversubscribe --bind-to none -x PIPELANE_WAN_CONNECTIONS $extra_mpi "${apps[@]}" &
run_pid=$!
wait "$run_pid"
status=$?
run_pid=""
exit "$status"
