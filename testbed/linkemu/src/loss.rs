//! Random loss models, applied to each IP packet as it reaches a link (before
//! its queue, like netem's `loss`): a lost packet never takes queue space or
//! link time, i.e. it models corruption on the path before the bottleneck.
//!
//! * Bernoulli: every packet is lost independently with probability `p`.
//! * Gilbert-Elliott (Gilbert 1960, Elliott 1963; netem's `loss gemodel`): a
//!   two-state Markov chain evaluated once per packet.  In the Good state a
//!   packet is lost with `loss_good` (netem's 1-k), in the Bad state with
//!   `loss_bad` (netem's 1-h); after each packet the chain moves Good->Bad with
//!   `p_gb` (netem's p) and Bad->Good with `p_bg` (netem's r).  The stationary
//!   share of Bad is p_gb / (p_gb + p_bg), so the mean loss rate is
//!   (p_bg * loss_good + p_gb * loss_bad) / (p_gb + p_bg), and bursts in the
//!   Bad state last 1/p_bg packets on average.  With loss_good = 0 and
//!   loss_bad = 1 it is the simple Gilbert model.
//!
//! Each link owns its model and its own random stream (seeded from the run
//! seed and the direction), so the loss pattern of one direction does not
//! depend on the traffic in the other.

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use crate::config::LossConfig;

#[derive(Debug, Clone)]
pub enum LossModel {
    None,
    Bernoulli { p: f64 },
    Gilbert { p_gb: f64, p_bg: f64, loss_good: f64, loss_bad: f64, bad: bool },
}

impl LossModel {
    pub fn new(cfg: Option<&LossConfig>) -> Self {
        match cfg {
            None => LossModel::None,
            Some(LossConfig::Bernoulli(b)) => LossModel::Bernoulli { p: b.p },
            Some(LossConfig::Gilbert(g)) => LossModel::Gilbert {
                p_gb: g.p_gb,
                p_bg: g.p_bg,
                loss_good: g.loss_good,
                loss_bad: g.loss_bad,
                bad: false,
            },
        }
    }

    /// Decide the fate of one packet: true = lost.
    pub fn lose(&mut self, rng: &mut Pcg64Mcg) -> bool {
        match self {
            LossModel::None => false,
            LossModel::Bernoulli { p } => *p > 0.0 && rng.random::<f64>() < *p,
            LossModel::Gilbert { p_gb, p_bg, loss_good, loss_bad, bad } => {
                let p = if *bad { *loss_bad } else { *loss_good };
                let lost = p > 0.0 && rng.random::<f64>() < p;
                let flip = if *bad { *p_bg } else { *p_gb };
                if rng.random::<f64>() < flip {
                    *bad = !*bad;
                }
                lost
            }
        }
    }

    /// Long-run loss probability.
    pub fn mean_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli { p } => p,
            LossModel::Gilbert { p_gb, p_bg, loss_good, loss_bad, .. } => {
                (p_bg * loss_good + p_gb * loss_bad) / (p_gb + p_bg)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Bernoulli, Gilbert};
    use rand::SeedableRng;

    fn run(m: &mut LossModel, n: usize) -> Vec<bool> {
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        (0..n).map(|_| m.lose(&mut rng)).collect()
    }

    #[test]
    fn bernoulli_rate() {
        let mut m = LossModel::new(Some(&LossConfig::Bernoulli(Bernoulli { p: 0.05 })));
        let v = run(&mut m, 200_000);
        let rate = v.iter().filter(|&&x| x).count() as f64 / v.len() as f64;
        assert!((rate - 0.05).abs() < 0.003, "{rate}");
        assert!(!run(&mut LossModel::None, 1000).iter().any(|&x| x));
    }

    #[test]
    fn gilbert_mean_and_bursts() {
        let cfg = LossConfig::Gilbert(Gilbert { p_gb: 0.01, p_bg: 0.25, loss_good: 0.0, loss_bad: 1.0 });
        let mut m = LossModel::new(Some(&cfg));
        let expect = m.mean_loss();
        assert!((expect - 0.01 / 0.26).abs() < 1e-12);
        let v = run(&mut m, 400_000);
        let lost = v.iter().filter(|&&x| x).count();
        let rate = lost as f64 / v.len() as f64;
        assert!((rate - expect).abs() < 0.004, "{rate} vs {expect}");
        // Mean burst length 1/p_bg = 4 packets (a Bernoulli process at the
        // same rate would give ~1.04).
        let bursts = v.windows(2).filter(|w| w[1] && !w[0]).count();
        let mean_burst = lost as f64 / bursts as f64;
        assert!((mean_burst - 4.0).abs() < 0.3, "{mean_burst}");
    }
}
