//! `compression algo|type|offload`: HTTP response compression with HAProxy's rules. Owns the
//! decisions (which algorithm a request accepts, whether a response may be compressed, how its
//! headers change) and the encoder that turns a response's payload into a compressed, chunked
//! body. It must not do I/O: the HTTP stream feeds it payload bytes and sends what it returns.
//!
//! A compressed response is flushed at the end of every piece the server sent, so a streamed
//! response is not held back waiting for more input (HAProxy holds back part of a piece until
//! the next one); the encoder exists only while such a response is in flight.

use std::io::Write as _;

use flate2::Compression;
use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};

/// A `compression algo` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    /// No transformation of the payload (HAProxy's debugging algorithm); the response is still
    /// re-framed as a compressed one would be (chunked, `Vary`, weak ETag), as HAProxy does.
    Identity,
    /// zlib-wrapped deflate (`Content-Encoding: deflate`, RFC 9110 §8.4.1.2).
    Deflate,
    /// Raw deflate, announced as `deflate` (for clients that expect it unwrapped).
    RawDeflate,
    Gzip,
}

impl Algo {
    /// Configuration names.
    pub const ALL: &'static [(&'static str, Algo)] = &[
        ("identity", Algo::Identity),
        ("deflate", Algo::Deflate),
        ("raw-deflate", Algo::RawDeflate),
        ("gzip", Algo::Gzip),
    ];

    /// The content-coding token it answers to in `Accept-Encoding` and announces in
    /// `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Algo::Identity => "identity",
            Algo::Deflate | Algo::RawDeflate => "deflate",
            Algo::Gzip => "gzip",
        }
    }
}

/// A proxy's `compression` lines (each `algo` and `type` line adds to its list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompressionCfg {
    pub algos: Vec<Algo>,
    /// MIME types to compress (prefixes of `Content-Type`, without case); empty: any.
    pub types: Vec<String>,
    /// `compression offload`: the server is not told the client accepts compressed content
    /// (`Accept-Encoding` is removed), so that sluice does the compressing.
    pub offload: bool,
}

/// What applies to a transaction: the backend's settings where it has them, else the
/// frontend's, as HAProxy resolves them (`offload` if either says so).
#[derive(Debug, Clone, Copy)]
pub struct Effective<'a> {
    pub algos: &'a [Algo],
    pub types: &'a [String],
    pub offload: bool,
}

impl<'a> Effective<'a> {
    pub fn of(be: Option<&'a CompressionCfg>, fe: Option<&'a CompressionCfg>) -> Option<Self> {
        let pick = |f: fn(&CompressionCfg) -> bool| be.filter(|c| f(c)).or(fe.filter(|c| f(c)));
        let algos = pick(|c| !c.algos.is_empty())?;
        Some(Effective {
            algos: &algos.algos,
            types: pick(|c| !c.types.is_empty()).map_or(&[], |c| &c.types),
            offload: be.is_some_and(|c| c.offload) || fe.is_some_and(|c| c.offload),
        })
    }
}

/// Old browsers that announce themselves as `Mozilla/4` mishandle compressed responses, except
/// MSIE 6 on XP SP2 and MSIE 7 or later (HAProxy's test, byte positions included).
fn broken_agent(ua: &[u8]) -> bool {
    if !ua.starts_with(b"Mozilla/4") {
        return false;
    }
    if ua.len() < 31 || &ua[25..30] != b"MSIE " || ua[30] < b'6' {
        return true;
    }
    ua[30] == b'6' && (ua.len() < 54 || &ua[51..54] != b"SV1")
}

/// A `q=` weight in thousandths (HAProxy's `http_parse_qvalue`: `1`, `1.000`, `0.5`, ...).
fn qvalue(s: &[u8]) -> u32 {
    let mut it = s.iter();
    let mut q = match it.next() {
        Some(b'1') => 1000,
        Some(b'0') => 0,
        _ => return 0,
    };
    if it.next() != Some(&b'.') {
        return q;
    }
    let mut scale = 100;
    for &c in it.take(3) {
        if !c.is_ascii_digit() {
            break;
        }
        q += u32::from(c - b'0') * scale;
        scale /= 10;
    }
    q.min(1000)
}

/// The algorithm for a request: among the configured ones, the one its `Accept-Encoding`
/// values weight highest (the first on a tie; `*` means the last configured); `None` when
/// none is accepted, or for a user agent known to mishandle compression. `identity`, when
/// configured, is the fallback; the flag says whether the header chose (only then does
/// `offload` remove it, as in HAProxy).
pub fn choose<'h>(
    algos: &[Algo],
    accept_encoding: impl Iterator<Item = &'h [u8]>,
    user_agent: Option<&[u8]>,
) -> Option<(Algo, bool)> {
    if user_agent.is_some_and(broken_agent) {
        return None;
    }
    let mut best: Option<(u32, Algo)> = None;
    for field in accept_encoding {
        for item in field.split(|&c| c == b',') {
            let item = trim(item);
            let mut parts = item.split(|&c| c == b';');
            let token = trim(parts.next().unwrap_or_default());
            let q = parts
                .map(trim)
                .find_map(|p| p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q=")))
                .map_or(1000, qvalue);
            if token.is_empty() || q == 0 || best.is_some_and(|(bq, _)| q <= bq) {
                continue;
            }
            let found = if token == b"*" {
                // HAProxy keeps its list in reverse order of configuration: `*` gets the
                // last algorithm configured (checked against HAProxy 2.6).
                algos.last().copied()
            } else {
                algos
                    .iter()
                    .copied()
                    .find(|a| token.eq_ignore_ascii_case(a.token().as_bytes()))
            };
            if let Some(a) = found {
                best = Some((q, a));
            }
        }
    }
    best.map(|(_, a)| (a, true)).or_else(|| {
        algos
            .contains(&Algo::Identity)
            .then_some((Algo::Identity, false))
    })
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// The response facts [`may_compress`] decides on.
#[derive(Debug, Clone, Copy, Default)]
pub struct Response<'a> {
    pub status: u16,
    /// Both the request and the response are HTTP/1.1 (a chunked body needs it).
    pub http11: bool,
    pub head_request: bool,
    /// The response has a body whose end is known (length or chunked; not close-delimited).
    pub framed_body: bool,
    pub content_encoding: bool,
    pub no_transform: bool,
    /// The ETag fields: none, one valid, or something else (several, malformed).
    pub etag_ok: bool,
    pub content_type: Option<&'a [u8]>,
}

/// Whether a response may be compressed, by HAProxy 2.6's rules: HTTP/1.1 on both sides,
/// not HEAD, status 200 to 203, a framed body, no `Content-Encoding`, no `no-transform`, at
/// most one valid ETag, not `multipart/*`, and a `Content-Type` of the configured `types`
/// (when there are some, a response without one is not compressed).
pub fn may_compress(types: &[String], r: &Response<'_>) -> bool {
    if !r.http11
        || r.head_request
        || !(200..=203).contains(&r.status)
        || !r.framed_body
        || r.content_encoding
        || r.no_transform
        || !r.etag_ok
    {
        return false;
    }
    match r.content_type {
        Some(ct) if ct.len() >= 9 && ct[..9].eq_ignore_ascii_case(b"multipart") => false,
        Some(ct) => {
            types.is_empty()
                || types.iter().any(|t| {
                    ct.len() >= t.len() && ct[..t.len()].eq_ignore_ascii_case(t.as_bytes())
                })
        }
        None => types.is_empty(),
    }
}

/// Whether an ETag value is well formed (`"x"` or `W/"x"`).
pub fn etag_valid(v: &[u8]) -> bool {
    let v = v.strip_prefix(b"W/").unwrap_or(v);
    v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"'
}

/// A strong ETag made weak (a compressed representation is not byte-identical); `None` when
/// it is already weak.
pub fn weaken_etag(v: &[u8]) -> Option<Vec<u8>> {
    (v.first() == Some(&b'"')).then(|| [b"W/", v].concat())
}

enum Inner {
    Identity(Vec<u8>),
    Gzip(GzEncoder<Vec<u8>>),
    Zlib(ZlibEncoder<Vec<u8>>),
    Raw(DeflateEncoder<Vec<u8>>),
}

/// Compresses one response's payload into chunked framing.
pub struct Encoder(Inner);

/// HAProxy's default `tune.comp.maxlevel`: the fastest level.
const LEVEL: u32 = 1;

impl Encoder {
    pub fn new(algo: Algo) -> Encoder {
        let level = Compression::new(LEVEL);
        Encoder(match algo {
            Algo::Identity => Inner::Identity(Vec::new()),
            Algo::Gzip => Inner::Gzip(GzEncoder::new(Vec::new(), level)),
            Algo::Deflate => Inner::Zlib(ZlibEncoder::new(Vec::new(), level)),
            Algo::RawDeflate => Inner::Raw(DeflateEncoder::new(Vec::new(), level)),
        })
    }

    fn sink(&mut self) -> &mut Vec<u8> {
        match &mut self.0 {
            Inner::Identity(v) => v,
            Inner::Gzip(e) => e.get_mut(),
            Inner::Zlib(e) => e.get_mut(),
            Inner::Raw(e) => e.get_mut(),
        }
    }

    /// Compresses `data`, flushes, and appends the output to `out` as one chunk. Writing into
    /// a `Vec` cannot fail.
    pub fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let _ = match &mut self.0 {
            Inner::Identity(_) => {
                chunk(out, data);
                return;
            }
            Inner::Gzip(e) => e.write_all(data).and_then(|_| e.flush()),
            Inner::Zlib(e) => e.write_all(data).and_then(|_| e.flush()),
            Inner::Raw(e) => e.write_all(data).and_then(|_| e.flush()),
        };
        let produced = self.sink();
        chunk(out, produced);
        produced.clear();
    }

    /// Ends the stream (the format's trailer), then the chunked body with the response's
    /// trailer fields (`trailers`: field lines with their CRLF).
    pub fn finish(self, trailers: &[u8], out: &mut Vec<u8>) {
        let rest = match self.0 {
            Inner::Identity(v) => Ok(v),
            Inner::Gzip(e) => e.finish(),
            Inner::Zlib(e) => e.finish(),
            Inner::Raw(e) => e.finish(),
        }
        .unwrap_or_default();
        chunk(out, &rest);
        out.extend_from_slice(b"0\r\n");
        out.extend_from_slice(trailers);
        out.extend_from_slice(b"\r\n");
    }
}

fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn pick(algos: &[Algo], ae: &[&str]) -> Option<Algo> {
        choose(algos, ae.iter().map(|s| s.as_bytes()), None).map(|(a, _)| a)
    }

    #[test]
    fn accept_encoding_choice() {
        use Algo::*;
        let gd = [Gzip, Deflate];
        assert_eq!(pick(&gd, &["gzip, deflate, br"]), Some(Gzip));
        assert_eq!(
            pick(&gd, &["deflate", "gzip"]),
            Some(Deflate),
            "first wins a tie"
        );
        assert_eq!(pick(&gd, &["deflate;q=0.5, gzip;q=0.8"]), Some(Gzip));
        assert_eq!(
            pick(&gd, &["gzip;q=0, deflate"]),
            Some(Deflate),
            "q=0 refuses"
        );
        assert_eq!(pick(&gd, &["br"]), None);
        assert_eq!(pick(&gd, &[]), None);
        assert_eq!(pick(&gd, &["*"]), Some(Deflate), "* is the last configured");
        assert_eq!(pick(&[Deflate, Gzip], &["*"]), Some(Gzip));
        assert_eq!(pick(&[RawDeflate], &["deflate"]), Some(RawDeflate));
        assert_eq!(pick(&[Gzip, Identity], &["br"]), Some(Identity));
        let by = |ae: &str| choose(&[Gzip, Identity], [ae.as_bytes()].into_iter(), None);
        assert_eq!(by("br"), Some((Identity, false)), "a fallback");
        assert_eq!(by("*"), Some((Identity, true)), "chosen by the header");
        assert_eq!(pick(&gd, &["GZIP ; q=1.0"]), Some(Gzip));
        let old = b"Mozilla/4.0 (compatible; MSIE 5.5; Windows 98)";
        let ua = |agent: &[u8]| choose(&gd, [&b"gzip"[..]].into_iter(), Some(agent));
        assert_eq!(ua(old), None);
        let ie7 = b"Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)";
        assert_eq!(ua(ie7), Some((Gzip, true)));
        let modern = b"Mozilla/5.0 (X11; Linux x86_64)";
        assert_eq!(ua(modern), Some((Gzip, true)));
        assert_eq!(qvalue(b"0.125"), 125);
        assert_eq!(qvalue(b"1"), 1000);
    }

    #[test]
    fn response_rules() {
        let ok = Response {
            status: 200,
            http11: true,
            framed_body: true,
            etag_ok: true,
            content_type: Some(b"text/html; charset=utf-8"),
            ..Default::default()
        };
        let types = vec!["text/html".to_string(), "application/json".to_string()];
        assert!(may_compress(&types, &ok));
        assert!(may_compress(&[], &ok));
        let no = |f: &dyn Fn(&mut Response)| {
            let mut r = ok;
            f(&mut r);
            !may_compress(&types, &r)
        };
        assert!(no(&|r| r.status = 204));
        assert!(no(&|r| r.status = 404));
        assert!(!no(&|r| r.status = 203));
        assert!(no(&|r| r.http11 = false));
        assert!(no(&|r| r.head_request = true));
        assert!(no(&|r| r.framed_body = false));
        assert!(no(&|r| r.content_encoding = true));
        assert!(no(&|r| r.no_transform = true));
        assert!(no(&|r| r.etag_ok = false));
        assert!(no(&|r| r.content_type = Some(b"image/png")));
        assert!(no(&|r| r.content_type = None), "types need a content type");
        let mut mp = ok;
        mp.content_type = Some(b"multipart/form-data");
        assert!(!may_compress(&[], &mp));
        assert!(etag_valid(b"\"abc\"") && etag_valid(b"W/\"abc\""));
        assert!(!etag_valid(b"abc"));
        assert_eq!(weaken_etag(b"\"x\"").as_deref(), Some(&b"W/\"x\""[..]));
        assert_eq!(weaken_etag(b"W/\"x\""), None);
    }

    /// Decodes a chunked body (test helper).
    fn unchunk(mut b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let eol = b.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap(), 16).unwrap();
            b = &b[eol + 2..];
            if n == 0 {
                assert_eq!(b, b"\r\n");
                return out;
            }
            out.extend_from_slice(&b[..n]);
            assert_eq!(&b[n..n + 2], b"\r\n");
            b = &b[n + 2..];
        }
    }

    #[test]
    fn encoders_round_trip() {
        let text: Vec<u8> = (0..2000)
            .flat_map(|i| format!("line {i} of a compressible body\n").into_bytes())
            .collect();
        for algo in [Algo::Gzip, Algo::Deflate, Algo::RawDeflate] {
            let mut e = Encoder::new(algo);
            let mut out = Vec::new();
            for piece in text.chunks(7000) {
                let before = out.len();
                e.push(piece, &mut out);
                assert!(out.len() > before, "{algo:?}: each piece is flushed");
            }
            e.finish(b"", &mut out);
            let z = unchunk(&out);
            assert!(z.len() < text.len() / 4, "{algo:?}: {} bytes", z.len());
            let mut plain = Vec::new();
            match algo {
                Algo::Gzip => flate2::read::GzDecoder::new(&z[..]).read_to_end(&mut plain),
                Algo::Deflate => flate2::read::ZlibDecoder::new(&z[..]).read_to_end(&mut plain),
                _ => flate2::read::DeflateDecoder::new(&z[..]).read_to_end(&mut plain),
            }
            .unwrap();
            assert_eq!(plain, text, "{algo:?}");
        }
        // identity: the payload re-chunked as it is; trailers follow the last chunk.
        let mut e = Encoder::new(Algo::Identity);
        let mut out = Vec::new();
        e.push(b"abc", &mut out);
        e.finish(b"X-T: 1\r\n", &mut out);
        assert_eq!(out, b"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n");
        // An empty body is still a valid stream.
        let mut out = Vec::new();
        Encoder::new(Algo::Gzip).finish(b"", &mut out);
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&unchunk(&out)[..])
            .read_to_end(&mut plain)
            .unwrap();
        assert!(plain.is_empty());
    }
}
