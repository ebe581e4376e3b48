//! Frame I/O: one AF_PACKET socket per router port.
//!
//! Why AF_PACKET on the veth ends rather than TUN: the emulator is an L2
//! bridge between existing veth ports (the topology gives the router no IP
//! addresses).  A raw packet socket bound to each port sees every frame
//! exactly as the endpoint sent it and can send frames out of a chosen port,
//! so client identity comes for free from the ingress port, ARP keeps working
//! end to end, nothing has to be routed, and no tc/mirred plumbing is needed
//! to steer veth traffic into a TUN device (a TUN is an L3 endpoint: it would
//! need addresses, routes and proxy ARP in the router, and would hide which
//! client a packet came from).  The cost of AF_PACKET (one copy each way, a
//! syscall per batch) is small at the rates the testbed needs (see the
//! fidelity benchmark).
//!
//! Socket set-up, and why:
//! * created with protocol 0 and bound with ETH_P_ALL to one ifindex, so it
//!   never queues frames of another interface;
//! * PACKET_IGNORE_OUTGOING: do not read back the frames we send (or the
//!   router's own), which would otherwise loop;
//! * PACKET_VNET_HDR: frames come with a virtio_net_hdr; veth hands over
//!   CHECKSUM_PARTIAL packets whose L4 checksum is still to be computed, and
//!   the header lets us pass that instruction on when sending instead of
//!   emitting a bad checksum; it also flags GSO super-packets (dropped as
//!   oversize when the endpoints did not disable TSO/GSO);
//! * PACKET_QDISC_BYPASS: our frames skip the router-side qdisc (the
//!   emulator is the queue);
//! * promiscuous membership: frames addressed to other MACs are ours to bridge;
//! * SO_TIMESTAMPNS: the kernel stamps each frame when it enters the router's
//!   backlog; the emulator uses that instant (converted to CLOCK_MONOTONIC) as
//!   the arrival time, so its own wake-up latency does not add delay;
//! * SO_RCVBUFFORCE 32 MiB: bursts wait in the socket, not in the drop counter
//!   (PACKET_STATISTICS reports any drops, in summary.json's io section);
//! * non-blocking; recvmmsg reads up to 64 frames per call with MSG_TRUNC so
//!   an oversize frame is recognised by its real length.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use crate::packet::{Packet, VNET_HDR_LEN};
use crate::time::Nanos;

const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const PACKET_OUTGOING: u8 = 4;

/// Frames read per recvmmsg call.
pub const BATCH: usize = 64;

#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    tp_packets: u32,
    tp_drops: u32,
}

/// Why a port could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// No such interface in this network namespace.
    NoInterface,
    Os(String),
}

pub struct PacketSocket {
    fd: RawFd,
    pub ifname: String,
    pub ifindex: i32,
    drops: u64,
}

fn check(r: libc::c_int, what: &str, ifname: &str) -> Result<(), OpenError> {
    if r < 0 {
        Err(OpenError::Os(format!("{what} on {ifname}: {}", io::Error::last_os_error())))
    } else {
        Ok(())
    }
}

fn setopt<T>(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: &T) -> libc::c_int {
    // SAFETY: val points to a live T of the given size.
    unsafe { libc::setsockopt(fd, level, opt, val as *const T as *const libc::c_void, std::mem::size_of::<T>() as u32) }
}

impl PacketSocket {
    pub fn open(ifname: &str) -> Result<PacketSocket, OpenError> {
        let c = CString::new(ifname).map_err(|_| OpenError::NoInterface)?;
        // SAFETY: plain libc calls with valid arguments.
        let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(OpenError::NoInterface);
        }
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(OpenError::Os(format!(
                "socket(AF_PACKET) for {ifname}: {} (linkemu needs CAP_NET_RAW)",
                io::Error::last_os_error()
            )));
        }
        let s = PacketSocket { fd, ifname: ifname.to_string(), ifindex, drops: 0 };
        let one: libc::c_int = 1;
        check(setopt(fd, libc::SOL_PACKET, PACKET_VNET_HDR, &one), "PACKET_VNET_HDR", ifname)?;
        check(setopt(fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &one), "PACKET_IGNORE_OUTGOING", ifname)?;
        // Best effort: older kernels lack it, it only saves a little work.
        setopt(fd, libc::SOL_PACKET, PACKET_QDISC_BYPASS, &one);
        let rcvbuf: libc::c_int = 32 << 20;
        if setopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf) < 0 {
            setopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf);
        }
        let sndbuf: libc::c_int = 8 << 20;
        if setopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &sndbuf) < 0 {
            setopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &sndbuf);
        }
        check(setopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &one), "SO_TIMESTAMPNS", ifname)?;
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        let r = unsafe {
            libc::bind(
                fd,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        check(r, "bind", ifname)?;
        let mreq = PacketMreq { mr_ifindex: ifindex, mr_type: PACKET_MR_PROMISC, mr_alen: 0, mr_address: [0; 8] };
        check(setopt(fd, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq), "promiscuous mode", ifname)?;
        Ok(s)
    }

    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Send one buffer (virtio_net_hdr + frame).
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        // SAFETY: buf is a valid slice; the socket is bound, no address needed.
        let r = unsafe { libc::send(self.fd, buf.as_ptr() as *const libc::c_void, buf.len(), libc::MSG_DONTWAIT) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Drops the kernel reported for this socket since it was opened (its
    /// receive buffer overflowed).
    pub fn kernel_drops(&mut self) -> u64 {
        let mut st = TpacketStats::default();
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: st and len are valid for writing.
        let r = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                &mut st as *mut TpacketStats as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            self.drops += st.tp_drops as u64; // reading resets the kernel's counters
        }
        self.drops
    }

    /// Read up to [`BATCH`] frames into `rx`; returns how many (0: none ready).
    pub fn recv_batch(&self, rx: &mut RxBatch) -> io::Result<usize> {
        rx.prepare();
        // SAFETY: the mmsghdr array points into rx's buffers, all sized as declared.
        let n = unsafe {
            libc::recvmmsg(
                self.fd,
                rx.hdrs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        rx.count = n as usize;
        Ok(n as usize)
    }
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.fd) };
    }
}

/// Buffers for one recvmmsg call.
pub struct RxBatch {
    slot: usize,
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_ll>,
    ctrl: Vec<u8>,
    hdrs: Vec<libc::mmsghdr>,
    count: usize,
}

const CTRL_LEN: usize = 64;

impl RxBatch {
    /// `max_frame`: the largest frame the emulator forwards; anything longer is
    /// recognised (by its true length) and dropped as oversize.
    pub fn new(max_frame: usize) -> RxBatch {
        let slot = VNET_HDR_LEN + max_frame.max(1600) + 64;
        RxBatch {
            slot,
            bufs: vec![0; slot * BATCH],
            iovs: Vec::with_capacity(BATCH),
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            ctrl: vec![0; CTRL_LEN * BATCH],
            hdrs: Vec::with_capacity(BATCH),
            count: 0,
        }
    }

    fn prepare(&mut self) {
        self.iovs.clear();
        self.hdrs.clear();
        self.count = 0;
        for i in 0..BATCH {
            self.iovs.push(libc::iovec {
                iov_base: self.bufs[i * self.slot..].as_mut_ptr() as *mut libc::c_void,
                iov_len: self.slot,
            });
        }
        for i in 0..BATCH {
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = &mut self.addrs[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            h.msg_iov = &mut self.iovs[i] as *mut libc::iovec;
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i * CTRL_LEN..].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CTRL_LEN as _;
            self.hdrs.push(libc::mmsghdr { msg_hdr: h, msg_len: 0 });
        }
    }

    /// Frames read by the last call: (buffer with virtio_net_hdr + frame,
    /// kernel timestamp in CLOCK_REALTIME ns if present).  Truncated (oversize)
    /// frames are returned with the bytes that fit; outgoing frames are skipped.
    pub fn frames(&self) -> impl Iterator<Item = (Packet, Option<Nanos>)> + '_ {
        (0..self.count).filter_map(move |i| {
            let h = &self.hdrs[i];
            if self.addrs[i].sll_pkttype == PACKET_OUTGOING {
                return None;
            }
            let len = (h.msg_len as usize).min(self.slot);
            if len < VNET_HDR_LEN + 14 {
                return None;
            }
            let ts = timestamp(&h.msg_hdr);
            let mut buf = self.bufs[i * self.slot..i * self.slot + len].to_vec();
            if h.msg_len as usize > self.slot {
                // Make sure a truncated frame is seen as oversize even if the
                // bytes that fit look like a normal frame.
                buf.resize(self.slot, 0);
            }
            Some((Packet::from_buf(buf, 0), ts))
        })
    }
}

fn timestamp(h: &libc::msghdr) -> Option<Nanos> {
    // SAFETY: walking the control buffer the kernel filled, with the libc macros.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}
