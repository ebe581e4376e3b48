//! Request lines -> [`Request`] (the grammar is in the module comment of
//! [`super`]).  Strict like the config: unknown ops and fields are errors,
//! every error names the field (`flows[1].key.sport: ...`).  Ranges that
//! depend on the qdisc (a limit against its `limit_pkts`, p' against 1/k)
//! are checked when the request is applied.

use std::net::IpAddr;

use serde_json::{Map, Value};

use super::{Request, RequestId, DEFAULT_MAX_FLOWS, MAX_FIELDS, MAX_FLOWS};
use crate::flow::FlowKey;
use crate::packet::Dir;
use crate::qdisc::control::{BaseProb, FlowLimit, FlowSel, SetParams};

const STATE_FIELDS: &[&str] = &["op", "id", "dir", "max_flows", "fields"];
const SET_FIELDS: &[&str] =
    &["op", "id", "dir", "default_limit_pkts", "flows", "base_prob", "prob_scale", "k", "hold_ms"];
/// Range of a residual agent's factor on the PI controller's p' (`prob_scale`).
const PROB_SCALE_RANGE: (f64, f64) = (1.0 / 16.0, 16.0);
/// Longest lease (`hold_ms`) of a fixed DualPI2 base probability, a factor or a k, ms.
const MAX_HOLD_MS: f64 = 60_000.0;

/// Parse one request line: its `id` (echoed even when the rest is refused)
/// and the request, or one line saying what is wrong.
pub fn request(line: &[u8]) -> (RequestId, Result<Request, String>) {
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return (None, Err(format!("malformed JSON: {e}"))),
    };
    let Value::Object(m) = v else {
        return (None, Err(format!("a request must be a JSON object, got {}", type_name(&v))));
    };
    (m.get("id").cloned(), parse_object(&m))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_object(m: &Map<String, Value>) -> Result<Request, String> {
    let op = match m.get("op") {
        None => return Err("op: missing (\"state\" or \"set\")".into()),
        Some(Value::String(s)) => s.as_str(),
        Some(v) => return Err(format!("op: must be a string (\"state\" or \"set\"), got {}", type_name(v))),
    };
    match op {
        "state" => {
            known_fields(m, STATE_FIELDS, "", "state")?;
            let dir = m.get("dir").map(|v| dir(v, "dir")).transpose()?;
            let max_flows = match m.get("max_flows") {
                None => DEFAULT_MAX_FLOWS,
                Some(v) => uint(v, "max_flows", 0, MAX_FLOWS as u64)? as usize,
            };
            let fields = m.get("fields").map(fields).transpose()?;
            Ok(Request::State { dir, max_flows, fields })
        }
        "set" => {
            known_fields(m, SET_FIELDS, "", "set")?;
            let dir = dir(m.get("dir").ok_or("dir: missing (\"uplink\" or \"downlink\")")?, "dir")?;
            let mut p = SetParams {
                default_limit_pkts: m
                    .get("default_limit_pkts")
                    .map(|v| uint(v, "default_limit_pkts", 1, u32::MAX as u64).map(|x| x as usize))
                    .transpose()?,
                ..SetParams::default()
            };
            if let Some(v) = m.get("flows") {
                let Value::Array(a) = v else {
                    return Err(format!(
                        "flows: must be an array of {{queue | key, limit_pkts}}, got {}",
                        type_name(v)
                    ));
                };
                p.flows = a
                    .iter()
                    .enumerate()
                    .map(|(i, f)| flow_limit(f, &format!("flows[{i}]")))
                    .collect::<Result<_, _>>()?;
            }
            p.base_prob = match m.get("base_prob") {
                None => None,
                Some(Value::String(s)) if s == "auto" => Some(BaseProb::Auto),
                Some(v) => Some(BaseProb::Fixed(
                    v.as_f64()
                        .ok_or_else(|| format!("base_prob: must be a number (0..1) or \"auto\", got {}", short(v)))?,
                )),
            };
            p.prob_scale = m
                .get("prob_scale")
                .map(|v| match v.as_f64() {
                    Some(f) if f.is_finite() && (PROB_SCALE_RANGE.0..=PROB_SCALE_RANGE.1).contains(&f) => Ok(f),
                    _ => Err(format!(
                        "prob_scale: must be a number in [{}, {}] (1: the PI controller alone), got {}",
                        PROB_SCALE_RANGE.0,
                        PROB_SCALE_RANGE.1,
                        short(v)
                    )),
                })
                .transpose()?;
            if p.prob_scale.is_some() && p.base_prob.is_some() {
                return Err("prob_scale: not with base_prob in one set (a factor on the PI's p', or p' itself)".into());
            }
            p.k = m
                .get("k")
                .map(|v| v.as_f64().ok_or_else(|| format!("k: must be a number, got {}", short(v))))
                .transpose()?;
            p.hold_ms = m
                .get("hold_ms")
                .map(|v| match v.as_f64() {
                    Some(h) if h.is_finite() && h > 0.0 && h <= MAX_HOLD_MS => Ok(h),
                    _ => Err(format!("hold_ms: must be a number of ms in (0, {MAX_HOLD_MS}], got {}", short(v))),
                })
                .transpose()?;
            if p.hold_ms.is_some()
                && !matches!(p.base_prob, Some(BaseProb::Fixed(_)))
                && p.prob_scale.is_none()
                && p.k.is_none()
            {
                return Err(
                    "hold_ms: only with a numeric base_prob, a prob_scale or a k (it is the lease of those values)"
                        .into(),
                );
            }
            if p.present().is_empty() {
                return Err("set: nothing to set (fields: default_limit_pkts, flows, base_prob, prob_scale, k)".into());
            }
            Ok(Request::Set { dir, params: p })
        }
        other => Err(format!("op: unknown op {other:?} (expected \"state\" or \"set\")")),
    }
}

/// A value in an error message (long ones cut).
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}...", &s[..s.char_indices().nth(37).map_or(s.len(), |(i, _)| i)])
    } else {
        s
    }
}

/// Err naming the first field of `m` not in `known` (`prefix` + its name).
fn known_fields(m: &Map<String, Value>, known: &[&str], prefix: &str, what: &str) -> Result<(), String> {
    match m.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("{prefix}{k}: unknown field for {what} (fields: {})", known.join(", "))),
        None => Ok(()),
    }
}

fn dir(v: &Value, field: &str) -> Result<Dir, String> {
    match v.as_str() {
        Some("uplink") => Ok(Dir::Up),
        Some("downlink") => Ok(Dir::Down),
        _ => Err(format!("{field}: must be \"uplink\" or \"downlink\", got {}", short(v))),
    }
}

/// `fields` of a state request: names of DIR keys (one that DIR does not have
/// is left out of the answer, like the key).
fn fields(v: &Value) -> Result<Vec<String>, String> {
    const WHAT: &str = "an array of key names";
    let Value::Array(a) = v else {
        return Err(format!("fields: must be {WHAT}, got {}", type_name(v)));
    };
    if a.len() > MAX_FIELDS {
        return Err(format!("fields: at most {MAX_FIELDS} names, got {}", a.len()));
    }
    a.iter()
        .enumerate()
        .map(|(i, n)| match n.as_str() {
            Some(s) if !s.is_empty() && s.len() <= 64 => Ok(s.to_string()),
            _ => Err(format!("fields[{i}]: must be a key name (1..64 characters), got {}", short(n))),
        })
        .collect()
}

fn uint(v: &Value, field: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match v.as_u64() {
        Some(x) if (lo..=hi).contains(&x) => Ok(x),
        _ => Err(format!("{field}: must be an integer {lo}..{hi}, got {}", short(v))),
    }
}

fn flow_limit(v: &Value, at: &str) -> Result<FlowLimit, String> {
    let Value::Object(m) = v else {
        return Err(format!("{at}: must be an object {{queue | key, limit_pkts}}, got {}", type_name(v)));
    };
    known_fields(m, &["queue", "key", "limit_pkts"], &format!("{at}."), "a flow")?;
    let limit_pkts = uint(
        m.get("limit_pkts").ok_or(format!("{at}.limit_pkts: missing"))?,
        &format!("{at}.limit_pkts"),
        1,
        u32::MAX as u64,
    )? as usize;
    let sel = match (m.get("queue"), m.get("key")) {
        (Some(q), None) => FlowSel::Queue(uint(q, &format!("{at}.queue"), 0, u32::MAX as u64)? as usize),
        (None, Some(k)) => FlowSel::Key(key(k, &format!("{at}.key"))?),
        _ => return Err(format!("{at}: give either queue or key (one of them)")),
    };
    Ok(FlowLimit { sel, limit_pkts })
}

/// A 5-tuple as `state` lists it: src, dst (same IP version), proto; sport
/// and dport for TCP and UDP (0 for other protocols, may be left out).
fn key(v: &Value, at: &str) -> Result<FlowKey, String> {
    let Value::Object(m) = v else {
        return Err(format!("{at}: must be an object {{src, dst, proto, sport, dport}}, got {}", type_name(v)));
    };
    known_fields(m, &["src", "dst", "proto", "sport", "dport"], &format!("{at}."), "a key")?;
    let addr = |f: &str| -> Result<IpAddr, String> {
        let s = m.get(f).ok_or(format!("{at}.{f}: missing"))?;
        s.as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{at}.{f}: must be an IPv4 or IPv6 address string, got {}", short(s)))
    };
    let (src, dst) = (addr("src")?, addr("dst")?);
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(format!("{at}: src and dst must be the same IP version"));
    }
    let proto = uint(m.get("proto").ok_or(format!("{at}.proto: missing"))?, &format!("{at}.proto"), 0, 255)? as u8;
    let port = |f: &str| -> Result<u16, String> {
        match m.get(f) {
            Some(p) => Ok(uint(p, &format!("{at}.{f}"), 0, 65_535)? as u16),
            None if proto != crate::flow::PROTO_TCP && proto != crate::flow::PROTO_UDP => Ok(0),
            None => Err(format!("{at}.{f}: missing (TCP and UDP flows have ports)")),
        }
    };
    Ok(FlowKey { src, dst, proto, sport: port("sport")?, dport: port("dport")? })
}
