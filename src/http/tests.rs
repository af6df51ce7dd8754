//! Unit tests for the HTTP/1 codec: one test (or a small table) per rule, plus a request
//! smuggling corpus.

use super::*;

const MAX: usize = 16 * 1024;

fn req(raw: &[u8]) -> RequestHead {
    match parse_request(raw, MAX) {
        Ok(Parsed::Complete(h)) => h,
        other => panic!(
            "expected a complete request for {:?}, got {other:?}",
            show(raw)
        ),
    }
}

fn req_err(raw: &[u8]) -> HttpError {
    match parse_request(raw, MAX) {
        Err(e) => e,
        other => panic!("expected an error for {:?}, got {other:?}", show(raw)),
    }
}

fn req_status(raw: &[u8]) -> u16 {
    req_err(raw).status
}

fn res(raw: &[u8], head: bool, connect: bool) -> ResponseHead {
    match parse_response(raw, MAX, head, connect) {
        Ok(Parsed::Complete(h)) => h,
        other => panic!(
            "expected a complete response for {:?}, got {other:?}",
            show(raw)
        ),
    }
}

fn res_get(raw: &[u8]) -> ResponseHead {
    res(raw, false, false)
}

fn res_err(raw: &[u8]) -> HttpError {
    match parse_response(raw, MAX, false, false) {
        Err(e) => e,
        other => panic!("expected an error for {:?}, got {other:?}", show(raw)),
    }
}

fn show(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

/// Feeds a whole chunked body; returns (consumed, done).
fn chunked(body: &[u8]) -> Result<(usize, bool), HttpError> {
    ChunkedState::new().feed(body)
}

/// Feeds a chunked body one byte at a time; returns (consumed, done).
fn chunked_bytewise(body: &[u8]) -> Result<(usize, bool), HttpError> {
    let mut st = ChunkedState::new();
    let mut total = 0;
    for i in 0..body.len() {
        let (n, done) = st.feed(&body[i..i + 1])?;
        total += n;
        if done {
            return Ok((total, true));
        }
    }
    Ok((total, st.is_done()))
}

// ---------------------------------------------------------------------------------------------
// Request line
// ---------------------------------------------------------------------------------------------

#[test]
fn simple_get() {
    let raw = b"GET /index.html?a=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\n";
    let h = req(raw);
    assert_eq!(h.head_len, raw.len());
    assert_eq!(h.method(raw), b"GET");
    assert_eq!(h.uri(raw), b"/index.html?a=1");
    assert_eq!(h.version_minor, 1);
    assert_eq!(h.headers.len(), 2);
    assert_eq!(h.headers[0].name(raw), b"Host");
    assert_eq!(h.headers[0].value(raw), b"example.com");
    assert_eq!(h.headers[1].name(raw), b"User-Agent");
    assert_eq!(h.body, BodyKind::None);
    assert!(!h.conn_close && !h.conn_keep_alive && !h.upgrade && !h.expect_continue);
    assert!(!h.is_head && !h.is_connect);
    assert_eq!(h.header(raw, b"HOST"), Some(&b"example.com"[..]));
    assert_eq!(h.header(raw, b"missing"), None);
}

#[test]
fn headers_keep_order_and_case_and_trim_values() {
    let raw = b"POST /x HTTP/1.1\r\nX-B:  two \t\r\nx-a:one\r\nX-Empty:\r\nX-Sp:   \r\nX-B: again\r\n\r\n";
    let h = req(raw);
    let got: Vec<(&[u8], &[u8])> = h
        .headers
        .iter()
        .map(|s| (s.name(raw), s.value(raw)))
        .collect();
    assert_eq!(
        got,
        vec![
            (&b"X-B"[..], &b"two"[..]),
            (b"x-a", b"one"),
            (b"X-Empty", b""),
            (b"X-Sp", b""),
            (b"X-B", b"again"),
        ]
    );
    assert_eq!(h.headers.capacity(), h.headers.len());
}

#[test]
fn partial_until_complete() {
    let raw = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    for i in 0..raw.len() {
        assert_eq!(
            parse_request(&raw[..i], MAX),
            Ok(Parsed::Partial),
            "prefix {i}"
        );
    }
    assert!(matches!(parse_request(raw, MAX), Ok(Parsed::Complete(_))));
}

#[test]
fn pipelined_bytes_are_not_part_of_the_head() {
    let raw = b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n";
    let h = req(raw);
    assert_eq!(h.head_len, 19);
    assert_eq!(h.uri(raw), b"/a");
}

#[test]
fn bare_lf_line_endings_accepted() {
    let raw = b"GET / HTTP/1.1\nHost: a\nContent-Length: 3\n\nabc";
    let h = req(raw);
    assert_eq!(h.head_len, raw.len() - 3);
    assert_eq!(h.body, BodyKind::Length(3));
}

#[test]
fn leading_empty_lines_accepted() {
    let raw = b"\r\n\nGET / HTTP/1.1\r\n\r\n";
    let h = req(raw);
    assert_eq!(h.method(raw), b"GET");
    assert_eq!(h.head_len, raw.len());
}

#[test]
fn http10_defaults_to_close() {
    let h = req(b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(h.version_minor, 0);
    assert!(h.conn_close);
    let h = req(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    assert!(!h.conn_close);
    assert!(h.conn_keep_alive);
}

#[test]
fn invalid_request_lines() {
    let cases: &[&[u8]] = &[
        b"GET  / HTTP/1.1\r\n\r\n",        // double space
        b"GET / HTTP/1.1 \r\n\r\n",        // trailing space
        b"G(T / HTTP/1.1\r\n\r\n",         // bad method token
        b"GET /a b HTTP/1.1\r\n\r\n",      // space in URI
        b"GET /a\x01b HTTP/1.1\r\n\r\n",   // CTL in URI
        b"GET /a\x7fb HTTP/1.1\r\n\r\n",   // DEL in URI
        b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n", // non-ASCII in URI
        b"GET /a#frag HTTP/1.1\r\n\r\n",   // fragment
        b"GET / HTTP/2.0\r\n\r\n",         // unsupported version
        b"GET / HTTP/1.2\r\n\r\n",
        b"GET / HTTP/0.9\r\n\r\n",
        b"GET / http/1.1\r\n\r\n",
        b"GET /\r\n\r\n",                        // HTTP/0.9
        b"GET / HTTP/1.1\rX: y\r\n\r\n",         // bare CR after request line
        b" GET / HTTP/1.1\r\n\r\n",              // leading space
        b"GET\t/ HTTP/1.1\r\n\r\n",              // tab delimiter
        b"GET foo HTTP/1.1\r\n\r\n",             // not origin/absolute form
        b"GET * HTTP/1.1\r\n\r\n",               // asterisk-form for GET
        b"CONNECT /x HTTP/1.1\r\n\r\n",          // origin-form for CONNECT
        b"CONNECT example.com HTTP/1.1\r\n\r\n", // no port
        b"CONNECT http://a:80/ HTTP/1.1\r\n\r\n",
        b"\rGET / HTTP/1.1\r\n\r\n", // bare CR before the request
    ];
    for raw in cases {
        assert_eq!(req_status(raw), 400, "{:?}", show(raw));
    }
}

#[test]
fn request_target_forms() {
    let raw = b"OPTIONS * HTTP/1.1\r\n\r\n";
    assert_eq!(req(raw).uri(raw), b"*");
    req(b"PRI * HTTP/1.1\r\n\r\n"); // unknown method with asterisk-form: accepted like HAProxy
    let raw = b"GET http://example.com:8080/p?q HTTP/1.1\r\nHost: example.com:8080\r\n\r\n";
    assert_eq!(req(raw).uri(raw), b"http://example.com:8080/p?q");
    let raw = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n";
    let h = req(raw);
    assert!(h.is_connect);
    assert_eq!(h.body, BodyKind::None);
    req(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n");
}

#[test]
fn head_and_connect_flags() {
    assert!(req(b"HEAD / HTTP/1.1\r\n\r\n").is_head);
    assert!(!req(b"head / HTTP/1.1\r\n\r\n").is_head); // methods are case-sensitive
    assert!(req(b"CONNECT a:1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n").is_connect);
    assert_eq!(
        req_status(b"CONNECT a:1 HTTP/1.1\r\nContent-Length: 5\r\n\r\n"),
        400
    );
    assert_eq!(
        req_status(b"CONNECT a:1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400
    );
}

// ---------------------------------------------------------------------------------------------
// Size limits
// ---------------------------------------------------------------------------------------------

#[test]
fn over_long_request_line_is_414() {
    let mut raw = b"GET /".to_vec();
    raw.extend(std::iter::repeat_n(b'a', 200));
    // Incomplete and at/over the limit, request line not finished.
    assert_eq!(parse_request(&raw, 100).unwrap_err().status, 414);
    // Below the limit: partial.
    assert_eq!(parse_request(&raw[..50], 100), Ok(Parsed::Partial));
    // A complete head whose request line alone exceeds the limit is 414 too.
    raw.extend_from_slice(b" HTTP/1.1\r\n\r\n");
    assert_eq!(parse_request(&raw, 100).unwrap_err().status, 414);
}

#[test]
fn too_large_headers_is_431() {
    let mut raw = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..50 {
        raw.extend_from_slice(format!("X-Header-{i}: some value\r\n").as_bytes());
    }
    let partial_len = raw.len();
    raw.extend_from_slice(b"\r\n");
    assert_eq!(parse_request(&raw, 256).unwrap_err().status, 431);
    assert_eq!(
        parse_request(&raw[..partial_len], 256).unwrap_err().status,
        431
    );
    assert_eq!(parse_request(&raw[..200], 256), Ok(Parsed::Partial));
    // Exactly fitting is fine.
    assert!(matches!(
        parse_request(&raw, raw.len()),
        Ok(Parsed::Complete(_))
    ));
    assert_eq!(parse_request(&raw, raw.len() - 1).unwrap_err().status, 431);
}

#[test]
fn limit_does_not_depend_on_trailing_bytes() {
    // A complete head followed by lots of body: still complete even if buf > max_head.
    let mut raw = b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n".to_vec();
    raw.extend(std::iter::repeat_n(b'x', 1000));
    let h = match parse_request(&raw, 64) {
        Ok(Parsed::Complete(h)) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(h.body, BodyKind::Length(1000));
}

#[test]
fn too_many_headers_is_400() {
    let mut raw = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..MAX_HEADERS {
        raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    let mut ok = raw.clone();
    ok.extend_from_slice(b"\r\n");
    assert_eq!(req(&ok).headers.len(), MAX_HEADERS);
    raw.extend_from_slice(b"X-last: v\r\n\r\n");
    let e = req_err(&raw);
    assert_eq!((e.status, e.reason), (400, "too many headers"));
}

#[test]
fn zero_max_head() {
    assert_eq!(parse_request(b"", 0).unwrap_err().status, 414);
    assert_eq!(
        parse_request(b"GET / HTTP/1.1\r\n\r\n", 0)
            .unwrap_err()
            .status,
        414
    );
    assert_eq!(
        parse_response(b"", 0, false, false).unwrap_err().status,
        502
    );
}

// ---------------------------------------------------------------------------------------------
// Header syntax
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_header_syntax_is_400() {
    let cases: &[&[u8]] = &[
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",  // space before colon
        b"GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", // tab before colon
        b"GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", // obs-fold (SP)
        b"GET / HTTP/1.1\r\nHost: a\r\n\tb\r\n\r\n", // obs-fold (HTAB)
        b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",  // first header starts with SP
        b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",   // bare CR in value
        b"GET / HTTP/1.1\r\nX: a\r\r\n\r\n",    // CR CR LF
        b"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n",   // NUL in value
        b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", // CTL in value
        b"GET / HTTP/1.1\r\nX: a\x7fb\r\n\r\n", // DEL in value
        b"GET / HTTP/1.1\r\nX\0Y: a\r\n\r\n",   // NUL in name
        b"GET / HTTP/1.1\r\nX(Y): a\r\n\r\n",   // separator in name
        b"GET / HTTP/1.1\r\n: a\r\n\r\n",       // empty name
        b"GET / HTTP/1.1\r\nNoColon\r\n\r\n",   // no colon
        b"GET / HTTP/1.1\r\nX: a\r\n\r\r\n",    // bad final line
        b"GET / HTTP/1.1\r\nX\xc3\xa9: a\r\n\r\n", // non-ASCII in name
    ];
    for raw in cases {
        assert_eq!(req_status(raw), 400, "{:?}", show(raw));
    }
}

#[test]
fn obs_text_in_value_is_accepted() {
    let raw = b"GET / HTTP/1.1\r\nX: caf\xc3\xa9\r\n\r\n";
    assert_eq!(req(raw).headers[0].value(raw), b"caf\xc3\xa9");
}

// ---------------------------------------------------------------------------------------------
// Content-Length / Transfer-Encoding (smuggling corpus)
// ---------------------------------------------------------------------------------------------

#[test]
fn content_length_variants() {
    let ok: &[(&[u8], u64)] = &[
        (b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 0),
        (b"POST / HTTP/1.1\r\nContent-Length: 42\r\n\r\n", 42),
        (b"POST / HTTP/1.1\r\ncontent-LENGTH:42 \r\n\r\n", 42),
        (b"POST / HTTP/1.1\r\nContent-Length: 007\r\n\r\n", 7),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            5,
        ),
        (b"POST / HTTP/1.1\r\nContent-Length: 5, 5,5\r\n\r\n", 5),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 05\r\n\r\n",
            5,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n",
            u64::MAX,
        ),
    ];
    for (raw, n) in ok {
        assert_eq!(req(raw).body, BodyKind::Length(*n), "{:?}", show(raw));
    }
    let bad: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 5,\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: ,5\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 5 5\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: \xd9\xa3\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
    ];
    for raw in bad {
        assert_eq!(req_status(raw), 400, "{:?}", show(raw));
    }
}

#[test]
fn transfer_encoding_chunked_accepted() {
    let ok: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\ntransfer-encoding: CHUNKED\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding:chunked  \r\n\r\n",
    ];
    for raw in ok {
        assert_eq!(req(raw).body, BodyKind::Chunked, "{:?}", show(raw));
    }
}

#[test]
fn smuggling_corpus() {
    // (raw request, expected status)
    let cases: &[(&[u8], u16)] = &[
        // CL.TE and TE.CL: both framing headers present.
        (
            b"POST / HTTP/1.1\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        // Duplicate / odd Content-Length.
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length : 1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length:\x0b1\r\n\r\n", 400),
        // Transfer-Encoding oddities.
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400),
        // An unknown coding without `chunked`: not implemented (RFC 9112 §6.1).
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunkedx\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n",
            400,
        ),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked;foo=bar\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: ,chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked,\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n : x\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: \x0bchunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: ch\x00unked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer_Encoding: chunked\r\nX\rY: z\r\n\r\n", 400),
        // Codings sluice cannot forward faithfully.
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
            501,
        ),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: identity, chunked\r\n\r\n", 501),
        // TE in HTTP/1.0.
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        // Duplicate Host with different values.
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ];
    for (raw, status) in cases {
        assert_eq!(req_status(raw), *status, "{:?}", show(raw));
    }
    // Identical duplicate Host is tolerated (HAProxy drops the copy).
    req(b"GET / HTTP/1.1\r\nHost: a\r\nhost: A\r\n\r\n");
    // An unrelated header merely resembling TE is not framing.
    let raw = b"POST / HTTP/1.1\r\nTransfer_Encoding: chunked\r\n\r\n";
    assert_eq!(req(raw).body, BodyKind::None);
}

// ---------------------------------------------------------------------------------------------
// Connection semantics
// ---------------------------------------------------------------------------------------------

#[test]
fn connection_tokens() {
    let h = req(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n");
    assert!(h.conn_close && !h.conn_keep_alive);
    let h = req(b"GET / HTTP/1.1\r\nConnection: foo, keep-alive\r\nConnection: X-Y\r\n\r\n");
    assert!(!h.conn_close && h.conn_keep_alive);
    let h = req(b"GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n");
    assert!(h.conn_close && h.conn_keep_alive);
    let h = req(b"GET / HTTP/1.1\r\nConnection: closed\r\n\r\n");
    assert!(!h.conn_close);
}

#[test]
fn upgrade_requires_token_and_header() {
    let h = req(
        b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
    );
    assert!(h.upgrade);
    // A WebSocket handshake without its key is refused, as HAProxy does.
    assert_eq!(
        req_status(b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
        400
    );
    let h = req(b"GET / HTTP/1.1\r\nConnection: keep-alive, upgrade\r\nupgrade: h2c\r\n\r\n");
    assert!(h.upgrade);
    assert!(!req(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n").upgrade);
    assert!(!req(b"GET / HTTP/1.1\r\nConnection: upgrade\r\n\r\n").upgrade);
    assert!(!req(b"GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade:\r\n\r\n").upgrade);
    // Upgrade is ignored in HTTP/1.0 (RFC 9110 §7.8).
    assert!(!req(b"GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n").upgrade);
}

#[test]
fn expect_continue() {
    assert!(
        req(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
            .expect_continue
    );
    assert!(req(b"POST / HTTP/1.1\r\nexpect: 100-Continue\r\n\r\n").expect_continue);
    assert!(!req(b"POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n").expect_continue);
    assert!(!req(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expect_continue);
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

#[test]
fn simple_response() {
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: x\r\n\r\nhello";
    let h = res_get(raw);
    assert_eq!(h.status, 200);
    assert_eq!(h.reason.of(raw), b"OK");
    assert_eq!(h.version_minor, 1);
    assert_eq!(h.body, BodyKind::Length(5));
    assert_eq!(h.head_len, raw.len() - 5);
    assert_eq!(h.headers.len(), 2);
    assert_eq!(h.header(raw, b"server"), Some(&b"x"[..]));
    assert!(!h.conn_close && !h.switching);
}

#[test]
fn response_reason_phrases() {
    let raw = b"HTTP/1.1 404 Not  Found \r\n\r\n";
    assert_eq!(res_get(raw).reason.of(raw), b"Not  Found ");
    let raw = b"HTTP/1.1 200 caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(res_get(raw).reason.of(raw), b"caf\xc3\xa9");
    let raw = b"HTTP/1.1 204\r\n\r\n";
    let h = res_get(raw);
    assert_eq!(h.reason.of(raw), b"");
    let raw = b"HTTP/1.1 204 \r\n\r\n";
    assert_eq!(res_get(raw).reason.of(raw), b"");
    let raw = b"\r\nHTTP/1.1 200 Fine\nContent-Length: 0\n\n";
    assert_eq!(res_get(raw).reason.of(raw), b"Fine");
}

#[test]
fn response_framing() {
    let close = |raw: &[u8]| res_get(raw).body;
    assert_eq!(close(b"HTTP/1.1 200 OK\r\n\r\n"), BodyKind::CloseDelimited);
    assert_eq!(
        close(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
        BodyKind::Chunked
    );
    assert_eq!(
        close(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        BodyKind::Chunked
    );
    assert_eq!(
        close(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
        BodyKind::CloseDelimited
    );
    assert_eq!(
        close(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
        BodyKind::CloseDelimited
    );
    for status in [100u16, 102, 103, 204, 304] {
        let raw = format!("HTTP/1.1 {status} X\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(res_get(raw.as_bytes()).body, BodyKind::None, "{status}");
    }
    // HEAD response: no body even with CL / TE.
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
    assert_eq!(res(raw, true, false).body, BodyKind::None);
    let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(res(raw, true, false).body, BodyKind::None);
    // CONNECT: 2xx is a tunnel, other statuses are framed normally.
    let raw = b"HTTP/1.1 200 Connection established\r\n\r\n";
    assert_eq!(res(raw, false, true).body, BodyKind::CloseDelimited);
    let raw = b"HTTP/1.1 407 Auth\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(res(raw, false, true).body, BodyKind::Length(3));
}

#[test]
fn response_101_switching() {
    let raw =
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";
    let h = res_get(raw);
    assert!(h.switching);
    assert_eq!(h.body, BodyKind::None);
    assert!(!res_get(b"HTTP/1.1 100 Continue\r\n\r\n").switching);
}

#[test]
fn response_te_and_cl() {
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n";
    let h = res_get(raw);
    assert_eq!(h.body, BodyKind::Chunked);
    assert!(h.conn_close);
    // HTTP/1.0 response with TE: TE framing, then close.
    let raw = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n";
    let h = res_get(raw);
    assert_eq!(h.body, BodyKind::Chunked);
    assert!(h.conn_close);
}

#[test]
fn response_connection() {
    assert!(
        res_get(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").conn_close
    );
    assert!(res_get(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").conn_close);
    let h = res_get(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
    assert!(!h.conn_close && h.conn_keep_alive);
    // Close-delimited implies close.
    assert!(res_get(b"HTTP/1.1 200 OK\r\n\r\n").conn_close);
}

#[test]
fn response_errors_are_502() {
    let cases: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX : a\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\0\r\n\r\n",
        b"HTTP/2.0 200 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 099 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1  200 OK\r\n\r\n",
        b"HTTP/1.1 200 O\x01K\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
    ];
    for raw in cases {
        assert_eq!(res_err(raw).status, 502, "{:?}", show(raw));
    }
    // Too many headers.
    let mut raw = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    assert_eq!(res_err(&raw).status, 502);
}

#[test]
fn response_partial_and_too_large() {
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    for i in 0..raw.len() {
        assert_eq!(
            parse_response(&raw[..i], MAX, false, false),
            Ok(Parsed::Partial)
        );
    }
    assert_eq!(
        parse_response(&raw[..20], 20, false, false)
            .unwrap_err()
            .status,
        502
    );
    assert_eq!(
        parse_response(raw, 20, false, false).unwrap_err().status,
        502
    );
}

// ---------------------------------------------------------------------------------------------
// Chunked tracker
// ---------------------------------------------------------------------------------------------

#[test]
fn chunked_basic() {
    let body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    assert_eq!(chunked(body), Ok((body.len(), true)));
    assert_eq!(chunked_bytewise(body), Ok((body.len(), true)));
    let mut st = ChunkedState::new();
    st.feed(body).unwrap();
    assert!(st.is_done());
    assert_eq!(st.payload_len(), 11);
    assert_eq!(st.feed(b"more"), Ok((0, true)));
}

#[test]
fn chunked_stops_at_end_of_message() {
    let body = b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n";
    let end = body.len() - b"GET / HTTP/1.1\r\n\r\n".len();
    assert_eq!(chunked(body), Ok((end, true)));
    assert_eq!(chunked_bytewise(body), Ok((end, true)));
}

#[test]
fn chunked_extensions_trailers_and_lf() {
    let ok: &[&[u8]] = &[
        b"0\r\n\r\n",
        b"0\n\n",
        b"000\r\n\r\n",
        b"A\r\n0123456789\r\n0\r\n\r\n",
        b"a;name=value;other=\"quoted ; \\\" x\"\r\n0123456789\r\n0;last\r\n\r\n",
        b"3 ;ext\r\nabc\r\n0\r\n\r\n",
        b"3  \r\nabc\r\n0\r\n\r\n",
        b"3\nabc\n0\n\n",
        b"3\r\nabc\n0\r\n\r\n",
        b"0\r\nTrailer-One: a\r\nX: \r\nY:b\n\r\n",
        b"0\r\nX: caf\xc3\xa9\r\n\r\n",
        b"ffffffffffffffff\r\n",
        b"0000000000000001\r\nx\r\n0\r\n\r\n",
    ];
    for body in ok {
        let expect_done = !body.starts_with(b"ffff");
        assert_eq!(
            chunked(body),
            Ok((body.len(), expect_done)),
            "{:?}",
            show(body)
        );
        assert_eq!(
            chunked_bytewise(body),
            Ok((body.len(), expect_done)),
            "{:?}",
            show(body)
        );
    }
}

#[test]
fn chunked_errors() {
    let bad: &[&[u8]] = &[
        b"-1\r\n\r\n",
        b"0x10\r\n",
        b"fffffffffffffffff\r\n", // 17 digits
        b"00000000000000000\r\n", // 17 digits, even if zero
        b"\r\n",                  // empty size
        b";ext\r\n",              // no size
        b" 5\r\n",                // leading space
        b"5 5\r\n",
        b"g\r\n",
        b"+5\r\n",
        b"5\rx",                    // bare CR in size line
        b"5;a\x01b\r\n",            // CTL in extension
        b"5;a\rb\r\n",              // bare CR in extension
        b"3\r\nabcX",               // missing CRLF after data
        b"3\r\nabc\rX",             // CR not followed by LF after data
        b"3\r\nabcd\r\n",           // data longer than size
        b"0\r\n\rX",                // bad final line
        b"0\r\n Folded: x\r\n\r\n", // obs-fold in trailers
        b"0\r\nX : y\r\n\r\n",      // space before colon in trailer
        b"0\r\nNoColon\r\n\r\n",
        b"0\r\n: y\r\n\r\n",
        b"0\r\nX: a\0b\r\n\r\n",
        b"0\r\nX: a\rb\r\n\r\n",
    ];
    for body in bad {
        let e = chunked(body).expect_err(&show(body));
        assert_eq!(e.status, 400);
        assert_eq!(chunked_bytewise(body).unwrap_err(), e, "{:?}", show(body));
    }
    // Errors are sticky.
    let mut st = ChunkedState::new();
    let e = st.feed(b"zz").unwrap_err();
    assert_eq!(st.feed(b"0\r\n\r\n"), Err(e));
}

#[test]
fn chunked_line_length_limit() {
    let mut body = b"1;".to_vec();
    body.extend(std::iter::repeat_n(b'a', 5000));
    assert_eq!(chunked(&body).unwrap_err().reason, "chunk line too long");
    let mut body = b"0\r\nX: ".to_vec();
    body.extend(std::iter::repeat_n(b'a', 5000));
    assert_eq!(chunked(&body).unwrap_err().reason, "chunk line too long");
    // Just under the limit is fine.
    let mut body = b"1;".to_vec();
    body.extend(std::iter::repeat_n(b'a', 4000));
    body.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
    assert_eq!(chunked(&body), Ok((body.len(), true)));
}

#[test]
fn chunked_huge_chunk_split() {
    let mut st = ChunkedState::new();
    assert_eq!(st.feed(b"100000000\r\n"), Ok((11, false)));
    let block = vec![b'x'; 1 << 20];
    let mut left: u64 = 0x1_0000_0000;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        assert_eq!(st.feed(&block[..n]), Ok((n, false)));
        left -= n as u64;
    }
    assert_eq!(st.feed(b"\r\n0\r\n\r\nrest"), Ok((7, true)));
    assert_eq!(st.payload_len(), 0x1_0000_0000);
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

#[test]
fn helper_header_eq_and_tokens() {
    assert!(header_eq(b"Content-Length", b"content-length"));
    assert!(!header_eq(b"Content-Length", b"content-lengt"));
    assert!(!header_eq(b"Content-Lengtx", b"content-length"));
    assert!(has_token(b"keep-alive, Upgrade", b"upgrade"));
    assert!(has_token(b" close ", b"close"));
    assert!(has_token(b"a,,\tclose\t,b", b"close"));
    assert!(!has_token(b"closed", b"close"));
    assert!(!has_token(b"", b"close"));
    assert!(!has_token(b"clo se", b"close"));
}

#[test]
fn helper_first_element_keeps_quoted_commas() {
    assert_eq!(trim_first_element(b" a , b"), b"a");
    assert_eq!(trim_first_element(b"a"), b"a");
    assert_eq!(trim_first_element(b""), b"");
    // HAProxy's element walk: a quoted string is one piece, quotes kept (balance_diff).
    assert_eq!(trim_first_element(br#""b,c""#), br#""b,c""#);
    assert_eq!(trim_first_element(br#""b,c", d"#), br#""b,c""#);
    assert_eq!(trim_first_element(br#""x\",y", z"#), br#""x\",y""#);
    assert_eq!(trim_first_element(br#"a"b,c"d, e"#), br#"a"b,c"d"#);
}

#[test]
fn helper_hop_by_hop() {
    for n in [
        &b"Connection"[..],
        b"keep-alive",
        b"Proxy-Connection",
        b"TE",
        b"upgrade",
    ] {
        assert!(is_hop_by_hop(n), "{}", show(n));
    }
    for n in [
        &b"Transfer-Encoding"[..],
        b"Trailer",
        b"Content-Length",
        b"Host",
        b"tee",
        b"",
    ] {
        assert!(!is_hop_by_hop(n), "{}", show(n));
    }
    let raw =
        b"GET / HTTP/1.1\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nX-Other: 2\r\n\r\n";
    let h = req(raw);
    assert!(connection_tokens_contain(raw, &h.headers, b"x-secret"));
    assert!(!connection_tokens_contain(raw, &h.headers, b"x-other"));
}

#[test]
fn helper_reason_phrase() {
    assert_eq!(reason_phrase(200), "OK");
    assert_eq!(reason_phrase(404), "Not Found");
    assert_eq!(reason_phrase(431), "Request Header Fields Too Large");
    assert_eq!(reason_phrase(502), "Bad Gateway");
    assert_eq!(reason_phrase(599), "Unknown");
}

#[test]
fn helper_path_and_query() {
    type Case = (&'static [u8], &'static [u8], Option<&'static [u8]>);
    let cases: &[Case] = &[
        (b"/", b"/", None),
        (b"/a/b?x=1&y", b"/a/b", Some(b"x=1&y")),
        (b"/a?", b"/a", Some(b"")),
        (b"/a?b?c", b"/a", Some(b"b?c")),
        (b"http://h:80/p/q?z", b"/p/q", Some(b"z")),
        (b"HTTPS://h/", b"/", None),
        (b"http://h", b"", None),
        (b"http://h?q", b"", Some(b"q")),
        (b"http://h#f", b"", None),
        (b"*", b"", None),
        (b"example.com:443", b"", None),
        (b"/a#f", b"/a", None),
    ];
    for (uri, path, query) in cases {
        let p = path_of(uri);
        assert_eq!(p, *path, "{}", show(uri));
        // Always a sub-slice of the URI, so its offset is meaningful.
        let off = (p.as_ptr() as usize).wrapping_sub(uri.as_ptr() as usize);
        assert!(off + p.len() <= uri.len(), "{}", show(uri));
        assert_eq!(query_of(uri), *query, "{}", show(uri));
    }
}

#[test]
fn urlencoded_pairs_decode_names_and_values() {
    let dec = |s: &[u8]| urlencoded_pairs(s).remove(0).0;
    assert_eq!(dec(b"a%2Ab+c"), "a*b c");
    assert_eq!(dec(b"%"), "%");
    assert_eq!(dec(b"%4"), "%4");
    assert_eq!(dec(b"%zz"), "%zz");
    assert_eq!(dec(b"%41"), "A");
    assert_eq!(
        urlencoded_pairs(b"s=s1&s=a%20b&&flag&b=%232"),
        vec![
            ("s".to_string(), Some("s1".to_string())),
            ("s".into(), Some("a b".into())),
            ("flag".into(), None),
            ("b".into(), Some("#2".into())),
        ]
    );
}

#[test]
fn keep_alive_header_parameters() {
    use crate::http::keep_alive_params;
    use std::time::Duration;
    assert_eq!(
        keep_alive_params(b"timeout=5, max=100"),
        (Some(Duration::from_secs(5)), Some(100))
    );
    assert_eq!(
        keep_alive_params(b"Max=0 ,TIMEOUT = \"2\""),
        (Some(Duration::from_secs(2)), Some(0))
    );
    assert_eq!(keep_alive_params(b"timeout=x, foo=1, max"), (None, None));
    assert_eq!(keep_alive_params(b""), (None, None));
}

#[test]
fn content_length_rewrite_is_flagged_for_lists_repeats_and_beside_te() {
    let plain = req(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n");
    assert!(!plain.cl_rewrite);
    let list = req(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\n");
    assert!(list.cl_rewrite);
    assert_eq!(list.body, BodyKind::Length(3));
    let twice =
        req(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n");
    assert!(twice.cl_rewrite);

    let r = res_get(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n");
    assert!(!r.cl_rewrite);
    let r = res_get(b"HTTP/1.1 200 OK\r\nContent-Length: 2,2\r\n\r\n");
    assert!(r.cl_rewrite);
    assert_eq!(r.cl_value, Some(2));
    let r = res_get(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert!(r.cl_rewrite);
    assert_eq!(r.cl_value, None);
    assert_eq!(r.body, BodyKind::Chunked);
    // A HEAD response keeps its (single) length.
    let r = res(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
        true,
        false,
    );
    assert_eq!((r.cl_rewrite, r.cl_value), (true, Some(5)));
}

#[test]
fn chunked_feed_with_yields_the_payload() {
    let body = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\nT2:y\n\r\nNEXT";
    // Fed whole and fed byte by byte, the spans make the decoded payload, and the trailer
    // lines come out with CRLF endings.
    for step in [body.len(), 1, 3] {
        let mut st = ChunkedState::new();
        let mut payload = Vec::new();
        let mut trailers = Vec::new();
        let mut used = 0;
        let mut done = false;
        for piece in body.chunks(step) {
            if done {
                break;
            }
            let (n, d) = st
                .feed_parts(
                    piece,
                    |p| payload.extend_from_slice(p),
                    |t| trailers.extend_from_slice(t),
                )
                .unwrap();
            used += n;
            done = d;
        }
        assert!(done);
        assert_eq!(used, body.len() - 4, "step {step}");
        assert_eq!(payload, b"hello, world", "step {step}");
        assert_eq!(trailers, b"Trailer: x\r\nT2:y\r\n", "step {step}");
    }
}
