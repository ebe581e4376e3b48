//! How a saturated WiFi medium is shared, in virtual time.
//!
//! Every client and the AP (towards every client) always has frames queued;
//! prints frames delivered per client and direction, aggregates, collisions and
//! airtime.  The WiFi section of the config comes from $WIFI (JSON), e.g.
//!
//! ```text
//! WIFI='{"clients":[{"phy_rate_mbit":300},{"phy_rate_mbit":50}]}' \
//!     cargo run --release --example wifi_share -- 10
//! ```
//!
//! (argument: seconds of virtual time; default 5).

use linkemu::config::WifiConfig;
use linkemu::link::Out;
use linkemu::packet::{build, Dir, Ecn, Packet};
use linkemu::time::{Nanos, NS_PER_S, NS_PER_US};
use linkemu::wifi::Wifi;

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let json =
        std::env::var("WIFI").unwrap_or_else(|_| r#"{"clients":[{"phy_rate_mbit":200},{"phy_rate_mbit":200}]}"#.into());
    let cfg: WifiConfig = serde_json::from_str(&json).expect("WIFI must be a wifi config object");
    let n = cfg.clients.len();
    let mut w = Wifi::new(&cfg, 1, 0);
    let mut out = vec![];
    let mut frames = vec![[0u64; 2]; n];
    let end = (secs * NS_PER_S as f64) as Nanos;
    let mut t: Nanos = 0;
    while t < end {
        while let Some(e) = w.next_event() {
            if e > t {
                break;
            }
            w.process(e, &mut out);
        }
        // Keep every queue topped up: one frame per flow every 20 us.
        for c in 0..n {
            for dir in Dir::BOTH {
                let mut p = Packet::from_frame(&build::ipv4_udp([2; 6], [4; 6], 1500, Ecn::NotEct), t);
                p.client = c as u16;
                match dir {
                    Dir::Up => w.enqueue_up(c, p, t, &mut out),
                    Dir::Down => w.enqueue_down(c, p, t, &mut out),
                }
            }
        }
        for (d, o) in out.drain(..) {
            if let Out::Depart { pkt, .. } = o {
                frames[pkt.client as usize][d.index()] += 1;
            }
        }
        t += 20 * NS_PER_US;
    }
    for (c, f) in frames.iter().enumerate() {
        let mbit = |x: u64| x as f64 * 1500.0 * 8.0 / secs / 1e6;
        println!("client {c}: uplink {:7.1} Mbit/s, downlink {:7.1} Mbit/s", mbit(f[0]), mbit(f[1]));
    }
    println!("{}", serde_json::to_string_pretty(&w.summary(end)).unwrap());
}
