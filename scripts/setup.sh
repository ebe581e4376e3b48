#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian/Ubuntu machine (run as root) for ccswitch:
#
#   1. apt-get install the missing system packages (clang, llvm, libbpf-dev,
#      bpftool, iperf3, tshark, iproute2, python3-venv, make, util-linux, procps,
#      ethtool, iputils-ping, tmux for the CLI layout test);
#   2. mount bpffs at /sys/fs/bpf;
#   3. create .venv at the repository root (Python >= 3.11) and
#      `pip install -e '.[dev]'` whenever pyproject.toml changed since the last install;
#   4. `make -C bpf`;
#   5. `cargo build --release --manifest-path testbed/linkemu/Cargo.toml` (the link
#      emulator) whenever its sources changed since the last build (skipped, with a
#      note, when cargo is not installed); it needs only cargo, so it runs in the
#      background while steps 3-4 install Python and build the BPF objects.
#
# A re-run with nothing to do prints nothing.  Environment knobs:
#   PYTHON=/path/to/python3   interpreter for the venv (default: first of python3,
#                             python3.13, python3.12, python3.11 that is >= 3.11)
#   CCSWITCH_SKIP_APT=1       never call apt-get (only report what is missing)
#   CCSWITCH_PREBUILD_TESTS=1 also compile linkemu's cargo test binary in that background
#                             job (scripts/test.sh sets it: the compile, ~1-2 min on 2 cores,
#                             then overlaps the pip install instead of running inside the suite)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
STAMP="$VENV/.ccswitch-install-stamp"

say() { printf 'ccswitch setup: %s\n' "$*"; }
die() { printf 'ccswitch setup: error: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# ---------------------------------------------------------------- packages ---

pkg_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]
}

have() { command -v "$1" >/dev/null 2>&1; }

# bpftool must actually run: on Ubuntu /usr/sbin/bpftool is a wrapper script from
# linux-tools-common that fails when linux-tools-$(uname -r) is absent.
BPFTOOL_BIN=""
find_bpftool() {
    local c
    for c in "$(command -v bpftool 2>/dev/null || true)" /usr/sbin/bpftool \
             /usr/lib/linux-tools/"$(uname -r)"/bpftool /usr/lib/linux-tools-*/bpftool \
             /usr/lib/linux-tools/*/bpftool; do
        if [ -n "$c" ] && [ -x "$c" ] && "$c" version >/dev/null 2>&1; then
            BPFTOOL_BIN="$c"
            return 0
        fi
    done
    return 1
}

# A package counts as present when dpkg says so or its main tool is on PATH
# (e.g. a clang installed from apt.llvm.org under another package name).
missing_packages() {
    local spec pkg cmd
    for spec in clang:clang llvm:llvm-strip libbpf-dev: iperf3:iperf3 tshark:tshark \
                iproute2:tc make:make util-linux:nsenter procps:pgrep ethtool:ethtool \
                iputils-ping:ping tmux:tmux; do
        pkg="${spec%%:*}"
        cmd="${spec#*:}"
        if pkg_installed "$pkg"; then continue; fi
        if [ -n "$cmd" ] && have "$cmd"; then continue; fi
        if [ "$pkg" = libbpf-dev ] && [ -f /usr/include/bpf/libbpf.h ]; then continue; fi
        printf '%s\n' "$pkg"
    done
    # python3-venv: needed when the system python3 lacks ensurepip (Debian split).
    if ! pkg_installed python3-venv && have python3 \
        && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        printf '%s\n' python3-venv
    fi
}

apt_install() {
    # $@: packages. Returns apt-get's status.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" \
        >/dev/null
}

APT_UPDATED=0
apt_update_once() {
    if [ "$APT_UPDATED" -eq 0 ]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        APT_UPDATED=1
    fi
}

apt_has_candidate() {
    local cand
    cand="$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')"
    [ -n "$cand" ] && [ "$cand" != "(none)" ]
}

install_packages() {
    local missing=()
    mapfile -t missing < <(missing_packages)
    local need_bpftool=0
    find_bpftool || need_bpftool=1
    # python3-venv only matters when we still have to build the venv with a
    # Debian python that lacks ensurepip; handled in ensure_python below.
    if [ "${#missing[@]}" -eq 0 ] && [ "$need_bpftool" -eq 0 ]; then
        return 0
    fi
    local what="${missing[*]}"
    [ "$need_bpftool" -eq 1 ] && what="$what bpftool"
    if [ "${CCSWITCH_SKIP_APT:-0}" = 1 ]; then
        die "missing packages:${what:+ }$what (CCSWITCH_SKIP_APT=1, not installing)"
    fi
    is_root || die "missing packages:${what:+ }$what; re-run as root to install them"
    have apt-get || die "missing packages:${what:+ }$what and apt-get is not available"

    apt_update_once
    # Non-interactive answers: no setuid dumpcap group question, no iperf3 daemon.
    if have debconf-set-selections; then
        printf '%s\n' \
            'wireshark-common wireshark-common/install-setuid boolean false' \
            'iperf3 iperf3/start_daemon boolean false' | debconf-set-selections
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]}"
        apt_install "${missing[@]}" || die "apt-get install ${missing[*]} failed"
    fi
    if [ "$need_bpftool" -eq 1 ]; then
        say "installing bpftool"
        if apt_has_candidate bpftool; then
            apt_install bpftool || true
        fi
        if ! find_bpftool; then
            # Ubuntu: bpftool ships in linux-tools-$(uname -r) (wrapper in -common).
            local kpkg
            kpkg="linux-tools-$(uname -r)"
            if apt_has_candidate "$kpkg"; then
                apt_install linux-tools-common "$kpkg" || true
            fi
        fi
        if ! find_bpftool && apt_has_candidate linux-tools-generic; then
            # Kernel-specific tools unavailable: any version's bpftool binary works
            # for `btf dump` / skeletons; find_bpftool looks under /usr/lib/linux-tools*.
            apt_install linux-tools-common linux-tools-generic || true
        fi
        find_bpftool || die "could not install a working bpftool (tried bpftool, linux-tools)"
    fi
}

# ------------------------------------------------------------------- bpffs ---

mount_bpffs() {
    if [ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null || true)" = bpf_fs ]; then
        return 0
    fi
    is_root || die "bpffs is not mounted at /sys/fs/bpf; re-run as root"
    say "mounting bpffs at /sys/fs/bpf"
    mkdir -p /sys/fs/bpf
    mount -t bpf bpf /sys/fs/bpf || die "mount -t bpf bpf /sys/fs/bpf failed"
}

# -------------------------------------------------------------------- venv ---

py_ok() {  # $1: interpreter; true if it runs and is >= 3.11
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}

pick_python() {
    local c
    if [ -n "${PYTHON:-}" ]; then
        have "$PYTHON" || die "PYTHON=$PYTHON not found"
        py_ok "$PYTHON" || die "PYTHON=$PYTHON is $("$PYTHON" -V 2>&1); ccswitch needs Python >= 3.11"
        printf '%s\n' "$PYTHON"
        return 0
    fi
    for c in python3 python3.13 python3.12 python3.11; do
        if have "$c" && py_ok "$c"; then
            printf '%s\n' "$c"
            return 0
        fi
    done
    local found="none"
    have python3 && found="$(python3 -V 2>&1)"
    die "ccswitch needs Python >= 3.11 (python3 is: $found); install python3.11+ or set PYTHON=/path/to/python3.11"
}

ensure_venv() {
    if [ -x "$VENV/bin/python" ] && py_ok "$VENV/bin/python"; then
        return 0
    fi
    local py
    py="$(pick_python)"
    if ! "$py" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        # Debian/Ubuntu split venv/ensurepip into python3-venv (or python3.X-venv).
        is_root || die "$py cannot create venvs (install python3-venv as root)"
        have apt-get || die "$py cannot create venvs and apt-get is not available"
        apt_update_once
        local ver
        ver="$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
        say "installing python3-venv"
        apt_install python3-venv || true
        if ! "$py" -c 'import ensurepip' >/dev/null 2>&1; then
            apt_install "python$ver-venv" || true
        fi
        "$py" -c 'import ensurepip, venv' >/dev/null 2>&1 \
            || die "$py still cannot create venvs (python3-venv / python$ver-venv)"
    fi
    say "creating .venv with $("$py" -V 2>&1)"
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
}

ensure_install() {
    local want have_stamp=""
    want="$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)"
    [ -f "$STAMP" ] && have_stamp="$(cat "$STAMP")"
    if [ "$want" = "$have_stamp" ]; then
        return 0
    fi
    say "pip install -e '.[dev]'"
    rm -f "$STAMP"
    (cd "$REPO" && "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]') \
        || die "pip install -e '.[dev]' failed"
    printf '%s\n' "$want" >"$STAMP"
}

# --------------------------------------------------------------------- bpf ---

build_bpf() {
    [ -f "$REPO/bpf/Makefile" ] || return 0
    local args=(-C "$REPO/bpf" --no-print-directory)
    [ -n "$BPFTOOL_BIN" ] && args+=("BPFTOOL=$BPFTOOL_BIN")
    if make -q "${args[@]}" >/dev/null 2>&1; then
        return 0
    fi
    say "make -C bpf"
    make -s "${args[@]}" || die "make -C bpf failed"
}

# ----------------------------------------------------------------- linkemu ---

build_linkemu() {
    local crate="$REPO/testbed/linkemu"
    local stamp="$crate/target/.setup-build-stamp"
    [ -f "$crate/Cargo.toml" ] || return 0
    if [ -f "$stamp" ] && [ -x "$crate/target/release/linkemu" ] \
        && [ -z "$(find "$crate/Cargo.toml" "$crate/Cargo.lock" "$crate/src" -newer "$stamp" -print -quit)" ]; then
        return 0
    fi
    if ! have cargo; then
        say "cargo not found: testbed/linkemu not built (its tests skip; install Rust from https://rustup.rs)"
        return 0
    fi
    say "cargo build --release --manifest-path testbed/linkemu/Cargo.toml"
    cargo build --release --quiet --manifest-path "$crate/Cargo.toml" || die "cargo build of testbed/linkemu failed"
    touch "$stamp"
}

prebuild_linkemu_tests() {
    [ "${CCSWITCH_PREBUILD_TESTS:-0}" = 1 ] && [ -f "$REPO/testbed/linkemu/Cargo.toml" ] && have cargo || return 0
    cargo test --no-run --quiet --manifest-path "$REPO/testbed/linkemu/Cargo.toml" 2>/dev/null \
        || die "cargo test --no-run of testbed/linkemu failed (run it by hand to see why)"
}

install_packages
find_bpftool || true
mount_bpffs
# linkemu needs only cargo: build it while pip installs (a failure is reported after the wait)
( build_linkemu && prebuild_linkemu_tests ) &
linkemu_job=$!
ensure_venv
ensure_install
build_bpf
wait "$linkemu_job" || die "building testbed/linkemu failed (message above)"
