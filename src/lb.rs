//! `lb`: load-balancing algorithms (`balance`, `hash-type`) — the tables that say which server
//! a request goes to, built with HAProxy's own algorithms so that a given URI, source or header
//! lands on the same server HAProxy would pick.
//!
//! It owns the lookup tables and the hash functions; it must not know about connections, queues
//! or sockets (that is `backend`). Tables are immutable snapshots rebuilt when weights or server
//! states change, so lookups are lock-free.

use crate::config::{HashFunction, HashMethod, HashType};

/// HAProxy scales user weights by this factor internally (BE_WEIGHT_SCALE); map sizes and
/// consistent-hash node counts depend on it, so we must too.
pub const WEIGHT_SCALE: u32 = 16;
/// SRV_EWGHT_RANGE = SRV_UWGHT_RANGE (256) * BE_WEIGHT_SCALE: spacing of consistent-hash keys.
const EWGHT_RANGE: u32 = 256 * WEIGHT_SCALE;

/// One usable server as seen by the table builder.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// Index into the backend's server list.
    pub idx: usize,
    /// User weight (0..=256); 0 = never picked by weighted algorithms.
    pub weight: u32,
    /// HAProxy's `puid` (the server id), which seeds consistent-hash keys.
    pub puid: u32,
}

/// Lookup tables for one set of servers (active, or backup).
#[derive(Debug, Clone, Default)]
pub struct Tables {
    /// HAProxy's weighted server map (`recalc_server_map`): `map[i]` is a server index; a hash
    /// `h` selects `map[h % map.len()]`, round-robin walks it in order.
    pub map: Vec<u32>,
    /// Consistent-hash ring: (key, server index), sorted by key.
    pub ring: Vec<(u32, u32)>,
    /// Servers in declaration order (for `first`, `leastconn`).
    pub servers: Vec<u32>,
}

impl Tables {
    /// Builds the tables. `cands` must be in declaration order.
    pub fn build(cands: &[Candidate], consistent: bool) -> Tables {
        let servers: Vec<u32> = cands.iter().map(|c| c.idx as u32).collect();
        let weighted: Vec<&Candidate> = cands.iter().filter(|c| c.weight > 0).collect();
        let tot: u32 = weighted.iter().map(|c| c.weight * WEIGHT_SCALE).sum();
        let mut map = Vec::with_capacity(tot as usize);
        if tot > 0 {
            // HAProxy's recalc_server_map: at each slot every server gains its effective weight;
            // the one with the highest (score + tot) / tot wins (first declared on ties) and pays
            // `tot`. This interleaves servers smoothly and respects declaration order.
            let mut score: Vec<i64> = vec![0; weighted.len()];
            for _ in 0..tot {
                let mut best: Option<usize> = None;
                let mut max = 0i64;
                for (i, c) in weighted.iter().enumerate() {
                    if tot == 1 {
                        best = Some(i);
                        break;
                    }
                    score[i] += (c.weight * WEIGHT_SCALE) as i64;
                    let v = (score[i] + tot as i64) / tot as i64;
                    if best.is_none() || v > max {
                        max = v;
                        best = Some(i);
                    }
                }
                let b = best.expect("tot > 0 implies a weighted server");
                map.push(weighted[b].idx as u32);
                score[b] -= tot as i64;
            }
        }
        let mut ring = Vec::new();
        if consistent {
            for c in &weighted {
                for node in 0..c.weight * WEIGHT_SCALE {
                    let key = full_hash(c.puid.wrapping_mul(EWGHT_RANGE).wrapping_add(node));
                    ring.push((key, c.idx as u32));
                }
            }
            ring.sort_unstable();
        }
        Tables { map, ring, servers }
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Server for a hash, with map-based or consistent lookup.
    pub fn by_hash(&self, hash: u32, method: HashMethod) -> Option<u32> {
        match method {
            HashMethod::MapBased => {
                if self.map.is_empty() {
                    return None;
                }
                Some(self.map[(hash as usize) % self.map.len()])
            }
            HashMethod::Consistent => self.ring_lookup(hash),
        }
    }

    /// HAProxy's chash lookup: the nearest node, the previous one winning ties.
    fn ring_lookup(&self, hash: u32) -> Option<u32> {
        if self.ring.is_empty() {
            return None;
        }
        let n = self.ring.len();
        let next = self.ring.partition_point(|&(k, _)| k < hash);
        let next = if next == n { 0 } else { next };
        let prev = if next == 0 { n - 1 } else { next - 1 };
        let dp = hash.wrapping_sub(self.ring[prev].0);
        let dn = self.ring[next].0.wrapping_sub(hash);
        Some(if dp <= dn {
            self.ring[prev].1
        } else {
            self.ring[next].1
        })
    }
}

/// Bob Jenkins' 32-bit integer hash, HAProxy's `full_hash` (avalanche and consistent keys).
pub fn full_hash(mut a: u32) -> u32 {
    a = a.wrapping_add(0x7ed55d16).wrapping_add(a << 12);
    a = (a ^ 0xc761c23c) ^ (a >> 19);
    a = a.wrapping_add(0x165667b1).wrapping_add(a << 5);
    a = a.wrapping_add(0xd3a2646c) ^ (a << 9);
    a = a.wrapping_add(0xfd7046c5).wrapping_add(a << 3);
    a = (a ^ 0xb55a4f09) ^ (a >> 16);
    a
}

pub fn hash_sdbm(key: &[u8]) -> u32 {
    key.iter().fold(0u32, |h, &c| {
        (c as u32)
            .wrapping_add(h << 6)
            .wrapping_add(h << 16)
            .wrapping_sub(h)
    })
}

pub fn hash_djb2(key: &[u8]) -> u32 {
    key.iter().fold(5381u32, |h, &c| {
        (h << 5).wrapping_add(h).wrapping_add(c as u32)
    })
}

/// HAProxy's wt6 hash (two lanes with data-dependent rotations).
pub fn hash_wt6(key: &[u8]) -> u32 {
    let (mut h0, mut h1) = (0xa53c965au32, 0x5ca6953au32);
    let (mut step0, mut step1) = (6u32, 18u32);
    for &c in key {
        let t = c as u32;
        h0 = !(h0 ^ t);
        h1 = !(h1.wrapping_add(t));
        let t = h1.rotate_left(step0);
        h1 = h0.rotate_left(step1);
        h0 = t;
        let t = ((h0 >> 16) ^ h1) & 0xffff;
        step0 = t & 0x1f;
        step1 = t >> 11;
    }
    h0 ^ h1
}

pub fn hash_crc32(key: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in key {
        crc ^= b as u32;
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xedb8_8320 & mask);
        }
    }
    !crc
}

/// `gen_hash` + optional avalanche: the hash HAProxy applies to a URI, parameter or header.
pub fn hash_key(ht: &HashType, key: &[u8]) -> u32 {
    let h = match ht.function {
        HashFunction::Sdbm => hash_sdbm(key),
        HashFunction::Djb2 => hash_djb2(key),
        HashFunction::Wt6 => hash_wt6(key),
        HashFunction::Crc32 => hash_crc32(key),
    };
    if ht.avalanche { full_hash(h) } else { h }
}

/// `balance source`: HAProxy XORs the address as big-endian 32-bit words (no string hash).
pub fn hash_source(ht: &HashType, ip: std::net::IpAddr) -> u32 {
    let h = match ip {
        std::net::IpAddr::V4(v4) => u32::from(v4),
        std::net::IpAddr::V6(v6) => {
            let o = v6.octets();
            o.chunks(4).fold(0u32, |h, w| {
                h ^ u32::from_be_bytes([w[0], w[1], w[2], w[3]])
            })
        }
    };
    if ht.avalanche { full_hash(h) } else { h }
}

/// The part of a URI `balance uri` hashes: HAProxy skips nothing before the path for
/// origin-form, stops at `?` unless `whole`, keeps at most `len` characters and `depth`
/// directories; `path-only` strips scheme and authority from absolute-form URIs.
pub fn uri_hash_input(
    uri: &[u8],
    whole: bool,
    len: Option<usize>,
    depth: Option<usize>,
    path_only: bool,
) -> &[u8] {
    let mut u = uri;
    if path_only && let Some(p) = u.windows(3).position(|w| w == b"://") {
        let rest = &u[p + 3..];
        u = match rest.iter().position(|&c| c == b'/') {
            Some(s) => &rest[s..],
            None => b"/",
        };
    }
    let mut end = u.len();
    if !whole && let Some(q) = u.iter().position(|&c| c == b'?') {
        end = q;
    }
    if let Some(d) = depth {
        let mut slashes = 0;
        for (i, &c) in u[..end].iter().enumerate() {
            if c == b'/' {
                slashes += 1;
                if slashes > d {
                    end = i;
                    break;
                }
            }
        }
    }
    if let Some(l) = len {
        end = end.min(l);
    }
    &u[..end]
}

/// Value of `name` in the query string of `uri` (`balance url_param`).
pub fn url_param<'a>(uri: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let q = uri.iter().position(|&c| c == b'?')?;
    uri[q + 1..].split(|&c| c == b'&').find_map(|kv| {
        let (k, v) = match kv.iter().position(|&c| c == b'=') {
            Some(e) => (&kv[..e], &kv[e + 1..]),
            None => (kv, &b""[..]),
        };
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(weights: &[u32]) -> Vec<Candidate> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Candidate {
                idx: i,
                weight: w,
                puid: i as u32 + 1,
            })
            .collect()
    }

    #[test]
    fn map_respects_weights_and_interleaves() {
        let t = Tables::build(&cands(&[1, 3]), false);
        assert_eq!(t.map.len(), 64);
        let ones = t.map.iter().filter(|&&s| s == 1).count();
        assert_eq!(ones, 48);
        // smooth: never four in a row of the light server
        assert!(!t.map.windows(2).any(|w| w == [0, 0]));
        // first declared wins ties: equal weights alternate starting with server 0
        let e = Tables::build(&cands(&[1, 1]), false);
        assert_eq!(&e.map[..4], &[0, 1, 0, 1]);
    }

    #[test]
    fn zero_weight_is_never_picked() {
        let t = Tables::build(&cands(&[0, 2]), true);
        assert!(t.map.iter().all(|&s| s == 1));
        assert!(t.ring.iter().all(|&(_, s)| s == 1));
        assert_eq!(t.servers, vec![0, 1]);
    }

    #[test]
    fn sdbm_known_values() {
        assert_eq!(hash_sdbm(b""), 0);
        assert_eq!(hash_sdbm(b"a"), 97);
        // h = 'b' + (97<<6) + (97<<16) - 97
        assert_eq!(hash_sdbm(b"ab"), 98 + (97 << 6) + (97 << 16) - 97);
    }

    #[test]
    fn crc32_known_value() {
        assert_eq!(hash_crc32(b"123456789"), 0xcbf43926);
    }

    #[test]
    fn uri_parts() {
        assert_eq!(
            uri_hash_input(b"/a/b/c?x=1", false, None, None, false),
            b"/a/b/c"
        );
        assert_eq!(
            uri_hash_input(b"/a/b/c?x=1", true, None, None, false),
            b"/a/b/c?x=1"
        );
        assert_eq!(
            uri_hash_input(b"/a/b/c", false, None, Some(2), false),
            b"/a/b"
        );
        assert_eq!(
            uri_hash_input(b"/abcdef", false, Some(3), None, false),
            b"/ab"
        );
        assert_eq!(
            uri_hash_input(b"http://h/p?q", false, None, None, true),
            b"/p"
        );
        assert_eq!(url_param(b"/x?a=1&user=bob&c", b"user"), Some(&b"bob"[..]));
        assert_eq!(url_param(b"/x?a=1", b"user"), None);
    }

    #[test]
    fn consistent_ring_is_stable_when_a_server_leaves() {
        let all = Tables::build(&cands(&[1, 1, 1]), true);
        let two = Tables::build(&cands(&[1, 1, 1])[..2], true);
        let mut moved = 0;
        for h in (0..u32::MAX).step_by(1 << 20) {
            let a = all.by_hash(h, HashMethod::Consistent).unwrap();
            let b = two.by_hash(h, HashMethod::Consistent).unwrap();
            if a != 2 && a != b {
                moved += 1;
            }
        }
        assert_eq!(moved, 0, "keys of remaining servers must not move");
    }
}
