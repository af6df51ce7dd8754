//! `resolvers` sections: servers named by a host name (`server s1 app.example.com:80
//! resolvers dns`) follow that name's DNS records at run time, as HAProxy's do, and servers
//! named by an SRV record name (`server-template s 1-5 _http._tcp.example.com resolvers dns`)
//! are slots that the name's SRV records fill.
//!
//! Owns the section's settings, the DNS messages (one A, AAAA or SRV question with an EDNS0
//! size; the answers' addresses, SRV records and their additional addresses: a few dozen lines
//! of wire format, so no DNS library), and the resolution tasks on the first worker thread.
//! One task per resolved host name: every `timeout resolve` it asks every nameserver, takes the
//! first valid answer, retries and falls back to the other address family as HAProxy does, and
//! applies the outcome to the servers: a new address (idle connections to the old one are
//! dropped), maintenance when no valid answer came within the `hold` period of the error, and
//! back when the name resolves again. One task per SRV record name and backend: each record
//! of an answer holds one server slot (matched again by target and port on the next answers),
//! which takes the record's port, weight and target, and the target's address from the
//! answer's additional section or else from its own A/AAAA resolution; slots without a record
//! wait in maintenance, and a record missing from the answers frees its slot after `hold
//! obsolete`.
//! It must not block a worker (all I/O is async) and does not touch requests.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::config::IpNet;
use crate::worker::Worker;

// ---------------------------------------------------------------------------------------------
// Types.

/// A `resolvers NAME` section.
#[derive(Debug, Clone)]
pub struct Resolvers {
    pub name: String,
    pub origin: crate::config::Origin,
    pub nameservers: Vec<Nameserver>,
    /// `resolve_retries` (default 3): queries sent for one resolution before giving up.
    pub resolve_retries: u32,
    /// `timeout resolve` (default 1 s): between two resolutions of a name.
    pub timeout_resolve: Duration,
    /// `timeout retry` (default 1 s): how long to wait for answers to one query.
    pub timeout_retry: Duration,
    /// `hold nx|refused|timeout|other` (default 30 s): how long after the last valid answer
    /// an error leaves the servers alone.
    pub hold_nx: Duration,
    pub hold_refused: Duration,
    pub hold_timeout: Duration,
    pub hold_other: Duration,
    /// `hold valid` (default 10 s): accepted; it concerns `do-resolve`, which sluice does not
    /// implement (each resolution here is a fresh query).
    pub hold_valid: Duration,
    /// `hold obsolete` (default 0): how long an SRV record missing from the answers keeps its
    /// server slot (HAProxy's `resolv_check_response` purge).
    pub hold_obsolete: Duration,
    /// `accepted_payload_size` (default 512): the EDNS0 size announced.
    pub accepted_payload_size: u16,
    /// The counters of `show resolvers`, per nameserver (shared with the CLI).
    pub stats: std::sync::Arc<Vec<NsStats>>,
}

#[derive(Debug, Clone)]
pub struct Nameserver {
    pub name: String,
    pub addr: SocketAddr,
}

/// `show resolvers` counters of one nameserver.
#[derive(Debug, Default)]
pub struct NsStats {
    pub sent: AtomicU64,
    pub snd_error: AtomicU64,
    pub valid: AtomicU64,
    pub update: AtomicU64,
    pub any_err: AtomicU64,
    pub nx: AtomicU64,
    pub timeout: AtomicU64,
    pub refused: AtomicU64,
    pub other: AtomicU64,
    pub invalid: AtomicU64,
    pub truncated: AtomicU64,
}

/// What a server line asks of its resolvers section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerResolve {
    /// Index into `Config::resolvers` (set when the configuration is complete).
    pub section: usize,
    /// The section's name as written (resolved to `section` at the end of parsing).
    pub section_name: String,
    pub hostname: String,
    /// `resolve-prefer ipv4|ipv6` (HAProxy's default: ipv6).
    pub prefer_v4: bool,
    /// `resolve-net`: addresses in these networks are chosen first.
    pub nets: Vec<IpNet>,
    /// `resolve-opts allow-dup-ip`: servers of a backend resolving the same name may share
    /// an address (by default each takes a different one while there are enough).
    pub allow_dup_ip: bool,
    /// `hostname` is an SRV record name (HAProxy's rule: it starts with `_`).
    pub srv_record: bool,
    /// `resolve-opts ignore-weight`: an SRV record's weight does not change the server's.
    pub ignore_weight: bool,
}

/// Why a resolution failed (which `hold` applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Nx,
    Refused,
    Timeout,
    Other,
}

/// One nameserver's answer to a query (`T`: the addresses, or the SRV records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T = Vec<IpAddr>> {
    /// NOERROR with at least one record of the type asked.
    Records(T),
    Failed(Failure),
    /// Not an answer to this query (wrong id, not a response, malformed): ignored.
    Invalid,
    /// The truncated bit: the answer did not fit (counted, treated as `other`).
    Truncated,
}

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_SRV: u16 = 33;
const TYPE_OPT: u16 = 41;

/// One SRV record of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvRecord {
    /// The target host name, lower case, without the final dot.
    pub target: String,
    pub port: u16,
    pub weight: u16,
    /// Read, not used: HAProxy 2.6 gives priorities no meaning either.
    pub priority: u16,
    /// The target's address from the answer's additional section, if it had one.
    pub addr: Option<IpAddr>,
}

// ---------------------------------------------------------------------------------------------
// Configuration.

impl Resolvers {
    pub fn new(name: &str, origin: crate::config::Origin) -> Resolvers {
        Resolvers {
            name: name.to_string(),
            origin,
            nameservers: Vec::new(),
            resolve_retries: 3,
            timeout_resolve: Duration::from_secs(1),
            timeout_retry: Duration::from_secs(1),
            hold_nx: Duration::from_secs(30),
            hold_refused: Duration::from_secs(30),
            hold_timeout: Duration::from_secs(30),
            hold_other: Duration::from_secs(30),
            hold_valid: Duration::from_secs(10),
            hold_obsolete: Duration::ZERO,
            accepted_payload_size: 512,
            stats: Default::default(),
        }
    }

    /// One line of the section.
    pub fn keyword(&mut self, w: &[String]) -> Result<(), String> {
        let kw = w[0].as_str();
        let arg = |i: usize, what: &str| -> Result<&str, String> {
            w.get(i)
                .map(String::as_str)
                .ok_or_else(|| format!("'{kw}' expects {what}"))
        };
        let no_more = |n: usize| -> Result<(), String> {
            match w.get(n) {
                Some(x) => Err(format!("'{kw}': unexpected argument '{x}'")),
                None => Ok(()),
            }
        };
        let time = |s: &str| crate::config::parser::parse_time_pub(s);
        match kw {
            "nameserver" => {
                let name = arg(1, "a name and an address")?;
                let addr = arg(2, "an address after the name")?;
                no_more(3)?;
                if self.nameservers.iter().any(|n| n.name == name) {
                    return Err(format!("'nameserver': '{name}' is already defined"));
                }
                let addr = nameserver_addr(addr)?;
                self.nameservers.push(Nameserver {
                    name: name.to_string(),
                    addr,
                });
            }
            "parse-resolv-conf" => {
                no_more(1)?;
                let text = std::fs::read_to_string("/etc/resolv.conf").map_err(|e| {
                    format!("'parse-resolv-conf': cannot read /etc/resolv.conf: {e}")
                })?;
                for (i, line) in text.lines().enumerate() {
                    let mut words = line.split_whitespace();
                    if words.next() != Some("nameserver") {
                        continue;
                    }
                    let Some(a) = words.next() else { continue };
                    let Ok(ip) = a.parse::<IpAddr>() else {
                        continue;
                    };
                    self.nameservers.push(Nameserver {
                        name: format!("resolv.conf:{}", i + 1),
                        addr: SocketAddr::new(ip, 53),
                    });
                }
            }
            "accepted_payload_size" => {
                let n: u32 = arg(1, "a size in bytes")?
                    .parse()
                    .map_err(|_| format!("'{kw}' expects a number of bytes"))?;
                no_more(2)?;
                if !(512..=65535).contains(&n) {
                    return Err(format!("'{kw}' must be between 512 and 65535 (got {n})"));
                }
                self.accepted_payload_size = n as u16;
            }
            "resolve_retries" => {
                let n: u32 = arg(1, "a number")?
                    .parse()
                    .map_err(|_| format!("'{kw}' expects a number"))?;
                no_more(2)?;
                if n == 0 {
                    return Err(format!("'{kw}' must be at least 1"));
                }
                self.resolve_retries = n;
            }
            "timeout" => {
                let ev = arg(1, "'resolve' or 'retry' and a time")?;
                let t = time(arg(2, "a time")?)?;
                no_more(3)?;
                match ev {
                    "resolve" => self.timeout_resolve = t,
                    "retry" => self.timeout_retry = t,
                    o => {
                        return Err(format!(
                            "'timeout': unknown event '{o}' (expected 'resolve' or 'retry')"
                        ));
                    }
                }
                if t.is_zero() {
                    return Err(format!("'timeout {ev}' must not be 0"));
                }
            }
            "hold" => {
                let st = arg(1, "a status and a time")?;
                let t = time(arg(2, "a time")?)?;
                no_more(3)?;
                match st {
                    "nx" => self.hold_nx = t,
                    "refused" => self.hold_refused = t,
                    "timeout" => self.hold_timeout = t,
                    "other" => self.hold_other = t,
                    "valid" => self.hold_valid = t,
                    "obsolete" => self.hold_obsolete = t,
                    o => {
                        return Err(format!(
                            "'hold': unknown status '{o}' (expected nx, refused, timeout, \
                             other, valid or obsolete)"
                        ));
                    }
                }
            }
            o => {
                const KNOWN: &[&str] = &[
                    "nameserver",
                    "parse-resolv-conf",
                    "accepted_payload_size",
                    "resolve_retries",
                    "timeout",
                    "hold",
                ];
                return Err(format!(
                    "unknown keyword '{o}' in resolvers section{}",
                    crate::config::did_you_mean(o, KNOWN.iter().copied())
                ));
            }
        }
        Ok(())
    }

    /// Called when the section ends: it needs a nameserver.
    pub fn finish(&mut self) -> Result<(), String> {
        if self.nameservers.is_empty() {
            return Err(format!(
                "resolvers '{}': no nameserver (add 'nameserver NAME ADDR' or \
                 'parse-resolv-conf')",
                self.name
            ));
        }
        self.stats = std::sync::Arc::new(
            (0..self.nameservers.len())
                .map(|_| NsStats::default())
                .collect(),
        );
        Ok(())
    }

    fn hold(&self, f: Failure) -> Duration {
        match f {
            Failure::Nx => self.hold_nx,
            Failure::Refused => self.hold_refused,
            Failure::Timeout => self.hold_timeout,
            Failure::Other => self.hold_other,
        }
    }
}

/// `ADDR[:PORT]` (port 53 by default), optionally `udp@`/`udp4@`/`udp6@`/`ipv4@`/`ipv6@`.
fn nameserver_addr(a: &str) -> Result<SocketAddr, String> {
    let mut s = a;
    for p in ["udp@", "udp4@", "udp6@", "ipv4@", "ipv6@"] {
        if let Some(r) = s.strip_prefix(p) {
            s = r;
            break;
        }
    }
    if s.starts_with("tcp@") || s.starts_with("tcp4@") || s.starts_with("tcp6@") {
        return Err(format!(
            "nameserver address '{a}': DNS over TCP is not supported by sluice (use UDP)"
        ));
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Ok(ip) = s.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    if let Some((h, p)) = s.rsplit_once(':')
        && let (Ok(ip), Ok(p)) = (h.parse::<IpAddr>(), p.parse::<u16>())
    {
        return Ok(SocketAddr::new(ip, p));
    }
    Err(format!(
        "invalid nameserver address '{a}' (expected an IP address, optionally with ':PORT')"
    ))
}

// ---------------------------------------------------------------------------------------------
// DNS messages.

/// A query for `name`'s A (`v6: false`) or AAAA records, recursion desired, with an EDNS0
/// OPT record announcing `payload` bytes.
pub fn query(id: u16, name: &str, v6: bool, payload: u16) -> Result<Vec<u8>, String> {
    query_type(id, name, if v6 { TYPE_AAAA } else { TYPE_A }, payload)
}

/// A query for `name`'s records of type `qtype` (A, AAAA or SRV), as [`query`].
fn query_type(id: u16, name: &str, qtype: u16, payload: u16) -> Result<Vec<u8>, String> {
    let mut q = Vec::with_capacity(32 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 1]); // 1 question, 1 additional
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("invalid host name '{name}'"));
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes()); // IN
    // OPT: root name, type 41, class = payload size, ttl 0, no data.
    q.push(0);
    q.extend_from_slice(&TYPE_OPT.to_be_bytes());
    q.extend_from_slice(&payload.to_be_bytes());
    q.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    if q.len() > 512 {
        return Err(format!("host name '{name}' is too long"));
    }
    Ok(q)
}

/// Skips a (possibly compressed) name at `at`; the offset after it.
fn skip_name(m: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *m.get(at)? as usize;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => {
                m.get(at + 1)?;
                return Some(at + 2);
            }
            l if l & 0xc0 != 0 => return None,
            l => at += 1 + l,
        }
    }
}

/// Reads the (possibly compressed) name at `at`: the name in lower case without the final
/// dot ("" for the root), and the offset after it where it is written. `None` when it is
/// malformed: cut short, a reserved label type, a label that is not printable ASCII or holds
/// a dot, longer than 255 bytes, or a compression pointer that does not point backwards.
/// Pointers are followed at most 64 times, so a cycle of pointers ends too (as do cycles
/// through labels, which hit the length limit first).
fn read_name(m: &[u8], at: usize) -> Option<(String, usize)> {
    let mut name = String::new();
    let mut pos = at;
    let mut after = None;
    let mut jumps = 0;
    loop {
        let len = usize::from(*m.get(pos)?);
        match len & 0xc0 {
            0xc0 => {
                let to = ((len & 0x3f) << 8) | usize::from(*m.get(pos + 1)?);
                after.get_or_insert(pos + 2);
                jumps += 1;
                if to >= pos || jumps > 64 {
                    return None;
                }
                pos = to;
            }
            0 if len == 0 => return Some((name, after.unwrap_or(pos + 1))),
            0 => {
                let label = m.get(pos + 1..pos + 1 + len)?;
                if label.iter().any(|&b| !b.is_ascii_graphic() || b == b'.') {
                    return None;
                }
                if !name.is_empty() {
                    name.push('.');
                }
                name.extend(label.iter().map(|b| char::from(b.to_ascii_lowercase())));
                if name.len() > 255 {
                    return None;
                }
                pos += 1 + len;
            }
            // 0x40 and 0x80: extended and reserved label types.
            _ => return None,
        }
    }
}

/// Skips one resource record at `at` (name, fixed fields, data); the offset after it.
fn skip_record(m: &[u8], at: usize) -> Option<usize> {
    let at = skip_name(m, at)?;
    let len = usize::from(u16_at(m, at + 8)?);
    m.get(at + 10..at + 10 + len)?;
    Some(at + 10 + len)
}

fn u16_at(m: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*m.get(at)?, *m.get(at + 1)?]))
}

/// Reads a response to query `id` asking for A (`v6: false`) or AAAA records.
pub fn parse(m: &[u8], id: u16, v6: bool) -> Answer {
    parse_inner(m, id, v6).unwrap_or(Answer::Invalid)
}

fn parse_inner(m: &[u8], id: u16, v6: bool) -> Option<Answer> {
    if m.len() < 12 || u16_at(m, 0)? != id {
        return Some(Answer::Invalid);
    }
    let flags = u16_at(m, 2)?;
    if flags & 0x8000 == 0 {
        return Some(Answer::Invalid);
    }
    if flags & 0x0200 != 0 {
        return Some(Answer::Truncated);
    }
    match flags & 0x000f {
        0 => {}
        3 => return Some(Answer::Failed(Failure::Nx)),
        5 => return Some(Answer::Failed(Failure::Refused)),
        _ => return Some(Answer::Failed(Failure::Other)),
    }
    let (qd, an) = (u16_at(m, 4)?, u16_at(m, 6)?);
    let mut at = 12;
    for _ in 0..qd {
        at = skip_name(m, at)? + 4;
    }
    let want = if v6 { TYPE_AAAA } else { TYPE_A };
    let mut addrs = Vec::new();
    for _ in 0..an {
        at = skip_name(m, at)?;
        let ty = u16_at(m, at)?;
        let len = u16_at(m, at + 8)? as usize;
        let data = m.get(at + 10..at + 10 + len)?;
        at += 10 + len;
        // CNAME records lead to the addresses that follow them in the same answer.
        if ty != want {
            continue;
        }
        match data.len() {
            4 => addrs.push(IpAddr::from(<[u8; 4]>::try_from(data).ok()?)),
            16 => addrs.push(IpAddr::from(<[u8; 16]>::try_from(data).ok()?)),
            _ => return Some(Answer::Invalid),
        }
    }
    Some(if addrs.is_empty() {
        // NOERROR without a record of the type asked: the other family may have some.
        Answer::Failed(Failure::Other)
    } else {
        Answer::Records(addrs)
    })
}

/// Reads a response to query `id` asking for `name`'s SRV records: each record (target and
/// port once, as HAProxy keeps them) with the address the additional section gives for its
/// target. As HAProxy, the truncated bit is no error for SRV answers (the records that came
/// are used), and the answer records' owner names are not compared with the question's.
pub fn parse_srv(m: &[u8], id: u16, name: &str) -> Answer<Vec<SrvRecord>> {
    parse_srv_inner(m, id, name).unwrap_or(Answer::Invalid)
}

fn parse_srv_inner(m: &[u8], id: u16, name: &str) -> Option<Answer<Vec<SrvRecord>>> {
    if m.len() < 12 || u16_at(m, 0)? != id {
        return Some(Answer::Invalid);
    }
    let flags = u16_at(m, 2)?;
    if flags & 0x8000 == 0 {
        return Some(Answer::Invalid);
    }
    match flags & 0x000f {
        0 => {}
        3 => return Some(Answer::Failed(Failure::Nx)),
        5 => return Some(Answer::Failed(Failure::Refused)),
        _ => return Some(Answer::Failed(Failure::Other)),
    }
    let (qd, an, ns, ar) = (u16_at(m, 4)?, u16_at(m, 6)?, u16_at(m, 8)?, u16_at(m, 10)?);
    // One question, the one asked: anything else answers another query.
    if qd != 1 {
        return Some(Answer::Invalid);
    }
    let (qname, mut at) = read_name(m, 12)?;
    if u16_at(m, at)? != TYPE_SRV || !qname.eq_ignore_ascii_case(name.trim_end_matches('.')) {
        return Some(Answer::Invalid);
    }
    at += 4;
    let mut recs: Vec<SrvRecord> = Vec::new();
    for _ in 0..an {
        at = skip_name(m, at)?;
        let ty = u16_at(m, at)?;
        let len = usize::from(u16_at(m, at + 8)?);
        let start = at + 10;
        let data = m.get(start..start + len)?;
        at = start + len;
        if ty != TYPE_SRV {
            continue;
        }
        // Priority, weight, port, then the target (at least its root label).
        if len <= 6 {
            return None;
        }
        let (priority, weight, port) = (u16_at(data, 0)?, u16_at(data, 2)?, u16_at(data, 4)?);
        let (target, end) = read_name(m, start + 6)?;
        if end > at {
            return None;
        }
        // "." says the service is not available at this name: no server for it.
        if target.is_empty() {
            continue;
        }
        match recs
            .iter_mut()
            .find(|r| r.target == target && r.port == port)
        {
            Some(r) => r.weight = weight,
            None => recs.push(SrvRecord {
                target,
                port,
                weight,
                priority,
                addr: None,
            }),
        }
    }
    if recs.is_empty() {
        return Some(Answer::Failed(Failure::Other));
    }
    for _ in 0..ns {
        at = skip_record(m, at)?;
    }
    // Additional A/AAAA records: each gives its address to the first record of its target
    // that has none yet (as HAProxy pairs them). Other types (the OPT record) are skipped.
    for _ in 0..ar {
        let (owner, next) = read_name(m, at)?;
        let ty = u16_at(m, next)?;
        let len = usize::from(u16_at(m, next + 8)?);
        let data = m.get(next + 10..next + 10 + len)?;
        at = next + 10 + len;
        let ip = match (ty, data.len()) {
            (TYPE_A, 4) => IpAddr::from(<[u8; 4]>::try_from(data).ok()?),
            (TYPE_AAAA, 16) => IpAddr::from(<[u8; 16]>::try_from(data).ok()?),
            (TYPE_A | TYPE_AAAA, _) => return None,
            _ => continue,
        };
        if let Some(r) = recs
            .iter_mut()
            .find(|r| r.addr.is_none() && r.target == owner)
        {
            r.addr = Some(ip);
        }
    }
    Some(Answer::Records(recs))
}

/// HAProxy 2.6's mapping of an SRV weight (0..=65535) to a server weight (0..=256): rounded
/// up, so that 0 stays 0 (`(weight + 255) / 256` in `resolv_check_response`; 1.8's `dns.c`
/// had `weight / 256 + 1`, which made 0 a 1).
pub fn srv_weight(w: u16) -> u32 {
    u32::from(w).div_ceil(256)
}

// ---------------------------------------------------------------------------------------------
// Resolving.

/// How a response to query `id` for a name is read.
type Parser<T> = fn(&[u8], u16, &str) -> Answer<T>;

/// Asks every nameserver once for `name`'s records of type `qtype`; the first valid answer,
/// or the last error (a timeout when no nameserver answered).
async fn ask<T: 'static>(
    r: &Rc<Resolvers>,
    name: &str,
    qtype: u16,
    parse: Parser<T>,
) -> Result<T, Failure> {
    let id: u16 = rand_id();
    let Ok(q) = query_type(id, name, qtype, r.accepted_payload_size) else {
        return Err(Failure::Other);
    };
    let q = Rc::new(q);
    let name: Rc<str> = name.into();
    let deadline = tokio::time::Instant::now() + r.timeout_retry;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..r.nameservers.len() {
        let (r, q, tx, name) = (r.clone(), q.clone(), tx.clone(), name.clone());
        tokio::task::spawn_local(async move {
            let a = ask_one(&r, i, &q, deadline, |m| parse(m, id, &name)).await;
            let _ = tx.send(a);
        });
    }
    drop(tx);
    let mut last_err = None;
    // Each nameserver's task reports once: its answer, or `None` for none in time.
    while let Some(a) = rx.recv().await {
        match a {
            Some(Ok(recs)) => return Ok(recs),
            Some(Err(f)) => last_err = Some(f),
            None => {}
        }
    }
    Err(last_err.unwrap_or(Failure::Timeout))
}

/// One nameserver's answer to query `q`, from a socket connected to it (so that only its
/// address and port are read); `None` when nothing valid came before `deadline`.
async fn ask_one<T>(
    r: &Resolvers,
    i: usize,
    q: &[u8],
    deadline: tokio::time::Instant,
    parse: impl Fn(&[u8]) -> Answer<T>,
) -> Option<Result<T, Failure>> {
    let (ns, st) = (&r.nameservers[i], &r.stats[i]);
    let bind: SocketAddr = if ns.addr.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let sent = async {
        let sock = tokio::net::UdpSocket::bind(bind).await.ok()?;
        sock.connect(ns.addr).await.ok()?;
        sock.send(q).await.ok()?;
        Some(sock)
    }
    .await;
    let Some(sock) = sent else {
        st.snd_error.fetch_add(1, Relaxed);
        return None;
    };
    st.sent.fetch_add(1, Relaxed);
    let mut buf = vec![0u8; usize::from(r.accepted_payload_size.max(512))];
    loop {
        let n = match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
            Ok(Ok(n)) => n,
            // An ICMP error (nothing listens there) or the deadline: no answer.
            Ok(Err(_)) | Err(_) => {
                st.timeout.fetch_add(1, Relaxed);
                return None;
            }
        };
        match parse(&buf[..n]) {
            Answer::Records(a) => {
                st.valid.fetch_add(1, Relaxed);
                return Some(Ok(a));
            }
            Answer::Failed(f) => {
                st.any_err.fetch_add(1, Relaxed);
                match f {
                    Failure::Nx => &st.nx,
                    Failure::Refused => &st.refused,
                    _ => &st.other,
                }
                .fetch_add(1, Relaxed);
                return Some(Err(f));
            }
            Answer::Truncated => {
                st.truncated.fetch_add(1, Relaxed);
                return Some(Err(Failure::Other));
            }
            // Not an answer to this query: keep waiting.
            Answer::Invalid => {
                st.invalid.fetch_add(1, Relaxed);
            }
        }
    }
}

/// Asks for `name`'s A (`v6: false`) or AAAA records.
async fn ask_addrs(r: &Rc<Resolvers>, name: &str, v6: bool) -> Result<Vec<IpAddr>, Failure> {
    if v6 {
        ask(r, name, TYPE_AAAA, |m, id, _| parse(m, id, true)).await
    } else {
        ask(r, name, TYPE_A, |m, id, _| parse(m, id, false)).await
    }
}

/// One SRV resolution: asked again on a timeout or an error answer, at most
/// `resolve_retries` times (there is no other type to fall back to, as in HAProxy).
async fn resolve_srv(r: &Rc<Resolvers>, name: &str) -> Result<Vec<SrvRecord>, Failure> {
    let mut last = Failure::Timeout;
    for _ in 0..r.resolve_retries {
        match ask(r, name, TYPE_SRV, parse_srv).await {
            Ok(recs) => return Ok(recs),
            Err(f) => last = f,
        }
    }
    Err(last)
}

/// One resolution as HAProxy makes it: the preferred type; on an error answer, the other
/// type; on a timeout, the same again; at most `resolve_retries` rounds.
async fn resolve(r: &Rc<Resolvers>, name: &str, prefer_v4: bool) -> Result<Vec<IpAddr>, Failure> {
    let mut last = Failure::Timeout;
    for _ in 0..r.resolve_retries {
        match ask_addrs(r, name, !prefer_v4).await {
            Ok(a) => return Ok(a),
            Err(Failure::Timeout) => last = Failure::Timeout,
            Err(f) => match ask_addrs(r, name, prefer_v4).await {
                Ok(a) => return Ok(a),
                // The other type's timeout does not hide the first answer's error.
                Err(Failure::Timeout) => last = f,
                Err(g) => last = g,
            },
        }
    }
    Err(last)
}

/// A query id an off-path sender cannot guess.
fn rand_id() -> u16 {
    let mut b = [0u8; 2];
    let _ = aws_lc_rs::rand::fill(&mut b);
    u16::from_ne_bytes(b)
}

/// HAProxy's choice of an address for a server (`resolv_get_ip_from_response`): the highest
/// score wins, the first in the answer among equals: the preferred family 8, a `resolve-net`
/// network 4, not another server's address 2, the server's current address 1. Addresses other
/// servers have are skipped unless `allow-dup-ip`.
fn choose(
    addrs: &[IpAddr],
    sr: &ServerResolve,
    cur: Option<IpAddr>,
    taken: &[IpAddr],
) -> Option<IpAddr> {
    let mut best: Option<(u8, IpAddr)> = None;
    for &a in addrs {
        let used = taken.contains(&a);
        if used && !sr.allow_dup_ip {
            continue;
        }
        let score = 8 * u8::from(a.is_ipv4() == sr.prefer_v4)
            + 4 * u8::from(sr.nets.iter().any(|n| n.contains(a)))
            + 2 * u8::from(!used)
            + u8::from(cur == Some(a));
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, a));
        }
    }
    best.map(|b| b.1)
}

/// Starts the resolution tasks (on the first worker thread): one per section, host name and
/// preferred family (the query types differ), and one per section, SRV record name and
/// backend (each backend has its own slots, as HAProxy's `srvrq` is per proxy).
pub fn spawn(w: &Rc<Worker>) {
    let cfg = &w.shared.cfg;
    let mut keys: Vec<(usize, String, bool)> = Vec::new();
    let mut srv_keys: Vec<(usize, String, usize)> = Vec::new();
    for (pi, p) in cfg.proxies.iter().enumerate() {
        for s in &p.servers {
            let Some(sr) = &s.resolve else { continue };
            if sr.srv_record {
                let k = (sr.section, sr.hostname.clone(), pi);
                if !srv_keys.contains(&k) {
                    srv_keys.push(k);
                }
                continue;
            }
            let k = (sr.section, sr.hostname.clone(), sr.prefer_v4);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    for key in keys {
        let w = w.clone();
        tokio::task::spawn_local(async move { run(w, key).await });
    }
    for key in srv_keys {
        let w = w.clone();
        tokio::task::spawn_local(async move { run_srv(w, key).await });
    }
}

/// What a resolution task knows of one of its servers.
struct Follower {
    pi: usize,
    si: usize,
    /// The task put the server in maintenance (an operator's or the configuration's own
    /// maintenance is left as it is).
    set_maint: bool,
}

impl Follower {
    /// A server that starts without an address is in maintenance for its task.
    fn new(pi: usize, si: usize, s: &crate::config::Server) -> Follower {
        Follower {
            pi,
            si,
            set_maint: s.unresolved && !s.disabled,
        }
    }
}

/// Resolves a name with its section every `timeout resolve`, for ever, and applies the
/// outcome to the servers that follow it.
async fn run(w: Rc<Worker>, (ri, name, prefer_v4): (usize, String, bool)) {
    let shared = w.shared.clone();
    let r = Rc::new(shared.cfg.resolvers[ri].clone());
    let mut servers: Vec<Follower> = Vec::new();
    for (pi, p) in shared.cfg.proxies.iter().enumerate() {
        for (si, s) in p.servers.iter().enumerate() {
            if s.resolve.as_ref().is_some_and(|sr| {
                !sr.srv_record
                    && sr.section == ri
                    && sr.hostname == name
                    && sr.prefer_v4 == prefer_v4
            }) {
                servers.push(Follower::new(pi, si, s));
            }
        }
    }
    // The start-up resolution counts as a valid answer for servers that got an address.
    let mut last_valid = Some(Instant::now());
    loop {
        match resolve(&r, &name, prefer_v4).await {
            Ok(addrs) => {
                last_valid = Some(Instant::now());
                for f in &mut servers {
                    apply_addrs(&w, &r, f, &addrs);
                }
            }
            Err(e) => {
                let held = last_valid.is_some_and(|t| t.elapsed() < r.hold(e));
                if !held {
                    for f in &mut servers {
                        set_rmaint(&w, f, failure_reason(e));
                    }
                }
            }
        }
        tokio::time::sleep(r.timeout_resolve).await;
    }
}

/// HAProxy's reason for a maintenance after resolution errors.
fn failure_reason(e: Failure) -> &'static str {
    match e {
        Failure::Nx => "DNS NX status",
        Failure::Refused => "DNS refused status",
        Failure::Timeout => "DNS timeout status",
        Failure::Other => "unspecified DNS error",
    }
}

/// A valid answer: the server takes the best address for it (usually the one it has, while
/// the answer still holds it and no other server of its backend following the name has it
/// too), and leaves resolution maintenance.
fn apply_addrs(w: &Worker, r: &Resolvers, f: &mut Follower, addrs: &[IpAddr]) {
    let shared = &w.shared;
    let p = &shared.cfg.proxies[f.pi];
    let Some(sr) = p.servers[f.si].resolve.as_ref() else {
        return;
    };
    let be = shared.backend(f.pi);
    let srv = &be.servers[f.si];
    let cur_sa = **srv.addr.load();
    let was_rmaint = srv.rmaint.load(Relaxed);
    let cur = (!was_rmaint).then(|| crate::config::converter::unmap(cur_sa.ip()));
    // The addresses of the other servers of the backend that follow the same name.
    let taken: Vec<IpAddr> = be
        .servers
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            *i != f.si
                && !s.rmaint.load(Relaxed)
                && p.servers
                    .get(*i)
                    .and_then(|c| c.resolve.as_ref())
                    .is_some_and(|o| o.hostname == sr.hostname && o.section == sr.section)
        })
        .map(|(_, s)| crate::config::converter::unmap(s.addr.load().ip()))
        .collect();
    let Some(new) = choose(addrs, sr, cur, &taken) else {
        // Every address is another server's: this one waits for more.
        if !was_rmaint {
            set_rmaint(w, f, "No IP for server");
        }
        return;
    };
    set_addr(w, r, f, SocketAddr::new(new, cur_sa.port()), "DNS cache");
    leave_rmaint(w, f, &sr.hostname);
}

/// Gives the server a new address (idle pooled connections to the old one are closed when
/// next met) and says so as HAProxy does when the IP changes: `by DNS cache` after an A/AAAA
/// answer, `by DNS additional record` from an SRV answer; `(none)` was no address.
fn set_addr(w: &Worker, r: &Resolvers, f: &Follower, new: SocketAddr, by: &str) {
    let be = w.shared.backend(f.pi);
    let srv = &be.servers[f.si];
    let cur_sa = **srv.addr.load();
    let unmap = crate::config::converter::unmap;
    let cur = (!srv.rmaint.load(Relaxed)).then(|| unmap(cur_sa.ip()));
    if cur == Some(unmap(new.ip())) && cur_sa.port() == new.port() {
        return;
    }
    srv.addr.store(std::sync::Arc::new(new));
    srv.addr_gen.fetch_add(1, Relaxed);
    if cur == Some(unmap(new.ip())) {
        // Only the port (an SRV record's) changed.
        return;
    }
    if let Some(st) = r.stats.first() {
        st.update.fetch_add(1, Relaxed);
    }
    // An A/AAAA answer for a server without an address says nothing, as HAProxy (the server
    // coming back up is logged instead).
    if cur.is_none() && by == "DNS cache" {
        return;
    }
    let old = cur.map_or_else(|| "(none)".to_string(), |ip| ip.to_string());
    notice(
        w,
        f.pi,
        5,
        &format!(
            "{}/{} changed its IP from {old} to {} by {by}.",
            w.shared.cfg.proxies[f.pi].name,
            srv.name,
            new.ip()
        ),
    );
}

/// The server has an address again: it leaves resolution maintenance (and the maintenance
/// that came with it, unless an operator's or the configuration's was there first).
fn leave_rmaint(w: &Worker, f: &mut Follower, host: &str) {
    let be = w.shared.backend(f.pi);
    let srv = &be.servers[f.si];
    if !srv.rmaint.swap(false, Relaxed) {
        return;
    }
    if std::mem::take(&mut f.set_maint) {
        srv.maint.store(false, Relaxed);
    }
    srv.last_change.store(crate::backend::unix_now(), Relaxed);
    be.changed();
    let line = format!(
        "Server {}/{} ('{host}') is UP/READY (resolves again).",
        w.shared.cfg.proxies[f.pi].name, srv.name
    );
    notice(w, f.pi, 5, &line);
}

// ---------------------------------------------------------------------------------------------
// SRV records.

/// One server slot of an SRV record name: a server of the backend named by it.
struct Slot {
    f: Follower,
    /// The record the slot holds; `None` while free (in resolution maintenance).
    rec: Option<Held>,
}

/// The record a slot holds.
struct Held {
    target: String,
    port: u16,
    /// When an answer last had the record (`hold obsolete` counts from there).
    last_seen: Instant,
    /// The address came from the answer's additional section: no A/AAAA query is made.
    from_additional: bool,
    /// When the target's own A/AAAA resolution last succeeded (its `hold` periods count from
    /// there).
    target_valid: Option<Instant>,
}

/// Resolves an SRV record name every `timeout resolve`, for ever, and fills the backend's
/// slots named by it with the records.
async fn run_srv(w: Rc<Worker>, (ri, name, pi): (usize, String, usize)) {
    let shared = w.shared.clone();
    let r = Rc::new(shared.cfg.resolvers[ri].clone());
    let mut slots: Vec<Slot> = Vec::new();
    for (si, s) in shared.cfg.proxies[pi].servers.iter().enumerate() {
        if s.resolve
            .as_ref()
            .is_some_and(|sr| sr.srv_record && sr.section == ri && sr.hostname == name)
        {
            slots.push(Slot {
                f: Follower::new(pi, si, s),
                rec: None,
            });
        }
    }
    // Free slots are taken in this order: configuration order first, then the order they
    // were freed in (HAProxy appends a freed server to its list of free ones).
    let mut free: VecDeque<usize> = (0..slots.len()).collect();
    let mut last_valid: Option<Instant> = None;
    loop {
        match resolve_srv(&r, &name).await {
            Ok(recs) => {
                last_valid = Some(Instant::now());
                apply_srv(&w, &r, &mut slots, &mut free, &recs);
            }
            Err(e) => {
                // Past the `hold` period of the error, no record is trusted any more.
                if last_valid.is_none_or(|t| t.elapsed() >= r.hold(e)) {
                    for (i, slot) in slots.iter_mut().enumerate() {
                        if slot.rec.is_some() {
                            release(&w, slot);
                            free.push_back(i);
                        }
                    }
                }
            }
        }
        resolve_targets(&w, &r, &mut slots).await;
        tokio::time::sleep(r.timeout_resolve).await;
    }
}

/// A valid SRV answer, applied as HAProxy's `resolv_check_response`: records seen again are
/// refreshed, records unseen for longer than `hold obsolete` free their slots, and each
/// record keeps its slot (matched by target and port) or takes the first free one (records
/// beyond the slots are left out). Then each record's slot takes its port, weight and the
/// address from the additional section.
fn apply_srv(
    w: &Worker,
    r: &Resolvers,
    slots: &mut [Slot],
    free: &mut VecDeque<usize>,
    recs: &[SrvRecord],
) {
    let now = Instant::now();
    let holds = |h: &Held, rec: &SrvRecord| h.target == rec.target && h.port == rec.port;
    for slot in slots.iter_mut() {
        if let Some(h) = &mut slot.rec
            && recs.iter().any(|rec| holds(h, rec))
        {
            h.last_seen = now;
        }
    }
    for (i, slot) in slots.iter_mut().enumerate() {
        if slot
            .rec
            .as_ref()
            .is_some_and(|h| now.duration_since(h.last_seen) > r.hold_obsolete)
        {
            release(w, slot);
            free.push_back(i);
        }
    }
    for rec in recs {
        let i = match slots
            .iter()
            .position(|s| s.rec.as_ref().is_some_and(|h| holds(h, rec)))
        {
            Some(i) => i,
            None => {
                let Some(i) = free.pop_front() else { continue };
                take(w, &mut slots[i], rec, now);
                i
            }
        };
        update_slot(w, r, &mut slots[i], rec);
    }
}

/// A free slot takes a record: its target becomes the server's host name.
fn take(w: &Worker, slot: &mut Slot, rec: &SrvRecord, now: Instant) {
    let srv = &w.shared.backend(slot.f.pi).servers[slot.f.si];
    srv.fqdn
        .store(Some(std::sync::Arc::new(rec.target.clone())));
    slot.rec = Some(Held {
        target: rec.target.clone(),
        port: rec.port,
        last_seen: now,
        from_additional: false,
        target_valid: None,
    });
    let line = format!(
        "{}/{} changed its FQDN from (null) to {} by 'SRV record'",
        w.shared.cfg.proxies[slot.f.pi].name, srv.name, rec.target
    );
    notice(w, slot.f.pi, 5, &line);
}

/// A slot's record as the latest answer has it: the port, the weight (unless `resolve-opts
/// ignore-weight`) and, from the additional section, the address.
fn update_slot(w: &Worker, r: &Resolvers, slot: &mut Slot, rec: &SrvRecord) {
    let shared = &w.shared;
    let be = shared.backend(slot.f.pi);
    let srv = &be.servers[slot.f.si];
    let Some(h) = slot.rec.as_mut() else { return };
    h.from_additional = rec.addr.is_some();
    match rec.addr {
        Some(ip) => {
            set_addr(
                w,
                r,
                &slot.f,
                SocketAddr::new(ip, rec.port),
                "DNS additional record",
            );
            leave_rmaint(w, &mut slot.f, &rec.target);
        }
        None => {
            // The target's own resolution gives the address; the port is the record's.
            let cur = **srv.addr.load();
            if cur.port() != rec.port {
                srv.addr
                    .store(std::sync::Arc::new(SocketAddr::new(cur.ip(), rec.port)));
                srv.addr_gen.fetch_add(1, Relaxed);
            }
        }
    }
    let ignore = shared.cfg.proxies[slot.f.pi].servers[slot.f.si]
        .resolve
        .as_ref()
        .is_some_and(|sr| sr.ignore_weight);
    let weight = srv_weight(rec.weight);
    if !ignore && srv.weight.load(Relaxed) != weight {
        // As HAProxy's `server_parse_weight_change_request`: a backend with a static
        // algorithm refuses weights other than 0 and the initial one (the slot keeps its own).
        let _ = crate::cli::set_weight(be, srv, &weight.to_string());
    }
}

/// The slot's record is gone: the server goes to maintenance, without address, port or host
/// name, and its slot is free for another record.
fn release(w: &Worker, slot: &mut Slot) {
    set_rmaint(w, &mut slot.f, "entry removed from SRV record");
    let srv = &w.shared.backend(slot.f.pi).servers[slot.f.si];
    srv.addr.store(std::sync::Arc::new(SocketAddr::new(
        std::net::Ipv4Addr::UNSPECIFIED.into(),
        0,
    )));
    srv.addr_gen.fetch_add(1, Relaxed);
    srv.fqdn.store(None);
    slot.rec = None;
}

/// The slots whose record came without an address resolve its target with A/AAAA queries,
/// as a server named by that host would (its `resolve-prefer`, `resolve-net`, and an address
/// per server of the backend unless `allow-dup-ip`). A target is asked once per round.
async fn resolve_targets(w: &Worker, r: &Rc<Resolvers>, slots: &mut [Slot]) {
    let p = &w.shared.cfg.proxies;
    let mut answers: Vec<(String, bool, Result<Vec<IpAddr>, Failure>)> = Vec::new();
    for i in 0..slots.len() {
        let Some(h) = slots[i].rec.as_ref().filter(|h| !h.from_additional) else {
            continue;
        };
        let (target, port) = (h.target.clone(), h.port);
        let Some(sr) = p[slots[i].f.pi].servers[slots[i].f.si].resolve.as_ref() else {
            continue;
        };
        let res = match answers
            .iter()
            .find(|(t, v4, _)| *t == target && *v4 == sr.prefer_v4)
        {
            Some((_, _, res)) => res.clone(),
            None => {
                let res = resolve(r, &target, sr.prefer_v4).await;
                answers.push((target.clone(), sr.prefer_v4, res.clone()));
                res
            }
        };
        let be = w.shared.backend(slots[i].f.pi);
        match res {
            Ok(addrs) => {
                let srv = &be.servers[slots[i].f.si];
                let unmap = crate::config::converter::unmap;
                let cur = (!srv.rmaint.load(Relaxed)).then(|| unmap(srv.addr.load().ip()));
                // The addresses of the other slots holding the same target.
                let taken: Vec<IpAddr> = slots
                    .iter()
                    .enumerate()
                    .filter(|(j, o)| {
                        *j != i
                            && o.rec.as_ref().is_some_and(|oh| oh.target == target)
                            && !be.servers[o.f.si].rmaint.load(Relaxed)
                    })
                    .map(|(_, o)| unmap(be.servers[o.f.si].addr.load().ip()))
                    .collect();
                let slot = &mut slots[i];
                if let Some(h) = slot.rec.as_mut() {
                    h.target_valid = Some(Instant::now());
                }
                match choose(&addrs, sr, cur, &taken) {
                    Some(ip) => {
                        set_addr(w, r, &slot.f, SocketAddr::new(ip, port), "DNS cache");
                        leave_rmaint(w, &mut slot.f, &target);
                    }
                    None => set_rmaint(w, &mut slot.f, "No IP for server"),
                }
            }
            Err(e) => {
                let slot = &mut slots[i];
                let held = slot
                    .rec
                    .as_ref()
                    .and_then(|h| h.target_valid)
                    .is_some_and(|t| t.elapsed() < r.hold(e));
                if !held {
                    set_rmaint(w, &mut slot.f, failure_reason(e));
                }
            }
        }
    }
}

/// No usable answer: the server goes to resolution maintenance (its own maintenance, if an
/// operator or the configuration put it in one, stays theirs).
fn set_rmaint(w: &Worker, f: &mut Follower, why: &str) {
    let shared = &w.shared;
    let p = &shared.cfg.proxies[f.pi];
    let be = shared.backend(f.pi);
    let srv = &be.servers[f.si];
    if srv.rmaint.swap(true, Relaxed) {
        return;
    }
    if !srv.maint.swap(true, Relaxed) {
        f.set_maint = true;
    }
    srv.last_change.store(crate::backend::unix_now(), Relaxed);
    be.changed();
    let line = format!(
        "Server {}/{} is going DOWN for maintenance ({why}). {} {} sessions active, 0 \
         requeued, {} remaining in queue.",
        p.name,
        srv.name,
        crate::check::counts(w, f.pi, false),
        srv.served.load(Relaxed),
        srv.queued.load(Relaxed)
    );
    notice(w, f.pi, 1, &line);
}

/// A state change, on standard error and to the proxy's log targets (as check transitions).
fn notice(w: &Worker, pi: usize, level: u8, line: &str) {
    let p = &w.shared.cfg.proxies[pi];
    crate::say!(
        "[{}] ({}) : {line}",
        if level <= 3 { "WARNING" } else { "NOTICE" },
        std::process::id()
    );
    w.log.emit(&p.logs, level, line);
}

// ---------------------------------------------------------------------------------------------
// The CLI.

/// `show resolvers [NAME]`, in HAProxy's layout.
pub fn cli_show(cfg: &crate::config::Config, which: Option<&str>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut found = false;
    for r in &cfg.resolvers {
        if which.is_some_and(|n| n != r.name) {
            continue;
        }
        found = true;
        let _ = writeln!(out, "Resolvers section {}", r.name);
        for (ns, st) in r.nameservers.iter().zip(r.stats.iter()) {
            let g = |a: &AtomicU64| a.load(Relaxed);
            let _ = write!(
                out,
                " nameserver {}:\n  sent:        {}\n  snd_error:   {}\n  valid:       {}\n  \
                 update:      {}\n  cname:       0\n  cname_error: 0\n  any_err:     {}\n  \
                 nx:          {}\n  timeout:     {}\n  refused:     {}\n  other:       {}\n  \
                 invalid:     {}\n  too_big:     0\n  truncated:   {}\n  outdated:    0\n",
                ns.name,
                g(&st.sent),
                g(&st.snd_error),
                g(&st.valid),
                g(&st.update),
                g(&st.any_err),
                g(&st.nx),
                g(&st.timeout),
                g(&st.refused),
                g(&st.other),
                g(&st.invalid),
                g(&st.truncated),
            );
        }
    }
    if !found && let Some(n) = which {
        return format!("Can't find resolvers section '{n}'.\n");
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response to `q` with `rcode` and the given A/AAAA records (names compressed to
    /// the question's).
    fn response(q: &[u8], rcode: u16, recs: &[IpAddr], cname_first: bool) -> Vec<u8> {
        let qend = skip_name(q, 12).unwrap() + 4;
        let mut m = q[..qend].to_vec();
        m[2..4].copy_from_slice(&(0x8180u16 | rcode).to_be_bytes());
        let an = recs.len() as u16 + u16::from(cname_first);
        m[6..8].copy_from_slice(&an.to_be_bytes());
        m[10..12].copy_from_slice(&0u16.to_be_bytes());
        if cname_first {
            m.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60]);
            let target = [3, b'w', b'w', b'w', 0xc0, 12];
            m.extend_from_slice(&(target.len() as u16).to_be_bytes());
            m.extend_from_slice(&target);
        }
        for ip in recs {
            let (ty, data): (u16, Vec<u8>) = match ip {
                IpAddr::V4(a) => (TYPE_A, a.octets().to_vec()),
                IpAddr::V6(a) => (TYPE_AAAA, a.octets().to_vec()),
            };
            m.extend_from_slice(&[0xc0, 12]);
            m.extend_from_slice(&ty.to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(&data);
        }
        m
    }

    #[test]
    fn query_layout() {
        let q = query(0x1234, "app.example.com", false, 512).unwrap();
        assert_eq!(&q[..4], &[0x12, 0x34, 0x01, 0x00]);
        assert_eq!(&q[12..16], &[3, b'a', b'p', b'p']);
        let end = skip_name(&q, 12).unwrap();
        assert_eq!(&q[end..end + 4], &[0, 1, 0, 1]);
        // EDNS0 OPT with the payload size.
        assert_eq!(&q[end + 4..end + 9], &[0, 0, 41, 2, 0]);
        assert!(query(1, "a..b", false, 512).is_err());
    }

    #[test]
    fn answers() {
        let q = query(7, "app.example.com", false, 512).unwrap();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(
            parse(&response(&q, 0, &[a, b], true), 7, false),
            Answer::Records(vec![a, b])
        );
        assert_eq!(
            parse(&response(&q, 0, &[a], false), 8, false),
            Answer::Invalid
        );
        assert_eq!(
            parse(&response(&q, 3, &[], false), 7, false),
            Answer::Failed(Failure::Nx)
        );
        assert_eq!(
            parse(&response(&q, 5, &[], false), 7, false),
            Answer::Failed(Failure::Refused)
        );
        assert_eq!(
            parse(&response(&q, 0, &[], false), 7, false),
            Answer::Failed(Failure::Other)
        );
        // Records of the other type are not an answer to this query.
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(
            parse(&response(&q, 0, &[v6], false), 7, false),
            Answer::Failed(Failure::Other)
        );
        // Cut short: malformed, ignored.
        let full = response(&q, 0, &[a], false);
        assert_eq!(parse(&full[..full.len() - 2], 7, false), Answer::Invalid);
        let mut tc = full.clone();
        tc[2] |= 0x02;
        assert_eq!(parse(&tc, 7, false), Answer::Truncated);
    }

    const SRV_NAME: &str = "_http._tcp.app.test";
    /// Where "app.test" starts in a query for [`SRV_NAME`] (after the header, `_http`, `_tcp`).
    const APP_AT: u8 = 12 + 6 + 5;

    /// A response to SRV query `q` with `rcode`: for each `(label, port, weight)` an SRV record
    /// whose target is `label.app.test`, written as the label and a pointer into the question;
    /// then for each `(label, ip)` an additional record whose owner points at that target
    /// inside the record data (or is written out when no record has it).
    fn srv_response(
        q: &[u8],
        rcode: u16,
        recs: &[(&str, u16, u16)],
        extra: &[(&str, IpAddr)],
    ) -> Vec<u8> {
        let qend = skip_name(q, 12).unwrap() + 4;
        let mut m = q[..qend].to_vec();
        m[2..4].copy_from_slice(&(0x8180u16 | rcode).to_be_bytes());
        m[6..8].copy_from_slice(&(recs.len() as u16).to_be_bytes());
        m[10..12].copy_from_slice(&(extra.len() as u16).to_be_bytes());
        let mut targets = Vec::new();
        for (label, port, weight) in recs {
            m.extend_from_slice(&[0xc0, 12, 0, 33, 0, 1, 0, 0, 0, 60]);
            let rdlen = 6 + 1 + label.len() + 2;
            m.extend_from_slice(&(rdlen as u16).to_be_bytes());
            m.extend_from_slice(&[0, 10]);
            m.extend_from_slice(&weight.to_be_bytes());
            m.extend_from_slice(&port.to_be_bytes());
            targets.push((*label, m.len()));
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
            m.extend_from_slice(&[0xc0, APP_AT]);
        }
        for (label, ip) in extra {
            match targets.iter().find(|(l, _)| l == label) {
                Some(&(_, at)) => m.extend_from_slice(&[0xc0, at as u8]),
                None => {
                    m.push(label.len() as u8);
                    m.extend_from_slice(label.as_bytes());
                    m.extend_from_slice(&[0xc0, APP_AT]);
                }
            }
            let (ty, data): (u16, Vec<u8>) = match ip {
                IpAddr::V4(a) => (TYPE_A, a.octets().to_vec()),
                IpAddr::V6(a) => (TYPE_AAAA, a.octets().to_vec()),
            };
            m.extend_from_slice(&ty.to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(&data);
        }
        m
    }

    fn rec(target: &str, port: u16, weight: u16, addr: Option<IpAddr>) -> SrvRecord {
        SrvRecord {
            target: target.into(),
            port,
            weight,
            priority: 10,
            addr,
        }
    }

    #[test]
    fn srv_query_layout() {
        let q = query_type(0x4242, SRV_NAME, TYPE_SRV, 1232).unwrap();
        assert_eq!(&q[12..18], b"\x05_http");
        assert_eq!(q[usize::from(APP_AT)..usize::from(APP_AT) + 4], *b"\x03app");
        let end = skip_name(&q, 12).unwrap();
        assert_eq!(&q[end..end + 4], &[0, 33, 0, 1]);
        assert_eq!(&q[end + 4..end + 9], &[0, 0, 41, 0x04, 0xd0]);
    }

    #[test]
    fn srv_answers_with_compressed_targets_and_additional_records() {
        let q = query_type(9, SRV_NAME, TYPE_SRV, 512).unwrap();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "2001:db8::2".parse().unwrap();
        let m = srv_response(
            &q,
            0,
            &[("a1", 8080, 256), ("b2", 8081, 0), ("c3", 8082, 10)],
            &[("a1", a), ("b2", b), ("zz", a)],
        );
        assert_eq!(
            parse_srv(&m, 9, SRV_NAME),
            Answer::Records(vec![
                rec("a1.app.test", 8080, 256, Some(a)),
                rec("b2.app.test", 8081, 0, Some(b)),
                // No additional record: its target is resolved by itself.
                rec("c3.app.test", 8082, 10, None),
            ])
        );
        // The question must be the one asked (names compare without case or final dot).
        assert!(matches!(
            parse_srv(&m, 9, "_HTTP._tcp.App.test."),
            Answer::Records(_)
        ));
        assert_eq!(parse_srv(&m, 9, "_http._tcp.other.test"), Answer::Invalid);
        assert_eq!(parse_srv(&m, 10, SRV_NAME), Answer::Invalid);
        // Errors, and a NOERROR without records.
        assert_eq!(
            parse_srv(&srv_response(&q, 3, &[], &[]), 9, SRV_NAME),
            Answer::Failed(Failure::Nx)
        );
        assert_eq!(
            parse_srv(&srv_response(&q, 5, &[], &[]), 9, SRV_NAME),
            Answer::Failed(Failure::Refused)
        );
        assert_eq!(
            parse_srv(&srv_response(&q, 0, &[], &[]), 9, SRV_NAME),
            Answer::Failed(Failure::Other)
        );
        // The same target and port twice is one record (the last weight); the truncated
        // bit does not spoil an SRV answer, as in HAProxy.
        let mut m = srv_response(&q, 0, &[("a1", 80, 1), ("a1", 80, 700)], &[]);
        m[2] |= 0x02;
        assert_eq!(
            parse_srv(&m, 9, SRV_NAME),
            Answer::Records(vec![rec("a1.app.test", 80, 700, None)])
        );
        // A response to an A question for the same name.
        let q4 = query(9, SRV_NAME, false, 512).unwrap();
        assert_eq!(
            parse_srv(&response(&q4, 0, &[a], false), 9, SRV_NAME),
            Answer::Invalid,
            "an answer to an A question is not an SRV answer"
        );
    }

    #[test]
    fn srv_records_malformed_are_rejected_without_panicking() {
        let q = query_type(9, SRV_NAME, TYPE_SRV, 512).unwrap();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let good = srv_response(&q, 0, &[("a1", 8080, 256), ("b2", 81, 1)], &[("a1", a)]);
        assert!(matches!(parse_srv(&good, 9, SRV_NAME), Answer::Records(_)));
        // Cut anywhere: malformed, ignored.
        for n in 0..good.len() {
            assert_eq!(
                parse_srv(&good[..n], 9, SRV_NAME),
                Answer::Invalid,
                "cut at {n}"
            );
        }
        // Any byte changed to any value: no panic, no endless loop.
        for i in 0..good.len() {
            for v in [0u8, 1, 6, 0x3f, 0x40, 0x80, 0xc0, 0xff] {
                let mut m = good.clone();
                m[i] = v;
                let _ = parse_srv(&m, 9, SRV_NAME);
            }
        }
        let first_target = q.len() - 11 + 10 + 2 + 6;
        // A target that is a pointer to itself, or forward.
        let mut m = good.clone();
        m[first_target] = 0xc0;
        m[first_target + 1] = first_target as u8;
        assert_eq!(parse_srv(&m, 9, SRV_NAME), Answer::Invalid);
        let mut m = good.clone();
        m[first_target] = 0xc0;
        m[first_target + 1] = (first_target + 20) as u8;
        assert_eq!(parse_srv(&m, 9, SRV_NAME), Answer::Invalid);
        // Record data too short for priority, weight, port and a name.
        let mut m = good.clone();
        m[first_target - 7] = 6;
        assert_eq!(parse_srv(&m, 9, SRV_NAME), Answer::Invalid);
        // An A record of the wrong size in the additional section.
        let mut m = good.clone();
        let n = m.len();
        m[n - 5] = 5;
        m.push(0);
        assert_eq!(parse_srv(&m, 9, SRV_NAME), Answer::Invalid);
    }

    #[test]
    fn names_follow_pointers_and_stop_on_loops() {
        // "www" then a pointer to "example.com" written at 0.
        let mut m = b"\x07example\x03com\x00".to_vec();
        m.extend_from_slice(b"\x03WWW\xc0\x00");
        assert_eq!(read_name(&m, 13), Some(("www.example.com".into(), 19)));
        assert_eq!(read_name(&m, 0), Some(("example.com".into(), 13)));
        assert_eq!(read_name(&[0], 0), Some((String::new(), 1)));
        // A pointer to a pointer to the name: followed (backwards each time).
        let mut chain = m.clone();
        chain.extend_from_slice(&[0xc0, 13, 0xc0, 19]);
        assert_eq!(read_name(&chain, 21), Some(("www.example.com".into(), 23)));
        // Loops: a pointer to itself, a label then a pointer back to the label, a pointer
        // forward to a pointer back (each jump must go backwards).
        assert_eq!(read_name(&[0xc0, 0], 0), None);
        assert_eq!(read_name(&[1, b'a', 0xc0, 0], 0), None);
        assert_eq!(read_name(&[0xc0, 2, 0xc0, 0], 0), None);
        // Cut short, reserved label types, dots or controls in a label, too long.
        assert_eq!(read_name(b"\x03ww", 0), None);
        assert_eq!(read_name(&[0xc0], 0), None);
        assert_eq!(read_name(&[0x40, 0], 0), None);
        assert_eq!(read_name(b"\x03a.b\x00", 0), None);
        assert_eq!(read_name(b"\x02a\n\x00", 0), None);
        let mut long = Vec::new();
        for _ in 0..5 {
            long.push(63);
            long.extend_from_slice(&[b'x'; 63]);
        }
        long.push(0);
        assert_eq!(read_name(&long, 0), None);
    }

    #[test]
    fn srv_weights_map_as_haproxy_2_6() {
        assert_eq!(srv_weight(0), 0);
        assert_eq!(srv_weight(1), 1);
        assert_eq!(srv_weight(256), 1);
        assert_eq!(srv_weight(257), 2);
        assert_eq!(srv_weight(512), 2);
        assert_eq!(srv_weight(65535), 256);
    }

    #[test]
    fn choice_follows_haproxys_scores() {
        let mut sr = ServerResolve {
            section: 0,
            section_name: "dns".into(),
            hostname: "x".into(),
            prefer_v4: true,
            nets: vec![crate::config::acl::parse_ipnet("10.2.0.0/16").unwrap()],
            allow_dup_ip: false,
            srv_record: false,
            ignore_weight: false,
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let v = [ip("2001:db8::1"), ip("10.1.0.1"), ip("10.2.0.1")];
        // Family first, then network.
        assert_eq!(choose(&v, &sr, None, &[]), Some(ip("10.2.0.1")));
        // The current address wins only among equals.
        assert_eq!(
            choose(&v, &sr, Some(ip("10.1.0.1")), &[]),
            Some(ip("10.2.0.1"))
        );
        sr.nets.clear();
        assert_eq!(
            choose(&v, &sr, Some(ip("10.2.0.1")), &[]),
            Some(ip("10.2.0.1"))
        );
        // Another server's address is skipped, unless duplicates are allowed (then it only
        // scores lower).
        let taken = [ip("10.1.0.1"), ip("10.2.0.1")];
        assert_eq!(choose(&v, &sr, None, &taken), Some(ip("2001:db8::1")));
        sr.allow_dup_ip = true;
        assert_eq!(choose(&v, &sr, None, &taken), Some(ip("10.1.0.1")));
        sr.allow_dup_ip = false;
        assert_eq!(choose(&v[1..], &sr, None, &taken), None);
    }

    #[test]
    fn section_keywords() {
        let mut r = Resolvers::new(
            "dns",
            crate::config::Origin {
                file: "t".into(),
                line: 1,
            },
        );
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        r.keyword(&w("nameserver ns1 127.0.0.1:5353")).unwrap();
        r.keyword(&w("nameserver ns2 10.0.0.1")).unwrap();
        assert_eq!(r.nameservers[1].addr.port(), 53);
        assert!(
            r.keyword(&w("nameserver ns1 10.0.0.2"))
                .unwrap_err()
                .contains("already")
        );
        assert!(
            r.keyword(&w("nameserver ns3 tcp@10.0.0.2:53"))
                .unwrap_err()
                .contains("TCP")
        );
        r.keyword(&w("hold nx 5s")).unwrap();
        assert_eq!(r.hold_nx, Duration::from_secs(5));
        r.keyword(&w("timeout resolve 250ms")).unwrap();
        assert_eq!(r.timeout_resolve, Duration::from_millis(250));
        assert!(
            r.keyword(&w("timeout nope 1s"))
                .unwrap_err()
                .contains("unknown event")
        );
        assert!(
            r.keyword(&w("nameservr x 1.2.3.4"))
                .unwrap_err()
                .contains("did you mean")
        );
        r.finish().unwrap();
        assert_eq!(r.stats.len(), 2);
    }
}
