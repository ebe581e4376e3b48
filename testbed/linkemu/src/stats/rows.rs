//! The rows a [`super::Sink`] receives and their CSV text: one packets.csv
//! row per packet ([`PacketRecord`] with its [`Verdict`]), one intervals.csv
//! row per direction and client and interval ([`IntervalRow`], with the
//! dual-queue classes' columns in [`ClassRow`]), and the files' headers.

use crate::packet::Dir;
use crate::qdisc::DropCause;
use crate::time::Nanos;

/// What finally happened to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Forward,
    /// Forwarded with CE set by an AQM.
    Mark,
    Drop(DropCause),
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Forward => "forward",
            Verdict::Mark => "mark",
            Verdict::Drop(DropCause::Queue) => "drop_queue",
            Verdict::Drop(DropCause::Aqm) => "drop_aqm",
            Verdict::Drop(DropCause::Loss) => "drop_loss",
            Verdict::Drop(DropCause::Oversize) => "drop_oversize",
            Verdict::Drop(DropCause::WifiQueue) => "drop_wifi_queue",
            Verdict::Drop(DropCause::WifiRetry) => "drop_wifi_retry",
            Verdict::Drop(DropCause::TxError) => "drop_tx_error",
        }
    }
}

/// One packets.csv row.
#[derive(Debug, Clone, Copy)]
pub struct PacketRecord {
    /// Time of the verdict (departure or drop), ns since the start.
    pub t: Nanos,
    pub dir: Dir,
    pub client: u16,
    /// IP length.
    pub len: u32,
    /// Bottleneck qdisc sojourn, ns.
    pub sojourn: Nanos,
    /// WiFi hop (queue + access + airtime), ns.
    pub wifi: Nanos,
    /// Arrival to verdict, ns.
    pub delay: Nanos,
    pub verdict: Verdict,
}

/// One intervals.csv row.
#[derive(Debug, Clone)]
pub struct IntervalRow {
    /// End of the interval, seconds since the start.
    pub t_s: f64,
    pub dir: Dir,
    /// Client index, or -1 for all clients of the direction.
    pub client: i32,
    /// IP bytes that entered the direction in the interval (offered load).
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub rate_mbit: f64,
    pub drops: u64,
    pub marks: u64,
    pub sojourn_mean_us: f64,
    pub sojourn_p99_us: f64,
    pub delay_mean_us: f64,
    pub delay_p99_us: f64,
    /// Packets queued at the end of the interval: the bottleneck qdisc for
    /// client = -1, the client's WiFi queue otherwise (None without WiFi).
    pub queue_pkts: Option<u64>,
    /// Share of the interval the medium carried this client's transmissions
    /// in this direction (None without WiFi; for -1 the sum over clients).
    pub airtime_frac: Option<f64>,
    /// Per class [Classic, L4S] when the direction's qdisc is dual-queue (DualPI2).
    pub classes: Option<[ClassRow; 2]>,
    /// The qdisc's base probability at the end of the interval (DualPI2's p',
    /// PIE's p; -1 rows only).
    pub p_prime: Option<f64>,
}

/// The per-class columns of an intervals.csv row.
#[derive(Debug, Clone, Default)]
pub struct ClassRow {
    pub bytes_out: u64,
    pub rate_mbit: f64,
    pub marks: u64,
    pub drops: u64,
    pub sojourn_mean_us: f64,
    pub sojourn_p90_us: f64,
    pub sojourn_p99_us: f64,
    pub sojourn_max_us: f64,
    /// Packets in the class's queue at the end of the interval (-1 rows only).
    pub queue_pkts: Option<u64>,
}

/// Names of the class prefixes in CSV columns and summary keys, in class-index order.
pub const CLASS_NAMES: [&str; 2] = ["classic", "l4s"];

/// The contract's columns first (t_s ... queue_pkts), then the additions.
/// The c_* and l_* columns are the DualPI2 classes (Classic and L4S queue), empty
/// for single-queue disciplines.
pub const INTERVAL_HEADER: &str = "t_s,direction,client,bytes_out,rate_mbit,drops,marks,sojourn_mean_us,\
sojourn_p99_us,queue_pkts,bytes_in,packets_out,delay_mean_us,delay_p99_us,airtime_frac,\
c_bytes_out,c_rate_mbit,c_marks,c_drops,c_sojourn_mean_us,c_sojourn_p90_us,c_sojourn_p99_us,c_sojourn_max_us,c_queue_pkts,\
l_bytes_out,l_rate_mbit,l_marks,l_drops,l_sojourn_mean_us,l_sojourn_p90_us,l_sojourn_p99_us,l_sojourn_max_us,l_queue_pkts,\
p_prime";
/// The contract's columns first (t_us ... verdict), then the additions.
pub const PACKET_HEADER: &str = "t_us,direction,client,len,sojourn_us,verdict,wifi_us,delay_us";

impl IntervalRow {
    pub fn csv(&self) -> String {
        let opt_u = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        let opt_f = |v: Option<f64>| v.map(|x| format!("{x:.4}")).unwrap_or_default();
        let class = |c: Option<&ClassRow>| match c {
            Some(c) => format!(
                "{},{:.4},{},{},{:.1},{:.1},{:.1},{:.1},{}",
                c.bytes_out,
                c.rate_mbit,
                c.marks,
                c.drops,
                c.sojourn_mean_us,
                c.sojourn_p90_us,
                c.sojourn_p99_us,
                c.sojourn_max_us,
                opt_u(c.queue_pkts)
            ),
            None => ",,,,,,,,".to_string(),
        };
        format!(
            "{:.3},{},{},{},{:.4},{},{},{:.1},{:.1},{},{},{},{:.1},{:.1},{},{},{},{}",
            self.t_s,
            self.dir.name(),
            self.client,
            self.bytes_out,
            self.rate_mbit,
            self.drops,
            self.marks,
            self.sojourn_mean_us,
            self.sojourn_p99_us,
            opt_u(self.queue_pkts),
            self.bytes_in,
            self.packets_out,
            self.delay_mean_us,
            self.delay_p99_us,
            opt_f(self.airtime_frac),
            class(self.classes.as_ref().map(|c| &c[0])),
            class(self.classes.as_ref().map(|c| &c[1])),
            self.p_prime.map(|x| format!("{x:.6}")).unwrap_or_default(),
        )
    }
}

impl PacketRecord {
    pub fn csv(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "{:.1},{},{},{},{:.1},{},{:.1},{:.1}",
            self.t as f64 / 1000.0,
            self.dir.name(),
            if self.client == u16::MAX { -1 } else { self.client as i32 },
            self.len,
            self.sojourn as f64 / 1000.0,
            self.verdict.name(),
            self.wifi as f64 / 1000.0,
            self.delay as f64 / 1000.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_match_their_headers() {
        let row = IntervalRow {
            t_s: 1.0,
            dir: Dir::Up,
            client: -1,
            bytes_in: 1,
            packets_out: 2,
            bytes_out: 3,
            rate_mbit: 4.0,
            drops: 5,
            marks: 6,
            sojourn_mean_us: 7.0,
            sojourn_p99_us: 8.0,
            delay_mean_us: 9.0,
            delay_p99_us: 10.0,
            queue_pkts: None,
            airtime_frac: Some(0.5),
            classes: None,
            p_prime: None,
        };
        let cols: Vec<&str> = INTERVAL_HEADER.split(',').collect();
        let line = row.csv();
        let vals: Vec<&str> = line.split(',').collect();
        assert_eq!(cols.len(), vals.len());
        let get = |c: &str| vals[cols.iter().position(|x| *x == c).unwrap()];
        assert_eq!((get("bytes_out"), get("queue_pkts"), get("airtime_frac")), ("3", "", "0.5000"));
        assert_eq!((get("c_marks"), get("l_queue_pkts"), get("p_prime")), ("", "", ""));
        let mut dual = row.clone();
        dual.classes = Some([
            ClassRow { marks: 7, ..Default::default() },
            ClassRow { sojourn_p90_us: 1050.0, queue_pkts: Some(3), ..Default::default() },
        ]);
        dual.p_prime = Some(0.25);
        let line = dual.csv();
        let vals: Vec<&str> = line.split(',').collect();
        assert_eq!(cols.len(), vals.len());
        let get = |c: &str| vals[cols.iter().position(|x| *x == c).unwrap()];
        assert_eq!((get("c_marks"), get("l_sojourn_p90_us"), get("l_queue_pkts")), ("7", "1050.0", "3"));
        assert_eq!((get("c_queue_pkts"), get("p_prime")), ("", "0.250000"));
        let mut s = String::new();
        PacketRecord {
            t: 1500,
            dir: Dir::Down,
            client: 1,
            len: 100,
            sojourn: 2000,
            wifi: 0,
            delay: 3000,
            verdict: Verdict::Drop(DropCause::Queue),
        }
        .csv(&mut s);
        let cols: Vec<&str> = PACKET_HEADER.split(',').collect();
        let vals: Vec<&str> = s.trim_end().split(',').collect();
        assert_eq!(cols.len(), vals.len());
        assert_eq!(vals[cols.iter().position(|x| *x == "verdict").unwrap()], "drop_queue");
        assert_eq!(vals[0], "1.5");
    }
}
