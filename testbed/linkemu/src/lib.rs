//! linkemu: ccswitch's userspace link emulator (see README.md).
//!
//! Module map (one job each):
//! * [`time`]: nanosecond instants, the injectable clock;
//! * [`config`]: the JSON configuration and its validation;
//! * [`packet`]: frames and the metadata tracked per packet (ECN, marks);
//! * [`flow`]: 5-tuple flow keys and their seeded hash (fair queuing);
//! * [`qdisc`]: the queue discipline trait, [`qdisc::pfifo`], [`qdisc::codel`],
//!   [`qdisc::dualpi2`], [`qdisc::fq_codel`], [`qdisc::fq`], [`qdisc::lfq`];
//! * [`loss`]: Bernoulli and Gilbert-Elliott loss;
//! * [`trace`]: Mahimahi delivery traces;
//! * [`link`]: one direction of the bottleneck (loss, qdisc, rate/trace, delay);
//! * [`wifi`]: the shared 802.11 medium of the client side;
//! * [`engine`]: the L2 bridge gluing them together, in virtual time;
//! * [`stats`], [`histogram`], [`output`]: counters, percentiles, CSV/JSON files;
//! * [`io`]: AF_PACKET sockets; [`runtime`]: the real-time loop;
//! * [`control`]: the control socket (an agent reads and sets qdisc state).

pub mod config;
pub mod control;
pub mod engine;
pub mod flow;
pub mod histogram;
pub mod io;
pub mod link;
pub mod loss;
pub mod output;
pub mod packet;
pub mod qdisc;
pub mod runtime;
pub mod stats;
pub mod time;
pub mod trace;
pub mod wifi;
