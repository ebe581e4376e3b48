//! The control socket: an agent outside linkemu (paper 001's LFQ, paper 000's
//! A3C for DualPI2) reads per-queue and per-flow state and sets qdisc
//! parameters while the emulator runs.
//!
//! Enabled by `"control": {"socket": "/path.sock"}` in the config (absent:
//! no socket, no thread, nothing on the forwarding path).
//!
//! # Protocol
//!
//! A UNIX stream socket; one JSON object per line each way.  Every request
//! line gets exactly one response line, in order; blank lines are ignored.
//! A request may carry `"id"` (any JSON value), echoed in its response.
//!
//! ```text
//! {"op": "state"}                                   both directions
//! {"op": "state", "dir": "uplink", "max_flows": 64} one direction, at most 64 flows listed (default 1024)
//! {"op": "state", "dir": "uplink", "fields": ["base_prob", "bytes_out"]}   only these keys of DIR
//! {"op": "set", "dir": "uplink", "flows": [{"queue": 17, "limit_pkts": 10},
//!     {"key": {"src": "10.99.0.11", "dst": "10.99.0.1", "proto": 6, "sport": 40000, "dport": 5201},
//!      "limit_pkts": 20}], "default_limit_pkts": 50}                       lfq
//! {"op": "set", "dir": "downlink", "base_prob": 0.05, "k": 2}              dualpi2
//! {"op": "set", "dir": "downlink", "base_prob": 0.05, "hold_ms": 150}     dualpi2: p' fixed for 150 ms unless renewed
//! {"op": "set", "dir": "downlink", "base_prob": "auto"}                    dualpi2: PI controller again
//! {"op": "set", "dir": "downlink", "prob_scale": 0.8, "hold_ms": 150}    dualpi2: PI's p' x 0.8 (a residual agent)
//! {"op": "set", "dir": "downlink", "prob_scale": 0.8, "k": 3, "hold_ms": 150}   dualpi2: both leased; then the config's k
//! ```
//!
//! Responses: `{"ok": true, "t_s": ..., "uplink": DIR, "downlink": DIR}` for
//! `state` (`t_s`: emulator time, seconds since start); `{"ok": true, "t_s":
//! ..., "dir": "uplink", "applied": {...}}` for `set` (what changed, with
//! the previous values as `*_was` / `was`, and for flows the queue and
//! 5-tuple a key resolved to); `{"ok": false, "error": "FIELD: what is
//! wrong"}` for anything refused: malformed JSON, an unknown op or field, a
//! value out of range, a parameter the direction's qdisc does not have, a
//! flow that is not active.  A refused `set` changes nothing (all or
//! nothing).  A line longer than 1 MiB is answered with an error and the
//! connection closed.  At most 8 clients at once.
//!
//! DIR (see [`render`]): `kind`, `backlog_pkts`, `backlog_bytes`,
//! `packets_in`, `bytes_in` (offered to the direction), `packets_out`,
//! `bytes_out` (delivered), `drops` {cause: count} and `drops_total` (the
//! direction's, as summary.json), the qdisc's own values (DualPI2:
//! `base_prob`, `pi`, `p_c`, `p_cl`, `k`, per-class lengths and head delays,
//! counters; pie: `prob`, `qdelay_ms`, ...; lfq: `default_limit_pkts`, ...),
//! and for per-flow qdiscs `flows_active` and `flows` [{`queue`, `key`,
//! `shared`, `limit_pkts`, `backlog_pkts`, `backlog_bytes`, ...; fq_pie:
//! `prob`, `qdelay_ms`, `burst_allowance_ms`; lfq: `features` {name: [10
//! values]}}] with lfq's `weights`.  With `fields`, a DIR holds only the keys
//! listed (a name it does not have is left out; flows are copied only if
//! `flows` is listed): an agent that reads a few numbers every interval gets
//! a short line.
//!
//! # Threads and cost
//!
//! The forwarding loop (`runtime.rs`) owns the engine and must not wait for
//! a client.  So the socket is served by threads of its own ([`server`]:
//! one accepting, one per client) that read and parse requests and render
//! responses; a parsed request goes to the loop through a channel plus an
//! eventfd in its epoll set, and the loop answers it ([`apply`]) between
//! packet events: a `set` changes a few fields, a `state` copies numbers
//! (no JSON on that thread).  The loop serves requests only when its next
//! event is at least 100 us away, or once one has waited 5 ms, at most 8
//! per iteration, so a burst of requests cannot delay departures by more
//! than that.  summary.json reports the loop's time per request
//! (`io.control.serve_us`).

pub mod apply;
pub mod parse;
pub mod render;
pub mod server;
#[cfg(test)]
mod socket_tests;
#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::packet::Dir;
use crate::qdisc::control::{QdiscState, SetApplied, SetParams};
use crate::qdisc::DropCause;

/// Flows listed per direction unless the request says otherwise.
pub const DEFAULT_MAX_FLOWS: usize = 1024;
/// The most flows a request may ask for.
pub const MAX_FLOWS: usize = 65_536;
/// The most names a `state` request's `fields` may list.
pub const MAX_FIELDS: usize = 256;

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// State of one direction (None: both); with `fields`, each DIR holds only
    /// those of its keys (an agent that reads a few numbers every interval
    /// gets a short line to decode).
    State { dir: Option<Dir>, max_flows: usize, fields: Option<Vec<String>> },
    /// Change parameters of one direction's qdisc.
    Set { dir: Dir, params: SetParams },
}

/// One direction's state.
#[derive(Debug, Clone)]
pub struct DirState {
    pub dir: Dir,
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub drops: [u64; DropCause::ALL.len()],
    pub qdisc: QdiscState,
}

/// The loop's answer to a request.
#[derive(Debug, Clone)]
pub enum Reply {
    State { t_s: f64, dirs: Vec<DirState> },
    Set { t_s: f64, dir: Dir, applied: SetApplied },
    Error(String),
}

/// Parse, apply and render one request line in one go (single-threaded
/// use and tests; the server splits these steps over its threads).
pub fn handle_line(line: &[u8], engine: &mut crate::engine::Engine) -> String {
    let (id, req) = parse::request(line);
    let (reply, fields) = match req {
        Ok(r) => (apply::apply(engine, &r), r.fields()),
        Err(e) => (Reply::Error(e), None),
    };
    render::reply_fields(id.as_ref(), &reply, fields.as_deref())
}

impl Request {
    /// The DIR keys a `state` request asked for (None: all).
    pub fn fields(&self) -> Option<Vec<String>> {
        match self {
            Request::State { fields, .. } => fields.clone(),
            Request::Set { .. } => None,
        }
    }
}

/// The `id` a request carried, if any.
pub type RequestId = Option<Value>;
