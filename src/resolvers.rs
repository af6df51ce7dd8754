//! `resolvers` sections: servers named by a host name (`server s1 app.example.com:80
//! resolvers dns`) follow that name's DNS records at run time, as HAProxy's do.
//!
//! Owns the section's settings, the DNS messages (one A or AAAA question with an EDNS0 size;
//! the answers' addresses: a few dozen lines of wire format, so no DNS library), and one
//! task per resolved host name on the first worker thread: every `timeout resolve` it asks
//! every nameserver, takes the first valid answer, retries and falls back to the other
//! address family as HAProxy does, and applies the outcome to the servers: a new address
//! (idle connections to the old one are dropped), maintenance when no valid answer came
//! within the `hold` period of the error, and back when the name resolves again.
//! It must not block a worker (all I/O is async) and does not touch requests.

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
    /// `hold valid` and `hold obsolete`: accepted; they concern `do-resolve` and SRV records,
    /// which sluice does not implement.
    pub hold_valid: Duration,
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
}

/// Why a resolution failed (which `hold` applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Nx,
    Refused,
    Timeout,
    Other,
}

/// One nameserver's answer to a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// NOERROR with at least one address of the type asked.
    Addrs(Vec<IpAddr>),
    Failed(Failure),
    /// Not an answer to this query (wrong id, not a response, malformed): ignored.
    Invalid,
    /// The truncated bit: the answer did not fit (counted, treated as `other`).
    Truncated,
}

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;

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
    q.extend_from_slice(&(if v6 { TYPE_AAAA } else { TYPE_A }).to_be_bytes());
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
        Answer::Addrs(addrs)
    })
}

// ---------------------------------------------------------------------------------------------
// Resolving.

/// Asks every nameserver once for `name`; the first valid answer, or the last error
/// (a timeout when no nameserver answered).
async fn ask(r: &Rc<Resolvers>, name: &str, v6: bool) -> Result<Vec<IpAddr>, Failure> {
    let id: u16 = rand_id();
    let Ok(q) = query(id, name, v6, r.accepted_payload_size) else {
        return Err(Failure::Other);
    };
    let q = Rc::new(q);
    let deadline = tokio::time::Instant::now() + r.timeout_retry;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..r.nameservers.len() {
        let (r, q, tx) = (r.clone(), q.clone(), tx.clone());
        tokio::task::spawn_local(async move {
            let a = ask_one(&r, i, &q, id, v6, deadline).await;
            let _ = tx.send(a);
        });
    }
    drop(tx);
    let mut last_err = None;
    // Each nameserver's task reports once: its answer, or `None` for none in time.
    while let Some(a) = rx.recv().await {
        match a {
            Some(Ok(addrs)) => return Ok(addrs),
            Some(Err(f)) => last_err = Some(f),
            None => {}
        }
    }
    Err(last_err.unwrap_or(Failure::Timeout))
}

/// One nameserver's answer to query `q`, from a socket connected to it (so that only its
/// address and port are read); `None` when nothing valid came before `deadline`.
async fn ask_one(
    r: &Resolvers,
    i: usize,
    q: &[u8],
    id: u16,
    v6: bool,
    deadline: tokio::time::Instant,
) -> Option<Result<Vec<IpAddr>, Failure>> {
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
        match parse(&buf[..n], id, v6) {
            Answer::Addrs(a) => {
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

/// One resolution as HAProxy makes it: the preferred type; on an error answer, the other
/// type; on a timeout, the same again; at most `resolve_retries` rounds.
async fn resolve(r: &Rc<Resolvers>, name: &str, prefer_v4: bool) -> Result<Vec<IpAddr>, Failure> {
    let mut last = Failure::Timeout;
    for _ in 0..r.resolve_retries {
        match ask(r, name, !prefer_v4).await {
            Ok(a) => return Ok(a),
            Err(Failure::Timeout) => last = Failure::Timeout,
            Err(f) => match ask(r, name, prefer_v4).await {
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
/// preferred family (the query types differ).
pub fn spawn(w: &Rc<Worker>) {
    let cfg = &w.shared.cfg;
    let mut keys: Vec<(usize, String, bool)> = Vec::new();
    for p in &cfg.proxies {
        for s in &p.servers {
            if let Some(sr) = &s.resolve {
                let k = (sr.section, sr.hostname.clone(), sr.prefer_v4);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
    }
    for key in keys {
        let w = w.clone();
        tokio::task::spawn_local(async move { run(w, key).await });
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

/// Resolves a name with its section every `timeout resolve`, for ever, and applies the
/// outcome to the servers that follow it.
async fn run(w: Rc<Worker>, (ri, name, prefer_v4): (usize, String, bool)) {
    let shared = w.shared.clone();
    let r = Rc::new(shared.cfg.resolvers[ri].clone());
    let mut servers: Vec<Follower> = Vec::new();
    for (pi, p) in shared.cfg.proxies.iter().enumerate() {
        for (si, s) in p.servers.iter().enumerate() {
            if s.resolve.as_ref().is_some_and(|sr| {
                sr.section == ri && sr.hostname == name && sr.prefer_v4 == prefer_v4
            }) {
                // A server that starts without an address is in maintenance for this task.
                let set_maint = s.unresolved && !s.disabled;
                servers.push(Follower { pi, si, set_maint });
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
                    let why = match e {
                        Failure::Nx => "DNS NX status",
                        Failure::Refused => "DNS refused status",
                        Failure::Timeout => "DNS timeout status",
                        Failure::Other => "unspecified DNS error",
                    };
                    for f in &mut servers {
                        set_rmaint(&w, f, why);
                    }
                }
            }
        }
        tokio::time::sleep(r.timeout_resolve).await;
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
    if cur != Some(new) {
        srv.addr
            .store(std::sync::Arc::new(SocketAddr::new(new, cur_sa.port())));
        // Idle pooled connections to the old address are closed when next met.
        srv.addr_gen.fetch_add(1, Relaxed);
        if let Some(st) = r.stats.first() {
            st.update.fetch_add(1, Relaxed);
        }
        if let Some(old) = cur {
            notice(
                w,
                f.pi,
                5,
                &format!(
                    "{}/{} changed its IP from {old} to {new} by DNS cache.",
                    p.name, srv.name
                ),
            );
        }
    }
    if was_rmaint {
        srv.rmaint.store(false, Relaxed);
        if std::mem::take(&mut f.set_maint) {
            srv.maint.store(false, Relaxed);
        }
        srv.last_change.store(crate::backend::unix_now(), Relaxed);
        be.changed();
        let line = format!(
            "Server {}/{} ('{}') is UP/READY (resolves again).",
            p.name, srv.name, sr.hostname
        );
        notice(w, f.pi, 5, &line);
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
    eprintln!(
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
            Answer::Addrs(vec![a, b])
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

    #[test]
    fn choice_follows_haproxys_scores() {
        let mut sr = ServerResolve {
            section: 0,
            section_name: "dns".into(),
            hostname: "x".into(),
            prefer_v4: true,
            nets: vec![crate::config::acl::parse_ipnet("10.2.0.0/16").unwrap()],
            allow_dup_ip: false,
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
