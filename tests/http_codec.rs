//! Integration test of the public HTTP/1 codec API, driven the way the proxy engine uses it:
//! parse a head, track its body, then parse the next pipelined message from what is left.

use sluice::http::{
    BodyKind, ChunkedState, Parsed, RequestHead, ResponseHead, parse_request, parse_response,
};

const MAX_HEAD: usize = 16 * 1024;

/// Splits `stream` into (head, body length) pairs for every pipelined request in it.
fn split_requests(mut stream: &[u8]) -> Vec<(RequestHead, usize)> {
    let mut out = Vec::new();
    while !stream.is_empty() {
        let head = match parse_request(stream, MAX_HEAD) {
            Ok(Parsed::Complete(h)) => h,
            other => panic!("unexpected {other:?}"),
        };
        let rest = &stream[head.head_len..];
        let body_len = match head.body {
            BodyKind::None => 0,
            BodyKind::Length(n) => n as usize,
            BodyKind::Chunked => {
                let mut st = ChunkedState::new();
                let (n, done) = st.feed(rest).expect("valid chunked body");
                assert!(done);
                n
            }
            BodyKind::CloseDelimited => unreachable!("requests are never close-delimited"),
        };
        stream = &rest[body_len..];
        out.push((head, body_len));
    }
    out
}

#[test]
fn pipelined_requests_with_all_framings() {
    let stream = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n\
POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n0\r\nT: v\r\n\r\n\
HEAD /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let reqs = split_requests(stream);
    let bodies: Vec<(BodyKind, usize)> = reqs.iter().map(|(h, n)| (h.body, *n)).collect();
    assert_eq!(
        bodies,
        vec![
            (BodyKind::None, 0),
            (BodyKind::Length(5), 5),
            (BodyKind::Chunked, 23),
            (BodyKind::None, 0),
        ]
    );
    assert!(reqs[3].0.is_head && reqs[3].0.conn_close);
}

#[test]
fn response_framing_follows_the_request() {
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
    let head: ResponseHead = match parse_response(raw, MAX_HEAD, false, false) {
        Ok(Parsed::Complete(h)) => h,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(head.body, BodyKind::Length(3));
    match parse_response(raw, MAX_HEAD, true, false) {
        Ok(Parsed::Complete(h)) => assert_eq!(h.body, BodyKind::None),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn smuggling_attempt_is_rejected() {
    let raw = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(parse_request(raw, MAX_HEAD).unwrap_err().status, 400);
}
