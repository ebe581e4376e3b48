#!/usr/bin/env bash
# Set up a REAL Linux router (and its sender/receiver hosts) for the L4S
# experiments: sch_dualpi2 on the bottleneck egress, the ECN sysctls, an
# optional DSCP classifier for senders that cannot set ECT(1), optional
# per-client ACK delay on the receiver (the RTT mix), checks and teardown.
#
# What it does, per command (every command is idempotent: run it twice and the
# second run changes nothing; --dry-run prints the commands instead of running
# them, one per line, exactly as they would run):
#
#   router    [HTB root at --rate-mbit, if given] -> dualpi2 with EVERY
#             parameter named (limit, target, tupdate, alpha, beta,
#             coupling_factor, step_thresh, min_qlen_step, classic_protection,
#             overload and drop-timing policy, ECN classifier, split_gso);
#             optional u32 filters sending DSCP --dscp to the L queue
#             (classid :1); GRO/GSO/TSO off on --dev (the step threshold and
#             marking work on real packets, not 64 KB aggregates);
#             net.ipv4.ip_forward=1.
#   sender    ECN sysctls of a sender: L4S senders request AccECN
#             (tcp_ecn=3) where the kernel has it, else classic ECN
#             (tcp_ecn=1: the L queue still marks, feedback is one bit per RTT);
#             classic senders keep tcp_ecn=2 (Not-ECT: the C queue drops)
#             unless --classic-ecn (ECT(0): the C queue marks).
#   receiver  ECN sysctls of the receiver (accept ECN/AccECN); with
#             --ack-delay ADDR=MS (repeatable) an HTB + netem per client on the
#             receiver's egress, delaying that client's ACKs (paper 004 made
#             its 5 ms / 40 ms RTT mix the same way); --servers N starts
#             iperf3 servers on ports 5201..5200+N (the runner's flow ports).
#   status    tc -s qdisc show; exits 1 unless dualpi2 is the active qdisc on
#             --dev (and prints its probability, queue delays and marks).
#   teardown  removes the qdiscs and filters this script added and restores
#             the sysctls it changed (saved in $STATE_DIR on first change).
#
# Requirements checked before changing anything (skipped with --dry-run):
# Linux >= 6.17 with CONFIG_NET_SCH_DUALPI2 (sch_dualpi2 is mainline since
# 6.17) and iproute2 >= 6.18.0 (the first release with tc/q_dualpi2.c, commit
# 0ad8fef3 "tc: add dualpi2 scheduler module").  AccECN negotiation
# (tcp_ecn=3..5) needs a kernel whose tcp_ecn accepts 3: Linux 6.18 still caps
# it at 2 (verified on 6.18.44), later kernels raise the maximum to 5.
#
# Defaults are sch_dualpi2's own (RFC 9332 and the kernel's
# dualpi2_reset_default): limit 10000 packets, target 15 ms, tupdate 16 ms,
# alpha 0.16 Hz, beta 3.2 Hz, coupling_factor 2, step_thresh 1 ms,
# min_qlen_step 0, classic_protection 10 %, drop_on_overload, drop_dequeue,
# l4s_ect, split_gso.  Give the scenario's values with the options below or
# with --scenario FILE (reads [link.uplink] of a testbed scenario through
# testbed/l4s/scenario_args.py; needs the repository's .venv).
#
# Usage: see `dualpi2-router.sh --help`.  Nothing here contacts the network;
# it only configures the host it runs on.
set -euo pipefail

PROG="dualpi2-router.sh"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
STATE_DIR="${CCSWITCH_L4S_STATE:-/run/ccswitch-l4s}"

# ---------------------------------------------------------------- defaults ---
MIN_KERNEL="6.17"        # sch_dualpi2 merged in Linux 6.17
MIN_IPROUTE2="6.18.0"    # first iproute2 release with tc-dualpi2
BASE_PORT=5201           # the runner's flows[i] use BASE_PORT + i (testbed/scenario/)
DSCP_L4S_CLASSID=1       # dualpi2 classid 1: L queue, ECN-marked (2 = L queue, never dropped)

DRY_RUN=0
DEV=""
RATE_MBIT=""
LIMIT=10000
TARGET="15ms"
TUPDATE="16ms"
ALPHA="0.16"
BETA="3.2"
COUPLING=2
STEP_THRESH="1ms"
MIN_QLEN_STEP=0
C_PROTECTION=10
OVERLOAD="drop_on_overload"
DROP_AT="drop_dequeue"
ECN_CLASS="l4s_ect"
DSCPS=()
OFFLOADS=1
ROLE_L4S=0
CLASSIC_ECN=0
SERVERS=0
ACK_DELAYS=()
SCENARIO=""

usage() {
    cat <<'EOF'
Usage: dualpi2-router.sh [--dry-run] COMMAND [OPTIONS]

Commands:
  router     install dualpi2 on the bottleneck egress --dev (and the ECN/forwarding sysctls)
  sender     ECN sysctls on a sender host (--l4s for Prague/L4S senders)
  receiver   ECN sysctls on the receiver, [--ack-delay ADDR=MS ...] [--servers N]
  status     show the qdisc on --dev; exit 1 unless dualpi2 is active there
  teardown   remove what router/receiver installed on --dev, restore saved sysctls

Router options (defaults: sch_dualpi2's own, RFC 9332):
  --dev IFACE                 egress interface toward the receiver (router, status, teardown, receiver)
  --rate-mbit N               make the router the bottleneck: HTB at N Mbit/s with dualpi2 as its leaf
  --limit PACKETS             10000
  --target TIME               15ms     (PI2 target queue delay of the C queue)
  --tupdate TIME              16ms     (PI2 update interval)
  --alpha HZ                  0.16     (integral gain)
  --beta HZ                   3.2      (proportional gain)
  --coupling-factor K         2        (p_CL = K * p')
  --step-thresh TIME|NPKTS    1ms      (L queue step marking threshold; 5p = packets)
  --min-qlen-step PACKETS     0
  --classic-protection PCT    10       (C queue's WRR weight)
  --overload drop|overflow    drop     (drop_on_overload | overflow)
  --drop-at enqueue|dequeue   dequeue  (drop_enqueue | drop_dequeue)
  --ecn l4s_ect|any_ect       l4s_ect  (ECT(1)/CE to the L queue | any ECT)
  --dscp N                    also classify DSCP N (0-63) into the L queue (u32 filter, classid :1;
                              repeatable; ccswitch's BPF Prague sends DSCP 40, see bpf/prague.h)
  --keep-offloads             leave GRO/GSO/TSO on --dev as they are
  --scenario FILE             take rate and dualpi2 parameters from a testbed scenario (options given
                              after --scenario override it)
Sender options:
  --l4s                       sender: an L4S (Prague) host: request AccECN, prague as default CCA;
                              receiver: prague listeners (accept AccECN on kernels whose tcp_ecn stops at 2)
  --classic-ecn               a classic sender that negotiates ECN (ECT(0)) instead of Not-ECT
Receiver options:
  --ack-delay ADDR=MS         delay ACKs to client ADDR by MS ms (netem; repeatable)
  --servers N                 start iperf3 servers on ports 5201..5200+N
General:
  --dry-run                   print the commands, change nothing
  -h, --help
EOF
}

die() { echo "$PROG: $*" >&2; exit 2; }

# -------------------------------------------------------------- execution ---
# run CMD...: print (dry run) or execute; a failure is fatal.
run() {
    if [ "$DRY_RUN" = 1 ]; then
        printf '%s\n' "$(quote "$@")"
    else
        "$@" || die "failed: $(quote "$@")"
    fi
}
# try CMD...: like run, but a failure is expected and ignored (delete-if-present).
try() {
    if [ "$DRY_RUN" = 1 ]; then
        printf '%s || true\n' "$(quote "$@")"
    else
        "$@" >/dev/null 2>&1 || true
    fi
}
note() { if [ "$DRY_RUN" = 1 ]; then echo "# $*"; else echo "$PROG: $*" >&2; fi; }
quote() {
    local out="" a
    for a in "$@"; do
        if [[ "$a" =~ ^[A-Za-z0-9_./:=,+-]+$ ]]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
    done
    printf '%s' "${out% }"
}

# ------------------------------------------------------------- validation ---
is_time() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]]; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_float() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
need_time() { is_time "$2" || die "$1: '$2' is not a time with a unit (us, ms or s), e.g. 15ms"; }
need_uint() { is_uint "$2" || die "$1: '$2' is not a non-negative integer"; }
need_float() { is_float "$2" || die "$1: '$2' is not a non-negative number (Hz), e.g. 0.16"; }

version_ge() {  # version_ge A B: A >= B (dotted numbers)
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

check_router_host() {
    if [ "$DRY_RUN" = 1 ]; then
        note "checks (skipped in a dry run): kernel >= $MIN_KERNEL (uname -r), iproute2 >= $MIN_IPROUTE2 (tc -V), sch_dualpi2 present"
        return
    fi
    [ "$(id -u)" = 0 ] || die "needs root (tc, sysctl); rerun with sudo"
    local kver tcver
    kver="$(uname -r | grep -oE '^[0-9]+\.[0-9]+' || true)"
    version_ge "${kver:-0}" "$MIN_KERNEL" || die "kernel $(uname -r) has no sch_dualpi2: needs Linux >= $MIN_KERNEL"
    tcver="$(tc -V 2>/dev/null | grep -oE 'iproute2-[0-9][0-9.]*' | sed 's/iproute2-//' | head -n1 || true)"
    # iproute2 6.x prints "iproute2-6.18.0"; a few distro builds print "iproute2-ss..." (date): then probe.
    if [ -n "$tcver" ]; then
        version_ge "$tcver" "$MIN_IPROUTE2" || die "tc is iproute2 $tcver, which does not know dualpi2: install iproute2 >= $MIN_IPROUTE2"
    fi
    modprobe sch_dualpi2 2>/dev/null || true   # built-in kernels: no module, nothing to load
    ip link show dev "$DEV" >/dev/null 2>&1 || die "--dev: no interface '$DEV' on this host (ip link)"
}

# ---------------------------------------------------------------- sysctls ---
# save_sysctl KEY: record its current value once (teardown restores it).
save_sysctl() {
    local key="$1" path
    path="/proc/sys/${key//./\/}"
    [ "$DRY_RUN" = 1 ] && return 0
    [ -e "$path" ] || die "sysctl $key does not exist on this kernel"
    mkdir -p "$STATE_DIR"
    grep -q "^$key=" "$STATE_DIR/sysctl.saved" 2>/dev/null || echo "$key=$(cat "$path")" >>"$STATE_DIR/sysctl.saved"
}

# set_sysctl KEY VALUE: save the old value, then set it.
set_sysctl() {
    save_sysctl "$1"
    run sysctl -q -w "$1=$2"
}

# set_tcp_ecn WANT FALLBACK WHY: tcp_ecn=WANT, or FALLBACK if this kernel rejects WANT.
set_tcp_ecn() {
    local want="$1" fallback="$2" why="$3"
    if [ "$DRY_RUN" = 1 ]; then
        note "tcp_ecn=$want: $why (kernels that cap tcp_ecn at 2, e.g. Linux 6.18, get tcp_ecn=$fallback)"
        run sysctl -q -w "net.ipv4.tcp_ecn=$want"
        return
    fi
    save_sysctl net.ipv4.tcp_ecn
    if ! sysctl -q -w "net.ipv4.tcp_ecn=$want" 2>/dev/null; then
        note "this kernel rejects tcp_ecn=$want (no AccECN negotiation); using tcp_ecn=$fallback"
        run sysctl -q -w "net.ipv4.tcp_ecn=$fallback"
    fi
}

restore_sysctls() {
    local f="$STATE_DIR/sysctl.saved" line
    if [ "$DRY_RUN" = 1 ]; then
        note "restore every sysctl saved in $f (sysctl -w KEY=OLD), then remove the file"
        return
    fi
    [ -f "$f" ] || return 0
    while IFS= read -r line; do
        [ -n "$line" ] && sysctl -q -w "$line" || true
    done <"$f"
    rm -f "$f"
}

# ---------------------------------------------------------------- commands ---
dualpi2_args() {
    local args=(limit "$LIMIT" target "$TARGET" tupdate "$TUPDATE" alpha "$ALPHA" beta "$BETA"
                coupling_factor "$COUPLING" step_thresh "$STEP_THRESH" min_qlen_step "$MIN_QLEN_STEP"
                classic_protection "$C_PROTECTION" "$OVERLOAD" "$DROP_AT" "$ECN_CLASS" split_gso)
    printf '%s\n' "${args[@]}"
}

cmd_router() {
    [ -n "$DEV" ] || die "router: --dev IFACE is required (the egress toward the receiver)"
    check_router_host
    local parent=(root) handle="1:" dp
    mapfile -t dp < <(dualpi2_args)
    if [ -n "$RATE_MBIT" ]; then
        # The router is the bottleneck: HTB shapes to RATE, dualpi2 queues below it.
        note "HTB at ${RATE_MBIT} Mbit/s as the bottleneck, dualpi2 as its only leaf (handle 2:)"
        run tc qdisc replace dev "$DEV" root handle 1: htb default 1
        run tc class replace dev "$DEV" parent 1: classid 1:1 htb rate "${RATE_MBIT}mbit" ceil "${RATE_MBIT}mbit"
        parent=(parent 1:1)
        handle="2:"
    fi
    note "dualpi2: every parameter named (defaults are sch_dualpi2's, RFC 9332)"
    run tc qdisc replace dev "$DEV" "${parent[@]}" handle "$handle" dualpi2 "${dp[@]}"
    try tc filter del dev "$DEV" parent "$handle"
    local dscp tos
    for dscp in "${DSCPS[@]+"${DSCPS[@]}"}"; do
        tos="$(printf '0x%02x' $((dscp << 2)))"
        note "DSCP $dscp (TOS byte $tos, ECN bits masked) -> L queue (classid ${handle%:}:$DSCP_L4S_CLASSID), IPv4 and IPv6"
        run tc filter add dev "$DEV" parent "$handle" protocol ip prio 1 u32 \
            match ip dsfield "$tos" 0xfc classid "${handle%:}:$DSCP_L4S_CLASSID"
        run tc filter add dev "$DEV" parent "$handle" protocol ipv6 prio 2 u32 \
            match ip6 priority "$tos" 0xfc classid "${handle%:}:$DSCP_L4S_CLASSID"
    done
    if [ "$OFFLOADS" = 1 ]; then
        run ethtool -K "$DEV" gro off gso off tso off
    fi
    set_sysctl net.ipv4.ip_forward 1
    note "check with: $PROG status --dev $DEV"
}

# prague_default: make prague this host's default CCA (ECN/AccECN are negotiated in the
# handshake, and iperf3 selects -C only after connect(): docs/l4s-kernel.md section 5).
prague_default() {
    if [ "$DRY_RUN" = 0 ] && ! grep -qw prague /proc/sys/net/ipv4/tcp_available_congestion_control; then
        die "prague is not registered on this host: load a tcp_prague module (L4STeam kernel) or keep a ccswitch process with Prague running (e.g. the runner), then rerun"
    fi
    set_sysctl net.ipv4.tcp_congestion_control prague
}

cmd_sender() {
    if [ "$ROLE_L4S" = 1 ]; then
        set_tcp_ecn 3 1 "request AccECN: per-ACK CE counts for a scalable congestion control"
        set_sysctl net.ipv4.tcp_ecn_option 2
        set_sysctl net.ipv4.tcp_ecn_fallback 1
        note "prague as the default CCA: the SYN then asks for (Acc)ECN (iperf3 sets -C only after connect)"
        prague_default
    elif [ "$CLASSIC_ECN" = 1 ]; then
        set_tcp_ecn 1 1 "classic ECN: ECT(0) packets, the C queue marks instead of dropping"
    else
        set_tcp_ecn 2 2 "classic sender, Not-ECT: the C queue drops"
    fi
}

cmd_receiver() {
    set_tcp_ecn 3 2 "accept AccECN (and classic ECN) from the senders"
    if [ "$ROLE_L4S" = 1 ]; then
        note "listeners running prague accept AccECN even where tcp_ecn stops at 2 (Linux 6.18)"
        prague_default
    fi
    if [ "${#ACK_DELAYS[@]}" -gt 0 ]; then
        [ -n "$DEV" ] || die "receiver: --ack-delay needs --dev IFACE (the receiver's interface toward the router)"
        [ "$DRY_RUN" = 1 ] || ip link show dev "$DEV" >/dev/null 2>&1 || die "--dev: no interface '$DEV' on this host"
        note "per-client ACK delay: HTB (unshaped classes) + netem per client on $DEV"
        run tc qdisc replace dev "$DEV" root handle 1: htb default 99
        run tc class replace dev "$DEV" parent 1: classid 1:99 htb rate 10gbit
        try tc filter del dev "$DEV" parent 1:
        local i=10 item addr ms
        for item in "${ACK_DELAYS[@]}"; do
            addr="${item%%=*}"
            ms="${item#*=}"
            run tc class replace dev "$DEV" parent 1: classid "1:$i" htb rate 10gbit
            run tc qdisc replace dev "$DEV" parent "1:$i" handle "$i:" netem delay "${ms}ms" limit 100000
            run tc filter add dev "$DEV" parent 1: protocol ip prio 1 u32 match ip dst "$addr/32" flowid "1:$i"
            i=$((i + 1))
        done
    fi
    if [ "$SERVERS" -gt 0 ]; then
        local p
        for ((p = BASE_PORT; p < BASE_PORT + SERVERS; p++)); do
            if [ "$DRY_RUN" = 0 ] && ss -Hltn "sport = :$p" | grep -q .; then
                continue   # already listening
            fi
            run iperf3 -s -p "$p" -D
        done
    fi
}

cmd_status() {
    [ -n "$DEV" ] || die "status: --dev IFACE is required"
    if [ "$DRY_RUN" = 1 ]; then
        run tc -s qdisc show dev "$DEV"
        run tc filter show dev "$DEV"
        run sysctl net.ipv4.tcp_ecn net.ipv4.ip_forward
        note "exit 1 unless a 'qdisc dualpi2' line is present; its xstats show prob, delay_c, delay_l, pkts_in_c, pkts_in_l, ecn_mark, step_mark"
        return
    fi
    local out
    out="$(tc -s qdisc show dev "$DEV")" || die "tc -s qdisc show dev $DEV failed"
    printf '%s\n' "$out"
    tc filter show dev "$DEV" || true
    sysctl net.ipv4.tcp_ecn net.ipv4.ip_forward || true
    if ! grep -q "qdisc dualpi2" <<<"$out"; then
        echo "$PROG: dualpi2 is NOT active on $DEV (run: $PROG router --dev $DEV ...)" >&2
        exit 1
    fi
    echo "$PROG: dualpi2 active on $DEV"
}

cmd_teardown() {
    [ -n "$DEV" ] || die "teardown: --dev IFACE is required"
    try tc qdisc del dev "$DEV" root
    restore_sysctls
    note "GRO/GSO/TSO stay off on $DEV; turn them back on with: ethtool -K $DEV gro on gso on tso on"
}

# -------------------------------------------------------------- arguments ---
scenario_options() {
    local py="$REPO/.venv/bin/python"
    [ -x "$py" ] || py="python3"
    "$py" "$HERE/scenario_args.py" "$1" || die "--scenario: could not read '$1' (see the message above)"
}

parse_opts() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --dry-run) DRY_RUN=1 ;;
            --dev) DEV="${2:?--dev needs an interface}"; shift ;;
            --rate-mbit) RATE_MBIT="${2:-}"; is_float "$RATE_MBIT" || die "--rate-mbit: '${2:-}' is not a number"; shift ;;
            --limit) need_uint "$1" "${2:-}"; LIMIT="$2"; shift ;;
            --target) need_time "$1" "${2:-}"; TARGET="$2"; shift ;;
            --tupdate) need_time "$1" "${2:-}"; TUPDATE="$2"; shift ;;
            --alpha) need_float "$1" "${2:-}"; ALPHA="$2"; shift ;;
            --beta) need_float "$1" "${2:-}"; BETA="$2"; shift ;;
            --coupling-factor)
                need_uint "$1" "${2:-}"; { [ "$2" -ge 1 ] && [ "$2" -le 255 ]; } || die "$1: must be 1..255, got $2"
                COUPLING="$2"; shift ;;
            --step-thresh)
                if ! is_time "${2:-}" && ! [[ "${2:-}" =~ ^[0-9]+(p|pkt|pkts|packet|packets)$ ]]; then
                    die "$1: '${2:-}' is neither a time (1ms) nor a packet count (5p)"
                fi
                STEP_THRESH="$2"; shift ;;
            --min-qlen-step) need_uint "$1" "${2:-}"; MIN_QLEN_STEP="$2"; shift ;;
            --classic-protection)
                need_uint "$1" "${2:-}"; [ "$2" -le 100 ] || die "$1: must be 0..100 (%), got $2"
                C_PROTECTION="$2"; shift ;;
            --overload)
                case "${2:-}" in drop) OVERLOAD=drop_on_overload ;; overflow) OVERLOAD=overflow ;;
                    *) die "$1: '${2:-}' must be drop or overflow" ;; esac; shift ;;
            --drop-at)
                case "${2:-}" in enqueue) DROP_AT=drop_enqueue ;; dequeue) DROP_AT=drop_dequeue ;;
                    *) die "$1: '${2:-}' must be enqueue or dequeue" ;; esac; shift ;;
            --ecn)
                case "${2:-}" in l4s_ect|any_ect) ECN_CLASS="$2" ;; *) die "$1: '${2:-}' must be l4s_ect or any_ect" ;; esac
                shift ;;
            --dscp)
                need_uint "$1" "${2:-}"; [ "$2" -le 63 ] || die "$1: a DSCP is 0..63, got $2"
                DSCPS+=("$2"); shift ;;
            --keep-offloads) OFFLOADS=0 ;;
            --l4s) ROLE_L4S=1 ;;
            --classic-ecn) CLASSIC_ECN=1 ;;
            --ack-delay)
                [[ "${2:-}" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+=[0-9]+(\.[0-9]+)?$ ]] \
                    || die "$1: '${2:-}' must be IPV4ADDR=MS, e.g. 10.99.0.12=35"
                ACK_DELAYS+=("$2"); shift ;;
            --servers) need_uint "$1" "${2:-}"; SERVERS="$2"; shift ;;
            --scenario)
                SCENARIO="${2:?--scenario needs a file}"; shift
                local extra
                extra="$(scenario_options "$SCENARIO")"
                # shellcheck disable=SC2086  # word splitting of generated --option value pairs
                parse_opts $extra ;;
            -h|--help) usage; exit 0 ;;
            *) die "unknown option '$1' (see --help)" ;;
        esac
        shift
    done
}

main() {
    local cmd="" args=()
    while [ $# -gt 0 ]; do
        case "$1" in
            router|sender|receiver|status|teardown) [ -z "$cmd" ] || die "one command at a time (got $cmd and $1)"; cmd="$1" ;;
            -h|--help) usage; exit 0 ;;
            *) args+=("$1") ;;
        esac
        shift
    done
    [ -n "$cmd" ] || { usage >&2; die "no command given (router, sender, receiver, status or teardown)"; }
    parse_opts "${args[@]+"${args[@]}"}"
    [ "$DRY_RUN" = 1 ] && echo "# $PROG $cmd (dry run: nothing is changed)"
    "cmd_$cmd"
}

main "$@"
