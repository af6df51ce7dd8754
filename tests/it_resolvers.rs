//! `resolvers` sections and servers that follow DNS at run time: the real binary, a real DNS
//! server over UDP started by the test (it answers what the test tells it to), real backends
//! on 127.0.0.1 and 127.0.0.2 with the same port, so that only the address changes, or on
//! different ports that SRV records give.

mod common;

use common::*;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the test DNS server answers to A queries (AAAA queries get an empty NOERROR).
#[derive(Clone, Debug)]
enum Dns {
    A(Vec<Ipv4Addr>),
    Nx,
    Silent,
    Srv(SrvZone),
}

/// SRV questions (any name) get `records` (target, port, weight), with the targets' A records
/// in the additional section when `additional`; A questions for a host of `hosts` get its
/// address; other questions an empty NOERROR.
#[derive(Clone, Debug)]
struct SrvZone {
    records: Vec<(&'static str, u16, u16)>,
    hosts: Vec<(&'static str, Ipv4Addr)>,
    additional: bool,
}

struct DnsServer {
    addr: SocketAddr,
    answer: Arc<Mutex<Dns>>,
    queries: Arc<AtomicUsize>,
    /// Every question: (type, name).
    asked: Arc<Mutex<Vec<(u16, String)>>>,
    stop: Arc<AtomicBool>,
}

impl DnsServer {
    fn start(initial: Dns) -> DnsServer {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let answer = Arc::new(Mutex::new(initial));
        let queries = Arc::new(AtomicUsize::new(0));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, q, s, log) = (answer.clone(), queries.clone(), stop.clone(), asked.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !s.load(SeqCst) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                q.fetch_add(1, SeqCst);
                if let Some(question) = question(&buf[..n]) {
                    log.lock().unwrap().push(question);
                }
                let current = a.lock().unwrap().clone();
                if let Some(resp) = respond(&buf[..n], &current) {
                    let _ = sock.send_to(&resp, from);
                }
            }
        });
        DnsServer {
            addr,
            answer,
            queries,
            asked,
            stop,
        }
    }

    fn set(&self, d: Dns) {
        *self.answer.lock().unwrap() = d;
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
    }
}

/// A query's question: its type and name (queries are not compressed).
fn question(q: &[u8]) -> Option<(u16, String)> {
    let mut at = 12;
    let mut labels = Vec::new();
    while *q.get(at)? != 0 {
        let len = usize::from(q[at]);
        labels.push(String::from_utf8_lossy(q.get(at + 1..at + 1 + len)?).into_owned());
        at += 1 + len;
    }
    Some((
        u16::from_be_bytes([*q.get(at + 1)?, *q.get(at + 2)?]),
        labels.join("."),
    ))
}

/// The response to a query: the question copied, then the records (names compressed).
fn respond(q: &[u8], d: &Dns) -> Option<Vec<u8>> {
    if q.len() < 12 {
        return None;
    }
    let mut at = 12;
    while q[at] != 0 {
        at += 1 + q[at] as usize;
    }
    let qtype = u16::from_be_bytes([q[at + 1], q[at + 2]]);
    let qend = at + 5;
    let mut m = q[..qend].to_vec();
    let (rcode, recs): (u16, Vec<Ipv4Addr>) = match d {
        Dns::Silent => return None,
        Dns::Nx => (3, vec![]),
        Dns::A(v) if qtype == 1 => (0, v.clone()),
        Dns::A(_) => (0, vec![]),
        Dns::Srv(z) if qtype == 33 => return Some(srv_response(m, z)),
        Dns::Srv(z) if qtype == 1 => {
            let name = question(q)?.1;
            let hosts = z.hosts.iter().filter(|(h, _)| *h == name);
            (0, hosts.map(|(_, ip)| *ip).collect())
        }
        Dns::Srv(_) => (0, vec![]),
    };
    m[2..4].copy_from_slice(&(0x8180u16 | rcode).to_be_bytes());
    m[6..8].copy_from_slice(&(recs.len() as u16).to_be_bytes());
    m[8..12].copy_from_slice(&[0, 0, 0, 0]);
    for ip in recs {
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4]);
        m.extend_from_slice(&ip.octets());
    }
    Some(m)
}

/// An SRV answer after the question `m`: each record's target written out in its data, and
/// each additional A record's owner a compression pointer to that target.
fn srv_response(mut m: Vec<u8>, z: &SrvZone) -> Vec<u8> {
    m[2..4].copy_from_slice(&0x8180u16.to_be_bytes());
    m[6..8].copy_from_slice(&(z.records.len() as u16).to_be_bytes());
    m[8..10].copy_from_slice(&[0, 0]);
    let mut targets = Vec::new();
    for (target, port, weight) in &z.records {
        m.extend_from_slice(&[0xc0, 12, 0, 33, 0, 1, 0, 0, 0, 1]);
        let mut rdata = vec![0, 0];
        rdata.extend_from_slice(&weight.to_be_bytes());
        rdata.extend_from_slice(&port.to_be_bytes());
        let at = m.len() + 2 + rdata.len();
        for label in target.split('.') {
            rdata.push(label.len() as u8);
            rdata.extend_from_slice(label.as_bytes());
        }
        rdata.push(0);
        m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(&rdata);
        targets.push((*target, at));
    }
    let mut additional = 0u16;
    for (target, at) in targets.iter().filter(|_| z.additional) {
        for (_, ip) in z.hosts.iter().filter(|(h, _)| h == target) {
            m.extend_from_slice(&[0xc0 | (*at >> 8) as u8, *at as u8]);
            m.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 1, 0, 4]);
            m.extend_from_slice(&ip.octets());
            additional += 1;
        }
    }
    m[10..12].copy_from_slice(&additional.to_be_bytes());
    m
}

/// The fields of `show servers state be` for one server (HAProxy's 25 fields: 3 srv_name,
/// 4 srv_addr, 6 srv_admin_state, 7 srv_uweight, 17 srv_fqdn, 18 srv_port, 19 srvrecord).
fn state_of(sock: &std::path::Path, srv: &str) -> Vec<String> {
    let out = stats_cli(sock, "show servers state be");
    out.lines()
        .map(|l| l.split(' ').map(String::from).collect::<Vec<_>>())
        .find(|f| f.len() == 25 && f[3] == srv)
        .unwrap_or_else(|| panic!("no {srv} in {out}"))
}

/// The backend names of `n` requests, counted: (name, count), sorted.
fn tally(port: u16, n: usize) -> Vec<(String, usize)> {
    let mut t: Vec<(String, usize)> = Vec::new();
    for _ in 0..n {
        let w = who(port);
        match t.iter_mut().find(|(k, _)| *k == w) {
            Some((_, c)) => *c += 1,
            None => t.push((w, 1)),
        }
    }
    t.sort();
    t
}

/// Two HTTP backends answering their name: on 127.0.0.1:P and 127.0.0.2:P.
fn two_backends() -> (HttpBackend, HttpBackend) {
    let a = HttpBackend::start("a");
    let l = TcpListener::bind(SocketAddr::new(
        Ipv4Addr::new(127, 0, 0, 2).into(),
        a.port(),
    ))
    .expect("bind 127.0.0.2 (loopback /8)");
    let b = HttpBackend::from_listener("b", l);
    (a, b)
}

fn lo(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

fn config(dir: &TempDir, dns: &DnsServer, hold: &str, servers: &str) -> (String, u16) {
    let port = free_port();
    let cfg = format!(
        "global
    stats socket {} level admin
{DEFAULTS_HTTP}
resolvers dns
    nameserver ns1 {}
    resolve_retries 2
    timeout resolve 100ms
    timeout retry 200ms
    {hold}

frontend fe
    bind 127.0.0.1:{port}
    default_backend be

backend be
{servers}
",
        dir.join("s.sock").display(),
        dns.addr,
    );
    (cfg, port)
}

/// The body of one `GET /` through sluice (the backend's name), or the status as text.
fn who(port: u16) -> String {
    let r = http_get(port, "/");
    if r.status == 200 {
        String::from_utf8_lossy(&r.body).into_owned()
    } else {
        r.status.to_string()
    }
}

#[test]
fn a_server_follows_its_name() {
    let (a, _b) = two_backends();
    let dns = DnsServer::start(Dns::A(vec![lo(1)]));
    let dir = TempDir::new();
    let (cfg, port) = config(
        &dir,
        &dns,
        "hold valid 1s",
        &format!(
            "    server s1 app.sluice.test:{} resolvers dns resolve-prefer ipv4 init-addr none",
            a.port()
        ),
    );
    let s = Sluice::start(&cfg);
    // Started without an address: in maintenance until the first answer.
    wait_until("s1 resolved to 127.0.0.1", Duration::from_secs(10), || {
        who(port) == "a"
    });
    s.wait_stderr_line(
        |l| l.contains("Server be/s1 ('app.sluice.test') is UP/READY (resolves again)."),
        Duration::from_secs(5),
    );
    dns.set(Dns::A(vec![lo(2)]));
    wait_until("s1 follows to 127.0.0.2", Duration::from_secs(10), || {
        who(port) == "b"
    });
    s.wait_stderr_line(
        |l| l.contains("be/s1 changed its IP from 127.0.0.1 to 127.0.0.2 by DNS cache."),
        Duration::from_secs(5),
    );
    let state = stats_cli(&dir.join("s.sock"), "show servers state be");
    assert!(state.contains(" s1 127.0.0.2 "), "{state}");
    // An answer that still holds the current address changes nothing.
    dns.set(Dns::A(vec![lo(1), lo(2)]));
    let before = dns.queries.load(SeqCst);
    wait_until("two more resolutions", Duration::from_secs(10), || {
        dns.queries.load(SeqCst) >= before + 4
    });
    assert_eq!(who(port), "b");
    let out = stats_cli(&dir.join("s.sock"), "show resolvers dns");
    assert!(
        out.starts_with("Resolvers section dns\n nameserver ns1:\n"),
        "{out}"
    );
    let valid: u64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("valid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(valid >= 3, "{out}");
    assert!(
        stats_cli(&dir.join("s.sock"), "show resolvers nope")
            .contains("Can't find resolvers section 'nope'.")
    );
}

#[test]
fn errors_past_the_hold_period_put_the_server_in_maintenance_until_it_resolves_again() {
    let (a, _b) = two_backends();
    let dns = DnsServer::start(Dns::A(vec![lo(1)]));
    let dir = TempDir::new();
    let (cfg, port) = config(
        &dir,
        &dns,
        "hold nx 300ms\n    hold timeout 300ms",
        &format!(
            "    server s1 127.0.0.1:{} resolvers dns resolve-prefer ipv4\n    \
             server s2 app.sluice.test:{} resolvers dns resolve-prefer ipv4 init-addr 127.0.0.1",
            a.port(),
            a.port()
        ),
    );
    // s1 has an IP address for a name: nothing to resolve, it stays up throughout.
    let s = Sluice::start(&cfg);
    assert_eq!(who(port), "a");
    dns.set(Dns::Nx);
    s.wait_stderr_line(
        |l| {
            l.contains("Server be/s2 is going DOWN for maintenance (DNS NX status). 1 active and 0 backup servers left.")
        },
        Duration::from_secs(10),
    );
    let stat = stats_cli(&dir.join("s.sock"), "show stat");
    let s2 = stat.lines().find(|l| l.starts_with("be,s2,")).unwrap();
    assert!(s2.contains(",MAINT (resolution),"), "{s2}");
    // Every request now goes to s1.
    for _ in 0..4 {
        assert_eq!(who(port), "a");
    }
    dns.set(Dns::A(vec![lo(1)]));
    s.wait_stderr_line(
        |l| l.contains("Server be/s2 ('app.sluice.test') is UP/READY (resolves again)."),
        Duration::from_secs(10),
    );
    // A nameserver that stops answering: the timeout hold, then maintenance again.
    dns.set(Dns::Silent);
    s.wait_stderr_line(
        |l| l.contains("Server be/s2 is going DOWN for maintenance (DNS timeout status)."),
        Duration::from_secs(15),
    );
}

#[test]
fn servers_sharing_a_name_take_different_addresses() {
    let (a, b) = two_backends();
    let dns = DnsServer::start(Dns::A(vec![lo(1), lo(2)]));
    let dir = TempDir::new();
    let (cfg, port) = config(
        &dir,
        &dns,
        "",
        &format!(
            "    balance roundrobin\n    \
             default-server resolvers dns resolve-prefer ipv4 init-addr none\n    \
             server-template s 3 app.sluice.test:{p}",
            p = a.port()
        ),
    );
    let _s = Sluice::start(&cfg);
    wait_until("two servers resolved", Duration::from_secs(10), || {
        let st = stats_cli(&dir.join("s.sock"), "show servers state be");
        st.contains(" s1 127.0.0.1 ") && st.contains(" s2 127.0.0.2 ")
    });
    // Two addresses for three servers: the third waits in maintenance.
    let stat = stats_cli(&dir.join("s.sock"), "show stat");
    let s3 = stat.lines().find(|l| l.starts_with("be,s3,")).unwrap();
    assert!(s3.contains(",MAINT (resolution),"), "{s3}");
    let mut seen: Vec<String> = (0..4).map(|_| who(port)).collect();
    seen.sort();
    assert_eq!(seen, ["a", "a", "b", "b"]);
    // A third address: the third server takes it.
    dns.set(Dns::A(vec![lo(1), lo(2), lo(3)]));
    wait_until("s3 resolved", Duration::from_secs(10), || {
        stats_cli(&dir.join("s.sock"), "show servers state be").contains(" s3 127.0.0.3 ")
    });
    drop(b);
}

#[test]
fn configuration_errors() {
    let (code, err) = Sluice::check(
        "resolvers dns
    timeout resolve 1s
defaults
    mode http
    timeout connect 1s
    timeout client 1s
    timeout server 1s
backend be
    server s1 app.sluice.test:80 resolvers nope init-addr none
    server s2 app.sluice.test:80 resolvers dns resolve-prefer ipv5 init-addr none
resolvers dup
    nameserver ns1 tcp@127.0.0.1:53
    nameservr ns2 127.0.0.1
backend be2
    server-template w 3 _http._tcp.app.sluice.test init-addr none
",
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(":1: resolvers 'dns': no nameserver"), "{err}");
    assert!(
        err.contains(":9: ") && err.contains("unknown resolvers section 'nope'"),
        "{err}"
    );
    assert!(
        err.contains(":10: ") && err.contains("'resolve-prefer' expects 'ipv4' or 'ipv6'"),
        "{err}"
    );
    assert!(
        err.contains(":12: ") && err.contains("DNS over TCP is not supported"),
        "{err}"
    );
    assert!(
        err.contains(":13: ") && err.contains("did you mean 'nameserver'"),
        "{err}"
    );
    assert!(
        err.contains(":15: ")
            && err.contains("an SRV record name ('_service._proto.name') needs 'resolvers'"),
        "{err}"
    );
}

/// Servers that all start on the address libc gave spread over the answer's addresses; an
/// operator's maintenance outlasts a resolution failure and its recovery.
#[test]
fn libc_start_spreads_and_admin_maintenance_stays() {
    let (a, b) = two_backends();
    let dns = DnsServer::start(Dns::A(vec![lo(1), lo(2)]));
    let dir = TempDir::new();
    let (cfg, port) = config(
        &dir,
        &dns,
        "hold nx 200ms",
        &format!(
            "    balance roundrobin\n    \
             server-template s 2 localhost:{} resolvers dns resolve-prefer ipv4",
            a.port()
        ),
    );
    let s = Sluice::start(&cfg);
    let sock = dir.join("s.sock");
    wait_until(
        "the two servers on two addresses",
        Duration::from_secs(10),
        || {
            let st = stats_cli(&sock, "show servers state be");
            st.contains(" 127.0.0.1 ") && st.contains(" 127.0.0.2 ")
        },
    );
    let mut seen: Vec<String> = (0..4).map(|_| who(port)).collect();
    seen.sort();
    assert_eq!(seen, ["a", "a", "b", "b"]);
    stats_cli(&sock, "set server be/s1 state maint");
    dns.set(Dns::Nx);
    s.wait_stderr_line(
        |l| l.contains("Server be/s2 is going DOWN for maintenance (DNS NX status)."),
        Duration::from_secs(10),
    );
    dns.set(Dns::A(vec![lo(1), lo(2)]));
    s.wait_stderr_line(
        |l| l.contains("Server be/s1 ('localhost') is UP/READY (resolves again)."),
        Duration::from_secs(10),
    );
    s.wait_stderr_line(
        |l| l.contains("Server be/s2 ('localhost') is UP/READY (resolves again)."),
        Duration::from_secs(10),
    );
    let stat = stats_cli(&sock, "show stat");
    let s1 = stat.lines().find(|l| l.starts_with("be,s1,")).unwrap();
    assert!(
        s1.contains(",MAINT,"),
        "the operator's maintenance stays: {s1}"
    );
    let s2 = stat.lines().find(|l| l.starts_with("be,s2,")).unwrap();
    assert!(s2.contains(",UP,") || s2.contains(",no check,"), "{s2}");
    drop(b);
}

/// SRV answers with these (target, port, weight) records, their targets' addresses in the
/// additional section.
fn zone(records: Vec<(&'static str, u16, u16)>) -> Dns {
    Dns::Srv(SrvZone {
        records,
        hosts: vec![("a.sluice.test", lo(1)), ("b.sluice.test", lo(1))],
        additional: true,
    })
}

/// A server-template on an SRV record name: each record fills a slot with its target, port
/// (two backends on two ports), weight and the additional section's address; the slot left
/// over waits in maintenance; a record that goes away frees its slot (`hold obsolete` 0) and
/// traffic goes to the other one only; when it comes back it takes the first free slot.
#[test]
fn srv_records_fill_template_slots() {
    let a = HttpBackend::start("a");
    let b = HttpBackend::start("b");
    let both = vec![
        ("a.sluice.test", a.port(), 256),
        ("b.sluice.test", b.port(), 512),
    ];
    let dns = DnsServer::start(zone(both.clone()));
    let dir = TempDir::new();
    let (cfg, port) = config(
        &dir,
        &dns,
        "",
        "    balance roundrobin\n    \
         server-template s 1-3 _http._tcp.app.sluice.test resolvers dns check inter 100ms",
    );
    let s = Sluice::start(&cfg);
    let sock = dir.join("s.sock");
    wait_until("two slots filled", Duration::from_secs(10), || {
        state_of(&sock, "s1")[6] == "0" && state_of(&sock, "s2")[6] == "0"
    });
    let s1 = state_of(&sock, "s1");
    assert_eq!(
        (&s1[4], &s1[7], &s1[17], &s1[18], &s1[19]),
        (
            &"127.0.0.1".to_string(),
            &"1".to_string(),
            &"a.sluice.test".to_string(),
            &a.port().to_string(),
            &"_http._tcp.app.sluice.test".to_string()
        ),
        "{s1:?}"
    );
    // SRV weights 256 and 512 are server weights 1 and 2 (HAProxy 2.6: weight / 256 rounded
    // up; the `weight / 256 + 1` of older versions would give 2 and 3).
    let s2 = state_of(&sock, "s2");
    assert_eq!(
        (&s2[7], &s2[17], &s2[18]),
        (
            &"2".to_string(),
            &"b.sluice.test".to_string(),
            &b.port().to_string()
        ),
        "{s2:?}"
    );
    // The third slot has no record: maintenance (resolution), no address nor host name.
    let s3 = state_of(&sock, "s3");
    assert_eq!(
        (&s3[4], &s3[6], &s3[17]),
        (&"0.0.0.0".to_string(), &"32".to_string(), &"-".to_string())
    );
    let stat = stats_cli(&sock, "show stat");
    let line = stat.lines().find(|l| l.starts_with("be,s3,")).unwrap();
    assert!(line.contains(",MAINT (resolution),"), "{line}");
    s.wait_stderr_line(
        |l| l.contains("be/s1 changed its FQDN from (null) to a.sluice.test by 'SRV record'"),
        Duration::from_secs(5),
    );
    s.wait_stderr_line(
        |l| l.contains("be/s2 changed its IP from (none) to 127.0.0.1 by DNS additional record."),
        Duration::from_secs(5),
    );
    // Health checks go to the records' addresses and ports.
    wait_until("checks pass", Duration::from_secs(10), || {
        ["s1", "s2"].iter().all(|srv| {
            stat_column(&sock, "be", srv, "check_status") == "L4OK"
                && stat_column(&sock, "be", srv, "status") == "UP"
        })
    });
    // Both ports serve, b twice as often as a.
    let t = tally(port, 6);
    assert_eq!(t.len(), 2, "{t:?}");
    assert!(t[0].0 == "a" && t[1].0 == "b" && t[1].1 > t[0].1, "{t:?}");

    // b's record goes away: its slot is freed at the next answer.
    dns.set(zone(both[..1].to_vec()));
    s.wait_stderr_line(
        |l| {
            l.contains(
                "Server be/s2 is going DOWN for maintenance (entry removed from SRV record).",
            )
        },
        Duration::from_secs(10),
    );
    let s2 = state_of(&sock, "s2");
    assert_eq!(
        (&s2[4], &s2[6], &s2[17]),
        (&"0.0.0.0".to_string(), &"32".to_string(), &"-".to_string())
    );
    let stat = stats_cli(&sock, "show stat");
    let line = stat.lines().find(|l| l.starts_with("be,s2,")).unwrap();
    assert!(line.contains(",MAINT (resolution),"), "{line}");
    assert_eq!(tally(port, 4), [("a".to_string(), 4)]);
    assert_eq!(state_of(&sock, "s1")[6], "0", "a keeps its slot");

    // Back: it takes the first free slot, s3 (s2 was freed after it).
    dns.set(zone(both));
    wait_until("b in s3", Duration::from_secs(10), || {
        let s3 = state_of(&sock, "s3");
        s3[6] == "0" && s3[17] == "b.sluice.test"
    });
    assert_eq!(state_of(&sock, "s2")[6], "32");
    assert_eq!(tally(port, 6).len(), 2);
}

/// `hold obsolete`: a record missing from the answers keeps its slot for that long.
#[test]
fn srv_hold_obsolete_keeps_a_missing_record() {
    let a = HttpBackend::start("a");
    let b = HttpBackend::start("b");
    let both = vec![
        ("a.sluice.test", a.port(), 1),
        ("b.sluice.test", b.port(), 1),
    ];
    let dns = DnsServer::start(zone(both.clone()));
    let dir = TempDir::new();
    let (cfg, port) = config(
        &dir,
        &dns,
        "hold obsolete 60s",
        "    server-template s 2 _http._tcp.app.sluice.test resolvers dns",
    );
    let _s = Sluice::start(&cfg);
    let sock = dir.join("s.sock");
    wait_until("two slots filled", Duration::from_secs(10), || {
        state_of(&sock, "s1")[6] == "0" && state_of(&sock, "s2")[6] == "0"
    });
    dns.set(zone(both[..1].to_vec()));
    let before = dns.queries.load(SeqCst);
    wait_until("five more resolutions", Duration::from_secs(10), || {
        dns.queries.load(SeqCst) >= before + 5
    });
    let s2 = state_of(&sock, "s2");
    assert_eq!(
        (&s2[6], &s2[17]),
        (&"0".to_string(), &"b.sluice.test".to_string())
    );
    assert_eq!(tally(port, 4).len(), 2, "b still serves");
}

/// Records without additional addresses: each target is resolved with A queries (here to
/// 127.0.0.1 and 127.0.0.2, the same port), as a server named by it would be.
#[test]
fn srv_targets_without_additional_records_are_resolved() {
    let (a, b) = two_backends();
    let dns = DnsServer::start(Dns::Srv(SrvZone {
        records: vec![
            ("a.sluice.test", a.port(), 100),
            ("b.sluice.test", a.port(), 100),
        ],
        hosts: vec![("a.sluice.test", lo(1)), ("b.sluice.test", lo(2))],
        additional: false,
    }));
    let dir = TempDir::new();
    let (cfg, port) = config(
        &dir,
        &dns,
        "",
        "    balance roundrobin\n    \
         server-template s 2 _http._tcp.app.sluice.test:80 resolvers dns",
    );
    let s = Sluice::start(&cfg);
    let sock = dir.join("s.sock");
    wait_until("two slots resolved", Duration::from_secs(10), || {
        state_of(&sock, "s1")[6] == "0" && state_of(&sock, "s2")[6] == "0"
    });
    let (s1, s2) = (state_of(&sock, "s1"), state_of(&sock, "s2"));
    assert_eq!(
        (&s1[4], &s1[17]),
        (&"127.0.0.1".to_string(), &"a.sluice.test".to_string())
    );
    assert_eq!(
        (&s2[4], &s2[17]),
        (&"127.0.0.2".to_string(), &"b.sluice.test".to_string())
    );
    // The records' port, not the one written after the name.
    assert_eq!(s1[18], a.port().to_string());
    let asked = dns.asked.lock().unwrap().clone();
    for host in ["a.sluice.test", "b.sluice.test"] {
        assert!(asked.contains(&(1, host.to_string())), "{asked:?}");
    }
    assert!(
        asked.contains(&(33, "_http._tcp.app.sluice.test".to_string())),
        "{asked:?}"
    );
    s.wait_stderr_line(
        |l| l.contains("Server be/s2 ('b.sluice.test') is UP/READY (resolves again)."),
        Duration::from_secs(5),
    );
    assert_eq!(tally(port, 4), [("a".to_string(), 2), ("b".to_string(), 2)]);
    drop(b);
}
