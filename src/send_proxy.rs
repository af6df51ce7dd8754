//! `send-proxy` / `send-proxy-v2`: the PROXY protocol header (haproxy's proxy-protocol.txt)
//! that tells a server who the client is, written first on a new server connection; and the
//! reading of one a client sends (`bind ... accept-proxy`).
//!
//! It owns the header's bytes only. Writing them, and keeping such connections private to
//! their client (they carry that client's address), is the connect path's job (`stream`).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;

/// Set once a server with `send-proxy*` exists (configuration or `add server`): from then
/// on accepted connections learn the address they arrived on (a getsockname per
/// connection), which the header carries. Process-wide, written rarely, read per accept.
pub static IN_USE: AtomicBool = AtomicBool::new(false);

/// Which header a server gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `send-proxy`: the text line.
    V1,
    /// `send-proxy-v2`: the binary header.
    V2,
}

/// The version 2 signature.
const SIG: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The header of a connection made on behalf of a client that connected from `src` to
/// `dst`. Without both (a unix-socket client), or for health checks, the header says the
/// connection is the proxy's own: `PROXY UNKNOWN` in version 1, the `LOCAL` command in
/// version 2 (as HAProxy sends them).
pub fn header(v: Version, src: Option<SocketAddr>, dst: Option<SocketAddr>) -> Vec<u8> {
    let (Some(src), Some(dst)) = (src, dst) else {
        return local(v).to_vec();
    };
    // A dual-stack listener sees IPv4 clients as mapped IPv6 addresses: both ends are then
    // given in one family, IPv6 if either is.
    let (s, d) = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (IpAddr::V4(s), IpAddr::V4(d)),
        (s, d) => (IpAddr::V6(v6(s)), IpAddr::V6(v6(d))),
    };
    match v {
        Version::V1 => {
            let fam = if s.is_ipv4() { "TCP4" } else { "TCP6" };
            format!("PROXY {fam} {s} {d} {} {}\r\n", src.port(), dst.port()).into_bytes()
        }
        Version::V2 => {
            let mut h = Vec::with_capacity(16 + 36);
            h.extend_from_slice(&SIG);
            // Version 2, command PROXY.
            h.push(0x21);
            match (s, d) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    // TCP over IPv4: two addresses and two ports.
                    h.push(0x11);
                    h.extend_from_slice(&12u16.to_be_bytes());
                    h.extend_from_slice(&s.octets());
                    h.extend_from_slice(&d.octets());
                }
                (s, d) => {
                    h.push(0x21);
                    h.extend_from_slice(&36u16.to_be_bytes());
                    h.extend_from_slice(&v6(s).octets());
                    h.extend_from_slice(&v6(d).octets());
                }
            }
            h.extend_from_slice(&src.port().to_be_bytes());
            h.extend_from_slice(&dst.port().to_be_bytes());
            h
        }
    }
}

/// The header of a connection of the proxy's own (health checks, unknown client address).
pub fn local(v: Version) -> &'static [u8] {
    match v {
        Version::V1 => b"PROXY UNKNOWN\r\n",
        // Signature, version 2 with command LOCAL, family UNSPEC, no address.
        Version::V2 => b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00",
    }
}

fn v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// What a client's first bytes hold under `bind ... accept-proxy`.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Not enough yet to tell.
    Partial,
    /// Not a PROXY header (or a malformed one): the connection is closed.
    Invalid,
    /// A whole header of `len` bytes; the client and the address it connected to, unless the
    /// header says `LOCAL`/`UNKNOWN` (the connection's own addresses then stand).
    Header {
        len: usize,
        addrs: Option<(SocketAddr, SocketAddr)>,
    },
}

const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Version 1's longest line, CRLF included (proxy-protocol.txt §2.1).
const V1_MAX: usize = 107;

/// Reads a PROXY header, version 1 or 2, at the start of `buf`.
pub fn parse(buf: &[u8]) -> Received {
    let n = buf.len().min(V2_SIG.len());
    if buf[..n] == V2_SIG[..n] {
        return if n < V2_SIG.len() {
            Received::Partial
        } else {
            parse_v2(buf)
        };
    }
    let n = buf.len().min(6);
    if buf[..n] != b"PROXY "[..n] {
        return Received::Invalid;
    }
    let Some(end) = buf.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") else {
        return if buf.len() < V1_MAX {
            Received::Partial
        } else {
            Received::Invalid
        };
    };
    let Ok(line) = std::str::from_utf8(&buf[6..end]) else {
        return Received::Invalid;
    };
    let f: Vec<&str> = line.split(' ').collect();
    let addrs = match f.as_slice() {
        ["UNKNOWN", ..] => None,
        [fam @ ("TCP4" | "TCP6"), src, dst, sp, dp] => {
            let ip = |s: &str| s.parse::<IpAddr>().ok();
            let port = |s: &str| s.parse::<u16>().ok();
            match (ip(src), ip(dst), port(sp), port(dp)) {
                (Some(s), Some(d), Some(sp), Some(dp))
                    if s.is_ipv4() == (*fam == "TCP4") && d.is_ipv4() == s.is_ipv4() =>
                {
                    Some((SocketAddr::new(s, sp), SocketAddr::new(d, dp)))
                }
                _ => return Received::Invalid,
            }
        }
        _ => return Received::Invalid,
    };
    Received::Header {
        len: end + 2,
        addrs,
    }
}

fn parse_v2(buf: &[u8]) -> Received {
    let Some(&[ver_cmd, fam, hi, lo]) = buf.get(12..16) else {
        return Received::Partial;
    };
    let len = 16 + usize::from(u16::from_be_bytes([hi, lo]));
    let Some(body) = buf.get(16..len) else {
        return Received::Partial;
    };
    if ver_cmd >> 4 != 2 {
        return Received::Invalid;
    }
    let addrs = match (ver_cmd & 0xf, fam) {
        // LOCAL: a health check of the sender; the connection's own addresses stand.
        (0, _) => None,
        (1, 0x11) if body.len() >= 12 => {
            let ip = |o: usize| IpAddr::from([body[o], body[o + 1], body[o + 2], body[o + 3]]);
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            Some((
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            ))
        }
        (1, 0x21) if body.len() >= 36 => {
            let ip = |o: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&body[o..o + 16]);
                IpAddr::from(a)
            };
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            Some((
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            ))
        }
        // Other families (UNIX, UDP, unspecified): the connection's own addresses.
        (1, _) => None,
        _ => return Received::Invalid,
    };
    Received::Header { len, addrs }
}

/// The TLVs of a whole version 2 header, in order (none for a version 1 line, and none past
/// a malformed one). HAProxy's `fc_pp_authority` is type 0x02, `fc_pp_unique_id` 0x05.
pub fn tlvs(header: &[u8]) -> Vec<(u8, Box<[u8]>)> {
    let mut out = Vec::new();
    if !header.starts_with(V2_SIG) || header.len() < 16 {
        return out;
    }
    let addr_len = match header[13] >> 4 {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    let mut at = 16 + addr_len;
    while let Some(&[t, hi, lo]) = header.get(at..at + 3) {
        let end = at + 3 + usize::from(u16::from_be_bytes([hi, lo]));
        let Some(v) = header.get(at + 3..end) else {
            break;
        };
        out.push((t, v.into()));
        at = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn tlvs_after_the_addresses() {
        let mut h = header(Version::V2, sa("192.0.2.1:5555"), sa("198.51.100.2:80"));
        let extra: &[u8] = &[
            0x02, 0, 3, b'a', b'.', b'b', 0x05, 0, 2, b'i', b'd', 0x05, 0, 9,
        ];
        let n = u16::from_be_bytes([h[14], h[15]]) + extra.len() as u16;
        h[14..16].copy_from_slice(&n.to_be_bytes());
        h.extend_from_slice(extra);
        let t = tlvs(&h);
        // The last TLV claims more bytes than there are: dropped.
        assert_eq!(t, vec![(0x02, b"a.b"[..].into()), (0x05, b"id"[..].into())]);
        assert!(tlvs(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n").is_empty());
    }

    #[test]
    fn version_1_lines() {
        assert_eq!(
            header(Version::V1, sa("192.0.2.1:5555"), sa("198.51.100.2:80")),
            b"PROXY TCP4 192.0.2.1 198.51.100.2 5555 80\r\n"
        );
        assert_eq!(
            header(Version::V1, sa("[2001:db8::1]:5555"), sa("[::1]:443")),
            b"PROXY TCP6 2001:db8::1 ::1 5555 443\r\n"
        );
        assert_eq!(
            header(Version::V1, sa("192.0.2.1:5555"), sa("[::1]:443")),
            b"PROXY TCP6 ::ffff:192.0.2.1 ::1 5555 443\r\n"
        );
        assert_eq!(
            header(Version::V1, None, sa("[::1]:443")),
            b"PROXY UNKNOWN\r\n"
        );
    }

    #[test]
    fn version_2_headers() {
        let h = header(Version::V2, sa("192.0.2.1:5555"), sa("198.51.100.2:80"));
        assert_eq!(&h[..12], &SIG);
        assert_eq!(&h[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&h[16..24], &[192, 0, 2, 1, 198, 51, 100, 2]);
        assert_eq!(&h[24..], &[0x15, 0xb3, 0, 80]);
        let h = header(Version::V2, sa("[2001:db8::1]:1"), sa("[::1]:2"));
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(&h[48..], &[0, 1, 0, 2]);
        let l = header(Version::V2, None, None);
        assert_eq!(&l[..12], &SIG);
        assert_eq!(&l[12..], &[0x20, 0, 0, 0]);
    }

    #[test]
    fn parse_received_headers() {
        let a: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let b: SocketAddr = "198.51.100.2:443".parse().unwrap();
        for v in [Version::V1, Version::V2] {
            let mut h = header(v, Some(a), Some(b));
            let len = h.len();
            h.extend_from_slice(b"GET / HTTP/1.1\r\n");
            assert_eq!(
                parse(&h),
                Received::Header {
                    len,
                    addrs: Some((a, b))
                },
                "{v:?}"
            );
            for cut in 0..len {
                assert_eq!(parse(&h[..cut]), Received::Partial, "{v:?} cut {cut}");
            }
            let l = local(v);
            assert_eq!(
                parse(l),
                Received::Header {
                    len: l.len(),
                    addrs: None
                }
            );
        }
        let six = header(
            Version::V2,
            Some("[2001:db8::1]:1".parse().unwrap()),
            Some("[2001:db8::2]:2".parse().unwrap()),
        );
        assert!(
            matches!(parse(&six), Received::Header { addrs: Some((s, _)), .. } if s.port() == 1)
        );
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Received::Invalid);
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4 x 1 2\r\n"), Received::Invalid);
        assert_eq!(parse(b"PROXY TCP4 ::1 ::1 1 2\r\n"), Received::Invalid);
        assert_eq!(parse(&[b'P'; 200]), Received::Invalid);
    }
}
