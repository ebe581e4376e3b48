//! [`Reply`] -> one response line (JSON, no newline).  Runs on the control
//! socket's client threads, not on the forwarding loop.
//!
//! Shapes (keys come out sorted):
//!
//! ```text
//! {"ok": true, "id": ID?, "t_s": 12.5, "uplink": DIR, "downlink": DIR}
//! DIR  = {"kind", "backlog_pkts", "backlog_bytes", "packets_in", "bytes_in", "packets_out", "bytes_out",
//!         "drops": {"queue", "aqm", "loss", "oversize", "wifi_queue", "wifi_retry", "tx_error"}, "drops_total",
//!         ...the qdisc's params..., "flows_active"?, "flows"?: [FLOW], "weights"?: [10 numbers]}
//! FLOW = {"queue", "key": {"src", "dst", "proto", "sport", "dport"} | null, "shared": bool | null,
//!         "limit_pkts": n | null, "backlog_pkts", "backlog_bytes", ...extra...,
//!         "features"?: {"queue_pkts", "queue_std_pkts", "limit_pkts", "in_rate_pps", "out_rate_pps",
//!                       "since_loss_s", "empty_frac": [10 numbers each]}}
//! {"ok": true, "id": ID?, "t_s", "dir": "uplink", "applied": {...params..., "flows"?: [
//!     {"queue", "key", "limit_pkts", "was"}]}}
//! {"ok": false, "id": ID?, "error": "one line"}
//! ```

use serde_json::{json, Map, Value};

use super::{DirState, Reply};
use crate::flow::FlowKey;
use crate::qdisc::control::{FlowState, QdiscState, Scalar};
use crate::qdisc::DropCause;

/// The response line to a request with `id`.
pub fn reply(id: Option<&Value>, r: &Reply) -> String {
    reply_fields(id, r, None)
}

/// The response line to a request with `id`; a state's DIRs hold only the
/// keys in `fields` (None: all).
pub fn reply_fields(id: Option<&Value>, r: &Reply, fields: Option<&[String]>) -> String {
    let mut m = Map::new();
    match r {
        Reply::State { t_s, dirs } => {
            m.insert("ok".into(), json!(true));
            m.insert("t_s".into(), json!(t_s));
            for d in dirs {
                let mut dm = dir_json(d);
                if let Some(f) = fields {
                    dm.retain(|k, _| f.iter().any(|n| n == k));
                }
                m.insert(d.dir.name().into(), Value::Object(dm));
            }
        }
        Reply::Set { t_s, dir, applied } => {
            m.insert("ok".into(), json!(true));
            m.insert("t_s".into(), json!(t_s));
            m.insert("dir".into(), json!(dir.name()));
            let mut a = params(&applied.params);
            if !applied.flows.is_empty() {
                let flows: Vec<Value> = applied
                    .flows
                    .iter()
                    .map(|f| json!({"queue": f.queue, "key": key(f.key.as_ref()), "limit_pkts": f.limit_pkts, "was": f.was}))
                    .collect();
                a.insert("flows".into(), Value::Array(flows));
            }
            m.insert("applied".into(), Value::Object(a));
        }
        Reply::Error(e) => {
            m.insert("ok".into(), json!(false));
            // One line, whatever the message holds.
            m.insert("error".into(), json!(e.replace(['\n', '\r'], " ")));
        }
    }
    if let Some(id) = id {
        m.insert("id".into(), id.clone());
    }
    Value::Object(m).to_string()
}

fn scalar(s: &Scalar) -> Value {
    match *s {
        Scalar::U(x) => json!(x),
        Scalar::F(x) => json!(x),
        Scalar::B(x) => json!(x),
        Scalar::S(x) => json!(x),
    }
}

fn params(p: &[(&'static str, Scalar)]) -> Map<String, Value> {
    p.iter().map(|(n, v)| ((*n).to_string(), scalar(v))).collect()
}

/// A 5-tuple (null for packets without one).
pub fn key(k: Option<&FlowKey>) -> Value {
    match k {
        Some(k) => json!({"src": k.src.to_string(), "dst": k.dst.to_string(), "proto": k.proto,
                          "sport": k.sport, "dport": k.dport}),
        None => Value::Null,
    }
}

fn dir_json(d: &DirState) -> Map<String, Value> {
    let mut m = qdisc_json(&d.qdisc);
    let mut drops = Map::new();
    for c in DropCause::ALL {
        drops.insert(c.name().into(), json!(d.drops[c.index()]));
    }
    m.insert("drops".into(), Value::Object(drops));
    m.insert("drops_total".into(), json!(d.drops.iter().sum::<u64>()));
    m.insert("packets_in".into(), json!(d.packets_in));
    m.insert("bytes_in".into(), json!(d.bytes_in));
    m.insert("packets_out".into(), json!(d.packets_out));
    m.insert("bytes_out".into(), json!(d.bytes_out));
    m
}

fn qdisc_json(q: &QdiscState) -> Map<String, Value> {
    let mut m = params(&q.params);
    m.insert("kind".into(), json!(q.kind));
    m.insert("backlog_pkts".into(), json!(q.backlog_pkts));
    m.insert("backlog_bytes".into(), json!(q.backlog_bytes));
    if let Some(flows) = &q.flows {
        m.insert("flows_active".into(), json!(q.flows_active));
        m.insert("flows".into(), Value::Array(flows.iter().map(flow_json).collect()));
    }
    if let Some(w) = q.weights {
        m.insert("weights".into(), json!(w));
    }
    m
}

fn flow_json(f: &FlowState) -> Value {
    let mut m = params(&f.extra);
    m.insert("queue".into(), json!(f.queue));
    m.insert("key".into(), key(f.key.as_ref()));
    m.insert("shared".into(), json!(f.shared));
    m.insert("limit_pkts".into(), json!(f.limit_pkts));
    m.insert("backlog_pkts".into(), json!(f.backlog_pkts));
    m.insert("backlog_bytes".into(), json!(f.backlog_bytes));
    if let Some(feats) = &f.features {
        let fm: Map<String, Value> = feats.named().iter().map(|(n, v)| ((*n).to_string(), json!(v))).collect();
        m.insert("features".into(), Value::Object(fm));
    }
    Value::Object(m)
}
