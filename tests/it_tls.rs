//! TLS: `bind ... ssl` (SNI certificate selection, strict-sni, ALPN, client certificates),
//! `ssl_fc*`/`ssl_c*` fetches, session resumption across threads, `server ... ssl` towards a
//! TLS backend, `set ssl cert` + `commit ssl cert`, and configuration errors. Certificates are
//! generated per test with rcgen; the client is rustls over std sockets.

mod common;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------------

/// A test CA that signs leaf certificates.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key, as PEM and DER.
struct Leaf {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl Ca {
    fn new(cn: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, cn);
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn leaf(&self, cn: &str, sans: &[&str]) -> Leaf {
        self.leaf_with(cn, sans, KeyPair::generate().unwrap())
    }

    /// A leaf with a 2048-bit RSA key (the others are ECDSA P-256).
    fn leaf_rsa(&self, cn: &str, sans: &[&str]) -> Leaf {
        self.leaf_with(
            cn,
            sans,
            KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap(),
        )
    }

    fn leaf_with(&self, cn: &str, sans: &[&str], key: KeyPair) -> Leaf {
        let mut p =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        let c = p.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: c.pem(),
            key_pem: key.serialize_pem(),
            der: c.der().to_vec(),
        }
    }
}

impl Leaf {
    fn bundle(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }
}

fn roots(ca_pem: &str) -> rustls::RootCertStore {
    let mut r = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        r.add(c.unwrap()).unwrap();
    }
    r
}

use rustls::pki_types::pem::PemObject;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A client trusting `ca_pem`, offering `alpn`, presenting `cert` if given.
fn client_cfg(ca_pem: &str, alpn: &[&str], cert: Option<&Leaf>) -> Arc<ClientConfig> {
    let b = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(ca_pem));
    let mut c = match cert {
        Some(l) => b
            .with_client_auth_cert(
                vec![CertificateDer::from(l.der.clone())],
                PrivateKeyDer::from_pem_slice(l.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    c.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    // Every handshake full, so that the certificate is always sent (a resumed session keeps
    // the one it was made with).
    c.resumption = rustls::client::Resumption::disabled();
    Arc::new(c)
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

/// Connects and completes the handshake. `sni`: `None` connects by IP (no SNI sent).
fn tls_connect(port: u16, sni: Option<&str>, cfg: &Arc<ClientConfig>) -> io::Result<Tls> {
    let name = match sni {
        Some(n) => ServerName::try_from(n.to_string()).unwrap(),
        None => ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
    };
    tls_over(TcpStream::connect(lo(port))?, name, cfg)
}

/// Completes a TLS handshake over an established TCP connection.
fn tls_over(
    mut sock: TcpStream,
    name: ServerName<'static>,
    cfg: &Arc<ClientConfig>,
) -> io::Result<Tls> {
    let mut conn = ClientConnection::new(cfg.clone(), name).map_err(io::Error::other)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    sock.set_nodelay(true)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    Ok(StreamOwned::new(conn, sock))
}

fn peer_der(t: &Tls) -> Vec<u8> {
    t.conn.peer_certificates().unwrap()[0].as_ref().to_vec()
}

/// One GET over an established TLS connection; `Err` when the server closed or reset instead.
fn tls_get(t: &mut Tls, path: &str, host: &str) -> io::Result<Response> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    t.write_all(req.as_bytes())?;
    t.flush()?;
    let mut c = HttpClient::from_stream(t);
    c.try_read_response(false)
}

fn write_file(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    dir.write(name, text)
}

/// A frontend on `port` with `bind_opts`, routing by `rules`, default backend `be`.
fn tls_proxy(port: u16, bind_opts: &str, fe_extra: &str, backends: &str) -> Sluice {
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port} {bind_opts}\n{fe_extra}\n    default_backend be\n{backends}"
    );
    Sluice::start(&cfg)
}

// ---------------------------------------------------------------------------------------------
// Server side: certificates, SNI, ALPN
// ---------------------------------------------------------------------------------------------

#[test]
fn sni_selects_exact_wildcard_and_default_certificates() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let def = ca.leaf("default.example", &["default.example"]);
    let a = ca.leaf("a.example", &["a.example"]);
    let w = ca.leaf("wild", &["*.w.example"]);
    let d = write_file(&dir, "default.pem", &def.bundle());
    std::fs::create_dir(dir.join("certs")).unwrap();
    write_file(&dir, "certs/a.pem", &a.bundle());
    // The key beside the certificate, as HAProxy also loads it.
    write_file(&dir, "certs/w.pem", &w.cert_pem);
    write_file(&dir, "certs/w.pem.key", &w.key_pem);
    let b = HttpBackend::start("s1");
    let bsni = HttpBackend::start("sni-a");
    let port = free_port();
    let _s = tls_proxy(
        port,
        &format!(
            "ssl crt {} crt {}",
            d.display(),
            dir.join("certs").display()
        ),
        "    use_backend be_a if { ssl_fc_sni a.example } { ssl_fc } { ssl_fc_protocol TLSv1.3 }",
        &format!(
            "{}{}",
            backend_section("be", "", &[&b]),
            backend_section("be_a", "", &[&bsni])
        ),
    );
    let cfg = client_cfg(&ca.pem(), &[], None);
    let mut t = tls_connect(port, Some("a.example"), &cfg).unwrap();
    assert_eq!(peer_der(&t), a.der, "exact name");
    assert_eq!(
        tls_get(&mut t, "/", "a.example").unwrap().body_str(),
        "sni-a"
    );
    let mut t = tls_connect(port, Some("x.w.example"), &cfg).unwrap();
    assert_eq!(peer_der(&t), w.der, "wildcard");
    assert_eq!(tls_get(&mut t, "/", "x").unwrap().body_str(), "s1");
    // The wildcard covers one label only, and unknown names get the default.
    let no_verify = insecure_cfg(&[]);
    let t = tls_connect(port, Some("y.x.w.example"), &no_verify).unwrap();
    assert_eq!(peer_der(&t), def.der, "wildcard is one label deep");
    let t = tls_connect(port, Some("other.example"), &no_verify).unwrap();
    assert_eq!(peer_der(&t), def.der, "unknown name -> default");
    let mut t = tls_connect(port, None, &no_verify).unwrap();
    assert_eq!(peer_der(&t), def.der, "no SNI -> default");
    let r = tls_get(&mut t, "/", "x").unwrap();
    assert_eq!(r.status, 200);
}

/// A client that can verify RSA signatures only (as old clients).
fn rsa_only_client(ca_pem: &str) -> Arc<ClientConfig> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    let rsa: Vec<_> = p
        .signature_verification_algorithms
        .mapping
        .iter()
        .filter(|(scheme, _)| format!("{scheme:?}").starts_with("RSA"))
        .cloned()
        .collect();
    p.signature_verification_algorithms.mapping = Box::leak(rsa.into_boxed_slice());
    let mut c = ClientConfig::builder_with_provider(Arc::new(p))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots(ca_pem))
        .with_no_client_auth();
    c.resumption = rustls::client::Resumption::disabled();
    Arc::new(c)
}

/// One name with an ECDSA and an RSA certificate (HAProxy's multi-certificate bundle:
/// `crt site.pem` loads `site.pem.ecdsa` and `site.pem.rsa`): clients that verify ECDSA get
/// the ECDSA one, RSA-only clients the RSA one, with SNI and by default.
#[test]
fn ecdsa_and_rsa_certificates_for_one_name_are_picked_by_the_client() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    // (The IP lets clients without SNI verify the default certificate.)
    let ec = ca.leaf("a.example", &["a.example", "127.0.0.1"]);
    let rsa = ca.leaf_rsa("a.example", &["a.example", "127.0.0.1"]);
    // Load order must not matter: the RSA one comes first in a second bind.
    write_file(&dir, "site.pem.rsa", &rsa.bundle());
    write_file(&dir, "site.pem.ecdsa", &ec.bundle());
    let rsa_first = write_file(&dir, "rsa.pem", &rsa.bundle());
    let ec_second = write_file(&dir, "ec.pem", &ec.bundle());
    let b = HttpBackend::start("s1");
    let (p1, p2) = (free_port(), free_port());
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{p1} ssl crt {}\n\
\x20   bind 127.0.0.1:{p2} ssl crt {} crt {}\n    default_backend be\n{}",
        dir.join("site.pem").display(),
        rsa_first.display(),
        ec_second.display(),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let modern = client_cfg(&ca.pem(), &[], None);
    let old = rsa_only_client(&ca.pem());
    for port in [p1, p2] {
        for sni in [Some("a.example"), None] {
            let mut t = tls_connect(port, sni, &modern).unwrap();
            assert_eq!(
                peer_der(&t),
                ec.der,
                "port {port} sni {sni:?}: ECDSA preferred"
            );
            assert_eq!(tls_get(&mut t, "/", "a").unwrap().status, 200);
            let mut t = tls_connect(port, sni, &old).unwrap();
            assert_eq!(
                peer_der(&t),
                rsa.der,
                "port {port} sni {sni:?}: RSA-only client"
            );
            assert_eq!(tls_get(&mut t, "/", "a").unwrap().status, 200);
        }
    }
    // A bundle with none of its files is an error naming them.
    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{p1} ssl crt {}\n    default_backend be\n{}",
        dir.join("none.pem").display(),
        backend_section("be", "", &[&b])
    ));
    assert_eq!(code, 1);
    assert!(err.contains("none.pem.ecdsa"), "{err}");
}

/// A temporary directory holding `a.pem`: a leaf for `a.example`, with its chain and key,
/// signed by the returned CA.
fn a_example_site() -> (TempDir, Ca, PathBuf) {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let a = ca.leaf("a.example", &["a.example"]);
    let f = write_file(&dir, "a.pem", &a.bundle());
    (dir, ca, f)
}

#[test]
fn strict_sni_refuses_unknown_and_missing_names() {
    let (_dir, ca, f) = a_example_site();
    let b = HttpBackend::start("s1");
    let port = free_port();
    let _s = tls_proxy(
        port,
        &format!("ssl crt {} strict-sni", f.display()),
        "",
        &backend_section("be", "", &[&b]),
    );
    let cfg = client_cfg(&ca.pem(), &[], None);
    let mut t = tls_connect(port, Some("a.example"), &cfg).unwrap();
    assert_eq!(tls_get(&mut t, "/", "a").unwrap().status, 200);
    let insecure = insecure_cfg(&[]);
    assert!(tls_connect(port, Some("b.example"), &insecure).is_err());
    assert!(tls_connect(port, None, &insecure).is_err());
}

#[test]
fn alpn_in_tcp_mode_is_as_configured_and_http_mode_picks_h2_only_when_offered() {
    let (_dir, ca, f) = a_example_site();
    let echo = TcpBackend::echo();
    let b = HttpBackend::start("s1");
    let bh2 = HttpBackend::start("alpn-h1");
    let (tport, hport) = (free_port(), free_port());
    let cfg = format!(
        "defaults\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend ft\n    mode tcp\n    bind 127.0.0.1:{tport} ssl crt {f} alpn h2,http/1.1\n    default_backend bt\n\
backend bt\n    mode tcp\n    server e {}\n\
frontend fh\n    mode http\n    bind 127.0.0.1:{hport} ssl crt {f} alpn h2,http/1.1\n\
\x20   use_backend bh2 if {{ ssl_fc_alpn http/1.1 }}\n    default_backend bh\n\
backend bh\n    mode http\n    server s1 {}\n\
backend bh2\n    mode http\n    server s2 {}\n",
        echo.hostport(),
        b.hostport(),
        bh2.hostport(),
        f = f.display()
    );
    let _s = Sluice::start(&cfg);
    let c = client_cfg(&ca.pem(), &["h2", "http/1.1"], None);
    // mode tcp: TLS is terminated and the bytes relayed; h2 is negotiated as configured.
    let mut t = tls_connect(tport, Some("a.example"), &c).unwrap();
    assert_eq!(t.conn.alpn_protocol(), Some(&b"h2"[..]));
    t.write_all(b"ping over tls").unwrap();
    t.flush().unwrap();
    let mut got = [0u8; 13];
    t.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping over tls");
    // mode http: h2 is agreed with a client that offers it (it_http2 speaks it), and a
    // client that offers only http/1.1 gets it.
    let t = tls_connect(hport, Some("a.example"), &c).unwrap();
    assert_eq!(t.conn.alpn_protocol(), Some(&b"h2"[..]));
    let h1 = client_cfg(&ca.pem(), &["http/1.1"], None);
    let mut t = tls_connect(hport, Some("a.example"), &h1).unwrap();
    assert_eq!(t.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(tls_get(&mut t, "/", "a").unwrap().body_str(), "alpn-h1");
}

/// A client that accepts any server certificate.
fn insecure_cfg(alpn: &[&str]) -> Arc<ClientConfig> {
    insecure_cfg_versions(alpn, rustls::DEFAULT_VERSIONS)
}

/// As [`insecure_cfg`], offering only `versions`.
fn insecure_cfg_versions(
    alpn: &[&str],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    insecure_client(alpn, versions)
}

// ---------------------------------------------------------------------------------------------
// Client certificates
// ---------------------------------------------------------------------------------------------

/// What happened to one request with a given client certificate.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Served, by the backend named.
    Served(String),
    Refused,
}

fn attempt(port: u16, cfg: &Arc<ClientConfig>) -> Outcome {
    // TLS 1.3: the server judges the client certificate after the client thinks the handshake
    // is done, so a refusal shows on the first read.
    match tls_connect(port, Some("a.example"), cfg).and_then(|mut t| tls_get(&mut t, "/", "a")) {
        Ok(r) => Outcome::Served(r.body_str()),
        Err(_) => Outcome::Refused,
    }
}

#[test]
fn client_certificate_verification_none_optional_required() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let client_ca = Ca::new("Client CA");
    let rogue_ca = Ca::new("Rogue CA");
    let srv = ca.leaf("a.example", &["a.example"]);
    let good = client_ca.leaf("alice", &["alice.example"]);
    let bad = rogue_ca.leaf("mallory", &["mallory.example"]);
    let f = write_file(&dir, "a.pem", &srv.bundle());
    let cafile = write_file(&dir, "clients.pem", &client_ca.pem());
    let b = HttpBackend::start("anon");
    let bc = HttpBackend::start("cert");
    let (pn, po, pr) = (free_port(), free_port(), free_port());
    let route = "    use_backend bc if { ssl_c_used } { ssl_c_verify 0 } { ssl_c_s_dn -m sub CN=alice } { ssl_c_i_dn -m end /CN=Client\\ CA }\n";
    let cfg = format!(
        "{DEFAULTS_HTTP}\
frontend fn\n    bind 127.0.0.1:{pn} ssl crt {f}\n{route}    default_backend be\n\
frontend fo\n    bind 127.0.0.1:{po} ssl crt {f} ca-file {ca} verify optional\n{route}    default_backend be\n\
frontend fr\n    bind 127.0.0.1:{pr} ssl crt {f} ca-file {ca} verify required\n{route}    default_backend be\n\
{}{}",
        backend_section("be", "", &[&b]),
        backend_section("bc", "", &[&bc]),
        f = f.display(),
        ca = cafile.display()
    );
    let _s = Sluice::start(&cfg);
    let none = client_cfg(&ca.pem(), &[], None);
    let with_good = client_cfg(&ca.pem(), &[], Some(&good));
    let with_bad = client_cfg(&ca.pem(), &[], Some(&bad));
    let served = |n: &str| Outcome::Served(n.to_string());
    // verify none: no certificate is asked for, so none is used.
    assert_eq!(attempt(pn, &none), served("anon"));
    assert_eq!(attempt(pn, &with_good), served("anon"));
    assert_eq!(attempt(pn, &with_bad), served("anon"));
    // verify optional: absent is fine, a valid one is seen, an invalid one is refused.
    assert_eq!(attempt(po, &none), served("anon"));
    assert_eq!(attempt(po, &with_good), served("cert"));
    assert_eq!(attempt(po, &with_bad), Outcome::Refused);
    // verify required: only a valid one gets through.
    assert_eq!(attempt(pr, &none), Outcome::Refused);
    assert_eq!(attempt(pr, &with_good), served("cert"));
    assert_eq!(attempt(pr, &with_bad), Outcome::Refused);
}

// ---------------------------------------------------------------------------------------------
// Session resumption
// ---------------------------------------------------------------------------------------------

/// A client of `ca`'s servers speaking only `version`, keeping the sessions it may resume.
fn resuming_client(
    ca: &Ca,
    version: &'static rustls::SupportedProtocolVersion,
) -> Arc<ClientConfig> {
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots(&ca.pem()))
        .with_no_client_auth();
    c.resumption = rustls::client::Resumption::in_memory_sessions(256);
    Arc::new(c)
}

#[test]
fn sessions_resume_across_worker_threads() {
    let (dir, ca, f) = a_example_site();
    let b = HttpBackend::start("s1");
    let port = free_port();
    let sock = dir.join("admin.sock");
    let cfg = format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port} ssl crt {}\n    default_backend be\n{}",
        sock.display(),
        f.display(),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    for versions in [&rustls::version::TLS13, &rustls::version::TLS12] {
        // One client configuration = one session store, as a browser has.
        let c = resuming_client(&ca, versions);
        let n = 40;
        let mut resumed = 0;
        let mut ports = std::collections::HashSet::new();
        for i in 0..n {
            let mut t = tls_connect(port, Some("a.example"), &c).unwrap();
            if t.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                resumed += 1;
            }
            ports.insert(t.sock.local_addr().unwrap().port());
            // Reading the response also reads the TLS 1.3 tickets sent after the handshake.
            let r = tls_get(&mut t, &format!("/{i}"), "a").unwrap();
            assert_eq!(r.status, 200);
        }
        assert_eq!(
            resumed,
            n - 1,
            "{versions:?}: every connection after the first resumes"
        );
        assert_eq!(ports.len(), n, "each request used a new connection");
    }
    // Both threads did handshakes: the kernel spread the 80 connections over the two
    // SO_REUSEPORT sockets, so resumption worked across threads.
    assert_both_threads_accepted(&sock);
}

/// `tune.ssl.lifetime`: a session resumes within its lifetime and not after (HAProxy's
/// OpenSSL refuses a session past its timeout; rustls alone would resume for hours), by
/// ticket and, with `no-tls-tickets`, from the session cache; `tune.ssl.cachesize 0` keeps
/// no session, so that without tickets nothing resumes.
#[test]
fn session_lifetime_and_cache_size() {
    let (_dir, ca, f) = a_example_site();
    let b = HttpBackend::start("s1");
    let run = |global: &str, bind_opts: &str| {
        let port = free_port();
        let cfg = format!(
            "global\n{global}{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port} ssl crt {} \
             {bind_opts}\n    default_backend be\n{}",
            f.display(),
            backend_section("be", "", &[&b])
        );
        (Sluice::start(&cfg), port)
    };
    let client = |versions| resuming_client(&ca, versions);
    // One request on a new connection; whether its handshake resumed a session.
    let resumed = |port: u16, c: &Arc<ClientConfig>| {
        let mut t = tls_connect(port, Some("a.example"), c).unwrap();
        let r = tls_get(&mut t, "/", "a").unwrap();
        assert_eq!(r.status, 200);
        t.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
    };
    for bind_opts in ["", "no-tls-tickets"] {
        let (_s, port) = run("    tune.ssl.lifetime 1\n", bind_opts);
        for v in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let c = client(v);
            assert!(!resumed(port, &c), "{bind_opts:?} {v:?}: first is full");
            assert!(resumed(port, &c), "{bind_opts:?} {v:?}: resumes within 1 s");
            // Aging the session past its lifetime is what is tested: a sleep, not a wait.
            std::thread::sleep(Duration::from_millis(1300));
            assert!(!resumed(port, &c), "{bind_opts:?} {v:?}: expired after 1 s");
            assert!(
                resumed(port, &c),
                "{bind_opts:?} {v:?}: the new session resumes"
            );
        }
    }
    let (_s, port) = run("    tune.ssl.cachesize 0\n", "no-tls-tickets");
    let c = client(&rustls::version::TLS12);
    assert!(
        !resumed(port, &c) && !resumed(port, &c),
        "no cache, no tickets: never"
    );
}

/// `show activity` says each of the 2 threads accepted connections.
fn assert_both_threads_accepted(sock: &Path) {
    let act = stats_cli(sock, "show activity");
    let line = act
        .lines()
        .find(|l| l.starts_with("accepted"))
        .unwrap_or_else(|| panic!("no accepted line in:\n{act}"))
        .to_string();
    // `accepted: TOTAL [ T1 T2 ]`
    let per_thread: Vec<u64> = line
        .split('[')
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    assert!(
        per_thread.len() == 2 && per_thread.iter().all(|&n| n > 0),
        "both threads accepted TLS connections: {line}"
    );
}

// ---------------------------------------------------------------------------------------------
// Handshake failures
// ---------------------------------------------------------------------------------------------

#[test]
fn failed_and_stalled_handshakes_are_logged_and_bounded() {
    let (_dir, ca, f) = a_example_site();
    let b = HttpBackend::start("s1");
    let (port, named) = (free_port(), free_port());
    let cfg = format!(
        "global\n    log stdout format raw local0\ndefaults\n    mode http\n    log global\n\
\x20   timeout connect 2s\n    timeout client 10s\n    timeout http-request 1s\n    timeout server 10s\n\
frontend fe\n    bind 127.0.0.1:{port} ssl crt {f}\n    bind 127.0.0.1:{named} name alt ssl crt {f}\n\
\x20   default_backend be\n{}",
        backend_section("be", "", &[&b]),
        f = f.display()
    );
    let s = Sluice::start(&cfg);
    // Plain HTTP on a TLS port: refused, logged, no crash.
    let mut c = HttpClient::connect(port);
    c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // A TLS alert may come first; then the connection closes.
    loop {
        match c.wait_closed(WAIT) {
            Closed::Data(d) => assert_eq!(d[0], 21, "only a TLS alert record: {d:?}"),
            other => {
                assert!(other.is_closed(), "{other:?}");
                break;
            }
        }
    }
    s.wait_log_line(|l| l.contains("fe/1: SSL handshake failure"), WAIT);
    // A named bind is logged by its name.
    let mut c = HttpClient::connect(named);
    c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    s.wait_log_line(|l| l.contains("fe/alt: SSL handshake failure"), WAIT);
    // A client that never speaks is cut after `timeout http-request`.
    let mut idle = HttpClient::connect(port);
    let started = std::time::Instant::now();
    idle.expect_closed();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "handshake bounded by timeout http-request (1s): took {took:?}"
    );
    s.wait_log_line(|l| l.contains("SSL handshake failure (timeout)"), WAIT);
    // And TLS still works.
    let cfg = client_cfg(&ca.pem(), &[], None);
    let mut t = tls_connect(port, Some("a.example"), &cfg).unwrap();
    assert_eq!(tls_get(&mut t, "/", "a").unwrap().status, 200);
}

// ---------------------------------------------------------------------------------------------
// Runtime certificate update
// ---------------------------------------------------------------------------------------------

/// Sends `set ssl cert` with a payload; returns the reply.
fn set_cert(sock: &Path, file: &Path, pem: &str) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let pem = pem.trim_end();
    write!(s, "set ssl cert {} <<\n{pem}\n\n", file.display()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn set_and_commit_ssl_cert_swaps_for_new_handshakes_only() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let old = ca.leaf("a.example", &["a.example"]);
    let new = ca.leaf("a.example", &["a.example", "b.example"]);
    let f = write_file(&dir, "a.pem", &old.bundle());
    let b = HttpBackend::start("s1");
    let port = free_port();
    let sock = dir.join("admin.sock");
    let cfg = format!(
        "global\n    stats socket {} level admin\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port} ssl crt {}\n    default_backend be\n{}",
        sock.display(),
        f.display(),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    let c = client_cfg(&ca.pem(), &[], None);
    let mut kept = tls_connect(port, Some("a.example"), &c).unwrap();
    assert_eq!(peer_der(&kept), old.der);
    assert_eq!(tls_get(&mut kept, "/1", "a").unwrap().status, 200);

    let listing = stats_cli(&sock, "show ssl cert");
    assert!(listing.contains(&f.display().to_string()), "{listing}");
    let r = set_cert(&sock, &f, &new.bundle());
    assert!(r.contains("Transaction created"), "{r}");
    let listing = stats_cli(&sock, "show ssl cert");
    assert!(listing.contains(&format!("*{}", f.display())), "{listing}");
    // Not committed yet: new handshakes still get the old certificate.
    let t = tls_connect(port, Some("a.example"), &c).unwrap();
    assert_eq!(peer_der(&t), old.der);
    let r = stats_cli(&sock, &format!("commit ssl cert {}", f.display()));
    assert!(r.contains("Success!"), "{r}");
    let t = tls_connect(port, Some("b.example"), &c).unwrap();
    assert_eq!(
        peer_der(&t),
        new.der,
        "new handshakes see the committed certificate"
    );
    // The connection opened before the swap keeps working.
    assert_eq!(tls_get(&mut kept, "/2", "a").unwrap().status, 200);
    let details = stats_cli(&sock, &format!("show ssl cert {}", f.display()));
    assert!(details.contains("DNS:b.example"), "{details}");

    // abort drops a pending change; a mismatched key is refused.
    let other = ca.leaf("a.example", &["a.example"]);
    let r = set_cert(&sock, &f, &other.cert_pem);
    assert!(r.contains("does not match"), "{r}");
    let r = set_cert(&sock, &f, &other.bundle());
    assert!(r.contains("Transaction created"), "{r}");
    let r = stats_cli(&sock, &format!("abort ssl cert {}", f.display()));
    assert!(r.contains("aborted"), "{r}");
    let t = tls_connect(port, Some("a.example"), &c).unwrap();
    assert_eq!(peer_der(&t), new.der);
    let r = set_cert(&sock, &dir.join("nope.pem"), &other.bundle());
    assert!(r.contains("not referenced"), "{r}");
}

/// A reload (`-x` on a stats socket with `expose-fd listeners`, `-sf` on the old process)
/// swaps the certificate for new handshakes without losing a connection: connections waiting
/// in the old process's accept queues (it is at its `maxconn`) are served by the new process
/// with the new certificate instead of being reset when the old one stops listening, a
/// request in flight on the old process completes, and the old process exits.
#[test]
fn reload_with_x_and_sf_swaps_certificates_without_losing_connections() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let old = ca.leaf("a.example", &["a.example"]);
    let new = ca.leaf("a.example", &["a.example", "b.example"]);
    let f = write_file(&dir, "site.pem", &old.bundle());
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let port = free_port();
    let sock = dir.join("admin.sock");
    // The old process takes one connection at a time; the new one, more.
    let cfg = |maxconn: u32| {
        format!(
            "global\n    nbthread 2\n    stats socket {} level admin expose-fd listeners\n\
{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port} ssl crt {} backlog 64\n\
\x20   maxconn {maxconn}\n    default_backend be\n{}",
            sock.display(),
            f.display(),
            backend_section("be", "", &[&b])
        )
    };
    let a = Sluice::start(&cfg(1));
    let c = client_cfg(&ca.pem(), &[], None);
    let name = || ServerName::try_from("a.example").unwrap();

    // A request in flight on the old process, holding its one connection slot until the
    // server answers (when the gate opens).
    let mut slow = tls_connect(port, Some("a.example"), &c).unwrap();
    assert_eq!(peer_der(&slow), old.der);
    let in_flight = std::thread::spawn(move || tls_get(&mut slow, "/slow", "a").map(|r| r.status));
    wait_until("the slow request reached the server", WAIT, || {
        b.requests().iter().any(|r| r.target == "/slow")
    });
    // Connections the old process does not accept (at maxconn): the kernel completed their
    // TCP handshakes, and they wait in its listening sockets' queues.
    let queued: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(lo(port)).unwrap())
        .collect();

    // The reload: a new certificate on disk, a new process taking the listeners.
    std::fs::write(&f, new.bundle()).unwrap();
    let n = Sluice::builder(&cfg(100))
        .arg("-x")
        .arg(sock.display().to_string())
        .arg("-sf")
        .arg(a.pid().to_string())
        .start();
    n.wait_stderr_line(|l| l.contains("took 2 listening socket(s)"), WAIT);
    a.wait_stderr_line(|l| l.contains("handed to a new process"), WAIT);
    a.wait_stderr_line(|l| l.contains("soft stop"), WAIT);
    // The queued connections are served: by the new process, with the new certificate (or,
    // for one that a thread of the old process had already taken from the queue while
    // waiting for a place, by the old one).
    let mut by_new = 0;
    for (i, s) in queued.into_iter().enumerate() {
        let mut t = tls_over(s, name(), &c).unwrap_or_else(|e| {
            panic!(
                "queued {i}: {e}\nold:\n{}\nnew:\n{}",
                a.stderr_text(),
                n.stderr_text()
            )
        });
        by_new += usize::from(peer_der(&t) == new.der);
        assert_eq!(
            tls_get(&mut t, "/q", "a").unwrap().status,
            200,
            "queued {i}"
        );
    }
    assert!(
        by_new >= 2,
        "{by_new} of 4 queued connections served by the new process"
    );

    // The old process finishes its request, then exits.
    assert!(
        a.exit_status().is_none(),
        "the old process waits for its request"
    );
    gate.open();
    assert_eq!(in_flight.join().unwrap().unwrap(), 200);
    let st = a.wait_exit(WAIT).expect("the old process exits");
    assert!(st.success(), "{st:?}");
    // New clients keep being served; the stats socket file is the new process's, still
    // there after the old one removed its own on exit.
    let mut t = tls_connect(port, Some("b.example"), &c).unwrap();
    assert_eq!(tls_get(&mut t, "/after", "b").unwrap().status, 200);
    let info = stats_cli(&sock, "show info");
    assert!(info.contains(&format!("Pid: {}", n.pid())), "{info}");
}

// ---------------------------------------------------------------------------------------------
// Configuration errors
// ---------------------------------------------------------------------------------------------

#[test]
fn configuration_errors_name_file_line_and_reason() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let a = ca.leaf("a.example", &["a.example"]);
    let other = ca.leaf("b.example", &["b.example"]);
    let good = write_file(&dir, "good.pem", &a.bundle());
    let nokey = write_file(&dir, "nokey.pem", &a.cert_pem);
    let mismatch = write_file(
        &dir,
        "mismatch.pem",
        &format!("{}{}", a.cert_pem, other.key_pem),
    );
    let badpem = write_file(
        &dir,
        "bad.pem",
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    );
    let cases: Vec<(String, &str)> = vec![
        (format!("ssl crt {}", nokey.display()), "no private key"),
        (format!("ssl crt {}", mismatch.display()), "does not match"),
        (format!("ssl crt {}", badpem.display()), "bad PEM"),
        (
            format!("ssl crt {}", dir.join("missing.pem").display()),
            "cannot read",
        ),
        ("ssl".to_string(), "at least one certificate"),
        (
            format!("ssl crt {} ciphers DHE-RSA-AES128-SHA", good.display()),
            "none of the listed ciphers is available in sluice",
        ),
        // A name that is no cipher is skipped as OpenSSL skips it; nothing left is an error.
        (
            format!(
                "ssl crt {} ciphers ECDHE-RSA-AES128-GCM-SHA255",
                good.display()
            ),
            "none of the listed ciphers is available in sluice (ECDHE-RSA-AES128-GCM-SHA255 are not",
        ),
        (
            format!("ssl crt {} ssl-max-ver TLSv1.1", good.display()),
            "not supported",
        ),
        (
            format!("ssl crt {} verify required", good.display()),
            "ca-file",
        ),
        (
            format!("ssl crt {} npn h2", good.display()),
            "not supported",
        ),
        (
            format!("ssl crt {} strict-snii", good.display()),
            "did you mean 'strict-sni'",
        ),
    ];
    // TLS options on a bind without `ssl`: accepted as HAProxy does (it ignores them), with a
    // warning naming them.
    let (code, out) = Sluice::check(&format!(
        "frontend fe\n    mode http\n    bind 127.0.0.1:8443 crt {} alpn h2\n",
        good.display()
    ));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("[WARNING]")
            && out.contains(":3: 'crt', 'alpn' ignored: no 'ssl' on this bind line"),
        "{out}"
    );
    for (opts, want) in cases {
        let cfg = format!("frontend fe\n    mode http\n    bind 127.0.0.1:8443 {opts}\n");
        let (code, out) = Sluice::check(&cfg);
        assert_ne!(code, 0, "{opts}: expected an error");
        assert!(
            out.contains(":3") && out.contains(want),
            "{opts}: expected file:3 and '{want}' in:\n{out}"
        );
    }
    let cfg = format!(
        "backend be\n    server s 127.0.0.1:1 ssl\n    server t 127.0.0.1:1 ssl verify none sni foo(bar)\n\
frontend fe\n    bind 127.0.0.1:8443 ssl crt {}\n    default_backend be\n",
        good.display()
    );
    let (code, out) = Sluice::check(&cfg);
    assert_ne!(code, 0);
    assert!(out.contains(":2") && out.contains("no CA file"), "{out}");
    assert!(
        out.contains(":3") && out.contains("'sni foo(bar)'"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// TLS towards servers
// ---------------------------------------------------------------------------------------------

/// A TLS HTTP/1.1 server answering every request with its name and the SNI it saw; counts
/// full and resumed handshakes and records the SNI and ALPN protocol of each (`-`: none).
struct TlsBackend {
    port: u16,
    handshakes: Arc<std::sync::atomic::AtomicUsize>,
    resumed: Arc<std::sync::atomic::AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    /// Requests answered.
    requests: Arc<std::sync::atomic::AtomicUsize>,
    /// The suite of the last handshake (`CipherSuite`'s name).
    last_suite: Arc<std::sync::Mutex<Option<String>>>,
}

impl TlsBackend {
    fn start(leaf: &Leaf) -> TlsBackend {
        TlsBackend::with_alpn(leaf, &["h2", "http/1.1"])
    }

    /// A server that selects among `alpn` (a client offering none of them is refused).
    fn with_alpn(leaf: &Leaf, alpn: &[&str]) -> TlsBackend {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let mut sc = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der.clone())],
                PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap(),
            )
            .unwrap();
        sc.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().unwrap();
        sc.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
        let sc = Arc::new(sc);
        let l = TcpListener::bind(lo(0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let resumed = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicUsize::new(0));
        let last_suite = Arc::new(std::sync::Mutex::new(None));
        let (h2, r2, s2, q2, l2) = (
            handshakes.clone(),
            resumed.clone(),
            seen.clone(),
            requests.clone(),
            last_suite.clone(),
        );
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let sc = sc.clone();
                let (h, r, seen, q, ls) =
                    (h2.clone(), r2.clone(), s2.clone(), q2.clone(), l2.clone());
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let Ok(mut conn) = rustls::ServerConnection::new(sc) else {
                        return;
                    };
                    while conn.is_handshaking() {
                        if conn.complete_io(&mut s).is_err() {
                            return;
                        }
                    }
                    *ls.lock().unwrap() = conn
                        .negotiated_cipher_suite()
                        .map(|c| format!("{:?}", c.suite()));
                    h.fetch_add(1, Ordering::SeqCst);
                    if conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                        r.fetch_add(1, Ordering::SeqCst);
                    }
                    let sni = conn.server_name().unwrap_or("-").to_string();
                    let alpn = conn
                        .alpn_protocol()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .unwrap_or_else(|| "-".into());
                    seen.lock().unwrap().push((sni.clone(), alpn.clone()));
                    let mut t = StreamOwned::new(conn, s);
                    let mut buf = Vec::new();
                    let mut b = [0u8; 4096];
                    loop {
                        while let Some(end) = find(&buf, b"\r\n\r\n") {
                            let is_alpn = buf.starts_with(b"GET /alpn");
                            buf.drain(..end + 4);
                            q.fetch_add(1, Ordering::SeqCst);
                            let body = if is_alpn {
                                format!("alpn={alpn}")
                            } else {
                                format!("tls-backend sni={sni}")
                            };
                            let resp = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if t.write_all(resp.as_bytes())
                                .and_then(|_| t.flush())
                                .is_err()
                            {
                                return;
                            }
                        }
                        match read_retrying(&mut t, &mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    }
                });
            }
        });
        TlsBackend {
            port,
            handshakes,
            resumed,
            seen,
            requests,
            last_suite,
        }
    }

    /// Whether a handshake with this SNI and ALPN protocol was seen.
    fn saw(&self, sni: &str, alpn: &str) -> bool {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .any(|(s, a)| s == sni && a == alpn)
    }
}

#[test]
fn tls_to_servers_with_verify_sni_and_session_reuse() {
    use std::sync::atomic::Ordering;
    let dir = TempDir::new();
    let ca = Ca::new("Backend CA");
    let wrong = Ca::new("Other CA");
    let leaf = ca.leaf("backend.example", &["backend.example"]);
    let tb = TlsBackend::start(&leaf);
    let ca_file = write_file(&dir, "ca.pem", &ca.pem());
    let wrong_file = write_file(&dir, "wrong.pem", &wrong.pem());
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   use_backend b_none if {{ path_beg /none }}\n\
\x20   use_backend b_host if {{ path_beg /host }}\n\
\x20   use_backend b_wrong if {{ path_beg /wrong }}\n\
\x20   use_backend b_name if {{ path_beg /name }}\n\
\x20   use_backend b_alpn if {{ path_beg /alpn }}\n\
\x20   use_backend b_never if {{ path_beg /never }}\n\
\x20   use_backend b_vh_bad if {{ path_beg /vhbad }}\n\
\x20   use_backend b_vh_sni if {{ path_beg /vhsni }}\n\
\x20   use_backend b_vh_off if {{ path_beg /vhoff }}\n\
\x20   use_backend b_vh if {{ path_beg /vh }}\n\
\x20   default_backend b_ok\n\
backend b_ok\n    server s 127.0.0.1:{p} ssl verify required ca-file {ca} sni str(backend.example)\n\
backend b_never\n    http-reuse never\n    server s 127.0.0.1:{p} ssl verify required ca-file {ca} sni str(backend.example)\n\
backend b_none\n    server s 127.0.0.1:{p} ssl verify none\n\
backend b_alpn\n    server s 127.0.0.1:{p} ssl verify none alpn h2,http/1.1 proto h1\n\
backend b_host\n    server s 127.0.0.1:{p} ssl verify required ca-file {ca} sni req.hdr(host)\n\
backend b_wrong\n    retries 0\n    server s 127.0.0.1:{p} ssl verify required ca-file {wrong}\n\
backend b_name\n    retries 0\n    server s 127.0.0.1:{p} ssl verify required ca-file {ca} sni str(other.example)\n\
backend b_vh\n    server s 127.0.0.1:{p} ssl verify required ca-file {ca} verifyhost backend.example\n\
backend b_vh_bad\n    retries 0\n    server s 127.0.0.1:{p} ssl verify required ca-file {ca} verifyhost other.example\n\
backend b_vh_sni\n    server s 127.0.0.1:{p} ssl verify required ca-file {ca} sni str(backend.example) verifyhost other.example\n\
backend b_vh_off\n    default-server verifyhost other.example\n    server s 127.0.0.1:{p} ssl verify required ca-file {ca} no-verifyhost\n",
        p = tb.port,
        ca = ca_file.display(),
        wrong = wrong_file.display()
    );
    let _s = Sluice::start(&cfg);
    let r = http_get(port, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_str(), "tls-backend sni=backend.example");
    let r = http_get(port, "/none");
    assert_eq!(
        r.body_str(),
        "tls-backend sni=-",
        "no sni configured: none sent"
    );
    // `sni req.hdr(host)`: the Host header is the SNI, and the name verified.
    let r = http_raw(port, "GET /host HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_eq!(r.status, 502, "the certificate is not valid for 'test'");
    let r = http_raw(
        port,
        "GET /host HTTP/1.1\r\nHost: backend.example:443\r\n\r\n",
    );
    assert_eq!(r.body_str(), "tls-backend sni=backend.example");
    // `proto h1` never offers h2 to a server, whatever its `alpn` (without it, h2 would be
    // agreed and spoken: it_http2).
    assert_eq!(http_get(port, "/alpn").body_str(), "alpn=http/1.1");
    // Verification failures: a failed connection, like a refused one (502).
    assert_eq!(http_get(port, "/wrong").status, 502, "wrong CA");
    assert_eq!(http_get(port, "/name").status, 502, "name mismatch");
    // `verifyhost`: the name checked when no SNI is sent; the SNI wins when there is one.
    let r = http_get(port, "/vh");
    assert_eq!(r.body_str(), "tls-backend sni=-", "verifyhost sends no SNI");
    assert_eq!(http_get(port, "/vhbad").status, 502, "verifyhost mismatch");
    assert_eq!(
        http_get(port, "/vhsni").body_str(),
        "tls-backend sni=backend.example"
    );
    assert_eq!(http_get(port, "/vhoff").status, 200, "no-verifyhost");
    // A keep-alive client's requests share one TLS server connection: at most one handshake
    // for three requests (none when the connection of the first request above is still
    // pooled).
    let before = tb.handshakes.load(Ordering::SeqCst);
    let mut c = HttpClient::connect(port);
    for _ in 0..3 {
        assert_eq!(c.get("/").body_str(), "tls-backend sni=backend.example");
    }
    assert!(tb.handshakes.load(Ordering::SeqCst) - before <= 1);
    drop(c);
    // New connections to the same server resume their TLS session (`http-reuse never`, so
    // that each client connection opens its own).
    let before = tb.resumed.load(Ordering::SeqCst);
    for _ in 0..5 {
        let r = http_raw(
            port,
            "GET /never HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200);
    }
    let resumed = tb.resumed.load(Ordering::SeqCst) - before;
    assert!(resumed >= 4, "server sessions resumed: {resumed} of 5");
    assert!(tb.handshakes.load(Ordering::SeqCst) >= 5);
}

/// TLS server connections are pooled like plain ones: sequential `Connection: close`
/// clients accepted by either of two threads all use one TLS connection (one handshake), which
/// moves between the threads with its session. With `sni req.hdr(host)` the SNI is part of
/// the pool key: a request never goes out on a connection opened with another name.
#[test]
fn tls_server_connections_are_pooled_and_taken_over_between_threads() {
    use std::sync::atomic::Ordering;
    let dir = TempDir::new();
    let ca = Ca::new("Backend CA");
    let leaf = ca.leaf("backend.example", &["backend.example"]);
    let tb = TlsBackend::start(&leaf);
    let tb_host = TlsBackend::start(&leaf);
    let sock = dir.join("admin.sock");
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 2\n    stats socket {sock} level admin\n\
{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   use_backend b_host if {{ path_beg /host }}\n\
\x20   default_backend be\n\
backend be\n    server s1 127.0.0.1:{p} ssl verify none sni str(backend.example)\n\
backend b_host\n    server s1 127.0.0.1:{ph} ssl verify none sni req.hdr(host)\n",
        sock = sock.display(),
        p = tb.port,
        ph = tb_host.port,
    );
    let _s = Sluice::start(&cfg);
    for i in 0..24 {
        let r = http_get(port, &format!("/r{i}"));
        assert_eq!(r.body_str(), "tls-backend sni=backend.example");
        wait_until("the server connection is released", WAIT, || {
            pool_line(&sock, "be/s1").0["used"] == 0
        });
    }
    let (srv, threads) = pool_line(&sock, "be/s1");
    assert_eq!(threads.len(), 2, "{threads:?}");
    // Which thread accepts a client is the kernel's choice: over 24 clients both are all but
    // certain to serve some, and the second to do so takes the first's connection over.
    for t in &threads {
        assert!(t["new"] + t["reused"] + t["takeovers"] > 0, "{threads:?}");
    }
    assert_eq!(
        tb.handshakes.load(Ordering::SeqCst),
        1,
        "one TLS connection for 24 clients: {srv:?}"
    );
    assert_eq!(srv["new"], 1, "{srv:?}");
    assert!(srv["takeovers"] >= 1, "{srv:?}");
    assert_eq!(srv["reused"], 23, "taken over ones included: {srv:?}");
    // HAProxy counts server-side TLS connections in `show info` too: the one pooled
    // connection is open, and it is the only TLS connection ever made (the frontend is plain).
    let info = stats_cli(&sock, "show info");
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}: ")))
            .unwrap_or_else(|| panic!("{k} missing in show info:\n{info}"))
            .to_string()
    };
    assert_eq!(field("CurrSslConns"), "1", "{info}");
    assert_eq!(field("CumSslConns"), "1", "{info}");

    // Two names on one server: each request is answered over a connection opened with its own
    // Host as SNI, and connections are reused per name (no takeover for named keys: at most
    // one connection per name and thread).
    for i in 0..16 {
        let host = if i % 2 == 0 { "a.example" } else { "b.example" };
        let r = http_raw(
            port,
            format!("GET /host HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(
            r.body_str(),
            format!("tls-backend sni={host}"),
            "request {i}"
        );
        wait_until("the server connection is released", WAIT, || {
            pool_line(&sock, "b_host/s1").0["used"] == 0
        });
    }
    let hs = tb_host.handshakes.load(Ordering::SeqCst);
    assert!((2..=4).contains(&hs), "{hs} handshakes for 2 names");
}

// ---------------------------------------------------------------------------------------------
// crt-list and tls-ticket-keys
// ---------------------------------------------------------------------------------------------

#[test]
fn crt_list_sni_filters_replace_the_certificate_names() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let def = ca.leaf("default.example", &["default.example"]);
    let a = ca.leaf("a.example", &["a.example"]);
    let d = write_file(&dir, "default.pem", &def.bundle());
    let f = write_file(&dir, "a.pem", &a.bundle());
    let list = write_file(
        &dir,
        "list.txt",
        &format!(
            "# certificates\n{}\n\n{} *.filtered.example other.example   # names from the list\n",
            d.display(),
            f.display()
        ),
    );
    let b = HttpBackend::start("s1");
    let port = free_port();
    let _s = tls_proxy(
        port,
        &format!("ssl crt-list {}", list.display()),
        "",
        &backend_section("be", "", &[&b]),
    );
    let c = insecure_cfg(&[]);
    let der = |sni: &str| peer_der(&tls_connect(port, Some(sni), &c).unwrap());
    assert_eq!(der("other.example"), a.der);
    assert_eq!(der("x.filtered.example"), a.der);
    assert_eq!(
        der("a.example"),
        def.der,
        "the filters replace the certificate's own names"
    );
    assert_eq!(der("default.example"), def.der);
}

/// Certificates for `default.example`, `a.example` and `b.example` from one CA, written as
/// bundles in `dir`, and a crt-list whose lines are `default.pem`, then `a.pem` and `b.pem`
/// each followed by the options given (`""`: none).
fn crt_list_abc(dir: &TempDir, ca: &Ca, a_opts: &str, b_opts: &str) -> PathBuf {
    let mut lines = String::new();
    for (name, opts) in [("default", ""), ("a", a_opts), ("b", b_opts)] {
        let leaf = ca.leaf(&format!("{name}.example"), &[&format!("{name}.example")]);
        let f = write_file(dir, &format!("{name}.pem"), &leaf.bundle());
        lines.push_str(&format!("{} {opts}\n", f.display()));
    }
    write_file(dir, "list.txt", &lines)
}

#[test]
fn crt_list_alpn_per_line_overrides_the_bind_alpn() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let list = crt_list_abc(&dir, &ca, "[alpn h2,http/1.1]", "[ alpn x-b ]   b.example");
    let echo = TcpBackend::echo();
    let b = HttpBackend::start("s1");
    let (tport, hport) = (free_port(), free_port());
    let cfg = format!(
        "defaults\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend ft\n    mode tcp\n    bind 127.0.0.1:{tport} ssl crt-list {l} alpn http/1.1\n    default_backend bt\n\
backend bt\n    mode tcp\n    server e {}\n\
frontend fh\n    mode http\n    bind 127.0.0.1:{hport} ssl crt-list {l} alpn http/1.1\n    default_backend bh\n\
backend bh\n    mode http\n    server s1 {}\n",
        echo.hostport(),
        b.hostport(),
        l = list.display()
    );
    let _s = Sluice::start(&cfg);
    // Trusting any certificate: a name matching no line gets the default one.
    let c = insecure_cfg(&["h2", "x-b", "http/1.1"]);
    let alpn = |port: u16, sni: &str| {
        let t = tls_connect(port, Some(sni), &c).unwrap();
        t.conn
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    };
    let some = |p: &str| Some(p.to_string());
    // mode tcp: each line's list, the bind's for the line without options.
    assert_eq!(alpn(tport, "a.example"), some("h2"));
    assert_eq!(alpn(tport, "b.example"), some("x-b"));
    assert_eq!(alpn(tport, "default.example"), some("http/1.1"));
    // A name matching no line gets the default certificate, hence its line's settings.
    assert_eq!(alpn(tport, "other.example"), some("http/1.1"));
    // The tunnel works over a handshake made with a line's settings.
    let mut t = tls_connect(tport, Some("b.example"), &c).unwrap();
    t.write_all(b"per-line alpn").unwrap();
    t.flush().unwrap();
    let mut got = [0u8; 13];
    t.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"per-line alpn");
    // mode http: a line's h2 is agreed as the bind's would be; HTTP/1.1 clients get theirs.
    assert_eq!(alpn(hport, "a.example"), some("h2"));
    let h1 = insecure_cfg(&["http/1.1"]);
    let mut t = tls_connect(hport, Some("a.example"), &h1).unwrap();
    assert_eq!(tls_get(&mut t, "/", "a").unwrap().body_str(), "s1");
}

/// A client speaking only `version`, trusting `ca_pem`, with `resumption`.
fn version_client(
    ca_pem: &str,
    version: &'static rustls::SupportedProtocolVersion,
    resumption: rustls::client::Resumption,
) -> ClientConfig {
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots(ca_pem))
        .with_no_client_auth();
    c.resumption = resumption;
    c
}

/// A client speaking only `version`, without resumption.
fn client_version(
    ca_pem: &str,
    version: &'static rustls::SupportedProtocolVersion,
) -> Arc<ClientConfig> {
    Arc::new(version_client(
        ca_pem,
        version,
        rustls::client::Resumption::disabled(),
    ))
}

#[test]
fn crt_list_ssl_min_ver_per_line_refuses_older_clients_for_that_name_only() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let list = crt_list_abc(&dir, &ca, "[ssl-min-ver TLSv1.3]", "");
    let b = HttpBackend::start("s1");
    let port = free_port();
    let _s = tls_proxy(
        port,
        &format!("ssl crt-list {}", list.display()),
        "",
        &backend_section("be", "", &[&b]),
    );
    let tls12 = client_version(&ca.pem(), &rustls::version::TLS12);
    let tls13 = client_version(&ca.pem(), &rustls::version::TLS13);
    let get = |sni: &str, c: &Arc<ClientConfig>| {
        let mut t = tls_connect(port, Some(sni), c)?;
        let version = t.conn.protocol_version();
        tls_get(&mut t, "/", sni).map(|r| (version, r.body_str()))
    };
    let v12 = Some(rustls::ProtocolVersion::TLSv1_2);
    let v13 = Some(rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(get("b.example", &tls12).unwrap(), (v12, "s1".into()));
    assert_eq!(get("default.example", &tls12).unwrap(), (v12, "s1".into()));
    let e = get("a.example", &tls12).unwrap_err();
    assert!(
        e.to_string().contains("ProtocolVersion"),
        "a TLS 1.2 client is refused for a.example: {e}"
    );
    assert_eq!(get("a.example", &tls13).unwrap(), (v13, "s1".into()));
}

#[test]
fn crt_list_verify_required_per_line_asks_a_client_certificate_for_that_name_only() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let client_ca = Ca::new("Client CA");
    let rogue_ca = Ca::new("Rogue CA");
    let cafile = write_file(&dir, "clients.pem", &client_ca.pem());
    let list = crt_list_abc(
        &dir,
        &ca,
        &format!("[verify required ca-file {}]", cafile.display()),
        "",
    );
    let good = client_ca.leaf("alice", &["alice.example"]);
    let bad = rogue_ca.leaf("mallory", &["mallory.example"]);
    let b = HttpBackend::start("anon");
    let bc = HttpBackend::start("cert");
    let port = free_port();
    let _s = tls_proxy(
        port,
        &format!("ssl crt-list {}", list.display()),
        "    use_backend bc if { ssl_c_used } { ssl_c_s_dn -m sub CN=alice }",
        &format!(
            "{}{}",
            backend_section("be", "", &[&b]),
            backend_section("bc", "", &[&bc])
        ),
    );
    let none = client_cfg(&ca.pem(), &[], None);
    let with_good = client_cfg(&ca.pem(), &[], Some(&good));
    let with_bad = client_cfg(&ca.pem(), &[], Some(&bad));
    let attempt = |sni: &str, c: &Arc<ClientConfig>| match tls_connect(port, Some(sni), c)
        .and_then(|mut t| tls_get(&mut t, "/", sni))
    {
        Ok(r) => Outcome::Served(r.body_str()),
        Err(_) => Outcome::Refused,
    };
    let served = |n: &str| Outcome::Served(n.to_string());
    assert_eq!(attempt("a.example", &none), Outcome::Refused);
    assert_eq!(attempt("a.example", &with_bad), Outcome::Refused);
    assert_eq!(attempt("a.example", &with_good), served("cert"));
    // The other names ask for no certificate, so none is sent, even a bad one.
    for sni in ["b.example", "default.example"] {
        assert_eq!(attempt(sni, &none), served("anon"), "{sni}");
        assert_eq!(attempt(sni, &with_bad), served("anon"), "{sni}");
        assert_eq!(attempt(sni, &with_good), served("anon"), "{sni}");
    }
}

/// With per-line settings the handshake reads the ClientHello first; sessions must still
/// resume on whichever thread accepts the next connection, for a line with options and for
/// the bind's own settings.
#[test]
fn crt_list_lines_with_options_resume_sessions_across_threads() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let list = crt_list_abc(
        &dir,
        &ca,
        "[alpn http/1.1 ciphers ECDHE-ECDSA-AES256-GCM-SHA384]",
        "",
    );
    let b = HttpBackend::start("s1");
    let port = free_port();
    let sock = dir.join("admin.sock");
    let cfg = format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port} ssl crt-list {}\n    default_backend be\n{}",
        sock.display(),
        list.display(),
        backend_section("be", "", &[&b])
    );
    let _s = Sluice::start(&cfg);
    for sni in ["a.example", "b.example"] {
        for versions in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let mut c = version_client(
                &ca.pem(),
                versions,
                rustls::client::Resumption::in_memory_sessions(256),
            );
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            let c = Arc::new(c);
            let n = 12;
            let mut resumed = 0;
            for i in 0..n {
                let mut t = tls_connect(port, Some(sni), &c).unwrap();
                if t.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                    resumed += 1;
                }
                if sni == "a.example" {
                    assert_eq!(t.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
                    if versions == &rustls::version::TLS12 {
                        assert_eq!(
                            t.conn.negotiated_cipher_suite().map(|s| s.suite()),
                            Some(rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
                            "the line's ciphers apply"
                        );
                    }
                }
                let r = tls_get(&mut t, &format!("/{i}"), sni).unwrap();
                assert_eq!(r.status, 200);
            }
            assert_eq!(
                resumed,
                n - 1,
                "{sni} {versions:?}: every connection after the first resumes"
            );
        }
    }
    assert_both_threads_accepted(&sock);
}

#[test]
fn crt_list_option_errors_name_the_file_line_and_option() {
    let (dir, _ca, f) = a_example_site();
    let cases = [
        (
            "[alpn h2 curves X25519] a.example",
            "'curves' is not supported by sluice in crt-list per-certificate options \
             (supported: alpn, ca-file, crl-file, ciphers, ciphersuites, ssl-min-ver, ssl-max-ver, verify)",
        ),
        (
            "[no-tlsv12]",
            "'no-tlsv12' is not supported by sluice in crt-list per-certificate options",
        ),
        (
            "[verify required]",
            "'verify optional|required' needs a 'ca-file' to verify against",
        ),
        (
            "[ssl-max-ver TLSv1.1]",
            "'ssl-max-ver TLSv1.1': TLSv1.1 is not supported by sluice",
        ),
        ("[alpn h2", "missing ']' after the options"),
        (
            "a.example [alpn h2]",
            "options in '[...]' must come right after the certificate file",
        ),
    ];
    for (opts, want) in cases {
        let list = write_file(
            &dir,
            "list.txt",
            &format!("# first line\n{} {opts}\n", f.display()),
        );
        let cfg = format!(
            "frontend fe\n    mode http\n    bind 127.0.0.1:8443 ssl crt-list {}\n",
            list.display()
        );
        let (code, out) = Sluice::check(&cfg);
        let want = format!(
            "@CFG@:3: 'bind' in frontend 'fe': crt-list '{}' line 2: {want}",
            list.display()
        );
        assert_eq!(code, 1, "{opts}: {out}");
        assert!(out.contains(&want), "{opts}: expected\n{want}\nin:\n{out}");
    }
}

#[test]
fn tls_ticket_keys_file_lets_instances_resume_each_others_sessions() {
    use base64::Engine;
    let (dir, ca, f) = a_example_site();
    let key = |seed: u8| base64::engine::general_purpose::STANDARD.encode([seed; 48]);
    let shared = write_file(
        &dir,
        "keys",
        &format!("{}\n{}\n{}\n", key(1), key(2), key(3)),
    );
    let other = write_file(
        &dir,
        "other",
        &format!("{}\n{}\n{}\n", key(4), key(5), key(6)),
    );
    let b = HttpBackend::start("s1");
    let start = |keys: &Path| {
        let port = free_port();
        let s = tls_proxy(
            port,
            &format!("ssl crt {} tls-ticket-keys {}", f.display(), keys.display()),
            "",
            &backend_section("be", "", &[&b]),
        );
        (s, port)
    };
    let (_s1, p1) = start(&shared);
    let (_s2, p2) = start(&shared);
    let (_s3, p3) = start(&other);
    for versions in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let session = |port: u16, c: &Arc<ClientConfig>| {
            let mut t = tls_connect(port, Some("a.example"), c).unwrap();
            assert_eq!(tls_get(&mut t, "/", "a").unwrap().status, 200);
            t.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
        };
        let cfg = || {
            Arc::new(version_client(
                &ca.pem(),
                versions,
                rustls::client::Resumption::in_memory_sessions(64),
            ))
        };
        // The client's session store is keyed by server name, not port: a ticket from one
        // instance is offered to the next.
        let c = cfg();
        assert!(!session(p1, &c), "{versions:?}: first connection is full");
        assert!(
            session(p2, &c),
            "{versions:?}: same key file: resumed on another instance"
        );
        let c = cfg();
        assert!(!session(p1, &c));
        assert!(!session(p3, &c), "{versions:?}: other keys: full handshake");
    }
    let bad = write_file(&dir, "bad", &format!("{}\n{}\n", key(1), key(2)));
    let cfg = format!(
        "frontend fe\n    mode http\n    bind 127.0.0.1:8443 ssl crt {} tls-ticket-keys {}\n",
        f.display(),
        bad.display()
    );
    let (code, out) = Sluice::check(&cfg);
    assert_ne!(code, 0);
    assert!(
        out.contains(":3") && out.contains("at least 3 keys"),
        "{out}"
    );
}

#[test]
fn a_session_from_a_bind_without_client_auth_never_resumes_on_one_that_requires_it() {
    use base64::Engine;
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let client_ca = Ca::new("Client CA");
    let a = ca.leaf("a.example", &["a.example"]);
    let f = write_file(&dir, "a.pem", &a.bundle());
    let cafile = write_file(&dir, "clients.pem", &client_ca.pem());
    let key = |seed: u8| base64::engine::general_purpose::STANDARD.encode([seed; 48]);
    let keys = write_file(
        &dir,
        "keys",
        &format!("{}\n{}\n{}\n", key(1), key(2), key(3)),
    );
    let b = HttpBackend::start("s1");
    // Same certificate and name on every bind; (open, mTLS) pairs with rustls' own ticket keys
    // and with one shared tls-ticket-keys file.
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let tk = format!("tls-ticket-keys {}", keys.display());
    let req = format!("ca-file {} verify required", cafile.display());
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n\
\x20   bind 127.0.0.1:{} ssl crt {f}\n\
\x20   bind 127.0.0.1:{} ssl crt {f} {req}\n\
\x20   bind 127.0.0.1:{} ssl crt {f} {tk}\n\
\x20   bind 127.0.0.1:{} ssl crt {f} {req} {tk}\n\
\x20   default_backend be\n{}",
        ports[0],
        ports[1],
        ports[2],
        ports[3],
        backend_section("be", "", &[&b]),
        f = f.display()
    );
    let _s = Sluice::start(&cfg);
    for (open, mtls) in [(ports[0], ports[1]), (ports[2], ports[3])] {
        for versions in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let c = Arc::new(version_client(
                &ca.pem(),
                versions,
                rustls::client::Resumption::in_memory_sessions(64),
            ));
            assert_eq!(attempt(open, &c), Outcome::Served("s1".into()));
            // The client offers the session it just got; the mTLS bind must not take it.
            assert_eq!(
                attempt(mtls, &c),
                Outcome::Refused,
                "{versions:?}: ports {open} -> {mtls}"
            );
        }
    }
}

/// Health checks over TLS: inherited from `ssl` (a connect check passes at layer 6, an HTTP
/// check runs inside TLS), forced by `check-ssl` on a plain server (the handshake fails:
/// L6RSP, DOWN), and not inherited when the check goes to its own `port`.
#[test]
fn health_checks_over_tls() {
    use std::sync::atomic::Ordering;
    let dir = TempDir::new();
    let ca = Ca::new("Check CA");
    let leaf = ca.leaf("backend.example", &["backend.example"]);
    let tb = TlsBackend::start(&leaf);
    let plain = HttpBackend::start("plain");
    // A plain server that closes at once: a TLS handshake with it fails outright.
    let closer = TcpBackend::with_handler(|s, _| drop(s));
    let sock = dir.join("admin.sock");
    let cfg = format!(
        "global\n    stats socket {sock} level admin\n{DEFAULTS_HTTP}\
backend b_l6\n    server s 127.0.0.1:{p} ssl verify none check inter 100ms rise 1\n\
backend b_http\n    option httpchk GET /\n    server s 127.0.0.1:{p} ssl verify none check inter 100ms rise 1\n\
backend b_plain\n    server s {closer} check-ssl verify none check inter 100ms rise 1 fall 1\n\
backend b_port\n    server s 127.0.0.1:{p} ssl verify none check port {pport} inter 100ms rise 1\n",
        sock = sock.display(),
        p = tb.port,
        closer = closer.addr,
        pport = plain.addr.port(),
    );
    let _s = Sluice::start(&cfg);
    let status = |be: &str| stat_column(&sock, be, "s", "check_status");
    wait_until("TLS connect check passes at layer 6", WAIT, || {
        status("b_l6") == "L6OK"
    });
    wait_until("HTTP check inside TLS", WAIT, || status("b_http") == "L7OK");
    assert_eq!(stat_column(&sock, "b_http", "s", "check_code"), "200");
    wait_until("a TLS check against a plain server fails", WAIT, || {
        status("b_plain") == "L6RSP"
    });
    assert!(stat_column(&sock, "b_plain", "s", "status").starts_with("DOWN"));
    wait_until("a check on its own port stays plain", WAIT, || {
        status("b_port") == "L4OK"
    });
    assert!(
        tb.handshakes.load(Ordering::SeqCst) >= 2,
        "checks shook hands"
    );
}

/// `check-sni` and `check-alpn` (server line, default connect), and `tcp-check connect ssl sni
/// alpn` on a plain server: the TLS server sees the configured SNI and ALPN, and the check
/// result follows what it answers (its body echoes the SNI; an ALPN it does not speak fails
/// the handshake). Traffic keeps the server's own `sni`.
#[test]
fn check_sni_and_alpn_reach_the_server() {
    let dir = TempDir::new();
    let ca = Ca::new("Check CA");
    let leaf = ca.leaf("backend.example", &["backend.example"]);
    let tb = TlsBackend::with_alpn(&leaf, &["http/1.1", "x-check"]);
    let plain = HttpBackend::start("plain");
    let sock = dir.join("admin.sock");
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {sock} level admin\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{port}\n    default_backend b_sni\n\
backend b_sni\n    option httpchk GET /\n    http-check expect string sni=check.example\n\
\x20   server s 127.0.0.1:{p} ssl verify none sni str(traffic.example) check check-sni check.example inter 100ms rise 1 fall 1\n\
backend b_srvsni\n    option httpchk GET /\n    http-check expect string sni=traffic.example\n\
\x20   server s 127.0.0.1:{p} ssl verify none sni str(traffic.example) check inter 100ms rise 1 fall 1\n\
backend b_alpn\n    option httpchk GET /alpn\n    http-check expect string alpn=x-check\n\
\x20   default-server check-alpn x-check check-sni alpn.example\n\
\x20   server s 127.0.0.1:{p} ssl verify none check inter 100ms rise 1 fall 1\n\
backend b_badalpn\n    server s 127.0.0.1:{p} ssl verify none check check-alpn nope check-sni bad.example inter 100ms rise 1 fall 1\n\
backend b_rule\n    option tcp-check\n    tcp-check connect port {p} ssl sni rule.example alpn x-check\n\
\x20   tcp-check send-binary 474554202f20485454502f312e310d0a0d0a\n    tcp-check expect string sni=rule.example\n\
\x20   server s {plain} verify none check inter 100ms rise 1 fall 1\n\
backend b_plainrule\n    option tcp-check\n    tcp-check connect port {pp}\n\
\x20   tcp-check send-binary 474554202f20485454502f312e310d0a0d0a\n    tcp-check expect string HTTP/1.1\n\
\x20   server s 127.0.0.1:{p} ssl verify none check inter 100ms rise 1 fall 1\n",
        sock = sock.display(),
        p = tb.port,
        plain = plain.hostport(),
        pp = plain.addr.port(),
    );
    let _s = Sluice::start(&cfg);
    let col = |be: &str, c: &str| stat_column(&sock, be, "s", c);
    wait_until("check-sni sent and echoed", WAIT, || {
        col("b_sni", "check_status") == "L7OK"
    });
    assert!(
        tb.saw("check.example", "-"),
        "no ALPN without check-alpn or alpn"
    );
    wait_until("the server's sni str() without check-sni", WAIT, || {
        col("b_srvsni", "check_status") == "L7OK"
    });
    wait_until("check-alpn negotiated", WAIT, || {
        col("b_alpn", "check_status") == "L7OK"
    });
    assert!(tb.saw("alpn.example", "x-check"));
    wait_until("an ALPN the server refuses fails the check", WAIT, || {
        col("b_badalpn", "check_status") == "L6RSP"
    });
    assert!(col("b_badalpn", "status").starts_with("DOWN"));
    assert!(
        col("b_badalpn", "check_desc").contains("SSL handshake failure"),
        "{}",
        col("b_badalpn", "check_desc")
    );
    wait_until("tcp-check connect ssl sni alpn", WAIT, || {
        col("b_rule", "check_status") == "L7OK"
    });
    assert!(tb.saw("rule.example", "x-check"));
    // A `connect` rule without `ssl` is plain even on an `ssl` server (HAProxy's rule).
    wait_until("a connect rule without ssl stays plain", WAIT, || {
        col("b_plainrule", "check_status") == "L7OK"
    });
    // Traffic keeps the server's own SNI.
    assert_eq!(
        http_get(port, "/").body_str(),
        "tls-backend sni=traffic.example"
    );
    assert!(
        !tb.saw("traffic.example", "x-check") && !tb.saw("check.example", "x-check"),
        "check-alpn of one server leaked elsewhere: {:?}",
        tb.seen.lock().unwrap()
    );
}

#[test]
fn check_tls_options_are_validated() {
    let bad = [
        (
            "server s 127.0.0.1:1 check check-sni 10.0.0.1",
            ":4",
            "'check-sni': '10.0.0.1' is not a valid server name",
        ),
        (
            "server s 127.0.0.1:1 check check-alpn ,",
            ":4",
            "'check-alpn': 'alpn': invalid protocol list ','",
        ),
        (
            "option tcp-check\n    tcp-check connect ssl\n    server s 127.0.0.1:1 check",
            ":6",
            "no CA file specified",
        ),
        (
            "option tcp-check\n    tcp-check connect sni",
            ":5",
            "missing name after 'sni'",
        ),
    ];
    for (lines, at, want) in bad {
        let cfg = format!("defaults\n    mode http\nbackend be\n    {lines}\n");
        let (code, out) = Sluice::check(&cfg);
        assert_ne!(code, 0, "{lines}");
        assert!(out.contains(at) && out.contains(want), "{lines}: {out}");
    }
    // The same with what they need is valid.
    let ok = "defaults\n    mode http\nbackend be\n    option tcp-check\n    tcp-check connect ssl sni a.example alpn h2\n    server s 127.0.0.1:1 check verify none check-sni b.example check-alpn h2,http/1.1\n";
    let (code, out) = Sluice::check(ok);
    assert_eq!(code, 0, "{out}");
}

/// `check-reuse-pool` on an `ssl` server: checks borrow the pooled TLS connection that carried
/// traffic, so they cost no handshake; without it every check shakes hands.
#[test]
fn check_reuse_pool_saves_tls_handshakes() {
    use std::sync::atomic::Ordering::SeqCst;
    let ca = Ca::new("Check CA");
    let leaf = ca.leaf("backend.example", &["backend.example"]);
    let reuse = TlsBackend::start(&leaf);
    let fresh = TlsBackend::start(&leaf);
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   use_backend b_fresh if {{ path_beg /fresh }}\n    default_backend b_reuse\n\
backend b_reuse\n    http-reuse always\n    option httpchk GET /\n\
\x20   server s 127.0.0.1:{r} ssl verify none sni str(backend.example) check inter 100ms check-reuse-pool\n\
backend b_fresh\n    http-reuse always\n    option httpchk GET /\n\
\x20   server s 127.0.0.1:{f} ssl verify none sni str(backend.example) check inter 100ms\n",
        r = reuse.port,
        f = fresh.port,
    );
    let _s = Sluice::start(&cfg);
    // A keep-alive client: its server connection waits in the pool between its requests.
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/").status, 200);
    assert_eq!(c.get("/fresh").status, 200);
    // Checks of one server run one after the other: two more requests and any check that
    // was connecting on its own when the pool was still empty is over.
    let q = reuse.requests.load(SeqCst);
    wait_until("two more checks", WAIT, || {
        reuse.requests.load(SeqCst) >= q + 2
    });
    let (h_reuse, q_reuse) = (reuse.handshakes.load(SeqCst), reuse.requests.load(SeqCst));
    let (h_fresh, q_fresh) = (fresh.handshakes.load(SeqCst), fresh.requests.load(SeqCst));
    wait_until("five more checks on each", WAIT, || {
        reuse.requests.load(SeqCst) >= q_reuse + 5 && fresh.requests.load(SeqCst) >= q_fresh + 5
    });
    assert_eq!(
        reuse.handshakes.load(SeqCst),
        h_reuse,
        "checks on the pooled TLS connection shook no hands"
    );
    // One check may straddle the snapshot (its handshake before it, its request after), and
    // a server's checks run one at a time: at least 4 of the 5 had their own handshake.
    assert!(
        fresh.handshakes.load(SeqCst) >= h_fresh + 4,
        "one handshake per check without check-reuse-pool"
    );
    // Given back after each check: traffic finds it still.
    assert_eq!(c.get("/").body_str(), "tls-backend sni=backend.example");
    assert_eq!(reuse.handshakes.load(SeqCst), h_reuse);
}

// ---------------------------------------------------------------------------------------------
// Global TLS settings: crt-base, ca-base, ssl-default-*, ssl-server-verify
// ---------------------------------------------------------------------------------------------

/// A client limited to TLS 1.2, trusting any certificate.
fn tls12_only_cfg() -> Arc<ClientConfig> {
    insecure_cfg_versions(&[], &[&rustls::version::TLS12])
}

#[test]
fn global_ssl_defaults_and_bases_apply_where_lines_leave_them_unset() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let leaf = ca.leaf("site.example", &["site.example"]);
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    std::fs::create_dir(dir.path().join("cas")).unwrap();
    write_file(&dir, "certs/site.pem", &leaf.bundle());
    // The backend side: a TLS server whose CA file is found under ca-base.
    let bca = Ca::new("Backend CA");
    let bleaf = bca.leaf("backend.example", &["backend.example"]);
    let tb = TlsBackend::start(&bleaf);
    write_file(&dir, "cas/backend-ca.pem", &bca.pem());
    let (p_def, p_own, p_plain) = (free_port(), free_port(), free_port());
    let cfg = format!(
        "global\n\
\x20   crt-base {base}/certs\n\
\x20   ca-base {base}/cas\n\
\x20   ssl-default-bind-ciphers DHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES128-GCM-SHA256\n\
\x20   ssl-default-bind-ciphersuites TLS_CHACHA20_POLY1305_SHA256\n\
\x20   ssl-default-bind-options no-sslv3 ssl-min-ver TLSv1.3 no-tls-tickets\n\
\x20   ssl-default-server-ciphersuites TLS_AES_256_GCM_SHA384\n\
{DEFAULTS_HTTP}\
frontend f_def\n    bind 127.0.0.1:{p_def} ssl crt site.pem\n    http-request return status 200 content-type text/plain string def\n\
frontend f_own\n    bind 127.0.0.1:{p_own} ssl crt site.pem ciphersuites TLS_AES_128_GCM_SHA256 ssl-min-ver TLSv1.2\n    http-request return status 200 content-type text/plain string own\n\
frontend f_plain\n    bind 127.0.0.1:{p_plain}\n    use_backend b_none if {{ path_beg /none }}\n    default_backend b_ca\n\
backend b_ca\n    server s 127.0.0.1:{tp} ssl verify required ca-file backend-ca.pem sni str(backend.example)\n\
backend b_none\n    server s 127.0.0.1:{tp} ssl verify none\n",
        base = dir.path().display(),
        tp = tb.port,
    );
    let s = Sluice::start(&cfg);
    // Accepted with a warning naming the line: the DHE suite does not exist in rustls.
    let warned = s.stderr.wait(
        |l| l.contains("[WARNING]") && l.contains(":4: 'ssl-default-bind-ciphers': DHE-RSA-AES128-GCM-SHA256 not implemented by rustls or not cipher names, skipped"),
        Duration::from_secs(5),
    );
    assert!(warned.is_some(), "no warning for the skipped cipher");
    let any = insecure_cfg(&[]);
    // Defaults: the certificate from crt-base, TLS 1.3 only, the one default suite.
    let mut t = tls_connect(p_def, Some("site.example"), &any).unwrap();
    assert_eq!(peer_der(&t), leaf.der);
    assert_eq!(
        t.conn.negotiated_cipher_suite().unwrap().suite(),
        rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
    );
    assert_eq!(
        tls_get(&mut t, "/", "site.example").unwrap().body_str(),
        "def"
    );
    assert!(
        tls_connect(p_def, Some("site.example"), &tls12_only_cfg()).is_err(),
        "ssl-min-ver TLSv1.3 from ssl-default-bind-options"
    );
    // A line's own settings win.
    let t = tls_connect(p_own, Some("site.example"), &any).unwrap();
    assert_eq!(
        t.conn.negotiated_cipher_suite().unwrap().suite(),
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
    );
    let mut t = tls_connect(p_own, Some("site.example"), &tls12_only_cfg()).unwrap();
    assert_eq!(
        t.conn.negotiated_cipher_suite().unwrap().suite(),
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "the only TLS 1.2 suite left of the default list"
    );
    assert_eq!(
        tls_get(&mut t, "/", "site.example").unwrap().body_str(),
        "own"
    );
    // Servers: ca-file under ca-base; the default TLS 1.3 suite is what the backend saw.
    let r = http_get(p_plain, "/");
    assert_eq!(r.status, 200, "{}", r.body_str());
    assert_eq!(r.body_str(), "tls-backend sni=backend.example");
    assert_eq!(
        tb.last_suite.lock().unwrap().as_deref(),
        Some("TLS13_AES_256_GCM_SHA384")
    );
    assert_eq!(http_get(p_plain, "/none").status, 200);
}

#[test]
fn ssl_server_verify_none_is_the_default_of_servers_without_verify() {
    let dir = TempDir::new();
    let bca = Ca::new("Backend CA");
    let other = write_file(&dir, "other-ca.pem", &Ca::new("Other CA").pem());
    let tb = TlsBackend::start(&bca.leaf("backend.example", &["backend.example"]));
    let cfg = |global: &str, port: u16| {
        format!(
            "global\n{global}\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
\x20   use_backend b_req if {{ path_beg /req }}\n    default_backend b\n\
backend b\n    retries 0\n    server s 127.0.0.1:{p} ssl\n\
backend b_req\n    retries 0\n    server s 127.0.0.1:{p} ssl verify required ca-file {o}\n",
            p = tb.port,
            o = other.display()
        )
    };
    let port = free_port();
    let _s = Sluice::start(&cfg("    ssl-server-verify none", port));
    assert_eq!(http_get(port, "/").status, 200, "not verified");
    assert_eq!(
        http_get(port, "/req").status,
        502,
        "a server's own 'verify required' still verifies (against the wrong CA here)"
    );
    // `required` (the default): a server without `verify` needs a CA file, as in HAProxy.
    let (code, err) = Sluice::check(&cfg("    ssl-server-verify required", free_port()));
    assert_eq!(code, 1);
    assert!(
        err.contains("verify is enabled by default but no CA file specified")
            && err.contains("'ssl-server-verify none'"),
        "{err}"
    );
}

#[test]
fn global_ssl_keyword_errors_name_file_line_and_reason() {
    let cases: &[(&str, &str)] = &[
        (
            "    ssl-default-bind-ciphers NOT-A-CIPHER",
            ":2: 'ssl-default-bind-ciphers' in 'global' section: 'ssl-default-bind-ciphers': none of the listed ciphers is available in sluice (NOT-A-CIPHER are not",
        ),
        (
            "    ssl-default-bind-ciphers DHE-RSA-AES128-GCM-SHA256",
            "none of the listed ciphers is available in sluice (DHE-RSA-AES128-GCM-SHA256 are not implemented by rustls)",
        ),
        (
            "    ssl-default-bind-options no-sslv3 fast-please",
            ":2: 'ssl-default-bind-options' in 'global' section: unknown option 'fast-please' on global statement 'ssl-default-bind-options'",
        ),
        (
            "    ssl-default-server-options prefer-client-ciphers",
            "unknown option 'prefer-client-ciphers' on global statement 'ssl-default-server-options'",
        ),
        (
            "    ssl-default-bind-options ssl-max-ver TLSv1.1",
            "TLSv1.1 is not supported by sluice (rustls implements TLSv1.2 and TLSv1.3 only)",
        ),
        (
            "    crt-base /a\n    crt-base /b",
            ":3: 'crt-base' in 'global' section: 'crt-base' already specified",
        ),
        (
            "    ssl-server-verify maybe",
            "expected 'none' or 'required', got 'maybe'",
        ),
        (
            "    user no-such-user-sluice",
            ":2: 'user' in 'global' section: cannot find user id for 'no-such-user-sluice'",
        ),
        (
            "    group no-such-group-sluice",
            "cannot find group id for 'no-such-group-sluice'",
        ),
    ];
    for (global, want) in cases {
        let (code, err) = Sluice::check(&format!(
            "global\n{global}\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{}\n    http-request return status 200\n",
            free_port()
        ));
        assert_eq!(code, 1, "{global}: {err}");
        assert!(err.contains(want), "{global}:\nwant {want}\ngot {err}");
    }
    // Accepted: the global section of Debian's packaged haproxy.cfg (a warning for the DHE
    // suites of Mozilla's intermediate list, nothing else).
    let (code, err) = Sluice::check(&format!(
        "global\n    chroot /var/lib/sluice-test-unused\n    user root\n    group root\n\
\x20   ca-base /etc/ssl/certs\n    crt-base /etc/ssl/private\n\
\x20   ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384\n\
\x20   ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256\n\
\x20   ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets\n\
{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{}\n    http-request return status 200\n",
        free_port()
    ));
    assert_eq!(code, 0, "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("[WARNING]")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains(":7: 'ssl-default-bind-ciphers': DHE-RSA-AES128-GCM-SHA256, DHE-RSA-AES256-GCM-SHA384 not implemented by rustls or not cipher names, skipped"),
        "{err}"
    );
    // Red Hat's packaged global section: the "system crypto policy" means rustls's defaults.
    let (code, err) = Sluice::check(&format!(
        "global\n    ssl-default-bind-ciphers PROFILE=SYSTEM\n    ssl-default-server-ciphers PROFILE=SYSTEM\n\
{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{}\n    http-request return status 200\n",
        free_port()
    ));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err.matches("sluice reads no system-wide crypto policy; rustls's default suites apply")
            .count(),
        2,
        "{err}"
    );
}

#[test]
fn curves_ecdhe_and_their_global_default_pick_the_key_exchange_group() {
    let dir = TempDir::new();
    let ca = Ca::new("Test CA");
    let crt = write_file(
        &dir,
        "site.pem",
        &ca.leaf("site.example", &["site.example"]).bundle(),
    );
    let (p_def, p_curves, p_ecdhe) = (free_port(), free_port(), free_port());
    let cfg = format!(
        "global\n    ssl-default-bind-curves prime256v1:secp521r1\n{DEFAULTS_HTTP}\
frontend fe\n    bind 127.0.0.1:{p_def} ssl crt {c}\n    bind 127.0.0.1:{p_curves} ssl crt {c} curves X25519:P-384\n\
\x20   bind 127.0.0.1:{p_ecdhe} ssl crt {c} ecdhe secp384r1\n    http-request return status 200\n",
        c = crt.display()
    );
    let s = Sluice::start(&cfg);
    assert!(
        s.stderr
            .wait(
                |l| l.contains(
                    ":2: 'ssl-default-bind-curves': secp521r1 not implemented by rustls, skipped"
                ),
                Duration::from_secs(5)
            )
            .is_some()
    );
    // The client offers rustls's defaults (X25519MLKEM768, X25519, P-256, P-384).
    let any = insecure_cfg(&[]);
    let group = |port: u16| {
        let t = tls_connect(port, Some("site.example"), &any).unwrap();
        t.conn.negotiated_key_exchange_group().unwrap().name()
    };
    assert_eq!(group(p_def), rustls::NamedGroup::secp256r1);
    assert_eq!(group(p_curves), rustls::NamedGroup::X25519);
    assert_eq!(group(p_ecdhe), rustls::NamedGroup::secp384r1);
    // Errors: an unknown name, a list with nothing rustls has, `ecdhe` with a list.
    for (opt, want) in [
        ("curves X25519:P-999", "unknown curve 'P-999'"),
        (
            "curves X448",
            "no curve of the list is available in sluice (X448 are not implemented by rustls)",
        ),
        ("ecdhe X25519:P-256", "'ecdhe' takes one curve"),
    ] {
        let (code, err) = Sluice::check(&format!(
            "frontend fe\n    mode http\n    bind 127.0.0.1:8443 ssl crt {} {opt}\n",
            crt.display()
        ));
        assert_eq!(code, 1, "{opt}");
        assert!(err.contains(":3") && err.contains(want), "{opt}: {err}");
    }
}
