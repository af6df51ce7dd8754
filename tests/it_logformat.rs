//! `log-format`: custom access-log lines from the real binary over HTTP, TCP and `ssl` binds —
//! addresses, names, status and byte counts, the quoted request line, `%[fetch]` samples, and
//! the TLS version and cipher (`%sslv`, `%sslc`) as HAProxy prints them.

mod common;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

const LOGGED: &str = "global
    log stdout format raw local0
defaults
    log global
    timeout connect 2s
    timeout client 10s
    timeout server 10s
";

fn field<'a>(caps: &'a regex::Captures<'_>, name: &str) -> &'a str {
    caps.name(name).map_or("", |m| m.as_str())
}

fn matches<'a>(re: &str, line: &'a str) -> regex::Captures<'a> {
    regex::Regex::new(re)
        .unwrap()
        .captures(line)
        .unwrap_or_else(|| panic!("log line {line:?} does not match {re}"))
}

#[test]
fn http_fields_quoting_flags_and_request_samples() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    // Spaces are separators (several merge into one, and none follows an empty item: %hr).
    let fmt = "%ci:%cp  %{+X}cp %f %ft %b/%s %ST %B %U %{+Q}r %HM %HU %HP %HQ %HV \
               %[src] %{+Q}[hdr(x-test)] %[hdr(x-missing)] %{+Q}[hdr(x-missing)] \
               %{+E}[hdr(x-esc)] %[path] %si:%sp %fi:%fp %bi:%bp %tsc %ts %ID %CC %hr \
               %sslv %sslc %rc %pid %% %Ts %ms %{+X}Ts end";
    let cfg = format!(
        "{LOGGED}    mode http\n    log-format \"{fmt}\"\nfrontend fe\n    bind 127.0.0.1:{port}\n    \
         default_backend be\n{}",
        backend_section("be", "", &[&b])
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    let r = c.get_with(
        "/a/b?x=1",
        "X-Test: one\r\nX-Test: two, last\r\nX-Esc: a\"b]c\r\n",
    );
    assert_eq!(r.status, 200);
    let cport = c.local_port();
    let line = s.wait_log_line(|l| l.contains("/a/b"), WAIT);
    let caps = matches(
        r#"^127\.0\.0\.1:(?P<cp>\d+) (?P<hexcp>[0-9A-F]{4}) fe fe be/s1 200 (?P<b>\d+) (?P<u>\d+) "GET /a/b\?x=1 HTTP/1\.1" GET /a/b\?x=1 /a/b \?x=1 HTTP/1\.1 127\.0\.0\.1 "last" - "" a\\"b\\\]c /a/b 127\.0\.0\.1:(?P<sp>\d+) 127\.0\.0\.1:(?P<fp>\d+) 127\.0\.0\.1:(?P<bp>\d+) ---- -- - - - - 0 (?P<pid>\d+) % (?P<ts>\d+) (?P<ms>\d{3}) (?P<hexts>[0-9A-F]{8}) end$"#,
        &line,
    );
    assert_eq!(field(&caps, "cp").parse::<u16>().unwrap(), cport);
    assert_eq!(
        u16::from_str_radix(field(&caps, "hexcp"), 16).unwrap(),
        cport
    );
    assert_eq!(
        field(&caps, "b").parse::<usize>().unwrap(),
        r.raw_head.len() + r.body.len(),
        "%B is what the client received: {line}"
    );
    let sent = "GET /a/b?x=1 HTTP/1.1\r\nHost: test\r\nX-Test: one\r\nX-Test: two, last\r\nX-Esc: a\"b]c\r\n\r\n";
    assert_eq!(field(&caps, "u").parse::<usize>().unwrap(), sent.len());
    assert_eq!(field(&caps, "sp").parse::<u16>().unwrap(), b.addr.port());
    assert_eq!(field(&caps, "fp").parse::<u16>().unwrap(), port);
    // The server saw a connection from the logged source port.
    assert_ne!(field(&caps, "bp"), "0");
    assert_eq!(field(&caps, "pid").parse::<i32>().unwrap(), s.pid());
    let ts: u64 = field(&caps, "ts").parse().unwrap();
    assert_eq!(u64::from_str_radix(field(&caps, "hexts"), 16).unwrap(), ts);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(ts <= now && now - ts < 60, "{line}");
}

#[test]
fn tcp_mode_fields() {
    let srv = TcpBackend::with_handler(|mut s, _| {
        let mut b = [0u8; 5];
        if s.read_exact(&mut b).is_ok() {
            let _ = s.write_all(&[b'r'; 321]);
        }
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let port = free_port();
    let cfg = format!(
        "{LOGGED}    mode tcp\nfrontend fe\n    bind 127.0.0.1:{port}\n    \
         log-format \"%ci:%cp [%t] %ft %b/%s %Tw/%Tc/%Tt %B %U %ts %ac/%fc %sslv %sslc %[ssl_fc] %[src] %si:%sp %ST\"\n    \
         default_backend be\nbackend be\n    server s1 {}\n",
        srv.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    let cport = c.local_addr().unwrap().port();
    c.write_all(b"hello").unwrap();
    let mut got = [0u8; 321];
    c.read_exact(&mut got).unwrap();
    drop(c);
    let line = s.wait_log_line(|l| l.contains(&format!(":{cport} ")), WAIT);
    let caps = matches(
        r"^127\.0\.0\.1:(?P<cp>\d+) \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d\.\d{3}\] fe be/s1 \d+/\d+/\d+ 321 5 -- 1/1 - - 0 127\.0\.0\.1 127\.0\.0\.1:(?P<sp>\d+) 0$",
        &line,
    );
    assert_eq!(field(&caps, "cp").parse::<u16>().unwrap(), cport);
    assert_eq!(field(&caps, "sp").parse::<u16>().unwrap(), srv.addr.port());
}

/// `fc_rtt`, `fc_rttvar`, `fc_unacked`, ... read the client connection's `TCP_INFO` (in
/// rules, headers and logs, HTTP and TCP); `%Tu` is `%Tt` less the idle time `%Ti`.
#[test]
fn tcp_info_fetches_and_tu() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{LOGGED}    mode http\nfrontend fe\n    bind 127.0.0.1:{port}\n    \
         log-format \"%HP rtt=%[fc_rtt(us)] var=%[fc_rttvar] un=%[fc_unacked] re=%[fc_reordering] \
         rt=%[fc_retrans] l=%[fc_lost] s=%[fc_sacked] Tt=%Tt Ti=%Ti Tu=%Tu\"\n    \
         http-request set-header x-rtt %[fc_rtt(us)]\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/first").status, 200);
    // Idle, then the second request of the connection: its Ti is the pause.
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(c.get("/second").status, 200);
    let rtt: u64 = b.last_request().header("x-rtt").unwrap().parse().unwrap();
    assert!(rtt > 0, "a connected TCP socket has an RTT estimate");
    let line = s.wait_log_line(|l| l.starts_with("/second "), WAIT);
    let caps = matches(
        r"^/second rtt=(?P<rtt>\d+) var=\d+ un=\d+ re=(?P<re>\d+) rt=\d+ l=\d+ s=\d+ Tt=(?P<tt>\d+) Ti=(?P<ti>\d+) Tu=(?P<tu>\d+)$",
        &line,
    );
    assert!(field(&caps, "rtt").parse::<u64>().unwrap() > 0);
    // Linux starts every connection's reordering metric at 3 (net.ipv4.tcp_reordering).
    assert!(field(&caps, "re").parse::<u64>().unwrap() > 0);
    let n = |k| field(&caps, k).parse::<i64>().unwrap();
    assert!(n("ti") >= 150, "{line}");
    assert_eq!(n("tu"), n("tt") - n("ti"), "{line}");
    // In mode tcp too, where the line is built when the session ends.
    let echo = TcpBackend::echo();
    let tport = free_port();
    let cfg = format!(
        "{LOGGED}    mode tcp\nfrontend fe\n    bind 127.0.0.1:{tport}\n    \
         log-format \"tcp rtt=%[fc_rtt(us)] re=%[fc_reordering]\"\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        echo.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = TcpStream::connect(lo(tport)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    c.read_exact(&mut got).unwrap();
    drop(c);
    let line = s.wait_log_line(|l| l.starts_with("tcp "), WAIT);
    matches(r"^tcp rtt=[1-9]\d* re=[1-9]\d*$", &line);
}

// ---------------------------------------------------------------------------------------------
// TLS

struct Cert {
    ca_pem: String,
    bundle: String,
}

/// A CA and an ECDSA P-256 leaf for `name` signed by it.
fn cert(name: &str) -> Cert {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, "test CA");
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec![name.to_string()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    let leaf = p.signed_by(&key, &ca).unwrap();
    Cert {
        ca_pem: ca.pem(),
        bundle: format!("{}{}", leaf.pem(), key.serialize_pem()),
    }
}

/// A client trusting `ca_pem`, speaking only `version`, offering only `suite` if given.
fn client(
    ca_pem: &str,
    version: &'static rustls::SupportedProtocolVersion,
    suite: Option<rustls::CipherSuite>,
) -> Arc<ClientConfig> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if let Some(s) = suite {
        provider.cipher_suites.retain(|c| c.suite() == s);
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let c = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(c)
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn tls_connect(port: u16, sni: &str, cfg: &Arc<ClientConfig>) -> Tls {
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = ClientConnection::new(cfg.clone(), name).unwrap();
    let mut sock = TcpStream::connect(lo(port)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    StreamOwned::new(conn, sock)
}

/// HAProxy's (OpenSSL's) name of the suite the client negotiated.
fn openssl_name(t: &Tls) -> String {
    let s = format!("{:?}", t.conn.negotiated_cipher_suite().unwrap().suite());
    match s.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => s,
    }
}

#[test]
fn ssl_binds_log_version_cipher_and_sni() {
    let c = cert("logs.example");
    let dir = TempDir::new();
    let pem = dir.write("site.pem", &c.bundle);
    let b = HttpBackend::start("s1");
    let tcp_srv = TcpBackend::echo();
    let (hport, tport) = (free_port(), free_port());
    let pem = pem.display();
    let cfg = format!(
        "{LOGGED}frontend fe\n    mode http\n    bind 127.0.0.1:{hport} ssl crt {pem}\n    \
         log-format \"%ci %ft %sslv %sslc %[ssl_fc_sni] %[ssl_fc] %{{+Q}}[ssl_fc_protocol] %[ssl_fc_cipher] %Th %{{+Q}}r\"\n    \
         default_backend be\n{}\
         frontend tfe\n    mode tcp\n    bind 127.0.0.1:{tport} ssl crt {pem}\n    \
         log-format \"tcp %cp %ft %sslv %sslc %[ssl_fc_sni] %[ssl_fc_has_sni]\"\n    default_backend tbe\n\
         backend tbe\n    mode tcp\n    server t1 {}\n",
        backend_section("be", "    mode http", &[&b]),
        tcp_srv.hostport()
    );
    let s = Sluice::start(&cfg);

    // TLS 1.3 over HTTP: the suite the client negotiated, under its IANA/OpenSSL name.
    let mut t = tls_connect(
        hport,
        "logs.example",
        &client(&c.ca_pem, &rustls::version::TLS13, None),
    );
    let cipher = openssl_name(&t);
    assert!(
        cipher.starts_with("TLS_AES_") || cipher.starts_with("TLS_CHACHA20_"),
        "{cipher}"
    );
    t.write_all(b"GET /tls13 HTTP/1.1\r\nHost: logs.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = Vec::new();
    let _ = t.read_to_end(&mut resp);
    assert!(
        resp.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    let line = s.wait_log_line(|l| l.contains("/tls13"), WAIT);
    let caps = matches(
        r#"^127\.0\.0\.1 fe~ TLSv1\.3 (?P<c>\S+) logs\.example 1 "TLSv1\.3" (?P<c2>\S+) (?P<th>\d+) "GET /tls13 HTTP/1\.1"$"#,
        &line,
    );
    assert_eq!(field(&caps, "c"), cipher, "{line}");
    assert_eq!(field(&caps, "c2"), cipher, "{line}");

    // TLS 1.2 with one suite: OpenSSL's name for it.
    let suite = rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
    let mut t = tls_connect(
        hport,
        "logs.example",
        &client(&c.ca_pem, &rustls::version::TLS12, Some(suite)),
    );
    t.write_all(b"GET /tls12 HTTP/1.1\r\nHost: logs.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = Vec::new();
    let _ = t.read_to_end(&mut resp);
    let line = s.wait_log_line(|l| l.contains("/tls12"), WAIT);
    matches(
        r#"^127\.0\.0\.1 fe~ TLSv1\.2 ECDHE-ECDSA-AES128-GCM-SHA256 logs\.example 1 "TLSv1\.2" ECDHE-ECDSA-AES128-GCM-SHA256 \d+ "GET /tls12 HTTP/1\.1"$"#,
        &line,
    );

    // mode tcp over an ssl bind.
    let mut t = tls_connect(
        tport,
        "logs.example",
        &client(&c.ca_pem, &rustls::version::TLS13, None),
    );
    let cipher = openssl_name(&t);
    let cport = t.sock.local_addr().unwrap().port();
    t.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    t.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
    t.conn.send_close_notify();
    let _ = t.flush();
    drop(t);
    let line = s.wait_log_line(|l| l.starts_with(&format!("tcp {cport} ")), WAIT);
    assert_eq!(
        line,
        format!("tcp {cport} tfe~ TLSv1.3 {cipher} logs.example 1"),
        "{line}"
    );
}

/// `option log-separate-errors` logs HAProxy's "interesting" sessions (5xx, errors, retries,
/// redispatches) at `err` instead of `info`; `option dontlog-normal` logs only those. The
/// level is read from the line (`format short` starts it with `<LEVEL>`).
#[test]
fn log_separate_errors_and_dontlog_normal() {
    let ok = HttpBackend::start("ok");
    let dead = closed_port();
    let (p_sep, p_err) = (free_port(), free_port());
    let cfg = format!(
        "global\n    log stdout format short local0\n\
defaults\n    mode http\n    log global\n    option httplog\n    retries 0\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
frontend sep\n    bind 127.0.0.1:{p_sep}\n    option log-separate-errors\n    use_backend dead if {{ path /bad }}\n    default_backend good\n\
frontend only_err\n    bind 127.0.0.1:{p_err}\n    option dontlog-normal\n    use_backend dead if {{ path /bad }}\n    default_backend good\n\
backend good\n    server s {}\n\
backend dead\n    server s 127.0.0.1:{dead}\n",
        ok.hostport()
    );
    let s = Sluice::start(&cfg);
    assert_eq!(http_get(p_sep, "/fine").status, 200);
    assert_eq!(http_get(p_sep, "/bad").status, 502);
    let fine = s.wait_log_line(|l| l.contains("GET /fine "), Duration::from_secs(5));
    assert!(fine.starts_with("<6>"), "info: {fine}");
    let bad = s.wait_log_line(|l| l.contains("GET /bad "), Duration::from_secs(5));
    assert!(bad.starts_with("<3>"), "err: {bad}");
    // dontlog-normal: the error is logged (at info: no log-separate-errors), the 200 is not.
    assert_eq!(http_get(p_err, "/quiet").status, 200);
    assert_eq!(http_get(p_err, "/bad?loud").status, 502);
    let loud = s.wait_log_line(|l| l.contains("GET /bad?loud "), Duration::from_secs(5));
    assert!(
        loud.starts_with("<6>") && loud.contains(" only_err "),
        "{loud}"
    );
    assert!(
        !s.stdout.snapshot().iter().any(|l| l.contains("/quiet")),
        "a normal request under dontlog-normal was logged"
    );
}

/// `unique-id-format` / `unique-id-header`: one id per request, built like a log line (no
/// leading space after the empty `%o`, as HAProxy 2.6 builds it), sent to the server in the
/// header, readable with `%[unique-id]` by the rules and logged as `%ID`.
#[test]
fn unique_id_format_header_fetch_and_log() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{LOGGED}frontend fe\n    mode http\n    bind 127.0.0.1:{port}\n\
         \x20   unique-id-format %{{+X}}o\\ %ci:%cp_%fi:%fp_%rt\n\
         \x20   unique-id-header X-Unique-ID\n\
         \x20   http-response set-header X-Request-ID %[unique-id]\n\
         \x20   log-format \"id=%ID st=%ST\"\n    default_backend be\n\
         backend be\n    mode http\n    server s1 {}\n",
        b.hostport()
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    let cport = c.local_port();
    for n in 0..2 {
        let r = c.request("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        let want = format!("7F000001:{cport:04X}_7F000001:{port:04X}_{n:04X}");
        assert_eq!(r.header("X-Request-ID"), Some(want.as_str()));
        assert_eq!(b.last_request().header("x-unique-id"), Some(want.as_str()));
        let line = s.wait_log_lines(n + 1, |l| l.starts_with("id="), WAIT)[n].clone();
        assert_eq!(line, format!("id={want} st=200"));
    }
}

/// The syslog header of each `log ... format F`, as HAProxy 2.6.12 writes it (observed on
/// the same configuration): `local` (the default) has no host name, `rfc3164` has
/// `localhost` unless `log-send-hostname`, `rfc5424` has `-`.
#[test]
fn syslog_headers_of_every_format() {
    let b = HttpBackend::start("A");
    let cases: [(&str, &str, &str); 8] = [
        (
            "local",
            "",
            r"^<134>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d sluice\[\d+\]: ",
        ),
        (
            "rfc3164",
            "",
            r"^<134>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d localhost sluice\[\d+\]: ",
        ),
        (
            "rfc3164",
            "    log-send-hostname web1\n",
            r"^<134>\w+ [ \d]\d [\d:]{8} web1 sluice\[",
        ),
        (
            "local",
            "    log-send-hostname web1\n",
            r"^<134>\w+ [ \d]\d [\d:]{8} web1 sluice\[",
        ),
        (
            "rfc5424",
            "",
            r"^<134>1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00 - sluice \d+ - - ",
        ),
        (
            "timed",
            "",
            r"^<6>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00 [^ ]",
        ),
        (
            "iso",
            "",
            r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00 [^ ]",
        ),
        ("priority", "", r"^<134>127\.0\.0\.1:\d+ \["),
    ];
    for (format, global, re) in cases {
        let port = free_port();
        let cfg = format!(
            "global\n    log stdout format {format} local0\n{global}\
             defaults\n    mode http\n    log global\n    option httplog\n    \
             timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\
             frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
             backend be\n    server s1 {}\n",
            b.hostport()
        );
        let s = Sluice::start(&cfg);
        let _ = http_get(port, "/fmt");
        let line = s.wait_log_line(|l| l.contains("GET /fmt"), WAIT);
        let re = regex::Regex::new(re).unwrap();
        assert!(re.is_match(&line), "{format} {global:?}: {line}");
    }
}

/// Header captures and `capture` rules: `{...}` groups in `option httplog` lines and in
/// `%hr` / `%hs`, in declaration order, truncated, escaped as HAProxy 2.6.12 escapes them
/// (its line for the same request is the expected one).
#[test]
fn captures_in_httplog_lines() {
    let b = HttpBackend::with_handler("A", |_| Reply::Full {
        status: 200,
        headers: vec![
            ("Content-Type".into(), "text/plain".into()),
            ("X-R".into(), "r|1".into()),
        ],
        body: b"ok".to_vec(),
    });
    let port = free_port();
    let p2 = free_port();
    let cfg = format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         capture request header Host len 5\n    capture request header X-Missing len 10\n    \
         capture request header User-Agent len 40\n    \
         capture response header Content-Type len 4\n    \
         declare capture response len 10\n    \
         http-request capture req.hdr(x-a) len 8\n    \
         http-response capture res.hdr(x-r) id 1\n    default_backend be\n\
         frontend fe2\n    bind 127.0.0.1:{p2}\n    capture request header Host len 20\n    \
         log-format \"hr=%hr hs=%hs\"\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        b.hostport(),
    );
    let s = Sluice::start(&cfg);
    let r = http_raw(
        port,
        "GET /c HTTP/1.1\r\nHost: example.com\r\nUser-Agent: a \"b\" c|d{e}#f\r\n\
         X-A: 123456789\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let line = s.wait_log_line(|l| l.contains("GET /c "), WAIT);
    assert!(
        line.ends_with(
            " {examp||a #22b#22 c#7Cd#7Be#7D#23f|12345678} {text|r#7C1} \"GET /c HTTP/1.1\""
        ),
        "{line}"
    );
    let _ = http_get(p2, "/d");
    let line = s.wait_log_line(|l| l.starts_with("hr="), WAIT);
    assert_eq!(line, "hr={test} hs=");
    // Slots are checked at load.
    let (code, err) = Sluice::check(&format!(
        "{LOGGED_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         http-response capture res.hdr(x) id 0\n    default_backend be\n\
         backend be\n    http-request capture req.hdr(x) len 4\n    server s1 {}\n",
        b.hostport(),
    ));
    assert_ne!(code, 0);
    assert!(
        err.contains("this proxy has no response capture slot 0"),
        "{err}"
    );
    assert!(
        err.contains("'capture ... len' declares a slot of a frontend"),
        "{err}"
    );
}

/// `option tcplog` on a `mode http` frontend logs each request in the TCP format, as
/// HAProxy 2.6.12 does (it was silent before); a request answered by `http-request return`
/// is marked `LR`.
#[test]
fn tcplog_on_an_http_frontend_logs_each_request_in_the_tcp_format() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{LOGGED}    mode http\n    option tcplog\nfrontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   http-request return status 200 content-type text/plain string here if {{ path /ret }}\n\
         \x20   default_backend be\n{}",
        backend_section("be", "", &[&b])
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    assert_eq!(c.get("/x").status, 200);
    assert_eq!(c.get("/ret").body_str(), "here");
    let lines = s.wait_log_lines(2, |l| l.contains(" fe "), WAIT);
    let re = r"^127\.0\.0\.1:\d+ \[[^\]]+\] fe (?P<bs>\S+) (?P<t>\S+) \d+ (?P<ts>\S\S) \d+/\d+/\d+/\d+/\d+ \d+/\d+$";
    let first = matches(re, &lines[0]);
    assert_eq!(field(&first, "bs"), "be/s1");
    assert_eq!(field(&first, "ts"), "--");
    let second = matches(re, &lines[1]);
    assert_eq!(field(&second, "bs"), "fe/<NOSRV>");
    assert_eq!(field(&second, "t"), "-1/-1/0");
    assert_eq!(field(&second, "ts"), "LR");
}

/// `cpu_calls`, `cpu_ns_tot`, `cpu_ns_avg` (HAProxy's task counters, per request) and
/// `lat_ns_*` (0: sluice does not measure scheduling latency, as HAProxy without task
/// profiling) in a log line; counted again from zero for each request of a connection.
#[test]
fn task_counters_in_log_lines() {
    let b = HttpBackend::start("s1");
    let port = free_port();
    let cfg = format!(
        "{LOGGED}    mode http\nfrontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   log-format \"%ST calls=%[cpu_calls] tot=%[cpu_ns_tot] avg=%[cpu_ns_avg] lat=%[lat_ns_avg]/%[lat_ns_tot]\"\n\
         \x20   default_backend be\n{}",
        backend_section("be", "", &[&b])
    );
    let s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    for _ in 0..2 {
        assert_eq!(c.get("/").status, 200);
    }
    let lines = s.wait_log_lines(2, |l| l.starts_with("200 "), WAIT);
    let re = r"^200 calls=(?P<c>\d+) tot=(?P<t>\d+) avg=(?P<a>\d+) lat=0/0$";
    for l in &lines {
        let m = matches(re, l);
        let n = |k: &str| field(&m, k).parse::<u64>().unwrap();
        // A proxied request takes a few polls (head, server answer, ...), not hundreds: the
        // count restarts with each request.
        assert!((1..50).contains(&n("c")), "{l}");
        assert!(n("t") > 0, "{l}");
        assert_eq!(n("a"), n("t") / n("c"), "{l}");
    }
}
