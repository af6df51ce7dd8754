//! The TLS accept path (DESIGN §6): `maxsslrate`, per-thread handshake scheduling (clients
//! that left before their handshake started cost no crypto), and `tune.runqueue-depth`
//! (a thread with a backlog of handshakes pauses its `ssl` listeners, and only then).
//!
//! Counts come from sluice itself (`show info`, `show activity`), so the tests wait on events,
//! not on sleeps, and bound rates from above with slack for a loaded machine.

mod common;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CA, a certificate for `localhost` it signed (as a PEM bundle on disk), and a client that
/// trusts the CA.
struct Certs {
    bundle: PathBuf,
    client: Arc<ClientConfig>,
    _dir: TempDir,
}

fn certs() -> Certs {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, "Accept CA");
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, "localhost");
    let key = KeyPair::generate().unwrap();
    let leaf = p.signed_by(&key, &ca).unwrap();
    let dir = TempDir::new();
    let bundle = dir.write("site.pem", format!("{}{}", leaf.pem(), key.serialize_pem()));
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every handshake a full one: these tests count handshakes.
    client.resumption = rustls::client::Resumption::disabled();
    Certs {
        bundle,
        client: Arc::new(client),
        _dir: dir,
    }
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn client_conn(c: &Certs) -> ClientConnection {
    ClientConnection::new(
        c.client.clone(),
        ServerName::try_from("localhost".to_string()).unwrap(),
    )
    .unwrap()
}

/// Finishes the handshake of `conn` on `sock` (whatever of it was already sent).
fn finish(mut conn: ClientConnection, mut sock: TcpStream) -> io::Result<Tls> {
    sock.set_read_timeout(Some(WAIT))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    Ok(StreamOwned::new(conn, sock))
}

fn tls_connect(port: u16, c: &Certs) -> io::Result<Tls> {
    let sock = TcpStream::connect(lo(port))?;
    sock.set_nodelay(true)?;
    finish(client_conn(c), sock)
}

/// One GET over `t`; the backend's name, or why not.
fn tls_get(t: &mut Tls) -> io::Result<String> {
    t.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")?;
    t.flush()?;
    let mut c = HttpClient::from_stream(t);
    let r = c.try_read_response(false)?;
    assert_eq!(r.status, 200);
    Ok(r.body_str())
}

/// A sluice with a `stats socket`, a frontend `fe` with an `ssl` bind and a plain bind, and a
/// backend `be` whose server answers with its name.
struct Proxy {
    s: Sluice,
    tls: u16,
    plain: u16,
    dir: TempDir,
    _b: HttpBackend,
}

impl Proxy {
    fn start(c: &Certs, global: &str) -> Proxy {
        let b = HttpBackend::start("s1");
        let dir = TempDir::new();
        let (tls, plain) = (free_port(), free_port());
        let cfg = format!(
            "global\n    stats socket {} level admin\n{global}\n{DEFAULTS_HTTP}\
             frontend fe\n    bind 127.0.0.1:{tls} ssl crt {}\n    bind 127.0.0.1:{plain}\n    \
             default_backend be\n{}",
            dir.join("admin.sock").display(),
            c.bundle.display(),
            backend_section("be", "", &[&b])
        );
        Proxy {
            s: Sluice::start(&cfg),
            tls,
            plain,
            dir,
            _b: b,
        }
    }

    fn cli(&self, cmd: &str) -> String {
        stats_cli(&self.dir.join("admin.sock"), cmd)
    }

    /// `show info` as a map.
    fn info(&self) -> HashMap<String, String> {
        self.cli("show info")
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn info_u64(&self, field: &str) -> u64 {
        let i = self.info();
        i.get(field)
            .unwrap_or_else(|| panic!("no {field} in show info: {i:?}"))
            .parse()
            .unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// maxsslrate
// ---------------------------------------------------------------------------------------------

/// 16 TLS clients at once against `maxsslrate 5` on two threads: all are served (they wait,
/// none is refused), no more than 5 a second are let in (so at least four one-second windows,
/// and never more than two windows' worth within any second), while a plain bind of the same
/// frontend is not held back.
#[test]
fn maxsslrate_spreads_handshakes_over_seconds_and_spares_plain_binds() {
    let c = certs();
    let p = Proxy::start(&c, "    nbthread 2\n    maxsslrate 5");
    let info = p.info();
    assert_eq!(info["SslRateLimit"], "5");
    assert_eq!(info["CumSslConns"], "0");
    let start = Instant::now();
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let (port, cfg) = (p.tls, client_conn(&c));
            std::thread::spawn(move || {
                let mut t = finish(cfg, TcpStream::connect(lo(port)).unwrap()).unwrap();
                let done = start.elapsed();
                assert_eq!(tls_get(&mut t).unwrap(), "s1");
                done
            })
        })
        .collect();
    // While TLS clients wait for their second, a burst of plain connections goes through.
    wait_until("a second's worth of TLS connections", WAIT, || {
        p.info_u64("CumSslConns") >= 5
    });
    let t = Instant::now();
    for i in 0..12 {
        assert_eq!(http_get(p.plain, &format!("/p{i}")).status, 200);
    }
    let plain = t.elapsed();
    assert!(
        p.info_u64("CumSslConns") < 16,
        "all TLS clients were served before the plain burst ended"
    );
    assert!(
        plain < Duration::from_secs(1),
        "12 plain requests took {plain:?}"
    );
    let mut done: Vec<Duration> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    done.sort();
    // 5 + 5 + 5 + 1: the last one cannot be in before three second boundaries have passed.
    assert!(
        done[15] >= Duration::from_secs(2),
        "16 handshakes at 5/s: {done:?}"
    );
    // Any one second holds at most two windows: no more than 10 handshakes by 1 s, 15 by 2 s.
    let by = |s: u64| done.iter().filter(|d| **d < Duration::from_secs(s)).count();
    assert!(by(1) <= 10 && by(2) <= 15, "{done:?}");
    let info = p.info();
    assert_eq!(info["CumSslConns"], "16");
    assert_eq!(info["MaxSslRate"], "5", "{info:?}");
}

#[test]
fn maxsslrate_config() {
    let (code, err) = Sluice::check("global\n    maxsslrate lots\n");
    assert_ne!(code, 0);
    assert!(
        err.contains(":2") && err.contains("maxsslrate"),
        "file:line and keyword: {err}"
    );
    let (code, err) = Sluice::check("global\n    maxsslrate 10 20\n");
    assert_ne!(code, 0, "{err}");
    let (code, err) = Sluice::check(
        "global\n    maxsslrate 0\n    maxsslrate 100\ndefaults\n    mode http\nfrontend fe\n    bind 127.0.0.1:8080\n",
    );
    assert_eq!(code, 0, "{err}");
}

/// Without `maxsslrate`, `show info` still measures the rate of TLS connections.
#[test]
fn ssl_rate_is_measured_without_a_limit() {
    let c = certs();
    let p = Proxy::start(&c, "");
    for _ in 0..3 {
        let mut t = tls_connect(p.tls, &c).unwrap();
        assert_eq!(tls_get(&mut t).unwrap(), "s1");
    }
    let info = p.info();
    assert_eq!(info["SslRateLimit"], "0");
    assert_eq!(info["CumSslConns"], "3");
    let max: u32 = info["MaxSslRate"].parse().unwrap();
    assert!((1..=3).contains(&max), "{info:?}");
    // `clear counters` resets the maximum.
    p.cli("clear counters");
    assert_eq!(p.info()["MaxSslRate"], "0");
}

// ---------------------------------------------------------------------------------------------
// Handshake scheduling: clients that left cost no crypto
// ---------------------------------------------------------------------------------------------

/// `show activity` counter `name`, summed over threads.
fn activity(p: &Proxy, name: &str) -> u64 {
    let out = p.cli("show activity");
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {name} in show activity:\n{out}"))
        .parse()
        .unwrap()
}

/// The bytes of a fresh ClientHello.
fn client_hello(c: &Certs) -> Vec<u8> {
    let mut conn = client_conn(c);
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

/// Clients that go away before their handshake starts are never handshaken: one that connects
/// and closes, one whose ClientHello arrives together with its FIN (a TLS client that shut
/// its side can never finish), one that resets. An established plain keep-alive client is
/// served throughout, and a real TLS client afterwards still is.
#[test]
fn clients_gone_before_their_handshake_are_never_handshaken() {
    let c = certs();
    let p = Proxy::start(&c, "    nbthread 1");
    let mut ka = HttpClient::connect(p.plain);
    assert_eq!(ka.get("/").status, 200);
    let rounds = 25;
    for i in 0..rounds {
        drop(TcpStream::connect(lo(p.tls)).unwrap());

        let mut s = TcpStream::connect(lo(p.tls)).unwrap();
        // Corked: the ClientHello and the FIN leave in one segment, so sluice cannot see
        // one without the other.
        socket2::SockRef::from(&s).set_tcp_cork(true).unwrap();
        s.write_all(&client_hello(&c)).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();

        let s = TcpStream::connect(lo(p.tls)).unwrap();
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(s);

        assert_eq!(ka.get(&format!("/k{i}")).status, 200);
    }
    wait_until("every connection seen and dropped", WAIT, || {
        activity(&p, "ssl_hs_dropped") == 3 * rounds
    });
    assert_eq!(activity(&p, "ssl_hs_started"), 0);
    assert_eq!(p.info()["CumSslConns"], "0");
    let mut t = tls_connect(p.tls, &c).unwrap();
    assert_eq!(tls_get(&mut t).unwrap(), "s1");
    assert_eq!(activity(&p, "ssl_hs_started"), 1);
    assert_eq!(p.info()["CurrSslConns"], "1");
    drop(t);
    wait_until("CurrSslConns back to 0", WAIT, || {
        p.info()["CurrSslConns"] == "0"
    });
}

// ---------------------------------------------------------------------------------------------
// tune.runqueue-depth
// ---------------------------------------------------------------------------------------------

/// A handshake storm: 48 connections whose ClientHellos all arrive at once (sent while sluice
/// is stopped, so its thread sees them in one poll). They queue; at 8 the thread pauses its
/// `ssl` listener, so new TLS clients wait in the backlog meanwhile. Everything is served,
/// the pause ends, and a plain bind of the same thread is served during the storm.
#[test]
fn a_handshake_storm_pauses_ssl_accepts_until_it_drains() {
    let c = certs();
    let p = Proxy::start(&c, "    nbthread 1\n    tune.runqueue-depth 8");
    let n: u64 = 48;
    let socks: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(lo(p.tls)).unwrap())
        .collect();
    wait_until("all accepted", WAIT, || activity(&p, "accepted") == n);
    let mut conns: Vec<ClientConnection> = (0..n).map(|_| client_conn(&c)).collect();
    p.s.signal(nix::sys::signal::Signal::SIGSTOP);
    for (conn, mut s) in conns.iter_mut().zip(&socks) {
        while conn.wants_write() {
            conn.write_tls(&mut s).unwrap();
        }
    }
    p.s.signal(nix::sys::signal::Signal::SIGCONT);
    // New TLS clients during the storm, and a plain one.
    let late: Vec<_> = (0..4)
        .map(|_| {
            let (port, conn) = (p.tls, client_conn(&c));
            std::thread::spawn(move || {
                let mut t = finish(conn, TcpStream::connect(lo(port)).unwrap()).unwrap();
                tls_get(&mut t).unwrap()
            })
        })
        .collect();
    assert_eq!(http_get(p.plain, "/plain").status, 200);
    for (conn, s) in conns.into_iter().zip(socks) {
        let mut t = finish(conn, s).unwrap();
        assert_eq!(tls_get(&mut t).unwrap(), "s1");
    }
    for h in late {
        assert_eq!(h.join().unwrap(), "s1");
    }
    assert!(
        activity(&p, "ssl_hs_queue_max") >= 8,
        "the storm queued: {}",
        p.cli("show activity")
    );
    assert!(activity(&p, "ssl_accept_paused") >= 1);
    assert_eq!(activity(&p, "ssl_hs_queued"), 0);
    assert_eq!(activity(&p, "ssl_hs_started"), n + 4);
    // Recovered: a new client is served.
    let mut t = tls_connect(p.tls, &c).unwrap();
    assert_eq!(tls_get(&mut t).unwrap(), "s1");
}

/// Regular traffic never pauses accepting, however low `tune.runqueue-depth` is: TLS clients
/// one after another, with plain keep-alive and new plain connections alongside, never make
/// a handshake wait, and the `ssl` listener never pauses.
#[test]
fn regular_traffic_never_pauses_accepts() {
    let c = certs();
    let p = Proxy::start(&c, "    nbthread 1\n    tune.runqueue-depth 1");
    let plain = p.plain;
    let busy: Vec<_> = (0..3)
        .map(|k| {
            std::thread::spawn(move || {
                let mut ka = HttpClient::connect(plain);
                for i in 0..100 {
                    assert_eq!(ka.get(&format!("/ka{k}-{i}")).status, 200);
                    if i % 10 == 0 {
                        assert_eq!(http_get(plain, "/new").status, 200);
                    }
                }
            })
        })
        .collect();
    for _ in 0..20 {
        let mut t = tls_connect(p.tls, &c).unwrap();
        assert_eq!(tls_get(&mut t).unwrap(), "s1");
    }
    for h in busy {
        h.join().unwrap();
    }
    assert_eq!(activity(&p, "ssl_hs_started"), 20);
    assert_eq!(
        activity(&p, "ssl_hs_queue_max"),
        0,
        "{}",
        p.cli("show activity")
    );
    assert_eq!(activity(&p, "ssl_accept_paused"), 0);
}

#[test]
fn runqueue_depth_config() {
    for bad in ["0", "-3", "many"] {
        let (code, err) = Sluice::check(&format!("global\n    tune.runqueue-depth {bad}\n"));
        assert_ne!(code, 0, "{bad}");
        assert!(
            err.contains(":2") && err.contains("tune.runqueue-depth"),
            "{err}"
        );
    }
    let (code, err) = Sluice::check(
        "global\n    tune.runqueue-depth 50\ndefaults\n    mode http\nfrontend fe\n    bind 127.0.0.1:8080\n",
    );
    assert_eq!(code, 0, "{err}");
}
