//! A [`Request`] applied to the engine at its current instant -> [`Reply`].
//! Runs on the forwarding loop: it copies numbers (`state`) or changes a few
//! fields (`set`), builds no JSON and does no I/O.

use super::{DirState, Reply, Request};
use crate::engine::Engine;
use crate::packet::Dir;
use crate::qdisc::DropCause;
use crate::time::Nanos;

pub fn apply(engine: &mut Engine, req: &Request) -> Reply {
    let now = engine.now();
    let t_s = engine.elapsed_s(now);
    match req {
        Request::State { dir, max_flows, fields } => {
            let dirs: Vec<Dir> = match dir {
                Some(d) => vec![*d],
                None => Dir::BOTH.to_vec(),
            };
            // Flows not asked for are not copied.
            let max_flows = match fields {
                Some(f) if !f.iter().any(|n| n == "flows") => 0,
                _ => *max_flows,
            };
            Reply::State { t_s, dirs: dirs.into_iter().map(|d| dir_state(engine, d, now, max_flows)).collect() }
        }
        Request::Set { dir, params } => match engine.link_mut(*dir).qdisc_mut().control_set(params, now) {
            Ok(applied) => Reply::Set { t_s, dir: *dir, applied },
            Err(e) => Reply::Error(e),
        },
    }
}

fn dir_state(engine: &Engine, dir: Dir, now: Nanos, max_flows: usize) -> DirState {
    let (packets_out, bytes_out, _) = engine.stats.totals(dir);
    let (packets_in, bytes_in) = engine.stats.totals_in(dir);
    let mut drops = [0; DropCause::ALL.len()];
    for c in DropCause::ALL {
        drops[c.index()] = engine.stats.drops(dir, c);
    }
    DirState {
        dir,
        packets_in,
        bytes_in,
        packets_out,
        bytes_out,
        drops,
        qdisc: engine.link(dir).qdisc().control_state(now, max_flows),
    }
}
