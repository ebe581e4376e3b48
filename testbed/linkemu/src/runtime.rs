//! The real-time loop: sockets -> engine -> sockets, on CLOCK_MONOTONIC.
//!
//! One thread does all forwarding (both directions, all ports), so the engine
//! needs no locks and its event order is exact.  Each iteration:
//!
//! 1. wait (see below) in epoll_pwait2 on the port sockets and a signalfd;
//! 2. read every ready socket (recvmmsg, up to 64 frames each);
//! 3. feed the frames to the engine in kernel-timestamp order, each after
//!    advancing the engine to its arrival instant (so arrivals and scheduled
//!    events interleave exactly as in virtual time);
//! 4. advance the engine to now and send everything that is due, recording
//!    how late each frame left relative to its ideal instant (tx lateness).
//!
//! Timing strategy for the 200 us delay-accuracy target on 2 shared cores:
//! * arrival instants come from the kernel (SO_TIMESTAMPNS taken when the
//!   frame entered the router's backlog), so the loop's wake-up latency does
//!   not shift them;
//! * departures are the hard part: a timer wake-up on this VM takes ~40 us
//!   (p50) to ~110 us (p99) with timer slack at 1 ns, and several ms when the
//!   CPU is busy with iperf3 (the scheduler lets the running task finish its
//!   slice).  So the loop sleeps in epoll_pwait2 (nanosecond timeout) only
//!   until `spin_us` (50 us) before the next event, then spins on the clock
//!   (with the CPU's pause hint, polling the sockets every 16 us) until the
//!   event is due.  50 us is a measured compromise: 150 us halved the rate an
//!   iperf3 sender on the other core could reach (the FIFO thread then spins
//!   most of the time at 5-10 kpps), while 0 leaves the full wake-up latency;
//! * the thread runs SCHED_FIFO (priority 10 by default) when allowed, so a
//!   wake-up preempts the traffic generators instead of waiting for a CFS
//!   slice; measured p999 wake-up latency under 2 busy loops drops from
//!   ~2.5 ms to ~120 us.  Spinning is bounded by `spin_us` per event and by
//!   `spin_budget` (25 % of each 100 ms window by default; past it the loop
//!   only sleeps), so a busy emulator never takes a whole core from the
//!   traffic generators (nor, with several emulators on one machine, all of
//!   them), and the kernel's RT throttling (95 %) is a last resort;
//! * `busy_poll` spins all the time (one core at 100 %).  Combine it with
//!   `sched_fifo_priority: 0`: a SCHED_FIFO thread that never sleeps is
//!   throttled by the kernel for 50 ms of every second (sched_rt_runtime_us).
//!
//! What is left on a shared VM: the host sometimes stalls the vCPU for a
//! millisecond or more, and send() on a veth runs the receiving namespace's
//! softirq work in our context (usually 3-15 us per frame, rarely much more).
//! summary.json reports both (`io.tx_lateness_us`, `io.send_us`) so a
//! disturbed run can be recognised.
//!
//! Control socket (optional, `control.socket`; see `control/mod.rs`): its
//! threads start here, before the priority is raised; parsed requests reach
//! this loop through an eventfd in the epoll set and are answered after the
//! departures of an iteration, only when the next event is at least
//! [`CTL_MIN_GAP`] away or a request has waited [`CTL_MAX_DEFER`], at most
//! [`CTL_BUDGET`] per iteration.  Without it nothing of this runs.
//!
//! Shutdown: SIGTERM/SIGINT (via signalfd, so no async handler) end the loop;
//! frames due by then are sent, the rest is counted as in flight, and the
//! outputs are written by the caller.

use std::io;
use std::time::Instant;

use serde_json::json;

use crate::config::{Config, ConfigError};
use crate::control::server::ControlServer;
use crate::engine::Engine;
use crate::histogram::Histogram;
use crate::io::{OpenError, PacketSocket, RxBatch};
use crate::output::{write_summary, CsvSink};
use crate::packet::{Dir, Packet};
use crate::stats::{NullSink, Sink};
use crate::time::{Clock, MonotonicClock, Nanos, RealtimeToMono};

/// How `run` failed: a config problem (exit 2) or anything else (exit 1).
#[derive(Debug)]
pub enum RunError {
    Config(ConfigError),
    Other(String),
}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e)
    }
}

/// Block the termination signals (inherited by threads created afterwards)
/// and return a non-blocking signalfd that reports them.
fn signal_fd() -> Result<i32, RunError> {
    // SAFETY: sigset manipulation and signalfd with valid arguments.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(RunError::Other("pthread_sigmask failed".into()));
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(RunError::Other(format!("signalfd: {}", io::Error::last_os_error())));
        }
        Ok(fd)
    }
}

fn epoll_wait_ns(ep: i32, events: &mut [libc::epoll_event], timeout: Option<Nanos>) -> usize {
    let ts =
        timeout.map(|t| libc::timespec { tv_sec: (t / 1_000_000_000) as i64, tv_nsec: (t % 1_000_000_000) as i64 });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: events is a valid buffer; epoll_pwait2 (Linux 5.11) takes a
    // timespec timeout (null = infinite) and a null sigmask.
    let r = unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait2,
            ep,
            events.as_mut_ptr(),
            events.len() as libc::c_int,
            tsp,
            std::ptr::null::<libc::sigset_t>(),
            0usize,
        )
    };
    if r < 0 {
        0
    } else {
        r as usize
    }
}

/// While spinning, the sockets are polled at least this often.
const POLL_EVERY: Nanos = 16_000;
/// The spin budget (`timing.spin_budget`) applies per window of this length.
const SPIN_WINDOW: Nanos = 100_000_000;
/// Control requests are answered when the next event is at least this far...
const CTL_MIN_GAP: Nanos = 100_000;
/// ...or once one has waited this long.
const CTL_MAX_DEFER: Nanos = 5_000_000;
/// Control requests answered per loop iteration at most.
const CTL_BUDGET: usize = 8;

/// Run the emulator until SIGTERM/SIGINT; `ready` is printed once forwarding.
pub fn run(cfg: &Config) -> Result<(), RunError> {
    cfg.validate()?;
    let sigfd = signal_fd()?;

    // Ports (config errors name the interface's field).
    let mut names: Vec<(String, String)> =
        cfg.client_ifs.iter().enumerate().map(|(i, n)| (format!("client_ifs[{i}]"), n.clone())).collect();
    names.push(("server_if".into(), cfg.server_if.clone()));
    let mut socks = Vec::with_capacity(names.len());
    for (field, name) in &names {
        match PacketSocket::open(name) {
            Ok(s) => socks.push(s),
            Err(OpenError::NoInterface) => {
                return Err(
                    ConfigError::new(field.clone(), format!("no interface {name:?} in this network namespace")).into()
                )
            }
            Err(OpenError::Os(m)) => return Err(RunError::Other(m)),
        }
    }

    // Outputs (the writer thread starts before we raise our priority).
    let sink: Box<dyn Sink> = match &cfg.stats {
        Some(s) => Box::new(
            CsvSink::create(&s.dir, s.per_packet).map_err(|e| RunError::Config(ConfigError::new("stats.dir", e)))?,
        ),
        None => Box::new(NullSink),
    };

    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(RunError::Other(format!("epoll_create1: {}", io::Error::last_os_error())));
    }
    let add = |fd: i32, tag: u64| -> Result<(), RunError> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: tag };
        // SAFETY: valid epoll fd and event.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(RunError::Other(format!("epoll_ctl: {}", io::Error::last_os_error())));
        }
        Ok(())
    };
    for (i, s) in socks.iter().enumerate() {
        add(s.fd(), i as u64)?;
    }
    const SIG_TAG: u64 = u64::MAX;
    add(sigfd, SIG_TAG)?;

    // Control socket threads (before SCHED_FIFO: they must not inherit it).
    let mut control = match &cfg.control {
        Some(c) => Some(
            ControlServer::start(&c.socket)
                .map_err(|e| RunError::Config(ConfigError::new("control.socket", format!("cannot listen: {e}"))))?,
        ),
        None => None,
    };
    const CTL_TAG: u64 = u64::MAX - 1;
    if let Some((_, port)) = &control {
        add(port.fd(), CTL_TAG)?;
    }

    // Timing: 1 ns timer slack, SCHED_FIFO if allowed.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let mut fifo = false;
    if cfg.timing.sched_fifo_priority > 0 {
        let p = libc::sched_param { sched_priority: cfg.timing.sched_fifo_priority };
        // SAFETY: valid sched_param for this thread.
        fifo = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &p) } == 0;
        if !fifo {
            eprintln!(
                "linkemu: warning: cannot use SCHED_FIFO (needs CAP_SYS_NICE); delay accuracy suffers under load"
            );
        }
    }

    let clock = MonotonicClock;
    let origin = clock.now();
    let wall_start = std::time::SystemTime::now();
    let mut engine = Engine::new(cfg, origin, sink)?;
    let server_port = engine.server_port();
    let max_frame = cfg.mtu + 14 + 8;
    let mut rx = RxBatch::new(max_frame);
    let mut conv = RealtimeToMono::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; socks.len() + 1];
    let mut ready = vec![false; socks.len()];
    let mut batch: Vec<(Nanos, usize, Packet)> = Vec::with_capacity(1024);
    let mut lateness = Histogram::new();
    let mut rx_age = Histogram::new();
    let mut send_cost = Histogram::new();
    let mut tx_errors = 0u64;
    let mut rx_errors = 0u64;
    let mut no_ts = 0u64;
    let spin = (cfg.timing.spin_us * 1000.0) as Nanos;
    let spin_budget = (cfg.timing.spin_budget * SPIN_WINDOW as f64) as Nanos;
    let mut window_end = 0;
    let mut spun: Nanos = 0;
    let mut stop = false;
    let mut iterations = 0u64;
    let mut ctl_woken = false;
    let mut ctl_cost = Histogram::new();
    let started = Instant::now();

    println!("ready");
    use std::io::Write;
    let _ = std::io::stdout().flush();

    while !stop {
        iterations += 1;
        // 1. Wait.
        let now = clock.now();
        let next = engine.next_event();
        if now >= window_end {
            window_end = now + SPIN_WINDOW;
            spun = 0;
        }
        let may_spin = cfg.timing.busy_poll || spun < spin_budget;
        let timeout = if next <= now {
            0
        } else if cfg.timing.busy_poll || (may_spin && next <= now + spin) {
            // Close to the next event: spin on the clock with the CPU's pause
            // hint (kind to an SMT sibling or a co-scheduled vCPU), looking at
            // the sockets at least every POLL_EVERY.  Arrivals carry kernel
            // timestamps, so reading them a few us later costs no accuracy.
            let until = next.min(now + POLL_EVERY);
            let mut t = now;
            while t < until {
                std::hint::spin_loop();
                t = clock.now();
            }
            spun += t - now;
            0
        } else if may_spin {
            next - now - spin
        } else {
            next - now
        };
        let n = epoll_wait_ns(ep, &mut events, Some(timeout));
        for ev in &events[..n] {
            if ev.u64 == SIG_TAG {
                stop = true;
            } else if ev.u64 == CTL_TAG {
                ctl_woken = true;
            } else {
                ready[ev.u64 as usize] = true;
            }
        }
        // 2. Read.
        let mut any = false;
        for (port, s) in socks.iter().enumerate() {
            if !ready[port] {
                continue;
            }
            ready[port] = false;
            match s.recv_batch(&mut rx) {
                Ok(0) => {}
                Ok(_) => {
                    if !any {
                        conv.refresh();
                        any = true;
                    }
                    let t_read = clock.now();
                    for (pkt, ts) in rx.frames() {
                        let t = match ts.and_then(|k| conv.arrival(k, t_read)) {
                            Some(t) => t,
                            None => {
                                no_ts += 1;
                                t_read
                            }
                        };
                        rx_age.record(t_read.saturating_sub(t));
                        batch.push((t, port, pkt));
                    }
                }
                Err(e) => {
                    rx_errors += 1;
                    if matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::ENXIO)) {
                        eprintln!("linkemu: {} disappeared ({e}); stopping", s.ifname);
                        stop = true;
                    }
                }
            }
        }
        // 3. Feed in arrival order.
        let now = clock.now();
        if !batch.is_empty() {
            batch.sort_by_key(|b| b.0);
            for (t, port, pkt) in batch.drain(..) {
                engine.ingress(port, pkt, t.min(now));
            }
        }
        // 4. Advance and send.
        engine.advance_to(now);
        if engine.pending_emits() > 0 {
            let emits: Vec<_> = engine.take_emits().collect();
            let mut failed = Vec::new();
            for mut e in emits {
                e.pkt.sanitize_vnet_hdr();
                let port = e.port.min(server_port);
                // Lateness is taken before send(): on veth, send() also runs the
                // receiver's softirq processing in our context.
                let t_send = clock.now();
                let r = socks[port].send(&e.pkt.buf);
                send_cost.record(clock.now().saturating_sub(t_send));
                match r {
                    Ok(()) => {
                        if e.dir.is_some() {
                            lateness.record(t_send.saturating_sub(e.due));
                        }
                    }
                    Err(_) => {
                        tx_errors += 1;
                        failed.push(e);
                    }
                }
            }
            let t = clock.now();
            for e in &failed {
                engine.tx_failed(e, t);
            }
        }
        // 5. Control requests, between events (module comment).
        if let Some((_, port)) = &mut control {
            let now = clock.now();
            if ctl_woken {
                port.collect(now);
                ctl_woken = false;
            }
            if port.pending() > 0
                && (engine.next_event() >= now + CTL_MIN_GAP || port.oldest_wait(now) >= CTL_MAX_DEFER)
            {
                let n = port.serve(&mut engine, CTL_BUDGET);
                let per = clock.now().saturating_sub(now) / n.max(1) as Nanos;
                for _ in 0..n {
                    ctl_cost.record(per);
                }
            }
        }
    }
    let control_json =
        control.as_ref().map(|(_, port)| json!({"requests": port.served, "serve_us": ctl_cost.summary()}));
    if let Some((server, port)) = control.take() {
        drop(port); // first: client threads waiting for an answer get "shutting down"
        drop(server);
    }

    // Shutdown.
    let end = clock.now();
    let inside = engine.finish(end);
    for mut e in engine.take_emits().collect::<Vec<_>>() {
        e.pkt.sanitize_vnet_hdr();
        let _ = socks[e.port.min(server_port)].send(&e.pkt.buf);
    }
    let mut rx_drops = 0;
    let mut per_port = Vec::new();
    for s in &mut socks {
        let d = s.kernel_drops();
        rx_drops += d;
        per_port.push(json!({"if": s.ifname, "rx_socket_drops": d}));
    }
    let elapsed = engine.elapsed_s(end);
    let mut up_json = engine.stats.direction_json(Dir::Up, inside[0]);
    up_json["qdisc_stats"] = engine.link(Dir::Up).qdisc().stats_json().unwrap_or(serde_json::Value::Null);
    let mut down_json = engine.stats.direction_json(Dir::Down, inside[1]);
    down_json["qdisc_stats"] = engine.link(Dir::Down).qdisc().stats_json().unwrap_or(serde_json::Value::Null);
    let summary = json!({
        "version": 1,
        "run": {
            "duration_s": elapsed,
            "start_unix_s": wall_start.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
            "seed": cfg.seed,
            "clients": cfg.client_ifs.len(),
            "qdisc": {"uplink": engine.link(Dir::Up).qdisc_kind(), "downlink": engine.link(Dir::Down).qdisc_kind()},
        },
        "uplink": up_json,
        "downlink": down_json,
        "wifi": engine.wifi().map(|w| w.summary(end)),
        "passthrough": {"frames": engine.stats.passthrough_frames, "bytes": engine.stats.passthrough_bytes},
        "io": {
            "rx_socket_drops": rx_drops,
            "rx_errors": rx_errors,
            "tx_errors": tx_errors,
            "frames_without_kernel_timestamp": no_ts,
            "tx_lateness_us": lateness.summary(),
            "rx_age_us": rx_age.summary(),
            "send_us": send_cost.summary(),
            "sched_fifo": fifo,
            "loop_iterations": iterations,
            "wall_s": started.elapsed().as_secs_f64(),
            "ports": per_port,
            "control": control_json,
        },
        "config": cfg,
    });
    engine.stats.finish();
    if let Some(s) = &cfg.stats {
        write_summary(&s.dir, &summary).map_err(RunError::Other)?;
    }
    unsafe {
        libc::close(ep);
        libc::close(sigfd);
    }
    Ok(())
}
