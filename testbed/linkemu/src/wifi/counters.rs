//! What the medium did: per-client airtime, aggregates, frames and
//! collisions per direction ([`ClientAir`]), utilisation, the airtime the
//! interval rows read, and summary.json's `wifi` object.

use super::Wifi;
use crate::packet::Dir;
use crate::time::Nanos;

/// Per-client WiFi counters.
#[derive(Debug, Default, Clone)]
pub struct ClientAir {
    /// Medium time of this client's exchanges, per direction (ns).
    pub airtime: [Nanos; 2],
    pub aggregates: [u64; 2],
    pub frames: [u64; 2],
    pub collisions: [u64; 2],
}

impl Wifi {
    /// Share of time the medium was busy since the start.
    pub fn utilisation(&self, now: Nanos) -> f64 {
        let el = now.saturating_sub(self.origin);
        if el == 0 {
            0.0
        } else {
            self.busy_ns as f64 / el as f64
        }
    }

    /// Cumulative airtime per client for `dir` (interval statistics).
    pub fn airtime(&self, dir: Dir) -> Vec<Nanos> {
        self.clients.iter().map(|c| c.airtime[dir.index()]).collect()
    }

    /// summary.json's "wifi" object.
    pub fn summary(&self, now: Nanos) -> serde_json::Value {
        let el = now.saturating_sub(self.origin).max(1) as f64;
        let clients: Vec<serde_json::Value> = self
            .clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mean =
                    |d: usize| if c.aggregates[d] > 0 { c.frames[d] as f64 / c.aggregates[d] as f64 } else { 0.0 };
                serde_json::json!({
                    "client": i,
                    "phy_rate_mbit": {"uplink": self.phy_bps[0][i] / 1e6, "downlink": self.phy_bps[1][i] / 1e6},
                    "airtime_frac": {"uplink": c.airtime[0] as f64 / el, "downlink": c.airtime[1] as f64 / el},
                    "aggregates": {"uplink": c.aggregates[0], "downlink": c.aggregates[1]},
                    "mean_aggregate_frames": {"uplink": mean(0), "downlink": mean(1)},
                    "collisions": {"uplink": c.collisions[0], "downlink": c.collisions[1]},
                })
            })
            .collect();
        serde_json::json!({
            "airtime_utilisation": self.utilisation(now),
            "busy_s": self.busy_ns as f64 / 1e9,
            "collisions": self.collision_events,
            "access_delay_us": self.access_delay.summary(),
            "aggregate_frames": {
                "mean": self.aggregate_frames.mean_us(),
                "p50": self.aggregate_frames.quantile_us(0.5),
                "max": self.aggregate_frames.max_us(),
            },
            "clients": clients,
        })
    }
}
