#!/usr/bin/env bash
# ccswitchd under a real systemd as PID 1: boot a minimal Debian container and check the unit.
#
#   sudo bash scripts/systemd-check.sh          # prints one PASS/FAIL line per check; exit 1 on any FAIL
#
# How: debootstrap a minimal Debian bookworm root file system once (systemd, dbus, iperf3,
# iproute2, python3, libbpf1, bpftool; cached under $CACHE, ~300 MB, ~2-3 min the first time),
# then boot it with `systemd-nspawn -b` on a throw-away overlay (--volatile=overlay: the cache
# is never written).  The container gets its own network namespace (loopback only: all test
# traffic stays inside it), the repository and its .venv (plus the Python the venv points at)
# bind-mounted read-only at the same paths, the host's bpffs, CAP_BPF and CAP_PERFMON on top of
# nspawn's default capabilities, and the bpf/perf_event_open system calls in its seccomp filter.
# The checks run from the host through `nsenter` into the container (systemctl, journalctl,
# ccswitch all talk to the container's systemd and daemon):
#
#   install     `ccswitch daemon install` writes the unit and config; systemd-analyze verify passes
#   ready       `systemctl enable --now` (installed defaults: the DQN) returns after READY=1: active (running), the STATUS= text arrived
#   caps        the daemon holds exactly the unit's capabilities, NoNewPrivs, a seccomp filter
#   flow        a real iperf3 flow (bbr, in the container) is listed by `ccswitch flows` over the
#               root-only control socket and switched by the daemon (static policy -> cubic)
#   root-only   the same socket refuses uid 65534 with one line
#   reload      `systemctl reload` applies a changed config: the installed defaults (dqn) -> a
#               static policy (journal "reloaded", same PID), then static_cca bbr (the flow goes
#               back to bbr); a broken config is refused and the old one kept
#   watchdog    WATCHDOG=1 keeps it alive over > 2 WatchdogSec periods (same PID, no restart,
#               WatchdogTimestamp advancing); a frozen daemon (SIGSTOP) is killed by the watchdog
#               and restarted (Restart=on-failure), and the new one restores the guard state
#   stop        `systemctl stop`: exit status 0, Result=success, journal "stopped", none of the
#               daemon's BPF links left (monitor, iterators, PCC's struct_ops link)
#
# Environment: CCSWITCH_SYSTEMD_CACHE (default /var/cache/ccswitch-systemd-check),
# CCSWITCH_DEBIAN_MIRROR (default http://deb.debian.org/debian), CCSWITCH_SKIP_APT=1 (never call
# apt-get for systemd-container/debootstrap), CCSWITCH_SYSTEMD_JOURNAL (where the container's
# journal of the units is written at the end, default /tmp/ccswitch-systemd-check.journal).  Needs root, /sys/kernel/btf/vmlinux, bpffs.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CCSWITCH_SYSTEMD_CACHE:-/var/cache/ccswitch-systemd-check}"
MIRROR="${CCSWITCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
PACKAGES=systemd,systemd-sysv,dbus,iperf3,iproute2,python3,libbpf1,bpftool,procps,util-linux
ROOTFS="$CACHE/$SUITE-$(echo "$PACKAGES" | sha1sum | cut -c1-8)"
MACHINE="ccs-sdcheck-$$"
PORT=5301
JOURNAL_OUT="${CCSWITCH_SYSTEMD_JOURNAL:-/tmp/ccswitch-systemd-check.journal}"
BOOT_TIMEOUT_S=60
VENV="$REPO/.venv"
IN_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

T0=$(date +%s.%N)
failures=0
NSPAWN_PID=""
LEADER=""
WORK="$(mktemp -d /tmp/ccs-sdcheck.XXXXXX)"

say() { printf '%s\n' "$*"; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
pass() { say "PASS $1${2:+: $2}"; }
fail() { say "FAIL $1${2:+: $2}"; failures=$((failures + 1)); }
die() { say "FAIL $1${2:+: $2}"; exit 1; }

cleanup() {
    if [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
        kill -TERM "$NSPAWN_PID" 2>/dev/null    # nspawn halts the container (SIGRTMIN+3 to its init)
        for _ in $(seq 1 100); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$NSPAWN_PID" 2>/dev/null
        wait "$NSPAWN_PID" 2>/dev/null
    fi
    rmdir "/run/systemd/nspawn/propagate/$MACHINE" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ prerequisites
[ "$(id -u)" = 0 ] || die "prerequisites" "run as root (sudo bash scripts/systemd-check.sh)"
[ -r /sys/kernel/btf/vmlinux ] || die "prerequisites" "/sys/kernel/btf/vmlinux missing: the kernel lacks BTF"
grep -qs " /sys/fs/bpf bpf " /proc/self/mounts || die "prerequisites" "bpffs is not mounted at /sys/fs/bpf (mount -t bpf bpf /sys/fs/bpf)"
[ -x "$VENV/bin/ccswitchd" ] || die "prerequisites" "$VENV/bin/ccswitchd missing: run scripts/setup.sh first"
missing=()
command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    [ "${CCSWITCH_SKIP_APT:-0}" = 1 ] && die "prerequisites" "missing packages: ${missing[*]} (apt-get install ${missing[*]})"
    say "systemd-check: apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$WORK/apt.log" 2>&1 \
        || { apt-get update -q >>"$WORK/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$WORK/apt.log" 2>&1; } \
        || die "prerequisites" "apt-get install ${missing[*]} failed: $(tail -1 "$WORK/apt.log")"
fi

# The venv's interpreter lives outside the repository (pyenv, /usr/bin, ...): bind its prefix too.
PY_HOME="$(sed -n 's/^home *= *//p' "$VENV/pyvenv.cfg")"
PY_PREFIX="$(dirname "$PY_HOME")"
binds=(--bind-ro="$REPO" --bind=/sys/fs/bpf)
case "$PY_PREFIX" in
    /usr | /usr/local) ;;
    *) binds+=(--bind-ro="$PY_PREFIX") ;;
esac
# The venv's own symlinks may point elsewhere (e.g. python3 -> /root/.pyenv/...): resolve and bind.
real_py="$(readlink -f "$VENV/bin/python")"
case "$real_py" in "$REPO"/* | "$PY_PREFIX"/* | /usr/*) ;; *) binds+=(--bind-ro="$(dirname "$(dirname "$real_py")")") ;; esac

# ------------------------------------------------------------------ root file system (cached)
if [ ! -x "$ROOTFS/lib/systemd/systemd" ]; then
    say "systemd-check: debootstrap $SUITE into $ROOTFS (first run only, a few minutes)"
    mkdir -p "$CACHE"
    rm -rf "$ROOTFS.tmp"
    if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS.tmp" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
        die "rootfs" "debootstrap failed: $(grep -E '^(E|W):' "$WORK/debootstrap.log" | tail -2 | tr '\n' ' ')"
    fi
    mv "$ROOTFS.tmp" "$ROOTFS"
fi
pass "rootfs" "$ROOTFS ($(du -sh "$ROOTFS" 2>/dev/null | cut -f1))"

# ------------------------------------------------------------------ boot
systemd-nspawn -D "$ROOTFS" --volatile=overlay -b --register=no --keep-unit --private-network \
    --machine="$MACHINE" --console=pipe --capability=CAP_BPF,CAP_PERFMON \
    --system-call-filter="bpf perf_event_open" "${binds[@]}" </dev/null >"$WORK/nspawn.log" 2>&1 &
NSPAWN_PID=$!

in_ct() { nsenter -t "$LEADER" -a -- env -i PATH="$IN_PATH" HOME=/root LANG=C.UTF-8 "$@"; }
deadline=$(( $(date +%s) + BOOT_TIMEOUT_S ))
state=""
while [ "$(date +%s)" -lt "$deadline" ]; do
    kill -0 "$NSPAWN_PID" 2>/dev/null || break
    # the container's init: nspawn's child running systemd (an intermediate child exits early)
    LEADER=""
    for p in $(cat "/proc/$NSPAWN_PID/task/$NSPAWN_PID/children" 2>/dev/null); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ] && LEADER=$p && break
    done
    if [ -n "$LEADER" ]; then
        state="$(in_ct systemctl is-system-running 2>/dev/null)"
        case "$state" in running | degraded) break ;; esac
    fi
    sleep 0.5
done
case "$state" in
    running) pass "boot" "systemd $(in_ct systemctl --version | head -1 | awk '{print $2}') is PID 1 in $MACHINE, system running after $(elapsed) s" ;;
    degraded) pass "boot" "system degraded (failed: $(in_ct systemctl --failed --plain --no-legend | awk '{print $1}' | tr '\n' ' '))" ;;
    *) die "boot" "container did not reach running in ${BOOT_TIMEOUT_S} s (state '${state}'): $(tail -3 "$WORK/nspawn.log" | tr '\n' ' ')" ;;
esac

sd_show() { in_ct systemctl show ccswitchd -p "$1" --value; }
journal() { in_ct journalctl -u ccswitchd -o cat --no-pager; }
pyjson() { in_ct /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }
ccs() { in_ct "$VENV/bin/ccswitch" "$@"; }

# poll CMD... until it succeeds, at most $1 seconds
wait_until() {
    local t=$1; shift
    local end=$(( $(date +%s) + t ))
    while [ "$(date +%s)" -le "$end" ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.3; done
    return 1
}

# ------------------------------------------------------------------ install
CONFIG="$(cat "$REPO/tests/fixtures/daemon-static-fast.toml")"   # the daemon tests' fast static config
write_config() { printf '%s\n' "${CONFIG/static_cca = \"cubic\"/static_cca = \"$1\"}" | in_ct tee /etc/ccswitch/ccswitch.toml >/dev/null; }

if out="$(in_ct "$VENV/bin/ccswitch" daemon install 2>&1)" && in_ct test -f /etc/systemd/system/ccswitchd.service \
        && grep -q "daemon-reload: done" <<<"$out"; then
    pass "install" "$(tr '\n' ';' <<<"$out" | sed 's/;$//')"
else
    die "install" "$out"
fi
if out="$(in_ct systemd-analyze verify /etc/systemd/system/ccswitchd.service 2>&1)" && [ -z "$out" ]; then
    pass "verify" "systemd-analyze verify: no findings"
else
    fail "verify" "$(tr '\n' ' ' <<<"$out")"
fi
# ------------------------------------------------------------------ start: READY=1
t_start=$(date +%s.%N)
if out="$(in_ct timeout 60 systemctl enable --now ccswitchd 2>&1)"; then
    took=$(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    st="$(sd_show ActiveState)/$(sd_show SubState)"
    text="$(sd_show StatusText)"
    if [ "$st" = active/running ] && [ -n "$text" ]; then
        pass "ready" "systemctl enable --now returned after READY=1 in $took s: $st, status \"$text\""
    else
        fail "ready" "state $st, StatusText '$text'"
    fi
else
    die "ready" "systemctl enable --now failed: $out; journal: $(journal | tail -5 | tr '\n' ' ')"
fi
MAINPID="$(sd_show MainPID)"
WATCHDOG_US="$(in_ct systemd-analyze timespan "$(sd_show WatchdogUSec)" | awk '/μs:/ {print $2}')"
t_ready=$(date +%s)

# capabilities, no_new_privs, seccomp of the running daemon
want_caps="$(sed -n 's/^CapabilityBoundingSet=//p' "$REPO/daemon/ccswitchd.service")"
out="$(in_ct /usr/bin/python3 - "$MAINPID" "$want_caps" <<'EOF' 2>&1
import re, subprocess, sys
pid, want = sys.argv[1], sys.argv[2].split()
names = subprocess.run(["setpriv", "--list-caps"], capture_output=True, text=True, check=True).stdout.split()
status = open(f"/proc/{pid}/status").read()
f = dict(re.findall(r"^(\w+):\s+(\S+)$", status, re.M))
mask = sum(1 << names.index(c.removeprefix("CAP_").lower()) for c in want)
eff = int(f["CapEff"], 16)
have = [n for i, n in enumerate(names) if eff >> i & 1]
ok = all(int(f[k], 16) == mask for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")) and f["NoNewPrivs"] == "1" and f["Seccomp"] == "2"
print(f"CapEff={','.join(have)} NoNewPrivs={f['NoNewPrivs']} Seccomp={f['Seccomp']} (unit: {' '.join(want)})")
sys.exit(0 if ok else 1)
EOF
)" && pass "caps" "$out" || fail "caps" "$out"

# ------------------------------------------------------------------ reload: defaults (dqn) -> static
# Started with the installed defaults (the shipped DQN); a static policy makes the switches below
# deterministic: every flow to static_cca, 2 consecutive decisions, 1 s dwell.
write_config cubic
out="$(in_ct "$VENV/bin/ccswitchd" --check-config --config /etc/ccswitch/ccswitch.toml 2>&1)" \
    || die "config" "$out"
in_ct systemctl reload ccswitchd 2>&1
static_loaded() { journal | grep -q "msg=reloaded policy=static"; }
if wait_until 15 static_loaded && [ "$(sd_show MainPID)" = "$MAINPID" ]; then
    pass "reload" "dqn -> static applied by systemctl reload, same PID $MAINPID: \"$(journal | grep msg=reloaded | tail -1 | cut -c1-60)\", status \"$(sd_show StatusText)\""
else
    fail "reload" "journal: $(journal | tail -3 | tr '\n' ' ')"
fi

# ------------------------------------------------------------------ a real flow, managed
in_ct systemd-run --quiet --unit=ccs-iperf-server iperf3 -s -p "$PORT" >/dev/null 2>&1
listening() { in_ct ss -ltnH "sport = :$PORT" | grep -q .; }
wait_until 10 listening
in_ct systemd-run --quiet --unit=ccs-iperf-client iperf3 -c 127.0.0.1 -p "$PORT" -t 120 -b 20M -C bbr >/dev/null 2>&1

# the iperf3 data connection (> 1 Mbit/s; its control connection is idle) and its CCA
flow_cca() {
    ccs flows --json 2>/dev/null | pyjson "r=[f for f in d if f['dport']==$PORT and f['throughput_bps']>1e6]; print(r[0]['flow_id'], r[0]['cca'], r[0]['managed'], round(r[0]['throughput_bps']/1e6,1)) if r else sys.exit(1)"
}
flow_is() { [ "$(flow_cca | awk '{print $2}')" = "$1" ]; }
if wait_until 30 flow_is cubic; then
    read -r FLOW cca managed mbit <<<"$(flow_cca)"
    sw="$(ccs status --json | pyjson "print(d['switches'], d['policy']['kind'])")"
    pass "flow" "iperf3 flow $FLOW started on bbr, now $cca (managed=$managed, $mbit Mbit/s); status: switches/policy $sw"
else
    fail "flow" "no data flow on cubic within 30 s: $(ccs flows 2>&1 | tail -3 | tr '\n' ' ')"
fi
# root-only: the unit's RuntimeDirectoryMode=0700 keeps others from the socket (the daemon also
# checks SO_PEERCRED); the container's own python3, as the venv's interpreter may sit under /root
out="$(in_ct setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/run/ccswitch/ccswitchd.sock")
except OSError as e:
    sys.exit(f"uid 65534 refused: {e.strerror} (errno {e.errno})")
s.sendall(b"{\"op\": \"status\"}\n")
print(s.recv(4096).decode().strip())' 2>&1)"
rc=$?
if [ $rc -ne 0 ] && grep -q "refused" <<<"$out"; then
    pass "root-only" "$out; socket dir $(in_ct stat -c '%a %U' /run/ccswitch)"
else
    fail "root-only" "exit $rc: $out"
fi

# ------------------------------------------------------------------ reload
write_config bbr
in_ct systemctl reload ccswitchd 2>&1
if wait_until 15 flow_is bbr && [ "$(journal | grep -c msg=reloaded)" -ge 2 ]; then
    pass "reload-cca" "static_cca=bbr applied without restart (PID $(sd_show MainPID)): the flow is back on $(flow_cca | awk '{print $2}')"
else
    fail "reload-cca" "flow $(flow_cca), journal: $(journal | tail -3 | tr '\n' ' ')"
fi
printf '[policy]\nkind = "nonsense"\n' | in_ct tee /etc/ccswitch/ccswitch.toml >/dev/null
in_ct systemctl reload ccswitchd 2>&1
bad_reload_logged() { journal | grep -q "reload failed, keeping the running config"; }
if wait_until 10 bad_reload_logged \
        && [ "$(sd_show ActiveState)" = active ] && [ "$(sd_show MainPID)" = "$MAINPID" ]; then
    pass "reload-bad" "a broken config is refused, still active with PID $MAINPID: \"$(journal | grep 'reload failed' | tail -1 | cut -c1-120)\""
else
    fail "reload-bad" "state $(sd_show ActiveState), PID $(sd_show MainPID): $(journal | tail -3 | tr '\n' ' ')"
fi
write_config bbr
in_ct systemctl reload ccswitchd 2>&1

# ------------------------------------------------------------------ watchdog keeps it alive
wd_s=$(( WATCHDOG_US / 1000000 ))
if [ "$wd_s" -le 0 ]; then
    fail "watchdog" "WatchdogUSec is '$WATCHDOG_US': the unit sets no watchdog"
else
    ts1="$(sd_show WatchdogTimestampMonotonic)"
    sleep $(( t_ready + 5 * wd_s / 2 - $(date +%s) > 0 ? t_ready + 5 * wd_s / 2 - $(date +%s) : 0 ))
    ts2="$(sd_show WatchdogTimestampMonotonic)"
    up=$(( $(date +%s) - t_ready ))
    if [ "$(sd_show ActiveState)" = active ] && [ "$(sd_show MainPID)" = "$MAINPID" ] && [ "$(sd_show NRestarts)" = 0 ] \
            && [ "$ts2" -gt "$ts1" ]; then
        pass "watchdog" "WatchdogSec=${wd_s}s, alive ${up} s (> 2 periods) with PID $MAINPID, NRestarts=0, WatchdogTimestamp advanced $(( (ts2 - ts1) / 1000 )) ms during the wait"
    else
        fail "watchdog" "state $(sd_show ActiveState) PID $(sd_show MainPID) NRestarts $(sd_show NRestarts) watchdog ts $ts1 -> $ts2"
    fi

    # a frozen daemon is killed by the watchdog and restarted
    in_ct kill -STOP "$MAINPID"
    t_stop=$(date +%s)
    not_active() { [ "$(sd_show ActiveState)" != active ]; }
    restarted() { [ "$(sd_show NRestarts)" = 1 ] && [ "$(sd_show SubState)" = running ]; }
    wait_until $(( wd_s + 10 )) not_active
    fired=$(( $(date +%s) - t_stop ))
    in_ct kill -CONT "$MAINPID" 2>/dev/null   # lets the pending SIGABRT through
    if wait_until 30 restarted \
            && journal | grep -q "Watchdog timeout"; then
        NEWPID="$(sd_show MainPID)"
        restored=$(journal | grep -c "state restored")
        pass "watchdog-kill" "SIGSTOPped daemon: watchdog fired after ~${fired} s ($(journal | grep -o 'Watchdog timeout[^!]*' | tail -1)), restarted as PID $NEWPID (NRestarts=1), state restored: $([ "$restored" -ge 1 ] && echo yes || echo no)"
        MAINPID="$NEWPID"
    else
        fail "watchdog-kill" "state $(sd_show ActiveState)/$(sd_show SubState) NRestarts $(sd_show NRestarts): $(journal | tail -4 | tr '\n' ' ')"
        MAINPID="$(sd_show MainPID)"
    fi
fi

# ------------------------------------------------------------------ stop
say "INFO resources: $(in_ct systemctl show ccswitchd -p MemoryCurrent -p CPUUsageNSec -p TasksCurrent | tr '\n' ' ')RSS $(in_ct sh -c "grep VmRSS /proc/$MAINPID/status" | awk '{print $2 " " $3}')"
# its links: monitor (sockops), iterators, PCC's struct_ops link when it registered PCC.  (The
# struct_ops map of that PCC may outlive the process for a while, unregistered: not checked.)
owned="$(in_ct sh -c "grep -hsE '^link_id:' /proc/$MAINPID/fdinfo/*" | awk '{print $1 $2}' | sort -u)"
links="$(grep -c '^link_id' <<<"$owned")"
t_stop=$(date +%s.%N)
if in_ct timeout 60 systemctl stop ccswitchd; then
    took=$(awk -v a="$t_stop" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    code="$(sd_show ExecMainCode)"; status="$(sd_show ExecMainStatus)"; result="$(sd_show Result)"
    left=""
    for obj in $owned; do
        id="${obj#*:}"
        in_ct bpftool link show id "$id" >/dev/null 2>&1 && left+=" link $id"
    done
    if [ "$code" = 1 ] && [ "$status" = 0 ] && [ "$result" = success ] && journal | grep -q "msg=stopped" && [ -z "$left" ] && [ "$links" -gt 0 ]; then
        pass "stop" "in $took s: exit status 0 (code=exited), Result=success, journal \"stopped\" + \"$(journal | grep -o 'Deactivated successfully' | tail -1)\", its $links BPF links gone"
    else
        fail "stop" "ExecMainCode=$code ExecMainStatus=$status Result=$result links=$links left:${left:- none}"
    fi
else
    fail "stop" "systemctl stop failed"
fi
in_ct systemctl stop ccs-iperf-client ccs-iperf-server >/dev/null 2>&1

in_ct journalctl -u ccswitchd -u ccs-iperf-client -u ccs-iperf-server -o short-monotonic --no-pager >"$JOURNAL_OUT" 2>&1
say "systemd-check: $failures failed, $(elapsed) s (the units' journal: $JOURNAL_OUT)"
[ "$failures" = 0 ]
