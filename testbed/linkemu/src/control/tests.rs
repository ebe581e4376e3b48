//! The control protocol against a real engine in virtual time: good and bad
//! requests -> responses without sockets ([`super::handle_line`]).  The real
//! UNIX socket and what a request costs the loop: `socket_tests.rs`, with the
//! engines and traffic of this file.

use serde_json::{json, Value};

use super::handle_line;
use crate::config::Config;
use crate::engine::Engine;
use crate::packet::{build, Dir, Ecn, Mac, Packet};
use crate::stats::NullSink;
use crate::time::{Nanos, NS_PER_S};

const C0: Mac = [2, 0, 0, 0, 0, 0x10];
const SRV: Mac = [2, 0, 0, 0, 0, 0x01];
const T0: Nanos = 1_000 * NS_PER_S;

/// lfq (limit 1000 packets) up, dualpi2 down, 10 Mbit/s each way.
pub(super) fn engine() -> Engine {
    engine_with(r#"{"kind": "lfq", "limit_pkts": 1000}"#)
}

pub(super) fn engine_with(uplink_qdisc: &str) -> Engine {
    let cfg = Config::from_json(&format!(
        r#"{{"client_ifs": ["c1"], "server_if": "srv",
            "uplink": {{"rate_mbit": 10, "qdisc": {uplink_qdisc}}},
            "downlink": {{"rate_mbit": 10, "qdisc": {{"kind": "dualpi2"}}}}}}"#
    ))
    .unwrap();
    cfg.validate().unwrap();
    Engine::new(&cfg, T0, Box::new(NullSink)).unwrap()
}

/// `n` packets of 1250 bytes per flow (source ports `sports`), 0.1 ms apart, uplink.
pub(super) fn traffic(e: &mut Engine, sports: &[u16], n: usize) {
    let mut t = e.now();
    for _ in 0..n {
        for &p in sports {
            t += 100_000;
            let f = build::ipv4_udp_ports(SRV, C0, 1250, Ecn::NotEct, p, 5201);
            e.ingress(0, Packet::from_frame(&f, 0), t);
            e.take_emits().for_each(drop);
        }
    }
}

fn ask(e: &mut Engine, line: &str) -> Value {
    let out = handle_line(line.as_bytes(), e);
    assert!(!out.contains('\n'), "{out}");
    serde_json::from_str(&out).unwrap()
}

fn error(e: &mut Engine, line: &str) -> String {
    let r = ask(e, line);
    assert_eq!(r["ok"], false, "{line}: {r}");
    r["error"].as_str().unwrap().to_string()
}

#[test]
fn state_and_set_requests() {
    let mut e = engine();
    traffic(&mut e, &[4000, 4001], 100);
    let r = ask(&mut e, r#"{"op": "state", "id": 7}"#);
    assert_eq!((&r["ok"], &r["id"]), (&json!(true), &json!(7)));
    assert!((r["t_s"].as_f64().unwrap() - 0.02).abs() < 1e-9, "{r}");
    let up = &r["uplink"];
    assert_eq!((&up["kind"], &up["packets_in"], &up["flows_active"]), (&json!("lfq"), &json!(200), &json!(2)));
    assert_eq!(up["drops"].as_object().unwrap().len(), 7);
    assert_eq!(up["weights"].as_array().unwrap().len(), 10);
    assert_eq!(up["default_limit_pkts"], 100);
    // 200 packets in 20 ms into 10 Mbit/s (1 ms each): 20 left, about 180 queued.
    assert_eq!(up["backlog_pkts"].as_u64().unwrap() + up["packets_out"].as_u64().unwrap(), 200 - 1);
    let f0 = &up["flows"][0];
    assert_eq!(f0["key"], json!({"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 17, "sport": 4000, "dport": 5201}));
    assert_eq!((&f0["limit_pkts"], &f0["shared"]), (&json!(100), &json!(false)));
    for name in
        ["queue_pkts", "queue_std_pkts", "limit_pkts", "in_rate_pps", "out_rate_pps", "since_loss_s", "empty_frac"]
    {
        assert_eq!(f0["features"][name].as_array().unwrap().len(), 10, "{name}");
    }
    // 5000 pps offered per flow; the first two averages are past their guard.
    assert!((f0["features"]["in_rate_pps"][0].as_f64().unwrap() - 5000.0).abs() < 1.0, "{f0}");
    let down = &r["downlink"];
    assert_eq!(
        (&down["kind"], &down["base_prob"], &down["pi"], &down["k"]),
        (&json!("dualpi2"), &json!(0.0), &json!("auto"), &json!(2.0))
    );
    assert_eq!(down["classic_pkts"], 0);
    // One direction, fewer flows listed.
    let r = ask(&mut e, r#"{"op": "state", "dir": "uplink", "max_flows": 1}"#);
    assert!(r.get("downlink").is_none());
    assert_eq!((r["uplink"]["flows"].as_array().unwrap().len(), &r["uplink"]["flows_active"]), (1, &json!(2)));
    // lfq: one flow by queue, the other by key, and the default.
    let (q0, q1) = (f0["queue"].clone(), up["flows"][1]["queue"].clone());
    let r = ask(
        &mut e,
        &format!(
            r#"{{"op": "set", "dir": "uplink", "flows": [{{"queue": {q0}, "limit_pkts": 10}}], "default_limit_pkts": 50}}"#
        ),
    );
    assert_eq!(r["applied"]["flows"], json!([{"queue": q0, "key": f0["key"], "limit_pkts": 10, "was": 100}]), "{r}");
    assert_eq!(
        (&r["applied"]["default_limit_pkts"], &r["applied"]["default_limit_pkts_was"], &r["dir"]),
        (&json!(50), &json!(100), &json!("uplink"))
    );
    let key = r#"{"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 17, "sport": 4001, "dport": 5201}"#;
    let r = ask(
        &mut e,
        &format!(r#"{{"op": "set", "dir": "uplink", "flows": [{{"key": {key}, "limit_pkts": 20}}], "id": "x"}}"#),
    );
    assert_eq!((&r["applied"]["flows"][0]["queue"], &r["id"]), (&q1, &json!("x")));
    let r = ask(&mut e, r#"{"op": "state", "dir": "uplink"}"#);
    assert_eq!(
        (&r["uplink"]["flows"][0]["limit_pkts"], &r["uplink"]["flows"][1]["limit_pkts"]),
        (&json!(10), &json!(20))
    );
    // dualpi2: p' fixed and k, then the PI controller back.
    let r = ask(&mut e, r#"{"op": "set", "dir": "downlink", "base_prob": 0.25, "k": 3}"#);
    assert_eq!(r["applied"], json!({"base_prob": 0.25, "base_prob_was": 0.0, "k": 3.0, "k_was": 2.0, "pi": "manual"}));
    let r = ask(&mut e, r#"{"op": "state", "dir": "downlink"}"#);
    assert_eq!(
        (&r["downlink"]["base_prob"], &r["downlink"]["p_cl"], &r["downlink"]["pi"]),
        (&json!(0.25), &json!(0.75), &json!("manual"))
    );
    let r = ask(&mut e, r#"{"op": "set", "dir": "downlink", "base_prob": "auto"}"#);
    assert_eq!(r["applied"]["pi"], "auto");
}

/// A k set with `hold_ms` is a lease: unless a newer set with k renews it,
/// the first PI update at or after it puts the configuration's k back
/// (`k_lease_expiries`); a k set without `hold_ms` stays.
#[test]
fn a_k_lease_runs_out_at_the_first_pi_update_after_it() {
    let mut e = engine();
    e.advance_to(T0); // the first timer starts DualPI2's PI grid: updates every 16 ms from T0
    let ms = |m: u64| T0 + m * 1_000_000;
    let down = |e: &mut Engine| ask(e, r#"{"op": "state", "dir": "downlink"}"#)["downlink"].clone();
    let r = ask(&mut e, r#"{"op": "set", "dir": "downlink", "k": 3, "hold_ms": 50}"#);
    assert_eq!(r["applied"], json!({"k": 3.0, "k_was": 2.0, "k_hold_ms": 50.0, "base_prob": 0.0, "pi": "auto"}));
    let d = down(&mut e);
    assert_eq!(
        (&d["k"], &d["k_config"], &d["k_hold_left_ms"], &d["hold_left_ms"]),
        (&json!(3.0), &json!(2.0), &json!(50.0), &json!(-1.0))
    );
    e.advance_to(ms(49));
    let d = down(&mut e);
    assert_eq!((&d["k"], &d["k_lease_expiries"], &d["k_hold_left_ms"]), (&json!(3.0), &json!(0), &json!(1.0)));
    e.advance_to(ms(64)); // the first update at or after 50 ms
    let d = down(&mut e);
    assert_eq!(
        (&d["k"], &d["k_lease_expiries"], &d["lease_expiries"], &d["k_hold_left_ms"]),
        (&json!(2.0), &json!(1), &json!(0), &json!(-1.0))
    );
    // Renewed every 40 ms for 1 s: k stays the agent's.
    for i in 0..25 {
        ask(&mut e, r#"{"op": "set", "dir": "downlink", "prob_scale": 1.2, "k": 3, "hold_ms": 50}"#);
        e.advance_to(ms(64 + 40 * (i + 1)));
        assert_eq!(down(&mut e)["k"], json!(3.0), "{i}");
    }
    e.advance_to(ms(1200));
    let d = down(&mut e);
    assert_eq!(
        (&d["k"], &d["k_lease_expiries"], &d["lease_expiries"], &d["prob_scale"]),
        (&json!(2.0), &json!(2), &json!(1), &json!(1.0))
    );
    assert_eq!(e.link(Dir::Down).qdisc().stats_json().unwrap()["k_lease_expiries"], 2);
    // Without hold_ms a k stays.
    let r = ask(&mut e, r#"{"op": "set", "dir": "downlink", "k": 4}"#);
    assert!(r["applied"].get("k_hold_ms").is_none(), "{r}");
    e.advance_to(ms(5000));
    let d = down(&mut e);
    assert_eq!((&d["k"], &d["k_lease_expiries"], &d["k_hold_left_ms"]), (&json!(4.0), &json!(2), &json!(-1.0)));
}

/// `fields`: each DIR holds only the keys asked for (names it does not have
/// are left out), with the values a full state has; flows only if asked.
#[test]
fn state_fields_narrow_the_answer() {
    let mut e = engine();
    traffic(&mut e, &[4000, 4001], 100);
    let full = ask(&mut e, r#"{"op": "state"}"#);
    let r = ask(
        &mut e,
        r#"{"op": "state", "dir": "downlink", "fields": ["base_prob", "bytes_out", "drops", "nope"], "id": 3}"#,
    );
    assert_eq!((&r["ok"], &r["id"], &r["t_s"]), (&json!(true), &json!(3), &full["t_s"]));
    assert!(r.get("uplink").is_none());
    let down = r["downlink"].as_object().unwrap();
    assert_eq!(down.keys().collect::<Vec<_>>(), ["base_prob", "bytes_out", "drops"]);
    for (k, v) in down {
        assert_eq!(v, &full["downlink"][k], "{k}");
    }
    let r = ask(&mut e, r#"{"op": "state", "fields": ["flows_active", "packets_in"]}"#);
    assert_eq!(r["uplink"], json!({"flows_active": 2, "packets_in": 200}));
    assert_eq!(r["downlink"], json!({"packets_in": 0}));
    let r = ask(&mut e, r#"{"op": "state", "dir": "uplink", "fields": ["flows"], "max_flows": 1}"#);
    assert_eq!(r["uplink"]["flows"], json!([full["uplink"]["flows"][0].clone()]));
    assert_eq!(ask(&mut e, r#"{"op": "state", "dir": "uplink", "fields": []}"#)["uplink"], json!({}));
    let many: Vec<String> = (0..=super::MAX_FIELDS).map(|i| format!("\"f{i}\"")).collect();
    assert_eq!(
        error(&mut e, &format!(r#"{{"op": "state", "fields": [{}]}}"#, many.join(","))),
        format!("fields: at most {} names, got {}", super::MAX_FIELDS, super::MAX_FIELDS + 1)
    );
}

#[test]
fn bad_requests_get_one_line_errors_and_change_nothing() {
    let mut e = engine();
    traffic(&mut e, &[4000], 10);
    let q = ask(&mut e, r#"{"op": "state"}"#)["uplink"]["flows"][0]["queue"].as_u64().unwrap();
    let idle = (q + 1) % 1024;
    for (line, want) in [
        ("{\"op\": \"state\"", "malformed JSON: EOF while parsing an object at line 1 column 14"),
        ("[1, 2]", "a request must be a JSON object, got an array"),
        (r#"{"id": 3}"#, "op: missing (\"state\" or \"set\")"),
        (r#"{"op": 1}"#, "op: must be a string (\"state\" or \"set\"), got a number"),
        (r#"{"op": "reset"}"#, "op: unknown op \"reset\" (expected \"state\" or \"set\")"),
        (r#"{"op": "state", "dirr": "up"}"#, "dirr: unknown field for state (fields: op, id, dir, max_flows, fields)"),
        (r#"{"op": "state", "dir": "up"}"#, "dir: must be \"uplink\" or \"downlink\", got \"up\""),
        (r#"{"op": "state", "max_flows": -1}"#, "max_flows: must be an integer 0..65536, got -1"),
        (r#"{"op": "state", "fields": "k"}"#, "fields: must be an array of key names, got a string"),
        (r#"{"op": "state", "fields": ["k", 2]}"#, "fields[1]: must be a key name (1..64 characters), got 2"),
        (r#"{"op": "state", "fields": [""]}"#, "fields[0]: must be a key name (1..64 characters), got \"\""),
        (r#"{"op": "set", "flows": []}"#, "dir: missing (\"uplink\" or \"downlink\")"),
        (
            r#"{"op": "set", "dir": "uplink"}"#,
            "set: nothing to set (fields: default_limit_pkts, flows, base_prob, prob_scale, k)",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "flows": {}}"#,
            "flows: must be an array of {queue | key, limit_pkts}, got an object",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "flows": [{"limit_pkts": 5}]}"#,
            "flows[0]: give either queue or key (one of them)",
        ),
        (r#"{"op": "set", "dir": "uplink", "flows": [{"queue": 1}]}"#, "flows[0].limit_pkts: missing"),
        (
            r#"{"op": "set", "dir": "uplink", "flows": [{"queue": 1, "limit_pkts": 5, "prio": 1}]}"#,
            "flows[0].prio: unknown field for a flow (fields: queue, key, limit_pkts)",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "flows": [{"key": {"src": "10.0.0.1", "dst": "::1", "proto": 6}, "limit_pkts": 5}]}"#,
            "flows[0].key: src and dst must be the same IP version",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "flows": [{"key": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 6, "sport": 1}, "limit_pkts": 5}]}"#,
            "flows[0].key.dport: missing (TCP and UDP flows have ports)",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "flows": [{"key": {"src": "10.0.0.x", "dst": "10.0.0.2", "proto": 1}, "limit_pkts": 5}]}"#,
            "flows[0].key.src: must be an IPv4 or IPv6 address string, got \"10.0.0.x\"",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "base_prob": "high"}"#,
            "base_prob: must be a number (0..1) or \"auto\", got \"high\"",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "default_limit_pkts": 0}"#,
            "default_limit_pkts: must be an integer 1..4294967295, got 0",
        ),
        // Checked against the direction's qdisc:
        (
            r#"{"op": "set", "dir": "uplink", "default_limit_pkts": 2000}"#,
            "default_limit_pkts: must be 1..1000 (limit_pkts), got 2000",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "base_prob": 0.1}"#,
            "base_prob: not settable on lfq (settable: default_limit_pkts, flows)",
        ),
        (
            r#"{"op": "set", "dir": "downlink", "default_limit_pkts": 10}"#,
            "default_limit_pkts: not settable on dualpi2 (settable: base_prob, prob_scale, k, hold_ms)",
        ),
        (
            r#"{"op": "set", "dir": "downlink", "base_prob": 0.1, "hold_ms": 0}"#,
            "hold_ms: must be a number of ms in (0, 60000], got 0",
        ),
        (
            r#"{"op": "set", "dir": "downlink", "base_prob": "auto", "hold_ms": 100}"#,
            "hold_ms: only with a numeric base_prob, a prob_scale or a k (it is the lease of those values)",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "k": 2, "hold_ms": 100}"#,
            "k: not settable on lfq (settable: default_limit_pkts, flows)",
        ),
        (
            r#"{"op": "set", "dir": "downlink", "prob_scale": 0}"#,
            "prob_scale: must be a number in [0.0625, 16] (1: the PI controller alone), got 0",
        ),
        (
            r#"{"op": "set", "dir": "downlink", "prob_scale": 2, "base_prob": 0.1}"#,
            "prob_scale: not with base_prob in one set (a factor on the PI's p', or p' itself)",
        ),
        (
            r#"{"op": "set", "dir": "uplink", "prob_scale": 2}"#,
            "prob_scale: not settable on lfq (settable: default_limit_pkts, flows)",
        ),
        (r#"{"op": "set", "dir": "downlink", "k": 0.1}"#, "k: must be in [0.5, 64] (RFC 9332 uses 2), got 0.1"),
    ] {
        assert_eq!(error(&mut e, line), want, "{line}");
    }
    // All or nothing: a good default next to a flow that is not active.
    let line = format!(
        r#"{{"op": "set", "dir": "uplink", "default_limit_pkts": 5, "flows": [{{"queue": {q}, "limit_pkts": 3}}, {{"queue": {idle}, "limit_pkts": 3}}]}}"#
    );
    assert_eq!(error(&mut e, &line), format!("flows[1].queue: no active flow in queue {idle}"));
    let r = ask(&mut e, r#"{"op": "state", "dir": "uplink"}"#);
    assert_eq!(
        (&r["uplink"]["default_limit_pkts"], &r["uplink"]["flows"][0]["limit_pkts"]),
        (&json!(100), &json!(100))
    );
    // The id comes back with errors too; pfifo has nothing to set.
    let r = ask(&mut e, r#"{"op": "sett", "id": [1, "a"]}"#);
    assert_eq!(r["id"], json!([1, "a"]));
    let mut p = Engine::new(
        &Config::from_json(r#"{"client_ifs": ["c1"], "server_if": "srv", "uplink": {}, "downlink": {}}"#).unwrap(),
        0,
        Box::new(NullSink),
    )
    .unwrap();
    assert_eq!(
        error(&mut p, r#"{"op": "set", "dir": "uplink", "k": 2}"#),
        "k: pfifo has no parameters settable at run time (lfq: default_limit_pkts, flows; dualpi2: base_prob, prob_scale, k, hold_ms)"
    );
    assert_eq!(ask(&mut p, r#"{"op": "state"}"#)["uplink"]["kind"], "pfifo");
}

#[test]
fn pie_and_fq_pie_state() {
    // Into 10 Mbit/s: 0.2 s at 100 Mbit/s (the 1000-packet limit overflows),
    // then 12.5 Mbit/s for 6.4 s: a standing queue, p above 0.
    let mut e = engine_with(r#"{"kind": "pie"}"#);
    traffic(&mut e, &[4000], 2_000);
    traffic_gap(&mut e, 4000, 8_000, 800_000);
    let up = &ask(&mut e, r#"{"op": "state", "dir": "uplink"}"#)["uplink"];
    assert_eq!((&up["kind"], &up["target_ms"], &up["alpha"]), (&json!("pie"), &json!(15.0), &json!(0.125)));
    assert!(up["prob"].as_f64().unwrap() > 0.0 && up["qdelay_ms"].as_f64().unwrap() > 0.0, "{up}");
    assert_eq!(up["packets_in"], json!(10_000)); // the direction's, not pie's enqueued_pkts
    assert!(up["enqueued_pkts"].as_u64().unwrap() < 10_000 && up.get("flows").is_none(), "{up}");
    let set = error(&mut e, r#"{"op": "set", "dir": "uplink", "k": 2}"#);
    assert!(set.starts_with("k: pie has no parameters settable"), "{set}");
    // fq_pie: per-flow p of each queue holding packets, at most max_flows.
    let mut e = engine_with(r#"{"kind": "fq_pie"}"#);
    traffic(&mut e, &[4000, 4001], 2_000);
    let up = &ask(&mut e, r#"{"op": "state", "dir": "uplink", "max_flows": 1}"#)["uplink"];
    assert_eq!((&up["kind"], &up["flows_active"], &up["ecn_prob_pct"]), (&json!("fq_pie"), &json!(2), &json!(10.0)));
    let flows = up["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 1);
    assert!(flows[0]["prob"].is_number() && flows[0]["qdelay_ms"].is_number(), "{up}");
    assert_eq!(flows[0]["burst_allowance_ms"], json!(0.0), "0.4 s of dequeuing used it up: {up}");
}

/// `n` packets of 1250 bytes from port `sport`, `gap` ns apart, uplink.
fn traffic_gap(e: &mut Engine, sport: u16, n: usize, gap: Nanos) {
    let mut t = e.now();
    for _ in 0..n {
        t += gap;
        let f = build::ipv4_udp_ports(SRV, C0, 1250, Ecn::NotEct, sport, 5201);
        e.ingress(0, Packet::from_frame(&f, 0), t);
        e.take_emits().for_each(drop);
    }
}

#[test]
fn vdq_csaqm_state_lists_ctvs_and_marked_flows() {
    // Two flows of 50 Mbit/s (1250 B every 0.2 ms each) into 10 Mbit/s, for 0.4 s: CTV_1 > 0.
    let mut e = engine_with(r#"{"kind": "vdq_csaqm", "policies": [{"policy": "silver", "sport": 4001}]}"#);
    traffic(&mut e, &[4000, 4001], 2_000);
    let up = &ask(&mut e, r#"{"op": "state", "dir": "uplink", "max_flows": 8}"#)["uplink"];
    assert_eq!((&up["kind"], &up["flows_active"], &up["rate_mbit"]), (&json!("vdq_csaqm"), &json!(2), &json!(10.0)));
    assert!(up["ctv_classic"].as_u64().unwrap() > 0, "overloaded 10x: {up}");
    assert!(up["ctv_classic_gold_mbit"].as_f64().unwrap() < 10.0, "{up}");
    let flows = up["flows"].as_array().unwrap();
    assert_eq!((&flows[0]["policy"], &flows[1]["policy"]), (&json!("gold"), &json!("silver")));
    assert!(flows[0]["rate_mbit"].as_f64().unwrap() > 20.0 && flows[0]["entitled_mbit"].is_number(), "{up}");
    let set = error(&mut e, r#"{"op": "set", "dir": "uplink", "k": 2}"#);
    assert!(set.starts_with("k: vdq_csaqm has no parameters settable"), "{set}");
}
