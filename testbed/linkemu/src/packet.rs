//! Packets: one Ethernet frame plus the metadata the emulator tracks for it.
//!
//! The buffer is laid out exactly as an AF_PACKET socket with `PACKET_VNET_HDR`
//! reads and writes it: a 10-byte `struct virtio_net_hdr`, then the frame.
//! Keeping the header lets a frame whose checksum the sender left to "hardware"
//! (veth advertises checksum offload, so the kernel hands over
//! `CHECKSUM_PARTIAL` packets with only the pseudo-header sum filled in) leave
//! the emulator with the same instruction, instead of arriving with a wrong
//! checksum.  A frame built in a test simply has an all-zero header.
//!
//! What the emulator needs from the frame is parsed once on arrival: the
//! Ethernet addresses, whether it carries IPv4/IPv6 (after an optional 802.1Q
//! tag), where the IP header starts and its ECN field.  [`Packet::mark_ce`]
//! sets CE (ECN = 0b11) on an ECN-capable packet and fixes the IPv4 header
//! checksum (RFC 1624 would allow an incremental update; recomputing 20-60
//! bytes is as cheap and obviously right).  IPv6 has no header checksum and the
//! traffic class is not part of any transport checksum.
//!
//! Fair-queuing disciplines classify packets by their 5-tuple
//! ([`Packet::flow_key`], [`Packet::flow_bucket`]; see [`crate::flow`]).

use crate::flow::{self, FlowKey};
use crate::time::Nanos;

/// Size of `struct virtio_net_hdr` (no `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;
/// `virtio_net_hdr.gso_type` value for "not a GSO packet".
pub const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
/// `virtio_net_hdr.flags`: the checksum at csum_start + csum_offset is still to be done.
pub const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;

pub const ETH_HLEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

pub type Mac = [u8; 6];

/// The two ECN bits of the IP header (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecn {
    NotEct = 0,
    Ect1 = 1,
    Ect0 = 2,
    Ce = 3,
}

impl Ecn {
    fn from_bits(b: u8) -> Ecn {
        match b & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
    /// ECN-capable transport (ECT(0), ECT(1) or already CE).
    pub fn capable(self) -> bool {
        self != Ecn::NotEct
    }
}

/// Which queue of a dual-queue discipline (DualPI2) held the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QClass {
    /// Not classified (single-queue disciplines, or dropped before a qdisc).
    #[default]
    None,
    /// DualPI2's Classic (C) queue.
    Classic,
    /// DualPI2's L4S (L) queue.
    L4s,
}

/// [`Packet::flow`] of a packet no fair-queuing discipline has classified.
pub const NO_FLOW: u32 = u32::MAX;

/// Direction through the emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Clients -> server.
    Up = 0,
    /// Server -> clients.
    Down = 1,
}

impl Dir {
    pub const BOTH: [Dir; 2] = [Dir::Up, Dir::Down];
    pub fn name(self) -> &'static str {
        match self {
            Dir::Up => "uplink",
            Dir::Down => "downlink",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone)]
pub struct Packet {
    /// virtio_net_hdr followed by the Ethernet frame.
    pub buf: Vec<u8>,
    /// Offset of the IP header in the frame (0 if not IP).
    l3: u16,
    ip_version: u8,
    /// Client index (uplink: the sender; downlink: the receiver).
    pub client: u16,
    /// When the packet entered the emulator.
    pub arrival: Nanos,
    /// When the queue currently holding it took it (set by each queue).
    pub enqueued: Nanos,
    /// Time spent in the bottleneck qdisc (set when it leaves the qdisc).
    pub sojourn: Nanos,
    /// Time spent in the WiFi queues, including channel access (0 without WiFi).
    pub wifi_wait: Nanos,
    /// Set when an AQM marked it CE.
    pub marked: bool,
    /// Queue class a dual-queue discipline put it in (per-class statistics).
    pub class: QClass,
    /// Index of its flow in a fair-queuing discipline's per-flow statistics
    /// ([`NO_FLOW`] otherwise).
    pub flow: u32,
}

impl Packet {
    /// A packet from a buffer in AF_PACKET + PACKET_VNET_HDR layout.
    pub fn from_buf(buf: Vec<u8>, arrival: Nanos) -> Packet {
        let mut p = Packet {
            buf,
            l3: 0,
            ip_version: 0,
            client: 0,
            arrival,
            enqueued: arrival,
            sojourn: 0,
            wifi_wait: 0,
            marked: false,
            class: QClass::None,
            flow: NO_FLOW,
        };
        p.parse();
        p
    }

    /// A packet from a bare Ethernet frame (zero virtio_net_hdr), e.g. in tests.
    pub fn from_frame(frame: &[u8], arrival: Nanos) -> Packet {
        let mut buf = vec![0u8; VNET_HDR_LEN + frame.len()];
        buf[VNET_HDR_LEN..].copy_from_slice(frame);
        Packet::from_buf(buf, arrival)
    }

    fn parse(&mut self) {
        let f = self.frame();
        if f.len() < ETH_HLEN {
            return;
        }
        let mut off = 12;
        let mut et = u16::from_be_bytes([f[off], f[off + 1]]);
        while (et == ETHERTYPE_VLAN || et == ETHERTYPE_QINQ) && f.len() >= off + 6 {
            off += 4;
            et = u16::from_be_bytes([f[off], f[off + 1]]);
        }
        let l3 = off + 2;
        match et {
            ETHERTYPE_IPV4 if f.len() >= l3 + 20 && f[l3] >> 4 == 4 => {
                self.l3 = l3 as u16;
                self.ip_version = 4;
            }
            ETHERTYPE_IPV6 if f.len() >= l3 + 40 && f[l3] >> 4 == 6 => {
                self.l3 = l3 as u16;
                self.ip_version = 6;
            }
            _ => {}
        }
    }

    pub fn frame(&self) -> &[u8] {
        &self.buf[VNET_HDR_LEN..]
    }

    pub fn frame_mut(&mut self) -> &mut [u8] {
        &mut self.buf[VNET_HDR_LEN..]
    }

    /// Ethernet frame length (no FCS).
    pub fn frame_len(&self) -> usize {
        self.buf.len() - VNET_HDR_LEN
    }

    /// True for IPv4 and IPv6 packets (the ones the links impair).
    pub fn is_ip(&self) -> bool {
        self.ip_version != 0
    }

    /// Length from the IP header to the end of the frame (0 if not IP): the
    /// size the link rate is charged for.
    pub fn ip_len(&self) -> usize {
        if self.is_ip() {
            self.frame_len() - self.l3 as usize
        } else {
            0
        }
    }

    pub fn dst_mac(&self) -> Mac {
        let f = self.frame();
        let mut m = [0u8; 6];
        if f.len() >= 6 {
            m.copy_from_slice(&f[..6]);
        }
        m
    }

    pub fn src_mac(&self) -> Mac {
        let f = self.frame();
        let mut m = [0u8; 6];
        if f.len() >= 12 {
            m.copy_from_slice(&f[6..12]);
        }
        m
    }

    /// The virtio_net_hdr says this is a GSO super-packet (several MTUs).
    pub fn is_gso(&self) -> bool {
        self.buf.len() >= VNET_HDR_LEN && self.buf[1] != VIRTIO_NET_HDR_GSO_NONE
    }

    /// Prepare the virtio_net_hdr for transmission: keep the pending-checksum
    /// instruction, drop everything the transmit path rejects or ignores.
    pub fn sanitize_vnet_hdr(&mut self) {
        if self.buf.len() < VNET_HDR_LEN {
            return;
        }
        let needs_csum = self.buf[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM;
        self.buf[0] = needs_csum;
        self.buf[1] = VIRTIO_NET_HDR_GSO_NONE;
        self.buf[2..6].fill(0); // hdr_len, gso_size
        if needs_csum == 0 {
            self.buf[6..10].fill(0); // csum_start, csum_offset
        }
    }

    pub fn ecn(&self) -> Ecn {
        let l3 = self.l3 as usize;
        let f = self.frame();
        match self.ip_version {
            4 => Ecn::from_bits(f[l3 + 1]),
            6 => Ecn::from_bits(f[l3 + 1] >> 4),
            _ => Ecn::NotEct,
        }
    }

    /// The DSCP (upper six bits of the IPv4 TOS / IPv6 traffic class); 0 if not IP.
    pub fn dscp(&self) -> u8 {
        let l3 = self.l3 as usize;
        let f = self.frame();
        match self.ip_version {
            4 => f[l3 + 1] >> 2,
            6 => ((f[l3] & 0x0f) << 2) | (f[l3 + 1] >> 6),
            _ => 0,
        }
    }

    /// The flow's 5-tuple; None if the packet is not IP or its IP header is truncated.
    pub fn flow_key(&self) -> Option<FlowKey> {
        if !self.is_ip() {
            return None;
        }
        flow::parse(&self.frame()[self.l3 as usize..])
    }

    /// The TCP header flags ([`flow::tcp_flags`]); None if not TCP.
    pub fn tcp_flags(&self) -> Option<u8> {
        if !self.is_ip() {
            return None;
        }
        flow::tcp_flags(&self.frame()[self.l3 as usize..])
    }

    /// The queue among `buckets` a fair-queuing discipline hashing with
    /// `seed` puts this packet in; 0 for packets without a flow key.
    pub fn flow_bucket(&self, seed: u64, buckets: usize) -> usize {
        self.flow_key().map_or(0, |k| k.bucket(seed, buckets))
    }

    /// Set CE on an ECN-capable packet; false (packet unchanged) otherwise.
    pub fn mark_ce(&mut self) -> bool {
        if !self.ecn().capable() {
            return false;
        }
        let l3 = self.l3 as usize;
        let v = self.ip_version;
        let f = self.frame_mut();
        match v {
            4 => {
                f[l3 + 1] |= 3;
                let ihl = ((f[l3] & 0x0f) as usize * 4).clamp(20, 60).min(f.len() - l3);
                f[l3 + 10] = 0;
                f[l3 + 11] = 0;
                let c = ipv4_checksum(&f[l3..l3 + ihl]);
                f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            }
            6 => f[l3 + 1] |= 0x30,
            _ => return false,
        }
        self.marked = true;
        true
    }
}

/// The Internet checksum (RFC 1071) of an IPv4 header whose checksum field is 0.
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in hdr.chunks(2) {
        let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], 0]) };
        sum += w as u32;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

pub fn is_multicast(mac: &Mac) -> bool {
    mac[0] & 1 == 1
}

/// Frame builders for tests, benchmarks and examples.
pub mod build {
    use super::*;

    /// An Ethernet + IPv4 + UDP frame of `ip_len` bytes from the IP header on.
    pub fn ipv4_udp(dst: Mac, src: Mac, ip_len: usize, ecn: Ecn) -> Vec<u8> {
        assert!(ip_len >= 28);
        let mut f = vec![0u8; ETH_HLEN + ip_len];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let ip = &mut f[ETH_HLEN..];
        ip[0] = 0x45;
        ip[1] = ecn as u8;
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let c = ipv4_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// Like [`ipv4_udp`] with a DSCP value in the TOS byte.
    pub fn ipv4_udp_dscp(dst: Mac, src: Mac, ip_len: usize, ecn: Ecn, dscp: u8) -> Vec<u8> {
        let mut f = ipv4_udp(dst, src, ip_len, ecn);
        let ip = &mut f[ETH_HLEN..];
        ip[1] = (dscp << 2) | ecn as u8;
        ip[10] = 0;
        ip[11] = 0;
        let c = ipv4_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// Like [`ipv4_udp`] (10.0.0.1 -> 10.0.0.2) with UDP ports: one flow per port pair.
    pub fn ipv4_udp_ports(dst: Mac, src: Mac, ip_len: usize, ecn: Ecn, sport: u16, dport: u16) -> Vec<u8> {
        let mut f = ipv4_udp(dst, src, ip_len, ecn);
        let udp = &mut f[ETH_HLEN + 20..];
        udp[..2].copy_from_slice(&sport.to_be_bytes());
        udp[2..4].copy_from_slice(&dport.to_be_bytes());
        udp[4..6].copy_from_slice(&((ip_len - 20) as u16).to_be_bytes());
        f
    }

    /// An Ethernet + IPv4 + TCP frame (10.0.0.1 -> 10.0.0.2) of `ip_len`
    /// bytes with the given ports and TCP `flags` (flow::TCP_SYN, ...).
    pub fn ipv4_tcp(dst: Mac, src: Mac, ip_len: usize, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
        assert!(ip_len >= 40);
        let mut f = ipv4_udp_ports(dst, src, ip_len, Ecn::NotEct, sport, dport);
        let ip = &mut f[ETH_HLEN..];
        ip[9] = crate::flow::PROTO_TCP;
        ip[10] = 0;
        ip[11] = 0;
        let c = ipv4_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let tcp = &mut ip[20..];
        tcp[4..8].fill(0); // no UDP length in a TCP header: sequence number 0
        tcp[12] = 5 << 4; // data offset: 20 bytes
        tcp[13] = flags;
        f
    }

    /// An ARP request frame (broadcast).
    pub fn arp(src: Mac) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        f
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    const A: Mac = [2, 0, 0, 0, 0, 1];
    const B: Mac = [2, 0, 0, 0, 0, 2];

    #[test]
    fn parses_ipv4() {
        let p = Packet::from_frame(&ipv4_udp(B, A, 1000, Ecn::Ect0), 0);
        assert!(p.is_ip());
        assert_eq!(p.ip_len(), 1000);
        assert_eq!(p.frame_len(), 1014);
        assert_eq!(p.ecn(), Ecn::Ect0);
        assert_eq!(p.src_mac(), A);
        assert_eq!(p.dst_mac(), B);
    }

    #[test]
    fn arp_is_not_ip() {
        let p = Packet::from_frame(&arp(A), 0);
        assert!(!p.is_ip());
        assert!(is_multicast(&p.dst_mac()));
    }

    #[test]
    fn mark_ce_fixes_the_ipv4_checksum() {
        let mut p = Packet::from_frame(&ipv4_udp(B, A, 100, Ecn::Ect1), 0);
        assert!(p.mark_ce());
        assert_eq!(p.ecn(), Ecn::Ce);
        // A header with a correct checksum sums to 0xffff, i.e. checksums to 0.
        assert_eq!(ipv4_checksum(&p.frame()[ETH_HLEN..ETH_HLEN + 20]), 0);
        let mut q = Packet::from_frame(&ipv4_udp(B, A, 100, Ecn::NotEct), 0);
        assert!(!q.mark_ce());
        assert_eq!(q.ecn(), Ecn::NotEct);
    }

    #[test]
    fn vlan_tagged_ipv6() {
        let mut f = vec![0u8; ETH_HLEN + 4 + 60];
        f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        f[16..18].copy_from_slice(&0x86ddu16.to_be_bytes());
        f[18] = 0x60;
        f[19] = 0x20; // traffic class low nibble in the top of byte 1: ECT(0)
        let mut p = Packet::from_frame(&f, 0);
        assert!(p.is_ip());
        assert_eq!(p.ip_len(), 60);
        assert_eq!(p.ecn(), Ecn::Ect0);
        assert!(p.mark_ce());
        assert_eq!(p.ecn(), Ecn::Ce);
        f[18] = 0x6b; // traffic class 0xb2: DSCP 44, ECN 2
        f[19] = 0x20;
        assert_eq!(Packet::from_frame(&f, 0).dscp(), 44);
    }

    #[test]
    fn dscp_of_ipv4() {
        let mut p = Packet::from_frame(&ipv4_udp_dscp(B, A, 100, Ecn::Ect0, 46), 0);
        assert_eq!((p.dscp(), p.ecn()), (46, Ecn::Ect0));
        assert!(p.mark_ce());
        assert_eq!((p.dscp(), p.ecn()), (46, Ecn::Ce));
        assert_eq!(ipv4_checksum(&p.frame()[ETH_HLEN..ETH_HLEN + 20]), 0);
    }

    #[test]
    fn vnet_header_sanitised() {
        let mut p = Packet::from_frame(&ipv4_udp(B, A, 100, Ecn::NotEct), 0);
        p.buf[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM | 2;
        p.buf[1] = 1;
        p.buf[6] = 34;
        assert!(p.is_gso());
        p.sanitize_vnet_hdr();
        assert_eq!(&p.buf[..2], &[1, 0]);
        assert_eq!(p.buf[6], 34);
    }
}
