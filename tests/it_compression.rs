//! `compression algo|type|offload`: responses compressed as HAProxy 2.6 compresses them (the
//! rules were compared with HAProxy on the same requests): the algorithm the client weights
//! highest, only 200-203 responses of the listed types, chunked, `Vary`, a weakened ETag; the
//! body decodes to what the server sent, and keep-alive framing stays right.

mod common;

use common::*;
use std::io::Read as _;

/// A compressible page of a few buffers, so that it crosses reads.
fn page() -> Vec<u8> {
    (0..4000)
        .flat_map(|i| format!("<p>paragraph {i} of a page</p>\n").into_bytes())
        .collect()
}

/// Serves `page()` as `text/html` (or what the path asks for): `/chunked` in chunked framing,
/// (`/chunked-trailer` with a trailer field), `/pdf` as a PDF, `/etag` with a strong ETag, `/nt`
/// with `no-transform`, `/br` already encoded, `/404` as a 404, `/empty` with no body. Records the `Accept-Encoding` it was sent.
fn origin() -> HttpBackend {
    HttpBackend::with_handler("origin", |r| {
        let body = page();
        let t = r.target.as_str();
        if t.starts_with("/chunked") {
            let mut raw =
                b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ntransfer-encoding: chunked\r\n\r\n"
                    .to_vec();
            for c in body.chunks(3000) {
                raw.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                raw.extend_from_slice(c);
                raw.extend_from_slice(b"\r\n");
            }
            raw.extend_from_slice(b"0\r\n");
            if t.ends_with("trailer") {
                raw.extend_from_slice(b"X-Sum: 42\r\n");
            }
            raw.extend_from_slice(b"\r\n");
            return Reply::Raw(raw);
        }
        if t == "/empty" {
            return Reply::Full {
                status: 200,
                headers: vec![("Content-Type".into(), "text/html".into())],
                body: Vec::new(),
            };
        }
        let mut headers = vec![(
            "Content-Type".to_string(),
            if t == "/pdf" {
                "application/pdf"
            } else {
                "text/html; charset=utf-8"
            }
            .to_string(),
        )];
        match t {
            "/etag" => headers.push(("ETag".into(), "\"v1\"".into())),
            "/nt" => headers.push(("Cache-Control".into(), "public, no-transform".into())),
            "/br" => headers.push(("Content-Encoding".into(), "br".into())),
            _ => {}
        }
        Reply::Full {
            status: if t == "/404" { 404 } else { 200 },
            headers,
            body,
        }
    })
}

fn get(c: &mut HttpClient, path: &str, ae: &str) -> Response {
    let ae = if ae.is_empty() {
        String::new()
    } else {
        format!("Accept-Encoding: {ae}\r\n")
    };
    c.request(format!("GET {path} HTTP/1.1\r\nHost: t\r\n{ae}\r\n"))
}

fn decode(r: &Response) -> Vec<u8> {
    let mut out = Vec::new();
    match r.header("content-encoding") {
        Some("gzip") => flate2::read::GzDecoder::new(&r.body[..])
            .read_to_end(&mut out)
            .unwrap(),
        Some("deflate") => flate2::read::ZlibDecoder::new(&r.body[..])
            .read_to_end(&mut out)
            .unwrap(),
        other => panic!("not compressed: {other:?}"),
    };
    out
}

fn start(fe: &str, be: &str, srv: &HttpBackend) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n{fe}\n    default_backend be\n\
         backend be\n{be}\n    server s {}\n",
        srv.hostport()
    );
    (Sluice::start(&cfg), port)
}

#[test]
fn compresses_what_the_client_accepts() {
    let srv = origin();
    let (_s, port) = start(
        "    compression algo gzip deflate\n    compression type text/html text/plain",
        "",
        &srv,
    );
    let body = page();
    // One keep-alive connection throughout: compressed and plain responses alternate, so a
    // framing mistake would desynchronise it.
    let mut c = HttpClient::connect(port);
    for (path, ae, want) in [
        ("/", "gzip, deflate, br", "gzip"),
        ("/chunked", "deflate;q=0.9, gzip;q=0.5", "deflate"),
        ("/", "br", ""),
        ("/", "*", "deflate"),
        ("/chunked", "gzip", "gzip"),
        ("/", "gzip;q=0", ""),
        ("/", "", ""),
    ] {
        let r = get(&mut c, path, ae);
        assert_eq!(r.status, 200, "{path} [{ae}]");
        if want.is_empty() {
            assert_eq!(r.header("content-encoding"), None, "{path} [{ae}]");
            assert_eq!(r.body, body, "{path} [{ae}]");
            continue;
        }
        assert_eq!(r.header("content-encoding"), Some(want), "{path} [{ae}]");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_eq!(r.header("content-length"), None);
        assert!(r.chunked, "a compressed body is chunked");
        assert!(r.body.len() < body.len() / 4, "{} bytes", r.body.len());
        assert_eq!(decode(&r), body, "{path} [{ae}]");
    }
    // A strong ETag becomes weak: the compressed bytes are another representation.
    let r = get(&mut c, "/etag", "gzip");
    assert_eq!(r.header("etag"), Some("W/\"v1\""));
    assert_eq!(decode(&r), body);
    // Without `offload`, the server is told what the client accepts.
    assert_eq!(srv.last_request().header("accept-encoding"), Some("gzip"));
}

#[test]
fn responses_that_are_not_compressed() {
    let srv = origin();
    let (_s, port) = start(
        "",
        "    compression algo gzip\n    compression type text/html",
        &srv,
    );
    let body = page();
    let mut c = HttpClient::connect(port);
    for path in ["/pdf", "/nt", "/br", "/404"] {
        let r = get(&mut c, path, "gzip");
        assert_ne!(r.header("content-encoding"), Some("gzip"), "{path}");
        assert_eq!(r.body, body, "{path}");
        assert!(
            r.header("content-length").is_some(),
            "{path}: passed as it came"
        );
    }
    // An empty body announced by its length is left alone (as HAProxy does).
    let r = get(&mut c, "/empty", "gzip");
    assert_eq!(
        (r.header("content-encoding"), r.header("content-length")),
        (None, Some("0"))
    );
    // HEAD, and an HTTP/1.0 client (which cannot read a chunked body), get no compression.
    let r = c.request("HEAD / HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n");
    assert_eq!(r.header("content-encoding"), None);
    let mut c10 = HttpClient::connect(port);
    let r = c10.request("GET / HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n");
    assert_eq!(
        (r.header("content-encoding"), r.body.len()),
        (None, body.len())
    );
    // And HTTP/1.1 on the same first connection still works.
    let r = get(&mut c, "/", "gzip");
    assert_eq!(decode(&r), body);
}

#[test]
fn offload_hides_accept_encoding_from_the_server() {
    let srv = origin();
    let (_s, port) = start("    compression algo gzip", "    compression offload", &srv);
    let mut c = HttpClient::connect(port);
    let r = get(&mut c, "/", "gzip, br");
    assert_eq!(decode(&r), page());
    assert_eq!(srv.last_request().header("accept-encoding"), None);
    // Nothing chosen: the header goes through.
    get(&mut c, "/", "br");
    assert_eq!(srv.last_request().header("accept-encoding"), Some("br"));
}

#[test]
fn compression_config_errors() {
    let (code, err) = Sluice::check(&format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind :0\n    compression algo gzip brotli\n\
         compression tpye text/html\n    compression algo-res gzip\n"
    ));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(":8: 'compression' in frontend 'fe': unknown compression algorithm 'brotli'"),
        "{err}"
    );
    assert!(
        err.contains(":9: 'compression' in frontend 'fe': unknown 'compression' argument 'tpye'"),
        "{err}"
    );
    assert!(err.contains("(did you mean 'type'?)"), "{err}");
    assert!(
        err.contains(
            ":10: 'compression' in frontend 'fe': 'compression algo-res' is not supported"
        ),
        "{err}"
    );
    let (code, err) =
        Sluice::check("frontend fe\n    mode tcp\n    bind :8000\n    compression algo gzip\n");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(
            ":4: 'compression' statement ignored for frontend 'fe' as it requires HTTP mode."
        ),
        "{err}"
    );
}

#[test]
fn trailers_follow_a_compressed_body() {
    let srv = origin();
    let (_s, port) = start("    compression algo gzip", "", &srv);
    let mut c = HttpClient::connect(port);
    for _ in 0..2 {
        let r = get(&mut c, "/chunked-trailer", "gzip");
        assert_eq!(decode(&r), page());
        assert_eq!(r.trailers, [("X-Sum".to_string(), "42".to_string())]);
    }
}

/// `compression` in `defaults` applies to the proxies after it; `offload` there is ignored
/// with HAProxy's warning.
#[test]
fn compression_from_defaults() {
    let srv = origin();
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}    compression algo gzip\n    compression offload\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n    server s {}\n",
        srv.hostport()
    );
    let (code, err) = Sluice::check(&cfg);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(":7: 'compression' : 'offload' ignored in 'defaults' section."),
        "{err}"
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    let r = get(&mut c, "/", "gzip");
    assert_eq!(decode(&r), page());
    assert_eq!(
        srv.last_request().header("accept-encoding"),
        Some("gzip"),
        "no offload"
    );
}

/// `identity` transforms nothing but frames the response as a compressed one (chunked, `Vary`,
/// weak ETag, no `Content-Encoding`), and `offload` then still hides `Accept-Encoding`, as in
/// HAProxy 2.6.
#[test]
fn identity_reframes_without_encoding() {
    let srv = origin();
    let (_s, port) = start(
        "    compression algo identity\n    compression offload",
        "",
        &srv,
    );
    let mut c = HttpClient::connect(port);
    for _ in 0..2 {
        let r = get(&mut c, "/etag", "*");
        assert_eq!(r.header("content-encoding"), None);
        assert_eq!(r.header("content-length"), None);
        assert!(r.chunked);
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_eq!(r.header("etag"), Some("W/\"v1\""));
        assert_eq!(r.body, page());
        assert_eq!(srv.last_request().header("accept-encoding"), None);
    }
}
