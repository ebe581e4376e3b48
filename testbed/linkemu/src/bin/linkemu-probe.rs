//! `linkemu-probe`: a paced UDP sender and a timestamping receiver for the
//! fidelity benchmark (bench/emulator_fidelity.py).
//!
//! iperf3 sends one datagram per syscall; on a 2-core VM it tops out below
//! 100 Mbit/s while the emulator holds one core, which is too little to
//! saturate the links under test.  This sender paces datagrams with a token
//! bucket and sends them with sendmmsg (up to 64 per call); each payload
//! carries a sequence number and the CLOCK_REALTIME instant just before the
//! call.  The receiver reads with recvmmsg and SO_TIMESTAMPNS, so one-way
//! delay = kernel receive time - send time, both on the same host clock.
//!
//! ```text
//! linkemu-probe recv --bind 10.99.0.1:6000 [--idle-s 1.5] [--skip-s 1]
//! linkemu-probe send --to 10.99.0.1:6000 --rate-mbit 100 [--size 1400] --duration-s 5
//! linkemu-probe send --to 10.99.0.1:6000 --pps 1000 --size 64 --duration-s 5
//! ```
//!
//! Both print one JSON object on stdout.  The receiver exits after `idle-s`
//! without packets (once it got one), or on SIGTERM/SIGINT.  Rates are IP
//! level (payload + 28 bytes of IPv4/UDP headers).

use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use linkemu::time::{read_clock, Nanos, NS_PER_S};
use serde_json::json;

const HDR: usize = 28;
const BATCH: usize = 64;

#[derive(Parser)]
#[command(name = "linkemu-probe", about = "Paced UDP sender / timestamping receiver for linkemu's benchmark")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send paced datagrams.
    Send {
        #[arg(long)]
        to: SocketAddrV4,
        /// IP-level rate (Mbit/s); or give --pps.
        #[arg(long)]
        rate_mbit: Option<f64>,
        #[arg(long)]
        pps: Option<f64>,
        /// UDP payload bytes (>= 16).
        #[arg(long, default_value_t = 1400)]
        size: usize,
        #[arg(long, default_value_t = 5.0)]
        duration_s: f64,
        /// Pace in steps of this many microseconds (sleeping in between)
        /// instead of per packet; for background load that must not hog a CPU.
        #[arg(long, default_value_t = 0.0)]
        batch_us: f64,
        /// IP TOS byte (DSCP << 2 | ECN): 1 sends ECT(1) (DualPI2's L queue), 2 ECT(0).
        #[arg(long, default_value_t = 0)]
        tos: u8,
    },
    /// Receive and measure.
    Recv {
        #[arg(long)]
        bind: SocketAddrV4,
        /// Stop after this long without a packet (once one arrived).
        #[arg(long, default_value_t = 1.5)]
        idle_s: f64,
        /// Leave this much out at both ends of the steady-state rate window.
        #[arg(long, default_value_t = 1.0)]
        skip_s: f64,
        /// Give up if nothing arrives within this long.
        #[arg(long, default_value_t = 20.0)]
        first_timeout_s: f64,
        /// Also write every one-way delay (us, one per line, arrival order) here.
        #[arg(long)]
        dump: Option<std::path::PathBuf>,
    },
}

fn realtime() -> Nanos {
    read_clock(libc::CLOCK_REALTIME)
}

fn mono() -> Nanos {
    read_clock(libc::CLOCK_MONOTONIC)
}

fn sleep_until(t: Nanos) {
    loop {
        let now = mono();
        if now >= t {
            return;
        }
        let d = t - now;
        if d > 200_000 {
            std::thread::sleep(Duration::from_nanos(d - 100_000));
        } else {
            std::hint::spin_loop();
        }
    }
}

fn send(
    to: SocketAddrV4,
    rate_mbit: Option<f64>,
    pps: Option<f64>,
    size: usize,
    duration_s: f64,
    batch_us: f64,
    tos: u8,
) -> Result<(), String> {
    let size = size.clamp(16, 65_000);
    let pps = match (rate_mbit, pps) {
        (Some(r), None) => r * 1e6 / 8.0 / (size + HDR) as f64,
        (None, Some(p)) => p,
        _ => return Err("give exactly one of --rate-mbit and --pps".into()),
    };
    if !(pps > 0.0 && pps.is_finite()) {
        return Err("rate must be positive".into());
    }
    let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    sock.connect(to).map_err(|e| e.to_string())?;
    let fd = sock.as_raw_fd();
    let buf: libc::c_int = 8 << 20;
    // SAFETY: setsockopt with a valid int.
    unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &buf as *const _ as *const libc::c_void, 4);
    }
    if tos != 0 {
        let t: libc::c_int = tos as libc::c_int;
        // SAFETY: setsockopt with a valid int.
        let r =
            unsafe { libc::setsockopt(fd, libc::IPPROTO_IP, libc::IP_TOS, &t as *const _ as *const libc::c_void, 4) };
        if r != 0 {
            return Err(format!("setsockopt IP_TOS {tos}: {}", std::io::Error::last_os_error()));
        }
    }
    let mut bufs = vec![vec![0u8; size]; BATCH];
    let start = mono() + 10_000_000;
    let total = (pps * duration_s).round() as u64;
    let mut sent: u64 = 0;
    let mut errors: u64 = 0;
    let mut calls: u64 = 0;
    sleep_until(start);
    while sent < total {
        let now = mono();
        let due = ((now - start) as f64 / 1e9 * pps) as u64 + 1;
        let n = (due.min(total) - sent.min(due.min(total))).min(BATCH as u64) as usize;
        if n == 0 {
            let next = start + ((sent as f64) / pps * 1e9) as Nanos;
            if batch_us > 0.0 {
                std::thread::sleep(Duration::from_nanos(((batch_us * 1000.0) as Nanos).max(next.saturating_sub(now))));
            } else {
                sleep_until(next);
            }
            continue;
        }
        let ts = realtime();
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(n);
        for (i, b) in bufs.iter_mut().take(n).enumerate() {
            b[..8].copy_from_slice(&(sent + i as u64).to_be_bytes());
            b[8..16].copy_from_slice(&ts.to_be_bytes());
            iov.push(libc::iovec { iov_base: b.as_mut_ptr() as *mut libc::c_void, iov_len: size });
        }
        let mut hdrs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: zeroed msghdr is valid; we set the iovec.
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_iov = v as *mut libc::iovec;
                h.msg_iovlen = 1;
                libc::mmsghdr { msg_hdr: h, msg_len: 0 }
            })
            .collect();
        // SAFETY: hdrs/iov/bufs outlive the call.
        let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as u32, 0) };
        calls += 1;
        if r < 0 {
            errors += 1;
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        sent += r as u64;
    }
    let el = (mono() - start) as f64 / 1e9;
    let out = json!({
        "packets": sent,
        "bytes_ip": sent * (size + HDR) as u64,
        "duration_s": el,
        "rate_mbit": sent as f64 * ((size + HDR) * 8) as f64 / el / 1e6,
        "target_pps": pps,
        "send_calls": calls,
        "send_errors": errors,
    });
    println!("{out}");
    Ok(())
}

struct Rx {
    seq: u64,
    tx: Nanos,
    rx: Nanos,
    len: usize,
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1);
    sorted[i]
}

fn recv(
    bind: SocketAddrV4,
    idle_s: f64,
    skip_s: f64,
    first_timeout_s: f64,
    dump: Option<std::path::PathBuf>,
) -> Result<(), String> {
    // Stop cleanly on SIGTERM/SIGINT too.
    // SAFETY: signal mask manipulation with valid sets.
    let sigfd = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signalfd(-1, &set, libc::SFD_NONBLOCK)
    };
    let sock = UdpSocket::bind(bind).map_err(|e| format!("bind {bind}: {e}"))?;
    let fd = sock.as_raw_fd();
    let one: libc::c_int = 1;
    let buf: libc::c_int = 32 << 20;
    // SAFETY: setsockopt with valid ints.
    unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &one as *const _ as *const libc::c_void, 4);
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &buf as *const _ as *const libc::c_void, 4);
    }
    println!("{}", json!({"ready": true}));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let slot = 65_536;
    let mut bufs = vec![0u8; slot * BATCH];
    let mut ctrl = vec![0u8; 64 * BATCH];
    let mut got: Vec<Rx> = Vec::with_capacity(1 << 20);
    let t_start = mono();
    let mut last = t_start;
    loop {
        let mut pfd = [
            libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: sigfd, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: valid pollfd array.
        unsafe { libc::poll(pfd.as_mut_ptr(), 2, 50) };
        if pfd[1].revents != 0 {
            break;
        }
        let now = mono();
        let limit = if got.is_empty() { first_timeout_s } else { idle_s };
        if (now - last) as f64 / 1e9 > limit {
            break;
        }
        if pfd[0].revents == 0 {
            continue;
        }
        let mut iov: Vec<libc::iovec> = (0..BATCH)
            .map(|i| libc::iovec { iov_base: bufs[i * slot..].as_mut_ptr() as *mut libc::c_void, iov_len: slot })
            .collect();
        let mut hdrs: Vec<libc::mmsghdr> = (0..BATCH)
            .map(|i| {
                // SAFETY: zeroed msghdr; pointers into live buffers.
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_iov = &mut iov[i] as *mut libc::iovec;
                h.msg_iovlen = 1;
                h.msg_control = ctrl[i * 64..].as_mut_ptr() as *mut libc::c_void;
                h.msg_controllen = 64;
                libc::mmsghdr { msg_hdr: h, msg_len: 0 }
            })
            .collect();
        // SAFETY: as above.
        let n =
            unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        if n <= 0 {
            continue;
        }
        last = mono();
        for (i, h) in hdrs.iter().take(n as usize).enumerate() {
            let len = h.msg_len as usize;
            if len < 16 {
                continue;
            }
            let b = &bufs[i * slot..i * slot + len];
            let seq = u64::from_be_bytes(b[..8].try_into().unwrap());
            let tx = u64::from_be_bytes(b[8..16].try_into().unwrap());
            let mut rx = realtime();
            // SAFETY: walking the kernel-filled control buffer.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                        let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                        rx = ts.tv_sec as u64 * NS_PER_S + ts.tv_nsec as u64;
                    }
                    c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
                }
            }
            got.push(Rx { seq, tx, rx, len });
        }
    }
    let n = got.len();
    if let Some(path) = dump {
        let text: String = got.iter().map(|r| format!("{:.1}\n", (r.rx as f64 - r.tx as f64) / 1000.0)).collect();
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut out = json!({"packets": n});
    if n > 0 {
        let first = got.iter().map(|r| r.rx).min().unwrap();
        let last_rx = got.iter().map(|r| r.rx).max().unwrap();
        let span = (last_rx - first) as f64 / 1e9;
        let skip = (skip_s * 1e9) as Nanos;
        let (w0, w1) = (first + skip, last_rx.saturating_sub(skip));
        let mut steady = serde_json::Value::Null;
        if w1 > w0 {
            let bytes: usize = got.iter().filter(|r| r.rx >= w0 && r.rx < w1).map(|r| r.len + HDR).sum();
            steady = json!(bytes as f64 * 8.0 / ((w1 - w0) as f64 / 1e9) / 1e6);
        }
        let mut owd: Vec<f64> = got.iter().map(|r| (r.rx as f64 - r.tx as f64) / 1000.0).collect();
        owd.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let max_seq = got.iter().map(|r| r.seq).max().unwrap();
        let mut reordered = 0;
        for w in got.windows(2) {
            if w[1].seq < w[0].seq {
                reordered += 1;
            }
        }
        // Per-100-ms IP-level rates over the whole span.
        let bins = ((last_rx - first) / 100_000_000 + 1) as usize;
        let mut per = vec![0usize; bins];
        for r in &got {
            per[((r.rx - first) / 100_000_000) as usize] += r.len + HDR;
        }
        let per_mbit: Vec<f64> = per.iter().map(|b| (*b as f64 * 8.0 / 0.1 / 1e6 * 100.0).round() / 100.0).collect();
        out = json!({
            "packets": n,
            "bytes_ip": got.iter().map(|r| r.len + HDR).sum::<usize>(),
            "lost": (max_seq + 1).saturating_sub(n as u64),
            "reordered": reordered,
            "span_s": span,
            "rate_mbit_steady": steady,
            "rate_mbit_100ms": per_mbit,
            "owd_us": {
                "min": owd[0], "p1": pct(&owd, 0.01), "p50": pct(&owd, 0.5), "p90": pct(&owd, 0.9),
                "p99": pct(&owd, 0.99), "p999": pct(&owd, 0.999), "max": owd[n - 1],
                "mean": owd.iter().sum::<f64>() / n as f64,
            },
        });
    }
    println!("{out}");
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Send { to, rate_mbit, pps, size, duration_s, batch_us, tos } => {
            send(to, rate_mbit, pps, size, duration_s, batch_us, tos)
        }
        Cmd::Recv { bind, idle_s, skip_s, first_timeout_s, dump } => recv(bind, idle_s, skip_s, first_timeout_s, dump),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linkemu-probe: error: {e}");
            ExitCode::from(1)
        }
    }
}
