//! The control socket's threads, and the forwarding loop's end of them.
//!
//! [`ControlServer::start`] binds the UNIX socket (replacing a stale one)
//! and starts an accepting thread; each client gets a thread that reads
//! request lines (at most [`MAX_LINE`] bytes), parses them ([`super::parse`]),
//! hands each parsed request to the loop as a [`Job`] (an mpsc channel, then
//! one write to an eventfd the loop has in its epoll set), waits for the
//! loop's [`Reply`] (at most [`REPLY_TIMEOUT`]) and writes the rendered
//! response ([`super::render`]).  Malformed requests never reach the loop.
//!
//! The loop's end is the [`ControlPort`]: when the eventfd is readable,
//! [`ControlPort::collect`] moves the waiting jobs into its queue (stamped
//! with the loop's clock) and [`ControlPort::serve`] answers up to a budget
//! of them against the engine.  Each client has at most one request in the
//! loop at a time, so the queue holds at most [`MAX_CLIENTS`] jobs.
//!
//! Threads are started before the loop raises itself to SCHED_FIFO and after
//! the termination signals are blocked (`runtime.rs`), so they run at normal
//! priority and never take SIGTERM.  Dropping the port, then the server,
//! stops everything and removes the socket file.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::{apply, parse, render, Reply, Request};
use crate::engine::Engine;
use crate::time::Nanos;

/// Longest request line (bytes, without the newline).
pub const MAX_LINE: usize = 1 << 20;
/// Clients connected at once; more are told so and closed.
pub const MAX_CLIENTS: usize = 8;
/// How long a client thread waits for the loop's answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed request on its way to the loop, with the way back.
pub struct Job {
    pub req: Request,
    reply: SyncSender<Reply>,
}

struct Client {
    stream: UnixStream,
    thread: Option<JoinHandle<()>>,
}

pub struct ControlServer {
    path: PathBuf,
    /// The listening socket (owned by the acceptor thread, which outlives its use here).
    listener_fd: RawFd,
    stop: Arc<AtomicBool>,
    clients: Arc<Mutex<Vec<Client>>>,
    acceptor: Option<JoinHandle<()>>,
}

/// The forwarding loop's end (see the module comment).
pub struct ControlPort {
    rx: Receiver<Job>,
    wake: Arc<OwnedFd>,
    pending: VecDeque<(Nanos, Job)>,
    /// Requests answered so far.
    pub served: u64,
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned by the OwnedFd from here on.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn wake(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to an eventfd (EAGAIN only if
    // the counter is about to overflow: the loop is woken anyway).
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

impl ControlServer {
    /// Bind `path` (a stale socket there is removed first; any other file is
    /// an error) and start serving; the loop polls the returned port.
    pub fn start(path: &Path) -> io::Result<(ControlServer, ControlPort)> {
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if !m.file_type().is_socket() {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a socket"));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)?;
        let listener_fd = listener.as_raw_fd();
        let wake_fd = Arc::new(eventfd()?);
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Arc<Mutex<Vec<Client>>> = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (stop, clients, wake_fd) = (stop.clone(), clients.clone(), wake_fd.clone());
            thread::Builder::new()
                .name("linkemu-ctl".into())
                .spawn(move || accept_loop(listener, tx, wake_fd, stop, clients))?
        };
        let server = ControlServer { path: path.to_path_buf(), listener_fd, stop, clients, acceptor: Some(acceptor) };
        let port = ControlPort { rx, wake: wake_fd, pending: VecDeque::new(), served: 0 };
        Ok((server, port))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes accept() (EINVAL), even if someone removed the socket file.
        // SAFETY: the acceptor thread owns the listener until it sees `stop`.
        unsafe { libc::shutdown(self.listener_fd, libc::SHUT_RDWR) };
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        let clients: Vec<Client> = std::mem::take(&mut *self.clients.lock().unwrap_or_else(|e| e.into_inner()));
        for c in &clients {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        for mut c in clients {
            if let Some(t) = c.thread.take() {
                let _ = t.join();
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(
    listener: UnixListener,
    tx: Sender<Job>,
    wake_fd: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    clients: Arc<Mutex<Vec<Client>>>,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut stream) = conn else {
            thread::sleep(Duration::from_millis(10)); // EMFILE and the like: do not spin
            continue;
        };
        let mut list = clients.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|c| c.thread.as_ref().is_some_and(|t| !t.is_finished()));
        if list.len() >= MAX_CLIENTS {
            let msg = render::reply(None, &Reply::Error(format!("too many clients (at most {MAX_CLIENTS})")));
            let _ = stream.write_all(format!("{msg}\n").as_bytes());
            continue;
        }
        let Ok(keep) = stream.try_clone() else { continue };
        let (tx, wake_fd) = (tx.clone(), wake_fd.clone());
        let thread = thread::Builder::new().name("linkemu-ctl-c".into()).spawn(move || client(stream, tx, wake_fd));
        if let Ok(t) = thread {
            list.push(Client { stream: keep, thread: Some(t) });
        }
    }
}

/// Read one line of at most MAX_LINE bytes into `buf` (newline stripped).
/// Ok(false): end of stream; Err: too long or a read error.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    let n = r.by_ref().take(MAX_LINE as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_LINE {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("request longer than {MAX_LINE} bytes")));
    }
    Ok(true)
}

fn client(stream: UnixStream, tx: Sender<Job>, wake_fd: Arc<OwnedFd>) {
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let mut out = io::BufWriter::new(stream);
    let mut line = Vec::new();
    loop {
        let resp = match read_line(&mut reader, &mut line) {
            Ok(false) => break,
            Ok(true) if line.trim_ascii().is_empty() => continue,
            Ok(true) => respond(&line, &tx, &wake_fd),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let _ = writeln!(out, "{}", render::reply(None, &Reply::Error(e.to_string())));
                let _ = out.flush();
                break;
            }
            Err(_) => break,
        };
        if writeln!(out, "{resp}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    // The acceptor keeps a clone of the stream (to shut it down at exit): close it for the peer now.
    let _ = out.get_ref().shutdown(std::net::Shutdown::Both);
}

/// The response line to one request line.
fn respond(line: &[u8], tx: &Sender<Job>, wake_fd: &OwnedFd) -> String {
    let (id, parsed) = parse::request(line);
    let fields = parsed.as_ref().ok().and_then(Request::fields);
    let reply = match parsed {
        Err(e) => Reply::Error(e),
        Ok(req) => {
            let (rtx, rrx) = mpsc::sync_channel(1);
            if tx.send(Job { req, reply: rtx }).is_err() {
                Reply::Error("the emulator is shutting down".into())
            } else {
                wake(wake_fd);
                match rrx.recv_timeout(REPLY_TIMEOUT) {
                    Ok(r) => r,
                    Err(RecvTimeoutError::Timeout) => {
                        Reply::Error(format!("the emulator did not answer within {} s", REPLY_TIMEOUT.as_secs()))
                    }
                    Err(RecvTimeoutError::Disconnected) => Reply::Error("the emulator is shutting down".into()),
                }
            }
        }
    };
    render::reply_fields(id.as_ref(), &reply, fields.as_deref())
}

impl ControlPort {
    /// The eventfd to watch for readability.
    pub fn fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Take the jobs that arrived (after the eventfd was readable), stamped `now`.
    pub fn collect(&mut self, now: Nanos) {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from a non-blocking eventfd.
        unsafe { libc::read(self.fd(), (&mut n as *mut u64).cast(), 8) };
        while let Ok(job) = self.rx.try_recv() {
            self.pending.push_back((now, job));
        }
    }

    /// Jobs waiting for the loop.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// How long the oldest waiting job has waited at `now` (0 if none).
    pub fn oldest_wait(&self, now: Nanos) -> Nanos {
        self.pending.front().map_or(0, |(t, _)| now.saturating_sub(*t))
    }

    /// Answer up to `budget` waiting jobs against `engine`; returns how many.
    pub fn serve(&mut self, engine: &mut Engine, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            let Some((_, job)) = self.pending.pop_front() else { break };
            let _ = job.reply.send(apply::apply(engine, &job.req)); // the client may have gone
            n += 1;
        }
        self.served += n as u64;
        n
    }
}
