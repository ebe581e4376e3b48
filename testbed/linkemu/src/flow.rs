//! Flow classification: the 5-tuple of an IP packet and the queue it hashes to.
//!
//! Fair-queuing disciplines (fq_codel, fq) give each flow its own queue.  A
//! flow is identified as Linux's flow dissector identifies it on a router
//! (skb_get_hash): source and destination address, IP protocol and, for TCP
//! and UDP, the two ports.  Other protocols (ICMP, ...) are keyed by addresses
//! and protocol only.  Fragments carry no ports (IPv4 with MF set or a
//! fragment offset, IPv6 with a Fragment header): every fragment of a datagram
//! then lands in the same queue, in order.  IPv6 extension headers
//! (hop-by-hop, routing, destination options, fragment, AH; at most 8) are
//! skipped to find the transport protocol.  A packet that is not IP, or whose
//! IP header is truncated, has no key; the disciplines put it in queue 0.  A
//! truncated transport header gives a key without ports.
//!
//! **Bucket.**  Linux fq_codel hashes the tuple with a secret random per-boot
//! key (siphash) and maps the 32-bit hash onto `flows` queues with
//! reciprocal_scale, `(hash * flows) >> 32`, which is what
//! [`FlowKey::bucket`] does too.  The hash here is seeded and deterministic:
//! FNV-1a (64 bit) over the key's canonical bytes (version, addresses,
//! protocol, ports in network order) with the seed mixed into the offset
//! basis, then MurmurHash3's fmix64 finaliser, upper 32 bits.  Given the same
//! seed (derived from the config's `seed`) the same flows share the same
//! queues on every machine and Rust version (std's `DefaultHasher` promises
//! neither), so virtual-time tests and reruns are reproducible; another seed
//! gives other collisions, as another boot does in Linux.  It is not a keyed
//! PRF: nobody in a testbed picks ports to make flows collide.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

/// A flow's identity: the IP 5-tuple (ports 0 for protocols without them and for fragments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// MurmurHash3's 64-bit finaliser (full avalanche).
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn addr_bytes(a: &IpAddr) -> ([u8; 16], usize) {
    let mut b = [0u8; 16];
    match a {
        IpAddr::V4(v4) => {
            b[..4].copy_from_slice(&v4.octets());
            (b, 4)
        }
        IpAddr::V6(v6) => (v6.octets(), 16),
    }
}

impl FlowKey {
    /// The seeded 32-bit hash of the key (see the module comment).
    pub fn hash32(&self, seed: u64) -> u32 {
        let mut h = FNV_OFFSET ^ fmix64(seed);
        let mut feed = |bytes: &[u8]| {
            for &b in bytes {
                h ^= b as u64;
                h = h.wrapping_mul(FNV_PRIME);
            }
        };
        let (src, n) = addr_bytes(&self.src);
        let (dst, _) = addr_bytes(&self.dst);
        feed(&[if n == 4 { 4 } else { 6 }]);
        feed(&src[..n]);
        feed(&dst[..n]);
        feed(&[self.proto]);
        feed(&self.sport.to_be_bytes());
        feed(&self.dport.to_be_bytes());
        (fmix64(h) >> 32) as u32
    }

    /// The queue among `buckets` this flow goes to (Linux's reciprocal_scale).
    pub fn bucket(&self, seed: u64, buckets: usize) -> usize {
        ((self.hash32(seed) as u64 * buckets as u64) >> 32) as usize
    }
}

fn has_ports(proto: u8) -> bool {
    proto == PROTO_TCP || proto == PROTO_UDP
}

fn ports_at(ip: &[u8], off: usize, proto: u8, fragment: bool) -> (u16, u16) {
    if fragment || !has_ports(proto) || ip.len() < off + 4 {
        return (0, 0);
    }
    (u16::from_be_bytes([ip[off], ip[off + 1]]), u16::from_be_bytes([ip[off + 2], ip[off + 3]]))
}

/// The key of an IP packet; `ip` starts at the IP header.  None: not IPv4/IPv6
/// or the IP header is truncated.
pub fn parse(ip: &[u8]) -> Option<FlowKey> {
    transport(ip).map(|t| t.key)
}

/// TCP header flags (the 13th byte: CWR ECE URG ACK PSH RST SYN FIN) of an
/// IP packet; `ip` starts at the IP header.  None: not TCP, a fragment, or
/// the TCP header is truncated.
pub fn tcp_flags(ip: &[u8]) -> Option<u8> {
    let t = transport(ip)?;
    (t.key.proto == PROTO_TCP && !t.fragment).then(|| ip.get(t.offset + 13).copied()).flatten()
}

pub const TCP_SYN: u8 = 0x02;
pub const TCP_ACK: u8 = 0x10;

/// What [`parse`] finds: the key, where the transport header starts, whether
/// the packet is a fragment (no transport header to read).
struct Transport {
    key: FlowKey,
    offset: usize,
    fragment: bool,
}

fn transport(ip: &[u8]) -> Option<Transport> {
    match ip.first()? >> 4 {
        4 => parse_v4(ip),
        6 => parse_v6(ip),
        _ => None,
    }
}

fn parse_v4(ip: &[u8]) -> Option<Transport> {
    let ihl = (ip[0] & 0x0f) as usize * 4;
    if ihl < 20 || ip.len() < ihl {
        return None;
    }
    let proto = ip[9];
    let frag = u16::from_be_bytes([ip[6], ip[7]]);
    let fragment = frag & 0x3fff != 0; // MF or a fragment offset
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let (sport, dport) = ports_at(ip, ihl, proto, fragment);
    Some(Transport { key: FlowKey { src: src.into(), dst: dst.into(), proto, sport, dport }, offset: ihl, fragment })
}

/// Extension headers skipped before giving up on finding the transport.
const MAX_EXT_HEADERS: usize = 8;

fn parse_v6(ip: &[u8]) -> Option<Transport> {
    if ip.len() < 40 {
        return None;
    }
    let addr = |at: usize| {
        let mut o = [0u8; 16];
        o.copy_from_slice(&ip[at..at + 16]);
        Ipv6Addr::from(o)
    };
    let (src, dst) = (addr(8), addr(24));
    let mut next = ip[6];
    let mut off = 40;
    let mut fragment = false;
    for _ in 0..MAX_EXT_HEADERS {
        let len = match next {
            0 | 43 | 60 if ip.len() >= off + 2 => (ip[off + 1] as usize + 1) * 8, // hop-by-hop, routing, dest opts
            44 if ip.len() >= off + 8 => {
                fragment = true;
                8
            }
            51 if ip.len() >= off + 2 => (ip[off + 1] as usize + 2) * 4, // AH
            0 | 43 | 60 | 44 | 51 => {
                fragment = true; // truncated chain: no ports
                break;
            }
            _ => break,
        };
        next = ip[off];
        off += len;
    }
    let (sport, dport) = ports_at(ip, off, next, fragment);
    let key = FlowKey { src: src.into(), dst: dst.into(), proto: next, sport, dport };
    Some(Transport { key, offset: off, fragment })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::build::{ipv4_udp, ipv4_udp_ports};
    use crate::packet::{Ecn, Packet, ETH_HLEN};

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    #[test]
    fn udp_and_tcp_over_ipv4() {
        let p = Packet::from_frame(&ipv4_udp_ports(B, A, 200, Ecn::NotEct, 61001, 5201), 0);
        let k = p.flow_key().unwrap();
        assert_eq!(k, FlowKey { src: v4([10, 0, 0, 1]), dst: v4([10, 0, 0, 2]), proto: 17, sport: 61001, dport: 5201 });
        let mut f = ipv4_udp_ports(B, A, 200, Ecn::NotEct, 1, 2);
        f[ETH_HLEN + 9] = PROTO_TCP;
        assert_eq!(Packet::from_frame(&f, 0).flow_key().unwrap().proto, PROTO_TCP);
        assert_eq!(Packet::from_frame(&f, 0).flow_key().unwrap().sport, 1);
    }

    #[test]
    fn tcp_flags_of_tcp_only_and_not_of_fragments_or_truncated_headers() {
        use crate::packet::build::ipv4_tcp;
        let syn = Packet::from_frame(&ipv4_tcp(B, A, 60, 40000, 5201, TCP_SYN), 0);
        assert_eq!(syn.tcp_flags(), Some(TCP_SYN));
        assert_eq!(syn.flow_key().unwrap().proto, PROTO_TCP);
        let ack = Packet::from_frame(&ipv4_tcp(B, A, 1500, 40000, 5201, TCP_ACK), 0);
        assert_eq!(ack.tcp_flags(), Some(TCP_ACK));
        assert_eq!(Packet::from_frame(&ipv4_udp_ports(B, A, 200, Ecn::NotEct, 1, 2), 0).tcp_flags(), None);
        let mut f = ipv4_tcp(B, A, 60, 1, 2, TCP_SYN);
        f[ETH_HLEN + 6] = 0x20; // MF: a fragment has no TCP header to read
        assert_eq!(Packet::from_frame(&f, 0).tcp_flags(), None);
        // Only 12 bytes of TCP header: the ports are there, the flags are not.
        let ip = &ipv4_tcp(B, A, 60, 1, 2, TCP_SYN)[ETH_HLEN..ETH_HLEN + 32];
        assert_eq!(parse(ip).unwrap().sport, 1);
        assert_eq!(tcp_flags(ip), None);
        // IPv6: flags found behind an extension header.
        let mut tcp = vec![0x13, 0x88, 0x00, 0x50, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, TCP_SYN | TCP_ACK];
        tcp.extend_from_slice(&[0; 6]);
        assert_eq!(tcp_flags(&ipv6(0, &[PROTO_TCP, 0, 0, 0, 0, 0, 0, 0], &tcp)), Some(TCP_SYN | TCP_ACK));
    }

    #[test]
    fn icmp_and_fragments_have_no_ports() {
        let mut f = ipv4_udp_ports(B, A, 200, Ecn::NotEct, 7, 9);
        f[ETH_HLEN + 9] = 1; // ICMP
        assert_eq!(Packet::from_frame(&f, 0).flow_key().unwrap().sport, 0);
        let mut f = ipv4_udp_ports(B, A, 200, Ecn::NotEct, 7, 9);
        f[ETH_HLEN + 6] = 0x20; // MF
        let k = Packet::from_frame(&f, 0).flow_key().unwrap();
        assert_eq!((k.proto, k.sport, k.dport), (PROTO_UDP, 0, 0));
        let mut f = ipv4_udp_ports(B, A, 200, Ecn::NotEct, 7, 9);
        f[ETH_HLEN + 6] = 0x40; // DF only: not a fragment
        assert_eq!(Packet::from_frame(&f, 0).flow_key().unwrap().sport, 7);
    }

    #[test]
    fn unparseable_packets_have_no_key() {
        assert!(Packet::from_frame(&crate::packet::build::arp(A), 0).flow_key().is_none());
        let mut f = ipv4_udp(B, A, 40, Ecn::NotEct);
        f[ETH_HLEN] = 0x4f; // IHL 60 bytes > 40 bytes of packet
        assert!(Packet::from_frame(&f, 0).flow_key().is_none());
        assert_eq!(Packet::from_frame(&f, 0).flow_bucket(1, 1024), 0);
    }

    fn ipv6(next: u8, ext: &[u8], l4: &[u8]) -> Vec<u8> {
        let mut ip = vec![0u8; 40];
        ip[0] = 0x60;
        ip[6] = next;
        ip[8 + 15] = 1; // src ::1
        ip[24] = 0xfe; // dst fe00::2
        ip[24 + 15] = 2;
        ip.extend_from_slice(ext);
        ip.extend_from_slice(l4);
        ip
    }

    #[test]
    fn ipv6_skips_extension_headers() {
        let ports = [0x13, 0x88, 0x00, 0x50, 0, 0, 0, 0]; // 5000 -> 80
        let k = parse(&ipv6(PROTO_TCP, &[], &ports)).unwrap();
        assert_eq!((k.proto, k.sport, k.dport), (PROTO_TCP, 5000, 80));
        assert_eq!(k.src, "::1".parse::<IpAddr>().unwrap());
        // Hop-by-hop (8 bytes) then destination options (16 bytes) then UDP.
        let mut ext = vec![60, 0, 0, 0, 0, 0, 0, 0];
        ext.extend_from_slice(&[PROTO_UDP, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let k = parse(&ipv6(0, &ext, &ports)).unwrap();
        assert_eq!((k.proto, k.sport, k.dport), (PROTO_UDP, 5000, 80));
        // A fragment header: protocol kept, ports not.
        let k = parse(&ipv6(44, &[PROTO_UDP, 0, 0, 1, 0, 0, 0, 1], &ports)).unwrap();
        assert_eq!((k.proto, k.sport, k.dport), (PROTO_UDP, 0, 0));
        assert!(parse(&[0x60; 39]).is_none());
    }

    #[test]
    fn hash_is_seeded_deterministic_and_spreads() {
        let key = |sport: u16| FlowKey { src: v4([10, 0, 0, 1]), dst: v4([10, 0, 0, 2]), proto: 6, sport, dport: 5201 };
        // Pinned values: a change of the hash changes which flows share queues
        // in every recorded experiment; it must be deliberate.
        assert_eq!(key(61001).hash32(1), key(61001).hash32(1));
        assert_ne!(key(61001).hash32(1), key(61001).hash32(2));
        assert_eq!([key(61001).bucket(1, 1024), key(61002).bucket(1, 1024)], PINNED_BUCKETS);
        // 64k flows over 1024 queues: every queue used, none with more than twice its share.
        let mut n = vec![0u32; 1024];
        for p in 0..65_536u32 {
            n[key(p as u16).bucket(7, 1024)] += 1;
        }
        assert!(n.iter().all(|&c| c > 0 && c < 128), "min {} max {}", n.iter().min().unwrap(), n.iter().max().unwrap());
        assert!(key(1).bucket(3, 1) == 0 && key(1).bucket(3, 65_536) < 65_536);
    }

    const PINNED_BUCKETS: [usize; 2] = [133, 998];
}
