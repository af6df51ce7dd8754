//! Property tests: (a) valid messages parse identically whole and fed incrementally, and the
//! chunked tracker consumes exactly the body; (b) mutated / random input never panics and only
//! yields the allowed statuses, with incremental parsing agreeing with whole parsing.

use proptest::prelude::*;
use proptest::sample::select;

use super::*;

const MAX: usize = 64 * 1024;
const PIPELINED: &[u8] = b"GET /next HTTP/1.1\r\nHost: n\r\n\r\n";

// ---------------------------------------------------------------------------------------------
// Message model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Framing {
    None,
    Length(Vec<u8>),
    Chunked(ChunkedBody),
}

#[derive(Debug, Clone)]
struct ChunkedBody {
    /// (data, extension, use CRLF rather than LF)
    chunks: Vec<(Vec<u8>, Option<String>, bool)>,
    last_ext: Option<String>,
    trailers: Vec<(String, String)>,
    final_crlf: bool,
}

impl ChunkedBody {
    fn encode(&self) -> Vec<u8> {
        let eol = |crlf: bool| -> &'static [u8] { if crlf { b"\r\n" } else { b"\n" } };
        let mut out = Vec::new();
        for (data, ext, crlf) in &self.chunks {
            out.extend_from_slice(format!("{:x}", data.len()).as_bytes());
            if let Some(ext) = ext {
                out.push(b';');
                out.extend_from_slice(ext.as_bytes());
            }
            out.extend_from_slice(eol(*crlf));
            out.extend_from_slice(data);
            out.extend_from_slice(eol(*crlf));
        }
        out.push(b'0');
        if let Some(ext) = &self.last_ext {
            out.push(b';');
            out.extend_from_slice(ext.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        for (n, v) in &self.trailers {
            out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        out.extend_from_slice(eol(self.final_crlf));
        out
    }
}

#[derive(Debug, Clone)]
struct Message {
    start_line: String,
    version_minor: u8,
    /// Generic headers (never framing/connection ones), in order.
    headers: Vec<(String, String)>,
    /// Tokens of one `Connection` header, if any.
    connection: Option<Vec<&'static str>>,
    framing: Framing,
    /// Line ending per head line (start line, headers, final empty line), cycled.
    crlf: Vec<bool>,
    pipelined: bool,
}

struct Encoded {
    bytes: Vec<u8>,
    head_len: usize,
    body_len: usize,
}

impl Message {
    fn encode(&self) -> Encoded {
        let mut eols = self.crlf.iter().cycle();
        let mut eol = || -> &'static [u8] {
            if *eols.next().unwrap_or(&true) {
                b"\r\n"
            } else {
                b"\n"
            }
        };
        let mut out = Vec::new();
        out.extend_from_slice(self.start_line.as_bytes());
        out.extend_from_slice(eol());
        let mut line = |out: &mut Vec<u8>, n: &str, v: &str| {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(eol());
        };
        // Framing header first, connection header in the middle, to vary positions.
        match &self.framing {
            Framing::None => {}
            Framing::Length(b) => line(&mut out, "Content-Length", &b.len().to_string()),
            Framing::Chunked(_) => line(&mut out, "Transfer-Encoding", "chunked"),
        }
        let mid = self.headers.len() / 2;
        for (i, (n, v)) in self.headers.iter().enumerate() {
            if i == mid
                && let Some(c) = &self.connection
            {
                line(&mut out, "Connection", &c.join(", "));
            }
            line(&mut out, n, v);
        }
        if self.headers.is_empty()
            && let Some(c) = &self.connection
        {
            line(&mut out, "Connection", &c.join(", "));
        }
        out.extend_from_slice(eol());
        let head_len = out.len();
        match &self.framing {
            Framing::None => {}
            Framing::Length(b) => out.extend_from_slice(b),
            Framing::Chunked(c) => out.extend_from_slice(&c.encode()),
        }
        let body_len = out.len() - head_len;
        if self.pipelined {
            out.extend_from_slice(PIPELINED);
        }
        Encoded {
            bytes: out,
            head_len,
            body_len,
        }
    }

    /// Expected (name, value) list as the parser reports it.
    fn expected_headers(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut v = Vec::new();
        match &self.framing {
            Framing::None => {}
            Framing::Length(b) => {
                v.push((b"Content-Length".to_vec(), b.len().to_string().into_bytes()))
            }
            Framing::Chunked(_) => v.push((b"Transfer-Encoding".to_vec(), b"chunked".to_vec())),
        }
        let mid = self.headers.len() / 2;
        let conn = self
            .connection
            .as_ref()
            .map(|c| (b"Connection".to_vec(), c.join(", ").into_bytes()));
        for (i, (n, val)) in self.headers.iter().enumerate() {
            if i == mid
                && let Some(c) = &conn
            {
                v.push(c.clone());
            }
            v.push((n.clone().into_bytes(), val.clone().into_bytes()));
        }
        if self.headers.is_empty()
            && let Some(c) = conn
        {
            v.push(c);
        }
        v
    }

    fn has_token(&self, t: &str) -> bool {
        self.connection.as_ref().is_some_and(|c| c.contains(&t))
    }
}

fn header_name() -> impl Strategy<Value = String> {
    "X-[A-Za-z0-9!#$%&'*+.^_`|~-]{0,12}"
}

fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[!-~]", "[!-~][ \t!-~]{0,30}[!-~]",]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((header_name(), header_value()), 0..12)
}

fn connection() -> impl Strategy<Value = Option<Vec<&'static str>>> {
    prop::option::of(prop::collection::vec(
        select(vec![
            "close",
            "keep-alive",
            "Keep-Alive",
            "CLOSE",
            "x-foo",
            "te",
        ]),
        1..4,
    ))
}

fn chunk_ext() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        "[a-z]{1,6}",
        "[a-z]{1,6}=[a-z0-9]{0,6}",
        "[a-z]{1,4}=\"[ a-z;]{0,8}\""
    ])
}

fn chunked_body() -> impl Strategy<Value = ChunkedBody> {
    (
        prop::collection::vec(
            (
                prop::collection::vec(any::<u8>(), 1..80),
                chunk_ext(),
                any::<bool>(),
            ),
            0..6,
        ),
        chunk_ext(),
        prop::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,10}", header_value()), 0..3),
        any::<bool>(),
    )
        .prop_map(|(chunks, last_ext, trailers, final_crlf)| ChunkedBody {
            chunks,
            last_ext,
            trailers,
            final_crlf,
        })
}

fn framing(allow_chunked: bool) -> impl Strategy<Value = Framing> {
    let len = prop::collection::vec(any::<u8>(), 0..200).prop_map(Framing::Length);
    if allow_chunked {
        prop_oneof![
            Just(Framing::None),
            len,
            chunked_body().prop_map(Framing::Chunked)
        ]
        .boxed()
    } else {
        prop_oneof![Just(Framing::None), len].boxed()
    }
}

fn request() -> impl Strategy<Value = Message> {
    (
        select(vec![
            "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "X-CUSTOM",
        ]),
        "/[A-Za-z0-9._~/%!$&'()*+,;=:@-]{0,40}",
        prop::option::of("[A-Za-z0-9=&/?%-]{0,20}"),
        0u8..2,
    )
        .prop_flat_map(|(method, path, query, minor)| {
            (
                Just(method),
                Just(path),
                Just(query),
                Just(minor),
                headers(),
                connection(),
                framing(minor == 1),
                prop::collection::vec(any::<bool>(), 1..4),
                any::<bool>(),
            )
        })
        .prop_map(
            |(method, path, query, minor, headers, connection, framing, crlf, pipelined)| {
                let uri = match query {
                    Some(q) => format!("{path}?{q}"),
                    None => path,
                };
                Message {
                    start_line: format!("{method} {uri} HTTP/1.{minor}"),
                    version_minor: minor,
                    headers,
                    connection,
                    framing,
                    crlf,
                    pipelined,
                }
            },
        )
}

fn response() -> impl Strategy<Value = (Message, u16, String)> {
    (
        select(vec![200u16, 201, 206, 301, 404, 500, 503]),
        prop_oneof![Just(String::new()), "[A-Za-z][ A-Za-z]{0,20}"],
        0u8..2,
    )
        .prop_flat_map(|(status, reason, minor)| {
            (
                Just(status),
                Just(reason),
                Just(minor),
                headers(),
                connection(),
                framing(true),
                prop::collection::vec(any::<bool>(), 1..4),
            )
        })
        .prop_map(
            |(status, reason, minor, headers, connection, framing, crlf)| {
                let start_line = if reason.is_empty() {
                    format!("HTTP/1.{minor} {status}")
                } else {
                    format!("HTTP/1.{minor} {status} {reason}")
                };
                let has_body = !matches!(framing, Framing::None);
                (
                    Message {
                        start_line,
                        version_minor: minor,
                        headers,
                        connection,
                        framing,
                        crlf,
                        // Pipelining after a close-delimited body is meaningless.
                        pipelined: has_body,
                    },
                    status,
                    reason,
                )
            },
        )
}

/// Sorted, deduplicated cut points in `0..=len`.
fn cuts(len: usize, raw: &[usize]) -> Vec<usize> {
    let mut c: Vec<usize> = raw.iter().map(|&x| x % (len + 1)).collect();
    c.push(len);
    c.sort_unstable();
    c.dedup();
    c
}

fn header_pairs(buf: &[u8], h: &[HeaderSpan]) -> Vec<(Vec<u8>, Vec<u8>)> {
    h.iter()
        .map(|s| (s.name(buf).to_vec(), s.value(buf).to_vec()))
        .collect()
}

/// Feeds `data` to a fresh tracker in pieces cut at `raw_cuts`; returns (consumed, done) or
/// the error.
fn feed_pieces(data: &[u8], raw_cuts: &[usize]) -> Result<(usize, bool), HttpError> {
    let mut st = ChunkedState::new();
    let mut consumed = 0;
    let mut prev = 0;
    for c in cuts(data.len(), raw_cuts) {
        let piece = &data[prev..c];
        let (n, done) = st.feed(piece)?;
        assert!(n <= piece.len());
        consumed += n;
        if n < piece.len() {
            assert!(done, "bytes left over without the message being done");
        }
        if done {
            assert_eq!(st.feed(&data[prev + n..]), Ok((0, true)));
            return Ok((consumed, true));
        }
        prev = c;
    }
    Ok((consumed, st.is_done()))
}

/// The first non-`Partial` result when the buffer grows through `cut` points, or `Partial`.
fn first_settled<T: std::fmt::Debug>(
    data: &[u8],
    raw_cuts: &[usize],
    parse: impl Fn(&[u8]) -> Result<Parsed<T>, HttpError>,
) -> Result<Parsed<T>, HttpError> {
    for c in cuts(data.len(), raw_cuts) {
        match parse(&data[..c]) {
            Ok(Parsed::Partial) => {}
            other => return other,
        }
    }
    Ok(Parsed::Partial)
}

fn check_request_invariants(
    data: &[u8],
    max_head: usize,
    r: &Result<Parsed<RequestHead>, HttpError>,
) {
    match r {
        Ok(Parsed::Partial) => assert!(data.len() < max_head),
        Ok(Parsed::Complete(h)) => {
            assert!(h.head_len <= data.len().min(max_head));
            for s in [h.method, h.uri]
                .into_iter()
                .chain(h.headers.iter().flat_map(|x| [x.name, x.value]))
            {
                assert!(s.start <= s.end && (s.end as usize) <= h.head_len);
            }
            assert!(h.version_minor <= 1);
        }
        Err(e) => assert!(
            matches!(e.status, 400 | 414 | 431 | 501),
            "unexpected status {e:?}"
        ),
    }
}

fn check_response_invariants(
    data: &[u8],
    max_head: usize,
    r: &Result<Parsed<ResponseHead>, HttpError>,
) {
    match r {
        Ok(Parsed::Partial) => assert!(data.len() < max_head),
        Ok(Parsed::Complete(h)) => {
            assert!(h.head_len <= data.len().min(max_head));
            for s in
                std::iter::once(h.reason).chain(h.headers.iter().flat_map(|x| [x.name, x.value]))
            {
                assert!(s.start <= s.end && (s.end as usize) <= h.head_len);
            }
            assert!((100..=999).contains(&h.status));
        }
        Err(e) => assert_eq!(e.status, 502, "unexpected error {e:?}"),
    }
}

/// Applies byte-level mutations to `data`.
fn mutate(mut data: Vec<u8>, muts: &[(u8, usize, u8)]) -> Vec<u8> {
    const INTERESTING: &[u8] = b"\r\n \t:,;\0\x7f\x80\xff0aA-\"";
    for &(kind, pos, byte) in muts {
        let b = if byte & 1 == 0 {
            INTERESTING[(byte as usize >> 1) % INTERESTING.len()]
        } else {
            byte
        };
        match kind % 3 {
            0 if !data.is_empty() => {
                let i = pos % data.len();
                data[i] = b;
            }
            1 => {
                let i = pos % (data.len() + 1);
                data.insert(i, b);
            }
            _ if !data.is_empty() => {
                let i = pos % data.len();
                data.remove(i);
            }
            _ => {}
        }
    }
    data
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// (a) Valid requests: whole == incremental; expected fields; tracker consumes the body.
    #[test]
    fn valid_request_roundtrip(
        msg in request(),
        head_cuts in prop::collection::vec(any::<usize>(), 0..10),
        body_cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let enc = msg.encode();
        let data = &enc.bytes;
        let whole = match parse_request(data, MAX) {
            Ok(Parsed::Complete(h)) => h,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(data)),
        };
        prop_assert_eq!(whole.head_len, enc.head_len);
        prop_assert_eq!(whole.version_minor, msg.version_minor);
        prop_assert_eq!(header_pairs(data, &whole.headers), msg.expected_headers());
        let close = msg.has_token("close") || msg.has_token("CLOSE");
        let ka = msg.has_token("keep-alive") || msg.has_token("Keep-Alive");
        prop_assert_eq!(whole.conn_close, close || (msg.version_minor == 0 && !ka));
        prop_assert_eq!(whole.conn_keep_alive, ka);
        prop_assert!(!whole.upgrade && !whole.expect_continue && !whole.is_connect && !whole.is_head);
        match &msg.framing {
            Framing::None => prop_assert_eq!(whole.body, BodyKind::None),
            Framing::Length(b) => prop_assert_eq!(whole.body, BodyKind::Length(b.len() as u64)),
            Framing::Chunked(_) => prop_assert_eq!(whole.body, BodyKind::Chunked),
        }

        // Incremental: Partial before the head is complete, then exactly the whole result.
        for c in cuts(data.len(), &head_cuts) {
            let r = parse_request(&data[..c], MAX);
            if c < enc.head_len {
                prop_assert_eq!(r, Ok(Parsed::Partial));
            } else {
                prop_assert_eq!(r, Ok(Parsed::Complete(whole.clone())));
            }
        }

        // Body boundaries.
        let rest = &data[enc.head_len..];
        if let BodyKind::Chunked = whole.body {
            prop_assert_eq!(feed_pieces(rest, &body_cuts), Ok((enc.body_len, true)));
            prop_assert_eq!(ChunkedState::new().feed(rest), Ok((enc.body_len, true)));
        }
        if msg.pipelined {
            let next = &data[enc.head_len + enc.body_len..];
            prop_assert_eq!(next, PIPELINED);
        }
    }

    /// (a) Valid responses: whole == incremental; framing; tracker consumes the body.
    #[test]
    fn valid_response_roundtrip(
        (msg, status, reason) in response(),
        req_is_head in any::<bool>(),
        head_cuts in prop::collection::vec(any::<usize>(), 0..10),
        body_cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let enc = msg.encode();
        let data = &enc.bytes;
        let whole = match parse_response(data, MAX, req_is_head, false) {
            Ok(Parsed::Complete(h)) => h,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(data)),
        };
        prop_assert_eq!(whole.head_len, enc.head_len);
        prop_assert_eq!(whole.status, status);
        prop_assert_eq!(whole.reason.of(data), reason.as_bytes());
        prop_assert_eq!(header_pairs(data, &whole.headers), msg.expected_headers());
        let expected_body = if req_is_head {
            BodyKind::None
        } else {
            match &msg.framing {
                Framing::None => BodyKind::CloseDelimited,
                Framing::Length(b) => BodyKind::Length(b.len() as u64),
                Framing::Chunked(_) => BodyKind::Chunked,
            }
        };
        prop_assert_eq!(whole.body, expected_body);
        let close = msg.has_token("close") || msg.has_token("CLOSE");
        let ka = msg.has_token("keep-alive") || msg.has_token("Keep-Alive");
        let expect_close = close
            || (msg.version_minor == 0 && !ka)
            || expected_body == BodyKind::CloseDelimited
            || (expected_body == BodyKind::Chunked && msg.version_minor == 0);
        prop_assert_eq!(whole.conn_close, expect_close);

        for c in cuts(data.len(), &head_cuts) {
            let r = parse_response(&data[..c], MAX, req_is_head, false);
            if c < enc.head_len {
                prop_assert_eq!(r, Ok(Parsed::Partial));
            } else {
                prop_assert_eq!(r, Ok(Parsed::Complete(whole.clone())));
            }
        }
        if whole.body == BodyKind::Chunked {
            let rest = &data[enc.head_len..];
            prop_assert_eq!(feed_pieces(rest, &body_cuts), Ok((enc.body_len, true)));
        }
    }

    /// (b) Mutated valid requests: no panic, allowed statuses, incremental == whole.
    #[test]
    fn mutated_request_is_safe(
        msg in request(),
        muts in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
        max_head in prop_oneof![Just(MAX), 0usize..600],
        head_cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let data = mutate(msg.encode().bytes, &muts);
        let whole = parse_request(&data, max_head);
        check_request_invariants(&data, max_head, &whole);
        let inc = first_settled(&data, &head_cuts, |d| parse_request(d, max_head));
        prop_assert_eq!(inc, whole);
    }

    /// (b) Mutated valid responses: no panic, only 502, incremental == whole.
    #[test]
    fn mutated_response_is_safe(
        (msg, _status, _reason) in response(),
        muts in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
        max_head in prop_oneof![Just(MAX), 0usize..600],
        flags in any::<(bool, bool)>(),
        head_cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        let data = mutate(msg.encode().bytes, &muts);
        let whole = parse_response(&data, max_head, flags.0, flags.1);
        check_response_invariants(&data, max_head, &whole);
        let inc = first_settled(&data, &head_cuts, |d| parse_response(d, max_head, flags.0, flags.1));
        prop_assert_eq!(inc, whole);
    }

    /// (b) Random garbage heads.
    #[test]
    fn garbage_heads_are_safe(
        data in prop::collection::vec(
            prop_oneof![any::<u8>(), select(b"GET HTTP/1.1\r\n: ,".to_vec())], 0..400),
        max_head in 0usize..500,
        flags in any::<(bool, bool)>(),
    ) {
        let r = parse_request(&data, max_head);
        check_request_invariants(&data, max_head, &r);
        let r = parse_response(&data, max_head, flags.0, flags.1);
        check_response_invariants(&data, max_head, &r);
    }

    /// (b) Mutated chunked bodies / garbage: no panic, split-invariant results.
    #[test]
    fn chunked_tracker_is_split_invariant(
        body in chunked_body(),
        muts in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..4),
        cuts_raw in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let data = mutate(body.encode(), &muts);
        let whole = ChunkedState::new().feed(&data);
        if let Ok((n, done)) = whole {
            prop_assert!(n <= data.len());
            prop_assert!(done || n == data.len());
        }
        if let Err(e) = whole {
            prop_assert_eq!(e.status, 400);
        }
        prop_assert_eq!(feed_pieces(&data, &cuts_raw), whole);
    }
}

proptest! {
    /// `path_of` / `query_of` never panic and always return sub-slices of the URI.
    #[test]
    fn path_and_query_are_subslices(
        uri in prop::collection::vec(select(b"/?#:ab.h-tp*".to_vec()), 0..24),
    ) {
        let within = |s: &[u8]| {
            let off = (s.as_ptr() as usize).wrapping_sub(uri.as_ptr() as usize);
            off + s.len() <= uri.len()
        };
        let p = path_of(&uri);
        prop_assert!(within(p));
        prop_assert!(p.is_empty() || p[0] == b'/');
        prop_assert!(!p.contains(&b'?') && !p.contains(&b'#'));
        if let Some(q) = query_of(&uri) {
            prop_assert!(within(q));
            prop_assert!(!q.contains(&b'#'));
        }
    }
}
