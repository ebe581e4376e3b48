//! The control protocol over the real UNIX socket, end to end (server threads
//! in process, this thread playing the forwarding loop), and what answering a
//! request costs the loop.  Engines and traffic: `tests.rs`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::server::ControlServer;
use super::tests::{engine, engine_with, traffic};
use super::{apply, render, Request};
use crate::engine::Engine;

fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("linkemu-{name}-{}.sock", std::process::id()))
}

/// Play the forwarding loop for `e` until `done` says stop (polling every 0.2 ms).
fn play_loop(port: &mut super::server::ControlPort, e: &mut Engine, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "the client did not finish");
        port.collect(e.now());
        port.serve(e, 8);
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn the_real_socket_end_to_end() {
    let path = socket_path("e2e");
    let _ = std::fs::remove_file(&path);
    // A regular file is never replaced; a stale socket (its listener gone) is.
    std::fs::write(&path, b"").unwrap();
    assert!(ControlServer::start(&path).is_err_and(|e| e.to_string().contains("not a socket")));
    std::fs::remove_file(&path).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let mut e = engine();
    traffic(&mut e, &[4000, 4001], 20);
    let (server, mut port) = ControlServer::start(&path).unwrap();
    let p = path.clone();
    let client = std::thread::spawn(move || {
        let s = UnixStream::connect(&p).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut w = s.try_clone().unwrap();
        // Pipelined: four requests (one malformed) and a blank line in one write.
        w.write_all(b"{\"op\": \"state\", \"id\": 1}\n\n{\"op\": \"set\", \"dir\": \"uplink\", \"default_limit_pkts\": 7, \"id\": 2}\n{oops\n{\"op\": \"state\", \"dir\": \"uplink\", \"fields\": [\"default_limit_pkts\"], \"id\": 4}\n").unwrap();
        let mut r = BufReader::new(s);
        let lines: Vec<Value> = (0..4)
            .map(|_| {
                let mut l = String::new();
                r.read_line(&mut l).unwrap();
                serde_json::from_str(&l).unwrap()
            })
            .collect();
        // A second client: a line over 1 MiB is refused and the connection closed.
        let mut s2 = UnixStream::connect(&p).unwrap();
        s2.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s2.write_all(&vec![b'x'; (1 << 20) + 10]);
        let mut r2 = BufReader::new(s2);
        let mut l = String::new();
        r2.read_line(&mut l).unwrap();
        let mut rest = String::new();
        assert_eq!(r2.read_line(&mut rest).unwrap(), 0, "closed after the error");
        (lines, l)
    });
    play_loop(&mut port, &mut e, || client.is_finished());
    let (lines, long) = client.join().unwrap();
    assert_eq!(lines[0]["id"], 1);
    assert_eq!(lines[0]["uplink"]["flows_active"], 2);
    assert_eq!((&lines[1]["id"], &lines[1]["applied"]["default_limit_pkts"]), (&json!(2), &json!(7)));
    assert_eq!(lines[2]["ok"], false);
    assert!(lines[2]["error"].as_str().unwrap().starts_with("malformed JSON: key must be a string"), "{}", lines[2]);
    assert_eq!((&lines[3]["id"], &lines[3]["uplink"]), (&json!(4), &json!({"default_limit_pkts": 7})));
    assert_eq!(long.trim(), r#"{"error":"request longer than 1048576 bytes","ok":false}"#);
    assert_eq!(port.served, 3, "the malformed and the long lines never reached the loop");
    drop(port);
    drop(server);
    assert!(!path.exists(), "the socket file is removed");
}

#[test]
fn shutdown_is_quick_even_without_the_socket_file() {
    let path = socket_path("gone");
    let _ = std::fs::remove_file(&path);
    let (server, port) = ControlServer::start(&path).unwrap();
    let mut c = UnixStream::connect(&path).unwrap(); // a client that stays connected
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::fs::remove_file(&path).unwrap();
    let t = Instant::now();
    drop(port);
    drop(server);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let mut buf = [0u8; 1];
    assert_eq!(std::io::Read::read(&mut c, &mut buf).unwrap(), 0, "the client sees the end of the stream");
}

/// What answering a request costs the forwarding loop (the `apply` step; the
/// parsing and rendering run on the control threads), with 10 to 1000
/// active lfq flows.  Printed for the README (run with --nocapture); the
/// bound only catches a gross regression.
#[test]
fn what_a_request_costs_the_loop() {
    for n in [10u16, 100, 1000] {
        // 65536 queues: 1000 flows rarely share one.
        let mut e = engine_with(r#"{"kind": "lfq", "flows": 65536}"#);
        let sports: Vec<u16> = (0..n).map(|i| 10_000 + i).collect();
        traffic(&mut e, &sports, 3);
        let state = Request::State { dir: None, max_flows: 1024, fields: None };
        let reps = 200;
        let t = Instant::now();
        let mut flows = 0;
        for _ in 0..reps {
            if let super::Reply::State { dirs, .. } = apply::apply(&mut e, &state) {
                flows = dirs[0].qdisc.flows_active;
            }
        }
        let per = t.elapsed() / reps;
        let reply = apply::apply(&mut e, &state);
        let t = Instant::now();
        let text = render::reply(None, &reply);
        let render_t = t.elapsed();
        let set = super::parse::request(br#"{"op": "set", "dir": "downlink", "base_prob": 0.1}"#).1.unwrap();
        let t = Instant::now();
        for _ in 0..reps {
            apply::apply(&mut e, &set);
        }
        let set_t = t.elapsed() / reps;
        eprintln!(
            "{flows} active flows (of {n} sent): state {:.1} us on the loop, rendering {:.1} us ({} kB); set {:.2} us",
            per.as_secs_f64() * 1e6,
            render_t.as_secs_f64() * 1e6,
            text.len() / 1000,
            set_t.as_secs_f64() * 1e6
        );
        assert!(flows > (n as usize) * 98 / 100, "{flows} of {n}: hash collisions only");
        assert!(per < Duration::from_millis(20), "{per:?}");
    }
}
