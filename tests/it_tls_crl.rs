//! TLS revocation lists: `crl-file` on `bind ... ssl ... ca-file X verify optional|required`
//! (client certificates) and on `server ... ssl verify required ca-file X` (the server's
//! certificate), as HAProxy checks them (OpenSSL's CRL_CHECK | CRL_CHECK_ALL): a revoked
//! certificate, a certificate whose issuer has no CRL in the file, or an expired CRL fails the
//! handshake. Also the configuration errors of a missing or invalid CRL file. Certificates
//! and CRLs are generated per test with rcgen; the client is rustls over std sockets.

mod common;

use common::*;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, CertifiedIssuer, DnType,
    IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SerialNumber, date_time_ymd,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Certificates and CRLs
// ---------------------------------------------------------------------------------------------

/// A test CA that signs leaf certificates and CRLs.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key.
struct Leaf {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
    serial: u64,
}

impl Ca {
    fn new(cn: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, cn);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn leaf(&self, cn: &str, serial: u64) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec![format!("{cn}.example")]).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.serial_number = Some(SerialNumber::from(serial));
        let c = p.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: c.pem(),
            key_pem: key.serialize_pem(),
            der: c.der().to_vec(),
            serial,
        }
    }

    /// A CRL revoking `revoked`, valid from 2020 to 2090, or expired since 2020-02 when
    /// `expired`.
    fn crl(&self, revoked: &[&Leaf], expired: bool) -> rcgen::CertificateRevocationList {
        let p = CertificateRevocationListParams {
            this_update: date_time_ymd(2020, 1, 1),
            next_update: if expired {
                date_time_ymd(2020, 2, 1)
            } else {
                date_time_ymd(2090, 1, 1)
            },
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|l| RevokedCertParams {
                    serial_number: SerialNumber::from(l.serial),
                    revocation_time: date_time_ymd(2020, 1, 1),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        p.signed_by(&self.issuer).unwrap()
    }

    fn crl_pem(&self, revoked: &[&Leaf], expired: bool) -> String {
        self.crl(revoked, expired).pem().unwrap()
    }
}

impl Leaf {
    fn bundle(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn roots(ca_pem: &str) -> rustls::RootCertStore {
    let mut r = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        r.add(c.unwrap()).unwrap();
    }
    r
}

/// A client trusting `ca_pem`, presenting `cert` if given, never resuming (so that every
/// handshake sends, and has checked, the certificate).
fn client_cfg(ca_pem: &str, cert: Option<&Leaf>) -> Arc<ClientConfig> {
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
    c.resumption = rustls::client::Resumption::disabled();
    Arc::new(c)
}

#[derive(Debug, PartialEq)]
enum Outcome {
    /// Served, by the backend named.
    Served(String),
    Refused,
}

fn served(n: &str) -> Outcome {
    Outcome::Served(n.to_string())
}

/// One GET over TLS with the given client configuration.
fn attempt(port: u16, cfg: &Arc<ClientConfig>) -> Outcome {
    let run = || -> io::Result<Response> {
        let mut sock = TcpStream::connect(lo(port))?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        let name = ServerName::try_from("srv.example").unwrap();
        let mut conn = ClientConnection::new(cfg.clone(), name).map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock)?;
        }
        let mut t = StreamOwned::new(conn, sock);
        t.write_all(b"GET / HTTP/1.1\r\nHost: srv.example\r\n\r\n")?;
        t.flush()?;
        // TLS 1.3: the server judges the client certificate after the client thinks the
        // handshake is done, so a refusal shows on the first read.
        HttpClient::from_stream(&mut t).try_read_response(false)
    };
    match run() {
        Ok(r) => Outcome::Served(r.body_str()),
        Err(_) => Outcome::Refused,
    }
}

// ---------------------------------------------------------------------------------------------
// bind ... crl-file
// ---------------------------------------------------------------------------------------------

#[test]
fn revoked_client_certificates_are_refused() {
    let dir = TempDir::new();
    let srv_ca = Ca::new("Server CA");
    let ca_a = Ca::new("Client CA A");
    let ca_b = Ca::new("Client CA B");
    let srv = srv_ca.leaf("srv", 1);
    let good_a = ca_a.leaf("alice", 10);
    let good_b = ca_b.leaf("bob", 20);
    let revoked_b = ca_b.leaf("mallory", 21);
    let crt = dir.write("srv.pem", srv.bundle());
    let cas = dir.write("clients.pem", format!("{}{}", ca_a.pem(), ca_b.pem()));
    // Several CRLs in one file, one per CA, with a certificate in between (skipped).
    let crls = dir.write(
        "crls.pem",
        format!(
            "{}{}{}",
            ca_a.crl_pem(&[], false),
            srv_ca.pem(),
            ca_b.crl_pem(&[&revoked_b], false)
        ),
    );
    // The same for CA B alone, in DER: CA A's clients have no CRL to be checked against.
    let der_b = dir.write("b.crl", ca_b.crl(&[&revoked_b], false).der().as_ref());
    let expired = dir.write(
        "expired.pem",
        format!(
            "{}{}",
            ca_a.crl_pem(&[], true),
            ca_b.crl_pem(&[&revoked_b], true)
        ),
    );
    let anon = HttpBackend::start("anon");
    let cert = HttpBackend::start("cert");
    let ports: Vec<u16> = (0..5).map(|_| free_port()).collect();
    let fe = |name: &str, port: u16, opts: String| {
        format!(
            "frontend {name}\n    bind 127.0.0.1:{port} ssl crt {} {opts}\n    use_backend bc if {{ ssl_c_used }}\n    default_backend be\n",
            crt.display()
        )
    };
    let (ca, crl) = (cas.display(), crls.display());
    let cfg = format!(
        "{DEFAULTS_HTTP}{}{}{}{}{}{}{}",
        fe(
            "fr",
            ports[0],
            format!("ca-file {ca} verify required crl-file {crl}")
        ),
        fe(
            "fo",
            ports[1],
            format!("ca-file {ca} verify optional crl-file {crl}")
        ),
        fe("fn", ports[2], format!("ca-file {ca} crl-file {crl}")),
        fe(
            "fx",
            ports[3],
            format!(
                "ca-file {ca} verify required crl-file {}",
                expired.display()
            )
        ),
        fe(
            "fd",
            ports[4],
            format!("ca-file {ca} verify required crl-file {}", der_b.display())
        ),
        backend_section("be", "", &[&anon]),
        backend_section("bc", "", &[&cert]),
    );
    let _s = Sluice::start(&cfg);
    let none = client_cfg(&srv_ca.pem(), None);
    let a = client_cfg(&srv_ca.pem(), Some(&good_a));
    let b = client_cfg(&srv_ca.pem(), Some(&good_b));
    let revoked = client_cfg(&srv_ca.pem(), Some(&revoked_b));

    // verify required: certificates of both CAs get through, the revoked one does not.
    assert_eq!(attempt(ports[0], &a), served("cert"));
    assert_eq!(attempt(ports[0], &b), served("cert"));
    assert_eq!(attempt(ports[0], &revoked), Outcome::Refused);
    assert_eq!(attempt(ports[0], &none), Outcome::Refused);
    // verify optional: no certificate is fine, a revoked one is refused (as HAProxy does).
    assert_eq!(attempt(ports[1], &none), served("anon"));
    assert_eq!(attempt(ports[1], &b), served("cert"));
    assert_eq!(attempt(ports[1], &revoked), Outcome::Refused);
    // verify none: no certificate is asked for, the CRL plays no part.
    assert_eq!(attempt(ports[2], &revoked), served("anon"));
    // An expired CRL fails every handshake it is needed for (OpenSSL's "CRL has expired").
    assert_eq!(attempt(ports[3], &a), Outcome::Refused);
    assert_eq!(attempt(ports[3], &b), Outcome::Refused);
    assert_eq!(attempt(ports[3], &none), Outcome::Refused);
    // A DER CRL file; a certificate whose issuer has no CRL there is refused (OpenSSL's
    // "unable to get certificate CRL").
    assert_eq!(attempt(ports[4], &b), served("cert"));
    assert_eq!(attempt(ports[4], &revoked), Outcome::Refused);
    assert_eq!(attempt(ports[4], &a), Outcome::Refused);
}

#[test]
fn crl_file_on_a_crt_list_line_applies_to_that_certificate_only() {
    let dir = TempDir::new();
    let srv_ca = Ca::new("Server CA");
    let ca = Ca::new("Client CA");
    let a = srv_ca.leaf("a", 1);
    let b = srv_ca.leaf("b", 2);
    let revoked = ca.leaf("mallory", 30);
    let fa = dir.write("a.pem", a.bundle());
    let fb = dir.write("b.pem", b.bundle());
    dir.write("clients.pem", ca.pem());
    dir.write("crl.pem", ca.crl_pem(&[&revoked], false));
    // Relative paths on crt-list lines are under ca-base.
    let list = dir.write(
        "list.txt",
        format!(
            "{} [crl-file crl.pem] a.example\n{} b.example\n",
            fa.display(),
            fb.display()
        ),
    );
    let port = free_port();
    let backend = HttpBackend::start("be");
    let cfg = format!(
        "global\n    ca-base {}\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port} ssl crt-list {} ca-file clients.pem verify required\n    default_backend be\n{}",
        dir.path().display(),
        list.display(),
        backend_section("be", "", &[&backend]),
    );
    let _s = Sluice::start(&cfg);
    let by_name = |sni: &str| {
        let cfg = client_cfg(&srv_ca.pem(), Some(&revoked));
        let mut sock = TcpStream::connect(lo(port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let name = ServerName::try_from(sni.to_string()).unwrap();
        let mut conn = ClientConnection::new(cfg, name).unwrap();
        let r = (|| -> io::Result<Response> {
            while conn.is_handshaking() {
                conn.complete_io(&mut sock)?;
            }
            let mut t = StreamOwned::new(conn, sock);
            t.write_all(format!("GET / HTTP/1.1\r\nHost: {sni}\r\n\r\n").as_bytes())?;
            t.flush()?;
            HttpClient::from_stream(&mut t).try_read_response(false)
        })();
        r.is_ok()
    };
    assert!(!by_name("a.example"), "a.example's line checks the CRL");
    assert!(by_name("b.example"), "b.example's line has no CRL");
}

// ---------------------------------------------------------------------------------------------
// server ... crl-file
// ---------------------------------------------------------------------------------------------

/// A TLS server answering every request with `tls-backend`, on its own thread.
fn tls_backend(leaf: &Leaf) -> u16 {
    let sc = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der.clone())],
            PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    let sc = Arc::new(sc);
    let l = TcpListener::bind(lo(0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let sc = sc.clone();
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
                let mut t = StreamOwned::new(conn, s);
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                loop {
                    while let Some(end) = find(&buf, b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let body = "tls-backend";
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
    port
}

#[test]
fn revoked_server_certificates_are_refused() {
    let dir = TempDir::new();
    let ca = Ca::new("Backend CA");
    let good = ca.leaf("good", 100);
    let revoked = ca.leaf("revoked", 101);
    let p_good = tls_backend(&good);
    let p_revoked = tls_backend(&revoked);
    let cafile = dir.write("ca.pem", ca.pem());
    let crl = dir.write("crl.pem", ca.crl_pem(&[&revoked], false));
    let expired = dir.write("expired.pem", ca.crl_pem(&[&revoked], true));
    let port = free_port();
    let srv = |p: u16, crl: &PathBuf, verify: &str| {
        format!(
            "    retries 0\n    server s 127.0.0.1:{p} ssl verify {verify} ca-file {} crl-file {}\n",
            cafile.display(),
            crl.display()
        )
    };
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    use_backend good if {{ path /good }}\n    use_backend revoked if {{ path /revoked }}\n    use_backend expired if {{ path /expired }}\n    default_backend unverified\n\
backend good\n{}backend revoked\n{}backend expired\n{}backend unverified\n{}",
        srv(p_good, &crl, "required"),
        srv(p_revoked, &crl, "required"),
        srv(p_good, &expired, "required"),
        srv(p_revoked, &crl, "none"),
    );
    let _s = Sluice::start(&cfg);
    let get = |b: &str| http_get(port, &format!("/{b}"));
    let r = get("good");
    assert_eq!((r.status, r.body_str().as_str()), (200, "tls-backend"));
    // A failed verification is a failed connection (502, as for a wrong CA in it_tls).
    assert_eq!(get("revoked").status, 502);
    assert_eq!(get("expired").status, 502);
    // verify none: the CRL is read (and must be valid) but nothing is checked.
    assert_eq!(get("unverified").status, 200);
}

// ---------------------------------------------------------------------------------------------
// Configuration errors
// ---------------------------------------------------------------------------------------------

#[test]
fn crl_file_errors_name_file_line_and_reason() {
    let dir = TempDir::new();
    let ca = Ca::new("CA");
    let srv = ca.leaf("srv", 1);
    let crt = dir.write("srv.pem", srv.bundle());
    let cafile = dir.write("ca.pem", ca.pem());
    let good = dir.write("crl.pem", ca.crl_pem(&[], false));
    let missing = dir.join("missing.pem");
    let garbage = dir.write("garbage.pem", "not a CRL\n");
    let certs_only = dir.write("certs.pem", ca.pem());
    let bad_der = dir.write(
        "bad.pem",
        "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n",
    );
    let bad_second = dir.write(
        "bad2.pem",
        format!(
            "{}-----BEGIN X509 CRL-----\nMAMCAQE=\n-----END X509 CRL-----\n",
            ca.crl_pem(&[], false)
        ),
    );
    let (crt, ca_s) = (crt.display(), cafile.display());
    let cases: Vec<(PathBuf, &str, String)> = vec![
        (
            missing.clone(),
            "required",
            format!("cannot read crl-file '{}'", missing.display()),
        ),
        // HAProxy loads the file whatever the verify mode.
        (
            missing.clone(),
            "none",
            format!("cannot read crl-file '{}'", missing.display()),
        ),
        (
            garbage.clone(),
            "required",
            format!("crl-file '{}': no CRL found", garbage.display()),
        ),
        (
            certs_only.clone(),
            "optional",
            format!("crl-file '{}': no CRL found", certs_only.display()),
        ),
        (
            bad_der.clone(),
            "required",
            format!("crl-file '{}': CRL is not valid", bad_der.display()),
        ),
        (
            bad_second.clone(),
            "required",
            format!("crl-file '{}': CRL #2 is not valid", bad_second.display()),
        ),
    ];
    for (file, verify, want) in &cases {
        // Bind side: the error is on line 3.
        let cfg = format!(
            "frontend fe\n    mode http\n    bind 127.0.0.1:8443 ssl crt {crt} ca-file {ca_s} verify {verify} crl-file {}\n",
            file.display()
        );
        let (code, out) = Sluice::check(&cfg);
        assert_ne!(code, 0, "{cfg}: expected an error");
        assert!(
            out.contains("@CFG@:3") && out.contains(want.as_str()),
            "bind: expected @CFG@:3 and '{want}' in:\n{out}"
        );
        // Server side: on line 2.
        let sv = if *verify == "optional" {
            "required"
        } else {
            verify
        };
        let cfg = format!(
            "backend be\n    server s 127.0.0.1:1 ssl verify {sv} ca-file {ca_s} crl-file {}\n",
            file.display()
        );
        let (code, out) = Sluice::check(&cfg);
        assert_ne!(code, 0, "{cfg}: expected an error");
        assert!(
            out.contains("@CFG@:2") && out.contains(want.as_str()),
            "server: expected @CFG@:2 and '{want}' in:\n{out}"
        );
    }
    // Verifying needs a CA file, CRL or not (HAProxy: "verify is enabled but no CA file").
    let (code, out) = Sluice::check(&format!(
        "frontend fe\n    mode http\n    bind 127.0.0.1:8443 ssl crt {crt} verify required crl-file {}\n",
        good.display()
    ));
    assert_ne!(code, 0);
    assert!(
        out.contains("@CFG@:3") && out.contains("needs a 'ca-file'"),
        "{out}"
    );
    let (code, out) = Sluice::check(&format!(
        "backend be\n    server s 127.0.0.1:1 ssl crl-file {}\n",
        good.display()
    ));
    assert_ne!(code, 0);
    assert!(
        out.contains("@CFG@:2") && out.contains("no CA file"),
        "{out}"
    );
    // Accepted as HAProxy accepts them: a CRL with verify none, or on a server without
    // verification, and several CRLs in one file.
    for cfg in [
        format!(
            "frontend fe\n    mode http\n    bind 127.0.0.1:8443 ssl crt {crt} crl-file {}\n",
            good.display()
        ),
        format!(
            "backend be\n    server s 127.0.0.1:1 ssl verify none crl-file {}\n",
            good.display()
        ),
        format!(
            "backend be\n    server s 127.0.0.1:1 ssl verify required ca-file {ca_s} crl-file {}\n",
            good.display()
        ),
    ] {
        let (code, out) = Sluice::check(&cfg);
        assert_eq!(code, 0, "{cfg}\n{out}");
    }
    // On a crt-list line, the error names the list and its line.
    let list = dir.write(
        "list.txt",
        format!("# first\n{crt} [crl-file {}]\n", garbage.display()),
    );
    let (code, out) = Sluice::check(&format!(
        "frontend fe\n    mode http\n    bind 127.0.0.1:8443 ssl crt-list {} ca-file {ca_s} verify required\n",
        list.display()
    ));
    assert_ne!(code, 0);
    assert!(
        out.contains("@CFG@:3")
            && out.contains(&format!("crt-list '{}' line 2", list.display()))
            && out.contains("no CRL found"),
        "{out}"
    );
}
