//! WiFi: one shared half-duplex medium between the clients and the AP.
//!
//! Why: on WiFi, delay varies for reasons that have nothing to do with
//! congestion.  A station must win the channel before it sends, and it sends
//! an aggregate of many frames at once, so packets arrive in bursts separated
//! by gaps, and ACKs are compressed.  Arun et al. (SIGCOMM 2022, "Starvation
//! in end-to-end congestion control") show that such non-congestive delay
//! variation can starve delay-based algorithms (BBR, Copa, Vegas, PCC Vivace's
//! latency term); paper 002 (section 3) builds on that.  This model produces
//! exactly those effects, from 802.11's own rules rather than from a jitter
//! distribution.
//!
//! The model (figures: IEEE Std 802.11-2020; defaults are 5 GHz OFDM, AC_BE):
//!
//! * Contenders: every client station (its uplink queue) and the AP (one
//!   contender holding one downlink queue per client, served round robin, as
//!   mac80211's per-station TXQs are).  All of them, in both directions,
//!   share one medium: at most one transmission at a time.
//! * Channel access (EDCA, 10.23.2): a contender with frames waits until the
//!   medium has been idle for AIFS = SIFS + AIFSN x aSlotTime (AC_BE: 16 +
//!   3 x 9 = 43 us), then counts down a backoff of uniform [0, CW] slots of
//!   9 us (aSlotTime, Table 17-21), CW starting at CWmin = 15.  The counter
//!   freezes while another station transmits and resumes afterwards.  After a
//!   successful exchange the winner draws a new backoff (post-backoff) with
//!   CW = CWmin.
//! * Collisions: contenders whose countdowns end less than one slot apart
//!   cannot hear each other and transmit together; the medium is busy for the
//!   longest of their PPDUs, nothing is delivered, each doubles CW (up to
//!   CWmax = 1023) and retries the same aggregate; after `retry_limit`
//!   (dot11ShortRetryLimit = 7) retries the aggregate is dropped.
//! * Extra access delay (optional distribution): a per-access deferral added
//!   to the countdown, standing for everything outside the emulated BSS that
//!   keeps the channel busy (neighbouring networks, interference, power-save
//!   wake-ups).  It freezes like the backoff.
//! * Aggregation (A-MPDU, 10.12): the winner sends up to `max_frames` MPDUs
//!   (Block Ack window: 64 for HT/VHT, 256 for HE), `max_bytes` (A-MPDU
//!   length limit: 65,535 B for HT, 1,048,575 B for VHT, 6,500,631 B for HE)
//!   and `max_ppdu_us` of airtime (aPPDUMaxTime 5.484 ms) from the head of its
//!   queue, in one PPDU.  AC_BE's default TXOP limit is 0 (one PPDU per
//!   access), which is what the model does.  With `max_wait_us` > 0 a
//!   station holds its first frame up to that long while the aggregate fills.
//! * Airtime of an exchange: PHY preamble (VHT: 20 us legacy + VHT-SIG/STF/LTF,
//!   ~40 us; HE SU ~48 us) + sum over MPDUs of (IP length + 42 B: QoS MAC
//!   header 26, LLC/SNAP 8, FCS 4, A-MPDU delimiter 4, padded to 4 B) x 8 /
//!   PHY rate, then SIFS (16 us) and a Block Ack (32 B at a 24 Mbit/s basic
//!   rate plus a 20 us preamble, ~32 us).  PHY rates are per client, e.g.
//!   802.11ac at 80 MHz: 433.3 Mbit/s for 1 SS MCS9, 866.7 for 2 SS;
//!   802.11ax at 80 MHz, 2 SS MCS11: 1201 Mbit/s; 802.11n at 20 MHz, 1 SS
//!   MCS7: 65 (72.2 with short GI) Mbit/s.
//! * Delivery: all MPDUs of an A-MPDU reach the receiver together at the end
//!   of the PPDU (the burst), the medium stays busy through SIFS + Block Ack.
//!
//! Not modelled: rate adaptation, per-MPDU errors (use the link's loss
//! models), RTS/CTS, TXOP bursting, OFDMA/MU-MIMO, beacons.  Frame
//! timestamps: `Packet::wifi_wait` is the time from entering the WiFi queue to
//! delivery (queueing + access + retries + airtime).
//!
//! **Files** (`wifi/`): this file holds the [`Wifi`] type and its
//! construction; `queues.rs` the station and AP queues (frames in, lengths,
//! readiness, drain); `access.rs` channel access and the exchanges on the
//! medium (its event loop); `aggregation.rs` building an A-MPDU and its
//! airtime; `counters.rs` the per-client counters and summary.json's `wifi`
//! object; `tests.rs` the unit tests.

mod access;
mod aggregation;
mod counters;
mod queues;
#[cfg(test)]
mod tests;

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

pub use counters::ClientAir;

use self::access::{Contender, Exchange};
use self::queues::TxQueue;
use crate::config::{Dist, WifiConfig};
use crate::histogram::Histogram;
use crate::qdisc::{self, Dropped};
use crate::time::Nanos;

pub struct Wifi {
    n: usize,
    phy_bps: [Vec<f64>; 2],
    up: Vec<TxQueue>,
    down: Vec<TxQueue>,
    cont: Vec<Contender>,
    ap_rr: usize,
    busy: Option<Exchange>,
    idle_since: Nanos,
    // Parameters, ns.
    slot: Nanos,
    aifs: Nanos,
    cw_min: u32,
    cw_max: u32,
    retry_limit: u32,
    collisions: bool,
    extra: Option<Dist>,
    preamble: Nanos,
    sifs_ba: Nanos,
    mpdu_overhead: usize,
    max_frames: usize,
    max_bytes: usize,
    max_wait: Nanos,
    max_ppdu: Nanos,
    rng: Pcg64Mcg,
    scratch: Vec<Dropped>,
    // Statistics.
    origin: Nanos,
    pub busy_ns: Nanos,
    pub clients: Vec<ClientAir>,
    pub access_delay: Histogram,
    pub aggregate_frames: Histogram,
    pub collision_events: u64,
}

fn us(x: f64) -> Nanos {
    (x * 1000.0).round() as Nanos
}

impl Wifi {
    pub fn new(cfg: &WifiConfig, seed: u64, origin: Nanos) -> Wifi {
        let n = cfg.clients.len();
        let down_bps: Vec<f64> = cfg.clients.iter().map(|c| c.phy_rate_mbit * 1e6).collect();
        let up_bps: Vec<f64> =
            cfg.clients.iter().map(|c| c.uplink_phy_rate_mbit.unwrap_or(c.phy_rate_mbit) * 1e6).collect();
        let mkq = || TxQueue { q: qdisc::build(&cfg.queue, seed), stash: None };
        let a = &cfg.access_delay_us;
        let cont = (0..=n).map(|_| Contender { cw: a.cw_min, ..Default::default() }).collect();
        Wifi {
            n,
            phy_bps: [up_bps, down_bps],
            up: (0..n).map(|_| mkq()).collect(),
            down: (0..n).map(|_| mkq()).collect(),
            cont,
            ap_rr: 0,
            busy: None,
            idle_since: origin,
            slot: us(a.slot_us),
            aifs: us(a.aifs_us),
            cw_min: a.cw_min,
            cw_max: a.cw_max,
            retry_limit: a.retry_limit,
            collisions: a.collisions,
            extra: a.extra.clone(),
            preamble: us(cfg.phy.preamble_us),
            sifs_ba: us(cfg.phy.sifs_us + cfg.phy.block_ack_us),
            mpdu_overhead: cfg.phy.mpdu_overhead_bytes,
            max_frames: cfg.aggregation.max_frames,
            max_bytes: cfg.aggregation.max_bytes,
            max_wait: us(cfg.aggregation.max_wait_us),
            max_ppdu: us(cfg.aggregation.max_ppdu_us),
            rng: Pcg64Mcg::seed_from_u64(seed),
            scratch: Vec::new(),
            origin,
            busy_ns: 0,
            clients: vec![ClientAir::default(); n],
            access_delay: Histogram::new(),
            aggregate_frames: Histogram::new(),
            collision_events: 0,
        }
    }

    fn ap(&self) -> usize {
        self.n
    }
}
