//! `acl`: conditions — named `acl NAME CRITERION [FLAGS] VALUES...` lines and the
//! `if|unless COND` expressions that use them (with anonymous `{ ... }` ACLs, `!`, `||`,
//! implicit AND). Owns parsing and evaluation; it must not know how a request is stored
//! (it sees one only through [`HttpView`]).
//!
//! Supported criteria: `path`, `url` (with the `_beg`, `_end`, `_sub`, `_reg`, `_dir`, `_dom`
//! and `_len` suffixes), `hdr(NAME)` / `req.hdr(NAME)` (same suffixes; comma-separated values
//! are matched one by one), `fhdr(NAME)` (whole lines), `hdr_cnt(NAME)`, `hdr_val(NAME)`,
//! `hdr_ip(NAME)`, `method`, `src`, `src_port`, `dst`, `dst_port`, `fe_name`, `be_name`,
//! `base`, `query`, `url_ip`, `url_port`, `url_param(NAME)`, `cook(NAME)`, `req.proto_http`,
//! `always_true`, `always_false`, the TLS fetches (`ssl_c_s_dn(CN)` included) and the
//! `tcp-request content` ones (`req.payload(OFF,LEN)` included), the stick-table fetches
//! (`sc_*`, `scN_*`, `src_*`, `table_*`), `var(NAME)`, the constants `str()`, `int()`,
//! `bool()`, `ipv4()`, `ipv6()`, `uuid`, and the predefined ACLs HAProxy defines that can be
//! evaluated from an [`HttpView`].
//! Flags: `-i`, `-n`, `-f FILE`, `-M`, `-m str|beg|end|sub|reg|dir|dom|len|found|ip|int|bool|bin`,
//! `--`. Criteria may carry converters (`path,lower`), evaluated by [`super::converter`].
//!
//! Evaluation without converters never allocates: samples are borrowed from the view and
//! compared in place (the exceptions: `src_inc_*`, `src_clr_*` and `src_updt_conn_cnt` make
//! the table entry they write to, as in HAProxy; `var()` copies the variable).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use regex::bytes::{Regex, RegexBuilder};

use super::IpNet;
use super::converter::{self, Conv};
use super::did_you_mean;

/// What a condition can look at. Implemented by the HTTP stream over its parsed head (and by a
/// plain source-address view in `mode tcp`).
pub trait HttpView {
    /// Request method bytes (`GET`); empty in `mode tcp`.
    fn method(&self) -> &[u8];
    /// Request target exactly as received (origin form `/a?b` or absolute form).
    fn uri(&self) -> &[u8];
    /// Calls `f` with the whole value of each header field named `name` (ASCII case-insensitive),
    /// in order; stops early and returns true as soon as `f` returns true.
    fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> bool;
    /// Client source address.
    fn src(&self) -> Option<IpAddr>;
    /// The client handshake's results on an `ssl` bind (`ssl_fc_*`, `ssl_c_*`).
    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        None
    }
    /// What a `mode tcp` client sent first, held for `tcp-request content` rules
    /// (`req.len`, `req.ssl_hello_type`, `req.ssl_sni`); `None` elsewhere.
    fn payload(&self) -> Option<&[u8]> {
        None
    }
    /// The session's addresses and proxy names (`dst`, `src_port`, `fe_name`, `be_name`).
    fn sess(&self) -> Sess<'_> {
        Sess::default()
    }
    /// The response's status, for `http-response` rules; `None` while there is no response
    /// (then [`HttpView::for_each_header`] is the request's).
    fn status(&self) -> Option<u16> {
        None
    }
    /// The cache a response comes from (`res.cache_hit`, `res.cache_name`).
    fn cache_hit(&self) -> Option<&str> {
        None
    }
    /// The header carrying the client's credentials (`http_auth`): `Proxy-Authorization` for
    /// a proxied request under `option http-use-proxy-header`.
    fn auth_header(&self) -> &'static [u8] {
        b"authorization"
    }
    /// What request (`req`) or response capture slot `idx` holds (`capture.req.hdr(N)`).
    fn capture(&self, _req: bool, _idx: usize) -> Option<&[u8]> {
        None
    }
    /// Calls `f` with each header field (name, value) in order (`req.hdrs`, `res.hdrs`).
    fn for_each_field(&self, _f: &mut dyn FnMut(&[u8], &[u8])) {}
    /// The minor version of HTTP/1 (`req.ver`, `res.ver`: `1.<minor>`).
    fn version_minor(&self) -> Option<u8> {
        None
    }
    /// The body received so far and the size it announced (`req.body`, `req.body_len`,
    /// `req.body_size`; on a response `res.body`...): the request's is whole once `option
    /// http-buffer-request` waited for it, a response's is what came with its head.
    fn body(&self) -> Option<(&[u8], u64)> {
        None
    }
}

/// What a view knows of its session beyond the request.
#[derive(Clone, Copy, Default)]
pub struct Sess<'a> {
    pub peer: Option<SocketAddr>,
    /// The address the client connected to; present only while [`LOCAL_ADDR_USED`] says a
    /// rule or format reads it (it costs a `getsockname` per connection).
    pub local: Option<SocketAddr>,
    pub frontend: &'a str,
    /// The backend, or the frontend before a backend is chosen (as HAProxy's `be_name`).
    pub backend: &'a str,
    /// The request's `unique-id-format` id (`unique-id`).
    pub unique_id: Option<&'a str>,
    /// The stick-table entries the session and the request track (`sc_*` fetches).
    pub sc: crate::stick::ScView<'a>,
    /// The session's and the transaction's variables (`var()`).
    pub vars: Option<&'a crate::vars::Vars>,
    /// TLVs of the client's PROXY v2 header (`fc_pp_authority`, `fc_pp_unique_id`).
    pub pp: Option<&'a crate::stream::PpTlvs>,
    /// The proxies' run-time state (`nbsrv`, `be_conn`, `fe_id`, ...), where known.
    pub shared: Option<&'a crate::backend::Shared>,
    /// The server of the transaction, once its response is being processed (`srv_name`).
    pub server: Option<&'a crate::backend::ServerState>,
    /// The client's TCP socket, when `TCP_INFO_USED` (`fc_rtt`, ...).
    pub tcp_fd: Option<std::os::fd::BorrowedFd<'a>>,
    /// The current request's poll counters (`cpu_calls`, ...), when a format reads them.
    pub profile: Option<crate::stream::TaskProfile>,
}

/// Set when a configuration reads the kernel's `TCP_INFO` (`fc_rtt`, ...): sessions then keep
/// a duplicate of the client socket's descriptor, which stays valid until they end.
pub static TCP_INFO_USED: AtomicBool = AtomicBool::new(false);

/// Which task counter a `cpu_*` / `lat_ns_*` fetch reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileField {
    Calls,
    CpuAvg,
    CpuTot,
    /// Scheduling latency: sluice does not measure it (HAProxy reports 0 too unless its
    /// task profiling is on).
    Lat,
}

/// Which `TCP_INFO` counter a `fc_*` fetch reads (HAProxy's mapping); RTTs in µs or ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpInfoField {
    Rtt(bool),
    RttVar(bool),
    Unacked,
    Sacked,
    Retrans,
    Fackets,
    Lost,
    Reordering,
}

impl TcpInfoField {
    fn of(self, ti: &libc::tcp_info) -> u32 {
        let ms = |us: bool, v: u32| if us { v } else { v / 1000 };
        match self {
            TcpInfoField::Rtt(us) => ms(us, ti.tcpi_rtt),
            TcpInfoField::RttVar(us) => ms(us, ti.tcpi_rttvar),
            TcpInfoField::Unacked => ti.tcpi_unacked,
            TcpInfoField::Sacked => ti.tcpi_sacked,
            TcpInfoField::Retrans => ti.tcpi_retrans,
            TcpInfoField::Fackets => ti.tcpi_fackets,
            TcpInfoField::Lost => ti.tcpi_lost,
            TcpInfoField::Reordering => ti.tcpi_reordering,
        }
    }
}

/// Set when a configuration reads the address a client connected to (`dst`, `dst_port`,
/// `%fi`, `%fp`): sessions then take it at accept.
pub static LOCAL_ADDR_USED: AtomicBool = AtomicBool::new(false);

/// A parsed `if`/`unless` condition, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Cond {
    /// `unless`: the result is inverted.
    unless: bool,
    /// OR of AND-groups of terms.
    groups: Vec<Vec<Term>>,
}

impl Cond {
    pub fn eval(&self, view: &dyn HttpView) -> bool {
        let r = self
            .groups
            .iter()
            .any(|g| g.iter().all(|t| t.acl.matches(view) != t.neg));
        r != self.unless
    }

    /// Whether the condition looks at the HTTP request (anything but `src` and constants), so
    /// it can only be evaluated in `mode http`.
    pub fn uses_http(&self) -> bool {
        self.groups
            .iter()
            .flatten()
            .any(|t| t.acl.exprs.iter().any(|e| e.fetch.is_http()))
    }

    /// Whether the condition reads the response (`status`, `res.hdr`, `shdr`).
    pub fn uses_response(&self) -> bool {
        self.groups
            .iter()
            .flatten()
            .any(|t| t.acl.exprs.iter().any(|e| e.fetch.is_response()))
    }

    /// Whether the condition reads bytes only a `mode tcp` proxy holds (`req.len`,
    /// `req.ssl_*`; not `req.proto_http`, which is true in `mode http`).
    pub fn reads_tcp_data(&self) -> bool {
        self.groups.iter().flatten().any(|t| {
            t.acl
                .exprs
                .iter()
                .any(|e| e.fetch.is_payload() && !matches!(e.fetch, Fetch::ProtoHttp))
        })
    }

    /// Whether the condition reads the client's first data (`req.len`, `req.ssl_*`,
    /// `req.proto_http`).
    pub fn needs_payload(&self) -> bool {
        self.groups
            .iter()
            .flatten()
            .any(|t| t.acl.exprs.iter().any(|e| e.fetch.is_payload()))
    }

    /// `true` for `unless` conditions.
    pub fn is_unless(&self) -> bool {
        self.unless
    }
}

#[derive(Debug, Clone)]
struct Term {
    neg: bool,
    acl: Arc<Acl>,
}

/// A named (or anonymous) ACL: the OR of its expressions.
#[derive(Debug, Clone)]
pub(crate) struct Acl {
    name: String,
    exprs: Vec<Expr>,
}

impl Acl {
    fn matches(&self, view: &dyn HttpView) -> bool {
        self.exprs.iter().any(|e| e.matches(view))
    }
}

/// One `CRITERION [FLAGS] VALUES...` expression.
#[derive(Debug, Clone)]
pub(crate) struct Expr {
    fetch: Fetch,
    /// Converters applied to each sample (`,lower`), usually none.
    convs: Box<[Conv]>,
    /// The patterns written on the line.
    matcher: Matcher,
    /// `-f FILE` patterns, looked up in the file's current version (the runtime API may
    /// change it), each with its `-i`, and the match method they are looked up with.
    files: Box<[(Arc<crate::map::PatRef>, bool)]>,
    file_match: crate::map::Match,
}

impl Expr {
    fn matches(&self, view: &dyn HttpView) -> bool {
        each_sample(&self.fetch, &self.convs, view, &mut |s| {
            self.matcher.test(s)
                || self
                    .files
                    .iter()
                    .any(|(f, icase)| file_test(&f.load(), self.file_match, *icase, s))
        })
    }
}

/// Whether sample `s` matches a pattern of file `f` by method `m`.
fn file_test(f: &crate::map::PatFile, m: crate::map::Match, icase: bool, s: Sample<'_>) -> bool {
    use crate::map::Match;
    match m {
        Match::Int => sample_int(s).is_some_and(|n| f.find_int(n).is_some()),
        Match::Ip => sample_ip(s).is_some_and(|ip| f.find_ip(ip).is_some()),
        _ => with_text(s, |v| f.find_str(m, v, icase).is_some()),
    }
}

/// A sample as an integer, as HAProxy casts it for integer matches.
fn sample_int(s: Sample<'_>) -> Option<i64> {
    match s {
        Sample::Int(n) => Some(n),
        Sample::Bool(b) => Some(b as i64),
        Sample::Str(v) => std::str::from_utf8(v).ok().and_then(|t| t.parse().ok()),
        Sample::Ip(IpAddr::V4(v4)) => Some(u32::from(v4) as i64),
        Sample::Ip(_) => None,
    }
}

/// A sample as an address, as HAProxy casts it for address matches.
fn sample_ip(s: Sample<'_>) -> Option<IpAddr> {
    match s {
        Sample::Ip(ip) => Some(ip),
        Sample::Str(v) => parse_ip(v),
        Sample::Int(n) => Some(IpAddr::V4((n as u32).into())),
        Sample::Bool(_) => None,
    }
}

/// Calls `f` on each sample of `fetch` passed through `convs` (a sample a converter fails on
/// is skipped); true as soon as `f` returns true.
fn each_sample(
    fetch: &Fetch,
    convs: &[Conv],
    view: &dyn HttpView,
    f: &mut dyn FnMut(Sample<'_>) -> bool,
) -> bool {
    if convs.is_empty() {
        return fetch.for_each(view, f);
    }
    let vars = view.sess().vars;
    fetch.for_each(view, &mut |s| match converter::run(convs, s, vars) {
        Some(v) => f(v.as_sample()),
        None => false,
    })
}

/// A parsed sample expression: the fetch, its default matching method, its converters and
/// the type of what they produce.
type Chain = (Fetch, &'static str, Box<[Conv]>, SmpType);

/// Parses `fetch(args),conv(args)...`: the fetch, its default matching method (that of the
/// last converter's output when there are converters), the converters, and the output type.
fn parse_chain(word: &str, what: &str) -> Result<Chain, String> {
    let (fetch_word, conv_words) = converter::split(word)?;
    let (fetch, default_m) = parse_fetch(fetch_word, what)?;
    if conv_words.is_empty() {
        let ty = fetch.out_type();
        return Ok((fetch, default_m, Box::new([]), ty));
    }
    let mut ty = fetch.out_type();
    let mut convs = Vec::with_capacity(conv_words.len());
    for (name, args) in conv_words {
        let (c, out) = Conv::parse(name, args.as_deref(), ty)
            .map_err(|e| format!("in {what} '{word}': {e}"))?;
        convs.push(c);
        ty = out;
    }
    let m = match ty {
        SmpType::Str => "str",
        SmpType::Int => "int",
        SmpType::Ip => "ip",
        SmpType::Bool => "bool",
    };
    Ok((fetch, m, convs.into_boxed_slice(), ty))
}

// ---------------------------------------------------------------------------------------------
// Samples and fetches.

#[derive(Clone, Copy)]
pub(crate) enum Sample<'a> {
    Str(&'a [u8]),
    Int(i64),
    Ip(IpAddr),
    Bool(bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SmpType {
    Str,
    Int,
    Ip,
    Bool,
}

#[derive(Debug, Clone)]
enum Fetch {
    /// `lua.NAME(ARGS)`: a Lua function registered with `core.register_fetches`.
    Lua {
        name: Box<str>,
        args: Box<[String]>,
    },
    /// `var(NAME[,DEFAULT])`: a variable, or the default as a string.
    Var {
        name: crate::vars::VarName,
        default: Option<Box<[u8]>>,
    },
    /// `uuid([4])`: a random version 4 UUID, new at each evaluation.
    Uuid,
    /// `str(S)`, `int(N)`, `bool(B)`, `ipv4(A)`, `ipv6(A)`: a constant.
    Const(converter::Val),
    AlwaysTrue,
    AlwaysFalse,
    ProtoHttp,
    Path,
    Url,
    Method,
    Src,
    /// `src_port`, `dst`, `dst_port`: the connection's ports and local address.
    SrcPort,
    Dst,
    DstPort,
    /// `fe_name`, `be_name`.
    FeName,
    BeName,
    /// `base`: the `Host` header followed by the path.
    Base,
    /// `query`: the query string, without the `?`.
    Query,
    /// `url_ip`, `url_port`: the address of an absolute-form request target.
    UrlIp,
    UrlPort,
    /// `url_param(NAME)` / `urlp(NAME)`: values of a query-string parameter.
    UrlParam {
        name: Box<[u8]>,
    },
    /// `cook(NAME)` / `req.cook(NAME)`: values of a request cookie.
    Cook {
        name: Box<[u8]>,
    },
    /// Inside `res.cook(NAME)` / `scook(NAME)`: the values a response's `Set-Cookie` lines
    /// give cookie NAME (each line sets one cookie, before its attributes).
    SetCook {
        name: Box<[u8]>,
    },
    /// Header values; `split`: comma-separated values are separate samples (`hdr`), else
    /// each field line is one sample (`fhdr`).
    Hdr {
        name: Box<[u8]>,
        split: bool,
        /// `hdr(NAME,OCC)`: only that occurrence (1 the first, -1 the last); 0 for all.
        occ: i32,
    },
    HdrCnt {
        name: Box<[u8]>,
        split: bool,
    },
    HdrVal {
        name: Box<[u8]>,
        occ: i32,
    },
    HdrIp {
        name: Box<[u8]>,
        occ: i32,
    },
    /// `ssl_fc`: the connection is TLS.
    SslFc,
    SslFcSni,
    SslFcProtocol,
    SslFcCipher,
    SslFcAlpn,
    /// `ssl_c_used`: the client presented a certificate.
    SslCUsed,
    /// `ssl_fc_has_sni`: the client's hello named a server.
    SslFcHasSni,
    /// `ssl_c_verify`: 0 when the client certificate verified (always, since a failed one
    /// aborts the handshake).
    SslCVerify,
    SslCSDn,
    SslCIDn,
    /// `ssl_c_s_dn(ENTRY[,OCC])`, `ssl_c_i_dn(...)`: one attribute of the subject's (or
    /// issuer's) DN, the OCC-th from the start (negative: from the end; default the first).
    SslCDnEntry {
        issuer: bool,
        entry: Box<str>,
        occ: i64,
    },
    /// `req.len`: bytes of the client's data held so far.
    ReqLen,
    /// `req.payload(OFF,LEN)`: those bytes of the client's first data (LEN 0: all from OFF);
    /// no sample until there are enough.
    ReqPayload {
        off: usize,
        len: usize,
    },
    /// `req.ssl_hello_type`: the type of the TLS handshake message the client's data starts
    /// with (1: ClientHello).
    ReqSslHelloType,
    /// `req.ssl_sni`: the server name of the client's TLS ClientHello.
    ReqSslSni,
    /// `req.ssl_alpn`: the first protocol of the client's TLS ClientHello's ALPN list.
    ReqSslAlpn,
    /// `unique-id`: the request's `unique-id-format` id.
    UniqueId,
    /// `fc_pp_authority` (type 0x02), `fc_pp_unique_id` (0x05): a TLV of the client's PROXY
    /// protocol v2 header.
    PpTlv(u8),
    /// `fc_rtt[(us|ms)]`, `fc_rttvar`, `fc_unacked`, `fc_sacked`, `fc_retrans`, `fc_fackets`,
    /// `fc_lost`, `fc_reordering`: the kernel's `TCP_INFO` of the client connection.
    TcpInfo(TcpInfoField),
    /// `cpu_calls`, `cpu_ns_avg`, `cpu_ns_tot`, `lat_ns_avg`, `lat_ns_tot`: the current
    /// request's task counters.
    Profile(ProfileField),
    /// `http_auth(L)`: the request's Basic credentials are valid in userlist L.
    HttpAuth(crate::userlist::UserlistRef),
    /// `http_auth_group(L)`: the groups of the user the credentials authenticate in L.
    HttpAuthGroup(crate::userlist::UserlistRef),
    /// `http_auth_bearer([H])`: the token of a `Bearer` credential, in the `Authorization`
    /// header (the credentials header) or, named, in header H (lower case).
    HttpAuthBearer(Option<Box<[u8]>>),
    /// `sc_*(N[,T])`, `scN_*([T])`, `src_*([T])`: a stick-table counter of what slot N
    /// tracks, or of the client's address.
    Stick {
        at: StickAt,
        what: StickWhat,
        /// `Some`: the table to look the key up in (for `src_*`, always set).
        table: Option<crate::stick::TableRef>,
    },
    /// `table_avl([T])`, `table_cnt([T])`: free and used entries of a table.
    TableAvl(crate::stick::TableRef),
    TableCnt(crate::stick::TableRef),
    /// `status`: the response's status code.
    Status,
    /// Proxy and server state, and the process (`nbsrv`, `srv_name`, `rand`, ...).
    State(StateFetch),
    /// `res.cache_hit`, `res.cache_name`: whether the response comes from a cache, and which.
    CacheHit,
    CacheName,
    /// A response fetch (`res.hdr`, `shdr`, ...): the inner header fetch, on a response only.
    Res(Box<Fetch>),
    /// `capture.req.hdr(N)`, `capture.res.hdr(N)`: what capture slot N holds.
    Capture {
        req: bool,
        idx: usize,
    },
    /// `req.ver` / `res.ver`: `1.0` or `1.1`.
    Ver,
    /// `req.hdrs` / `res.hdrs`: the header block as text, with its final empty line.
    Hdrs,
    /// `req.hdrs_bin` / `res.hdrs_bin`: the header fields as varint-prefixed names and
    /// values, ending with two empty ones.
    HdrsBin,
    /// `pathq`: the path and the query string of the target.
    PathQ,
    /// `req.body`, `req.body_len`, `req.body_size`.
    Body,
    BodyLen,
    BodySize,
}

/// Whose entry a stick-table fetch reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StickAt {
    Sc(usize),
    Src,
}

/// What a stick-table fetch does with the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StickWhat {
    Get(crate::stick::Data),
    /// `kbytes_in`, `kbytes_out`: a byte counter in KiB.
    KBytes(crate::stick::Data),
    /// `inc_gpc0`: adds one, gives the new value.
    Inc(crate::stick::Data),
    /// `clr_gpc0`: clears, gives the value before.
    Clr(crate::stick::Data),
    /// `updt_conn_cnt` (`src_` only): counts a connection, gives the new count.
    UpdtConnCnt,
    /// `tracked` (`sc` only): whether the slot tracks something.
    Tracked,
    /// `trackers`: how many sessions track the entry.
    Trackers,
}

impl StickWhat {
    fn parse(s: &str) -> Option<StickWhat> {
        use crate::stick::Data::*;
        Some(match s {
            "get_gpc0" => StickWhat::Get(Gpc0),
            "get_gpc1" => StickWhat::Get(Gpc1),
            "get_gpt0" => StickWhat::Get(Gpt0),
            "inc_gpc0" => StickWhat::Inc(Gpc0),
            "inc_gpc1" => StickWhat::Inc(Gpc1),
            "clr_gpc0" => StickWhat::Clr(Gpc0),
            "clr_gpc1" => StickWhat::Clr(Gpc1),
            "kbytes_in" => StickWhat::KBytes(BytesInCnt),
            "kbytes_out" => StickWhat::KBytes(BytesOutCnt),
            "updt_conn_cnt" => StickWhat::UpdtConnCnt,
            "tracked" => StickWhat::Tracked,
            "trackers" => StickWhat::Trackers,
            "gpc0_rate" | "gpc1_rate" | "conn_cnt" | "conn_cur" | "conn_rate" | "sess_cnt"
            | "sess_rate" | "http_req_cnt" | "http_req_rate" | "http_err_cnt" | "http_err_rate"
            | "http_fail_cnt" | "http_fail_rate" | "bytes_in_rate" | "bytes_out_rate" => {
                StickWhat::Get(crate::stick::Data::by_name(s)?)
            }
            _ => return None,
        })
    }
}

/// Evaluates a stick-table fetch: `None` is no sample (nothing tracked on the slot, or the
/// table does not store the data); an absent key reads as 0, as in HAProxy.
fn stick_fetch(
    at: StickAt,
    what: StickWhat,
    table: Option<&crate::stick::TableRef>,
    view: &dyn HttpView,
) -> Option<Sample<'static>> {
    use crate::stick::{Data, KeySample};
    use std::borrow::Cow;
    let t_named = table.and_then(|t| t.get());
    // The table, and the entry (borrowed from the tracking slot when it is that table's);
    // an absent entry reads as in HAProxy.
    let (t, e): (
        &crate::stick::Table,
        Option<Cow<'_, Arc<crate::stick::Entry>>>,
    ) = match at {
        StickAt::Sc(n) => {
            let tr = view.sess().sc.get(n);
            if what == StickWhat::Tracked {
                return Some(Sample::Bool(tr.is_some()));
            }
            let tr = tr?;
            match t_named {
                Some(t) if !Arc::ptr_eq(t, &tr.table) => {
                    (t, t.lookup(tr.entry.key()).map(Cow::Owned))
                }
                _ => (&tr.table, Some(Cow::Borrowed(&tr.entry))),
            }
        }
        StickAt::Src => {
            let t = t_named?;
            let k = t.key_of(KeySample::Ip(view.src()?))?;
            let e = match what {
                StickWhat::Inc(_) | StickWhat::Clr(_) | StickWhat::UpdtConnCnt => {
                    t.get_or_create(k)
                }
                _ => t.lookup(&k),
            };
            (t, e.map(Cow::Owned))
        }
    };
    let int = |v: u64| Some(Sample::Int(v.min(i64::MAX as u64) as i64));
    match what {
        StickWhat::Tracked => unreachable!("answered above"),
        StickWhat::Trackers => int(e.map_or(0, |e| e.trackers() as u64)),
        StickWhat::Get(d) | StickWhat::KBytes(d) => {
            if !t.stores(d) {
                return None;
            }
            let v = e.and_then(|e| t.get(&e, d)).unwrap_or(0);
            int(if matches!(what, StickWhat::KBytes(_)) {
                v >> 10
            } else {
                v
            })
        }
        StickWhat::Inc(d) => {
            let rate = if d == Data::Gpc0 {
                Data::Gpc0Rate
            } else {
                Data::Gpc1Rate
            };
            // As HAProxy: a table that stores neither gives 0, a sample (unlike a read).
            if !t.stores(d) && !t.stores(rate) {
                return int(0);
            }
            let Some(e) = e else { return int(0) };
            t.add(&e, d, 1);
            int(t.get(&e, d).unwrap_or(0))
        }
        StickWhat::Clr(d) => {
            if !t.stores(d) {
                return None;
            }
            let Some(e) = e else { return int(0) };
            let v = t.get(&e, d).unwrap_or(0);
            t.set(&e, d, 0);
            int(v)
        }
        StickWhat::UpdtConnCnt => {
            if !t.stores(Data::ConnCnt) {
                return None;
            }
            let Some(e) = e else { return int(0) };
            t.add(&e, Data::ConnCnt, 1);
            int(t.get(&e, Data::ConnCnt).unwrap_or(0))
        }
    }
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// What follows `SCHEME://` in an absolute-form target; `None` for other forms (a scheme
/// holds no `/`).
fn after_scheme(uri: &[u8]) -> Option<&[u8]> {
    let pos = uri.windows(3).position(|w| w == b"://")?;
    (!uri[..pos].contains(&b'/')).then(|| &uri[pos + 3..])
}

/// A request target from its path on: origin form as it is, absolute form from the first
/// `/` or `?` after the authority (empty without either); `None` for `*` and authority form.
fn target_from_path(uri: &[u8]) -> Option<&[u8]> {
    if uri.first() == Some(&b'/') {
        return Some(uri);
    }
    let after = after_scheme(uri)?;
    let p = after
        .iter()
        .position(|&c| c == b'/' || c == b'?')
        .unwrap_or(after.len());
    Some(&after[p..])
}

/// The path of a request target: origin form up to `?`; absolute form with the scheme and
/// authority removed; `None` for `*` and authority form.
fn uri_path(uri: &[u8]) -> Option<&[u8]> {
    let rest = target_from_path(uri)?;
    let end = rest.iter().position(|&c| c == b'?').unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The path and query string of a request target (`pathq`), without a fragment.
fn uri_pathq(uri: &[u8]) -> Option<&[u8]> {
    let rest = target_from_path(uri)?;
    let end = rest.iter().position(|&c| c == b'#').unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The host and port of an absolute-form request target (`http://10.0.0.1:8080/x`); the port
/// defaults to 80. `None` for origin form.
fn url_authority(uri: &[u8]) -> Option<(&[u8], u16)> {
    let after = after_scheme(uri)?;
    let end = after
        .iter()
        .position(|&c| matches!(c, b'/' | b'?' | b'#'))
        .unwrap_or(after.len());
    let auth = &after[..end];
    // Credentials before '@' are not the host.
    let auth = match auth.iter().rposition(|&c| c == b'@') {
        Some(at) => &auth[at + 1..],
        None => auth,
    };
    let (host, port) = if let Some(rest) = auth.strip_prefix(b"[") {
        let close = rest.iter().position(|&c| c == b']')?;
        (&rest[..close], rest[close + 1..].strip_prefix(b":"))
    } else {
        match auth.iter().position(|&c| c == b':') {
            Some(c) => (&auth[..c], Some(&auth[c + 1..])),
            None => (auth, None),
        }
    };
    let port = match port {
        None | Some(b"") => 80,
        Some(p) => std::str::from_utf8(p).ok()?.parse().ok()?,
    };
    Some((host, port))
}

/// Integer value of a header, as HAProxy's `hdr_val` (leading sign and digits).
fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, s),
    };
    let end = digits
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in &digits[..end] {
        v = v.saturating_mul(10).saturating_add((d - b'0') as i64);
    }
    Some(if neg { -v } else { v })
}

fn parse_ip(s: &[u8]) -> Option<IpAddr> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// An address in a header (`hdr_ip`): IPv4 may carry a `:port`, which HAProxy drops.
fn parse_hdr_ip(s: &[u8]) -> Option<IpAddr> {
    parse_ip(s).or_else(|| {
        let t = std::str::from_utf8(s).ok()?;
        let (a, port) = t.split_once(':')?;
        port.bytes().all(|c| c.is_ascii_digit()).then_some(())?;
        a.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
    })
}

impl Fetch {
    fn is_http(&self) -> bool {
        !matches!(
            self,
            Fetch::AlwaysTrue
                | Fetch::AlwaysFalse
                | Fetch::Const(_)
                | Fetch::Lua { .. }
                | Fetch::Var { .. }
                | Fetch::Uuid
                | Fetch::State(_)
                | Fetch::ReqPayload { .. }
                | Fetch::Src
                | Fetch::SrcPort
                | Fetch::Dst
                | Fetch::DstPort
                | Fetch::FeName
                | Fetch::BeName
                | Fetch::SslFc
                | Fetch::SslFcSni
                | Fetch::SslFcProtocol
                | Fetch::SslFcCipher
                | Fetch::SslFcAlpn
                | Fetch::SslCUsed
                | Fetch::SslFcHasSni
                | Fetch::SslCVerify
                | Fetch::SslCSDn
                | Fetch::SslCIDn
                | Fetch::SslCDnEntry { .. }
                | Fetch::ReqLen
                | Fetch::ReqSslHelloType
                | Fetch::ReqSslSni
                | Fetch::ReqSslAlpn
                | Fetch::ProtoHttp
                // Made from the request, but kept with the session until it is logged.
                | Fetch::UniqueId
                | Fetch::PpTlv(_)
                | Fetch::TcpInfo(_)
                | Fetch::Profile(_)
                | Fetch::Stick { .. }
                | Fetch::TableAvl(_)
                | Fetch::TableCnt(_)
        )
    }

    /// Whether it reads the response (`status`, `res.hdr`), which only `http-response` rules
    /// see.
    fn is_response(&self) -> bool {
        matches!(
            self,
            Fetch::Status | Fetch::Res(_) | Fetch::CacheHit | Fetch::CacheName
        )
    }

    /// Whether it reads the client's first data (`tcp-request content` waits for it).
    fn is_payload(&self) -> bool {
        matches!(
            self,
            Fetch::ReqLen
                | Fetch::ReqPayload { .. }
                | Fetch::ReqSslHelloType
                | Fetch::ReqSslSni
                | Fetch::ReqSslAlpn
                | Fetch::ProtoHttp
        )
    }

    fn out_type(&self) -> SmpType {
        match self {
            Fetch::Res(inner) => inner.out_type(),
            Fetch::TcpInfo(_) | Fetch::Profile(_) | Fetch::BodyLen | Fetch::BodySize => {
                SmpType::Int
            }
            Fetch::Capture { .. } => SmpType::Str,
            Fetch::Ver | Fetch::Hdrs | Fetch::HdrsBin | Fetch::PathQ | Fetch::Body => SmpType::Str,
            // A variable's type is known only when it is read: taken as text for matching.
            Fetch::Var { .. } | Fetch::Uuid | Fetch::Lua { .. } => SmpType::Str,
            Fetch::Const(v) => match v {
                converter::Val::Str(_) => SmpType::Str,
                converter::Val::Int(_) => SmpType::Int,
                converter::Val::Ip(_) => SmpType::Ip,
                converter::Val::Bool(_) => SmpType::Bool,
            },
            Fetch::Status | Fetch::TableAvl(_) | Fetch::TableCnt(_) => SmpType::Int,
            Fetch::CacheHit => SmpType::Bool,
            Fetch::CacheName => SmpType::Str,
            Fetch::State(st) => st.out_type(),
            Fetch::Stick { what, .. } => {
                if *what == StickWhat::Tracked {
                    SmpType::Bool
                } else {
                    SmpType::Int
                }
            }
            Fetch::AlwaysTrue
            | Fetch::AlwaysFalse
            | Fetch::ProtoHttp
            | Fetch::SslFc
            | Fetch::SslCUsed
            | Fetch::SslFcHasSni
            | Fetch::HttpAuth(_) => SmpType::Bool,
            Fetch::HttpAuthGroup(_) | Fetch::HttpAuthBearer(_) => SmpType::Str,
            Fetch::Path
            | Fetch::Url
            | Fetch::Method
            | Fetch::FeName
            | Fetch::BeName
            | Fetch::Base
            | Fetch::Query
            | Fetch::UrlParam { .. }
            | Fetch::Cook { .. }
            | Fetch::SetCook { .. }
            | Fetch::Hdr { .. }
            | Fetch::SslFcSni
            | Fetch::SslFcProtocol
            | Fetch::SslFcCipher
            | Fetch::SslFcAlpn
            | Fetch::SslCSDn
            | Fetch::SslCIDn
            | Fetch::SslCDnEntry { .. }
            | Fetch::ReqPayload { .. }
            | Fetch::ReqSslSni
            | Fetch::ReqSslAlpn
            | Fetch::UniqueId
            | Fetch::PpTlv(_) => SmpType::Str,
            Fetch::Src | Fetch::Dst | Fetch::UrlIp | Fetch::HdrIp { .. } => SmpType::Ip,
            Fetch::SrcPort
            | Fetch::DstPort
            | Fetch::UrlPort
            | Fetch::HdrCnt { .. }
            | Fetch::HdrVal { .. }
            | Fetch::SslCVerify
            | Fetch::ReqLen
            | Fetch::ReqSslHelloType => SmpType::Int,
        }
    }

    /// `req.ver`, `req.hdrs`, `req.body`... on the message the view shows (the response's
    /// through `Res`).
    fn message_fetch(&self, view: &dyn HttpView, f: &mut dyn FnMut(Sample<'_>) -> bool) -> bool {
        match self {
            Fetch::Ver => match view.version_minor() {
                Some(0) => f(Sample::Str(b"1.0")),
                Some(_) => f(Sample::Str(b"1.1")),
                None => false,
            },
            // Not an HTTP message (`mode tcp`): no sample.
            Fetch::Hdrs | Fetch::HdrsBin if view.version_minor().is_none() => false,
            Fetch::Hdrs | Fetch::HdrsBin => {
                let bin = matches!(self, Fetch::HdrsBin);
                let mut out = Vec::new();
                // As HAProxy's HTX: lower-case names, and no `Connection` field (the
                // connection's business, not the message's).
                view.for_each_field(&mut |n, v| {
                    if n.eq_ignore_ascii_case(b"connection") {
                        return;
                    }
                    if bin {
                        crate::peers::wire::put_varint(&mut out, n.len() as u64);
                        out.extend(n.iter().map(u8::to_ascii_lowercase));
                        crate::peers::wire::put_varint(&mut out, v.len() as u64);
                        out.extend_from_slice(v);
                    } else {
                        out.extend(n.iter().map(u8::to_ascii_lowercase));
                        out.extend_from_slice(b": ");
                        out.extend_from_slice(v);
                        out.extend_from_slice(b"\r\n");
                    }
                });
                out.extend_from_slice(if bin { b"\0\0" } else { b"\r\n" });
                f(Sample::Str(&out))
            }
            Fetch::Body => match view.body() {
                Some((b, _)) => f(Sample::Str(b)),
                None => false,
            },
            Fetch::BodyLen => match view.body() {
                Some((b, _)) => f(Sample::Int(b.len() as i64)),
                None => false,
            },
            Fetch::BodySize => match view.body() {
                Some((_, n)) => f(Sample::Int(n.min(i64::MAX as u64) as i64)),
                None => false,
            },
            _ => false,
        }
    }

    /// Calls `f` on each sample; true as soon as `f` returns true.
    fn for_each(&self, view: &dyn HttpView, f: &mut dyn FnMut(Sample<'_>) -> bool) -> bool {
        match self {
            Fetch::Const(v) => f(v.as_sample()),
            Fetch::Lua { name, args } => match crate::lua::run_fetch(name, args, view) {
                Some(v) => f(v.as_sample()),
                None => false,
            },
            Fetch::Uuid => {
                let mut b = [0u8; 16];
                if aws_lc_rs::rand::fill(&mut b).is_err() {
                    return false;
                }
                b[6] = (b[6] & 0x0f) | 0x40;
                b[8] = (b[8] & 0x3f) | 0x80;
                let h = |r: std::ops::Range<usize>| -> String {
                    b[r].iter().map(|x| format!("{x:02x}")).collect()
                };
                let s = format!(
                    "{}-{}-{}-{}-{}",
                    h(0..4),
                    h(4..6),
                    h(6..8),
                    h(8..10),
                    h(10..16)
                );
                f(Sample::Str(s.as_bytes()))
            }
            Fetch::Var { name, default } => {
                let found = match view.sess().vars {
                    Some(vs) => vs.get(name),
                    None => crate::vars::Vars::default().get(name),
                };
                match (found, default) {
                    (Some(v), _) => f(v.as_sample()),
                    (None, Some(d)) => f(Sample::Str(d)),
                    (None, None) => false,
                }
            }
            Fetch::AlwaysTrue => f(Sample::Bool(true)),
            Fetch::AlwaysFalse => f(Sample::Bool(false)),
            // In `mode tcp`, whether the client's first data is an HTTP request (the `HTTP`
            // ACL of protocol detection); in `mode http`, always.
            Fetch::ProtoHttp => f(Sample::Bool(match view.payload() {
                Some(p) => crate::http::request_head_state(p) == Some(true),
                None => true,
            })),
            Fetch::Method => {
                let m = view.method();
                !m.is_empty() && f(Sample::Str(m))
            }
            Fetch::Url => {
                let u = view.uri();
                !u.is_empty() && f(Sample::Str(u))
            }
            Fetch::Path => match uri_path(view.uri()) {
                Some(p) => f(Sample::Str(p)),
                None => false,
            },
            Fetch::Src => match view.src() {
                Some(ip) => f(Sample::Ip(ip)),
                None => false,
            },
            Fetch::SrcPort => match view.sess().peer {
                Some(a) => f(Sample::Int(a.port().into())),
                None => false,
            },
            Fetch::Dst => match view.sess().local {
                Some(a) => f(Sample::Ip(a.ip())),
                None => false,
            },
            Fetch::DstPort => match view.sess().local {
                Some(a) => f(Sample::Int(a.port().into())),
                None => false,
            },
            Fetch::FeName | Fetch::BeName => {
                let s = view.sess();
                let n = if matches!(self, Fetch::FeName) {
                    s.frontend
                } else {
                    s.backend
                };
                !n.is_empty() && f(Sample::Str(n.as_bytes()))
            }
            Fetch::Base => {
                let Some(p) = uri_path(view.uri()) else {
                    return false;
                };
                // The first Host field, then the path: built on the stack (no allocation on
                // the evaluation path); longer than the buffer, no sample.
                let mut buf = [0u8; 1024];
                let mut len = 0;
                view.for_each_header(b"host", &mut |h| {
                    let h = trim_ows(h);
                    if h.len() <= buf.len() {
                        buf[..h.len()].copy_from_slice(h);
                        len = h.len();
                    }
                    true
                });
                if len + p.len() > buf.len() {
                    return false;
                }
                buf[len..len + p.len()].copy_from_slice(p);
                f(Sample::Str(&buf[..len + p.len()]))
            }
            Fetch::Query => {
                let u = view.uri();
                match u.iter().position(|&c| c == b'?') {
                    Some(q) => f(Sample::Str(&u[q + 1..])),
                    None => false,
                }
            }
            Fetch::UrlIp | Fetch::UrlPort => {
                let Some((host, port)) = url_authority(view.uri()) else {
                    return false;
                };
                if matches!(self, Fetch::UrlIp) {
                    match parse_ip(host) {
                        Some(ip) => f(Sample::Ip(ip)),
                        None => false,
                    }
                } else {
                    f(Sample::Int(port.into()))
                }
            }
            Fetch::UrlParam { name } => {
                let u = view.uri();
                let Some(q) = u.iter().position(|&c| c == b'?') else {
                    return false;
                };
                u[q + 1..].split(|&c| c == b'&').any(|kv| {
                    let (k, v) = match kv.iter().position(|&c| c == b'=') {
                        Some(e) => (&kv[..e], &kv[e + 1..]),
                        None => (kv, &b""[..]),
                    };
                    k == &name[..] && f(Sample::Str(v))
                })
            }
            Fetch::Cook { name } => view.for_each_header(b"cookie", &mut |v| {
                v.split(|&c| c == b';').any(|kv| {
                    let kv = trim_ows(kv);
                    let (k, v) = match kv.iter().position(|&c| c == b'=') {
                        Some(e) => (trim_ows(&kv[..e]), trim_ows(&kv[e + 1..])),
                        None => (kv, &b""[..]),
                    };
                    k == &name[..] && f(Sample::Str(v))
                })
            }),
            Fetch::SetCook { name } => view.for_each_header(b"set-cookie", &mut |v| {
                let pair = trim_ows(v.split(|&c| c == b';').next().unwrap_or(b""));
                match pair.iter().position(|&c| c == b'=') {
                    Some(e) if trim_ows(&pair[..e]) == &name[..] => {
                        f(Sample::Str(trim_ows(&pair[e + 1..])))
                    }
                    _ => false,
                }
            }),
            Fetch::Hdr { name, split, occ } => {
                each_value(view, name, *split, *occ, &mut |v| f(Sample::Str(v)))
            }
            Fetch::HdrCnt { name, split } => {
                let mut n: i64 = 0;
                view.for_each_header(name, &mut |v| {
                    n += if *split {
                        v.split(|&c| c == b',').count() as i64
                    } else {
                        1
                    };
                    false
                });
                f(Sample::Int(n))
            }
            // The occurrence counts every value, converted or not (HAProxy picks the value,
            // then converts it).
            Fetch::HdrVal { name, occ } => each_value(view, name, true, *occ, &mut |v| {
                parse_int(v).is_some_and(|n| f(Sample::Int(n)))
            }),
            Fetch::HdrIp { name, occ } => each_value(view, name, true, *occ, &mut |v| {
                parse_hdr_ip(v).is_some_and(|ip| f(Sample::Ip(ip)))
            }),
            Fetch::ReqLen => match view.payload() {
                Some(p) => f(Sample::Int(p.len() as i64)),
                None => false,
            },
            Fetch::ReqPayload { off, len } => {
                let Some(p) = view.payload() else {
                    return false;
                };
                let end = if *len == 0 {
                    p.len()
                } else {
                    off.saturating_add(*len)
                };
                match p.get(*off..end) {
                    Some(b) => f(Sample::Str(b)),
                    None => false,
                }
            }
            Fetch::ReqSslHelloType => match view.payload().and_then(crate::tls::peek::hello_type) {
                Some(t) => f(Sample::Int(t.into())),
                None => false,
            },
            Fetch::ReqSslSni => match view.payload().and_then(crate::tls::peek::sni) {
                Some(n) => f(Sample::Str(n)),
                None => false,
            },
            Fetch::ReqSslAlpn => match view.payload().and_then(crate::tls::peek::alpn) {
                Some(n) => f(Sample::Str(n)),
                None => false,
            },
            Fetch::PpTlv(t) => match view.sess().pp.and_then(|p| p.get(*t)) {
                Some(v) => f(Sample::Str(v)),
                None => false,
            },
            Fetch::TcpInfo(field) => match view.sess().tcp_fd.map(crate::sys::tcp_info) {
                Some(Ok(ti)) => f(Sample::Int(i64::from(field.of(&ti)))),
                _ => false,
            },
            Fetch::Profile(field) => match view.sess().profile {
                Some(p) => f(Sample::Int(match field {
                    ProfileField::Calls => p.calls as i64,
                    ProfileField::CpuTot => p.cpu_ns as i64,
                    ProfileField::CpuAvg => (p.cpu_ns / p.calls.max(1)) as i64,
                    ProfileField::Lat => 0,
                })),
                None => false,
            },
            Fetch::UniqueId => match view.sess().unique_id {
                Some(id) => f(Sample::Str(id.as_bytes())),
                None => false,
            },
            Fetch::HttpAuth(l) => {
                let ok = l.get().is_some_and(|l| {
                    view.for_each_header(view.auth_header(), &mut |v| l.authenticate(v).is_some())
                });
                f(Sample::Bool(ok))
            }
            Fetch::HttpAuthGroup(l) => {
                let Some(l) = l.get() else { return false };
                view.for_each_header(view.auth_header(), &mut |v| {
                    l.authenticate(v)
                        .is_some_and(|u| l.groups_of(u).any(|g| f(Sample::Str(g.as_bytes()))))
                })
            }
            Fetch::HttpAuthBearer(name) => {
                // The first element of the first header only, as HAProxy's lookup gives it.
                let (mut seen, mut hit) = (false, false);
                let hname = name.as_deref().unwrap_or(view.auth_header());
                view.for_each_header(hname, &mut |v| {
                    seen = true;
                    let v = crate::http::trim_first_element(v);
                    hit = match name {
                        None => bearer_credentials(v).is_some_and(|t| f(Sample::Str(t))),
                        // A named header always gives a sample, empty unless it holds a
                        // `Bearer` credential (HAProxy 2.6's `http_auth_bearer(H)`).
                        Some(_) => f(Sample::Str(bearer_in_header(v))),
                    };
                    true
                });
                if !seen && name.is_some() {
                    return f(Sample::Str(b""));
                }
                hit
            }
            Fetch::Status => view.status().is_some_and(|s| f(Sample::Int(s.into()))),
            Fetch::State(st) => st.for_each(view, f),
            // Only responses have them: no sample while the request is processed.
            Fetch::CacheHit => {
                view.status().is_some() && f(Sample::Bool(view.cache_hit().is_some()))
            }
            Fetch::CacheName => {
                view.status().is_some() && f(Sample::Str(view.cache_hit().unwrap_or("").as_bytes()))
            }
            Fetch::Stick { at, what, table } => {
                stick_fetch(*at, *what, table.as_ref(), view).is_some_and(&mut *f)
            }
            Fetch::TableAvl(t) | Fetch::TableCnt(t) => {
                let Some(t) = t.get() else { return false };
                let used = t.used() as i64;
                f(Sample::Int(if matches!(self, Fetch::TableCnt(_)) {
                    used
                } else {
                    (t.def.size as i64 - used).max(0)
                }))
            }
            Fetch::Res(inner) => {
                view.status().is_some()
                    && match **inner {
                        Fetch::Ver
                        | Fetch::Hdrs
                        | Fetch::HdrsBin
                        | Fetch::Body
                        | Fetch::BodyLen
                        | Fetch::BodySize => inner.message_fetch(view, f),
                        _ => inner.for_each(view, f),
                    }
            }
            Fetch::Capture { req, idx } => match view.capture(*req, *idx) {
                Some(b) => f(Sample::Str(b)),
                None => false,
            },
            // The request's on a request, the response's inside `Res`.
            Fetch::Ver
            | Fetch::Hdrs
            | Fetch::HdrsBin
            | Fetch::Body
            | Fetch::BodyLen
            | Fetch::BodySize => view.status().is_none() && self.message_fetch(view, f),
            Fetch::PathQ => match uri_pathq(view.uri()) {
                Some(p) => f(Sample::Str(p)),
                None => false,
            },
            Fetch::SslFc => f(Sample::Bool(view.tls().is_some())),
            Fetch::SslCUsed => f(Sample::Bool(view.tls().is_some_and(|t| t.client_cert))),
            Fetch::SslFcHasSni => f(Sample::Bool(view.tls().is_some_and(|t| t.sni.is_some()))),
            Fetch::SslCVerify => match view.tls() {
                Some(_) => f(Sample::Int(0)),
                None => false,
            },
            Fetch::SslFcSni
            | Fetch::SslFcProtocol
            | Fetch::SslFcCipher
            | Fetch::SslFcAlpn
            | Fetch::SslCSDn
            | Fetch::SslCIDn => {
                let Some(t) = view.tls() else { return false };
                let v: Option<&[u8]> = match self {
                    Fetch::SslFcSni => t.sni.as_deref().map(str::as_bytes),
                    Fetch::SslFcProtocol => Some(t.protocol.as_bytes()),
                    Fetch::SslFcCipher => Some(t.cipher.as_bytes()),
                    Fetch::SslFcAlpn => t.alpn.as_deref(),
                    Fetch::SslCSDn => t.c_s_dn.as_deref().map(str::as_bytes),
                    _ => t.c_i_dn.as_deref().map(str::as_bytes),
                };
                v.is_some_and(|v| f(Sample::Str(v)))
            }
            Fetch::SslCDnEntry { issuer, entry, occ } => {
                let Some(t) = view.tls() else { return false };
                let dn = if *issuer { &t.c_i_dn } else { &t.c_s_dn };
                let Some(dn) = dn.as_deref() else {
                    return false;
                };
                match dn_entry(dn, entry, *occ) {
                    Some(v) => f(Sample::Str(v.as_bytes())),
                    None => false,
                }
            }
        }
    }
}

/// The value of the `occ`-th `entry` attribute of a `/K=V/K=V` DN (from the end when
/// negative).
/// Calls `f` with each value of header `name` (comma-separated ones apart when `split`,
/// trimmed), or only the one occurrence `occ` designates (0: all), until `f` returns true.
fn each_value(
    view: &dyn HttpView,
    name: &[u8],
    split: bool,
    occ: i32,
    f: &mut dyn FnMut(&[u8]) -> bool,
) -> bool {
    let want = occurrence(view, name, split, occ);
    let mut i = 0;
    view.for_each_header(name, &mut |v| {
        let mut one = |p: &[u8]| {
            i += 1;
            want.is_none_or(|w| w == i) && f(trim_ows(p))
        };
        if split {
            v.split(|&c| c == b',').any(&mut one)
        } else {
            one(v)
        }
    })
}

/// Which value (1-based, in received order) `occ` designates among header `name`'s values
/// (comma-separated ones apart when `split`): `None` for all (`occ` 0), `Some(0)` for one
/// that does not exist.
fn occurrence(view: &dyn HttpView, name: &[u8], split: bool, occ: i32) -> Option<usize> {
    if occ == 0 {
        return None;
    }
    if occ > 0 {
        return Some(occ as usize);
    }
    let mut n = 0usize;
    view.for_each_header(name, &mut |v| {
        n += if split {
            v.split(|&c| c == b',').count()
        } else {
            1
        };
        false
    });
    Some((n + 1).saturating_sub(occ.unsigned_abs() as usize))
}

fn dn_entry<'a>(dn: &'a str, entry: &str, occ: i64) -> Option<&'a str> {
    let mut values = dn
        .split('/')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == entry)
        .map(|(_, v)| v);
    if occ >= 0 {
        values.nth(occ.max(1) as usize - 1)
    } else {
        let all: Vec<&str> = values.collect();
        let back = occ.unsigned_abs() as usize;
        all.len().checked_sub(back).map(|i| all[i])
    }
}

/// A sample fetch used outside ACLs (`%[fetch]` in `log-format`): the same fetches, taken as
/// HAProxy's sample expressions take them (the last occurrence of a header, the sample
/// converted to text).
#[derive(Debug, Clone)]
pub struct SampleFetch {
    fetch: Fetch,
    convs: Box<[Conv]>,
    text: Box<str>,
}

/// Fetches that read the request's head (or body), which HAProxy refuses in the formats of
/// `http-response` rules ("may not be reliably used here"); `method` and `capture.req.*`
/// are kept with the transaction and stay allowed, and `hdr` reads the response there.
fn reads_request_head(name: &str) -> bool {
    let base = name.split_once('_').map_or(name, |(b, _)| b);
    (name.starts_with("req.") && !name.starts_with("req.ssl") && name != "req.len")
        || matches!(base, "path" | "url" | "query" | "base" | "cook" | "urlp")
        || matches!(name, "base32" | "req_ver" | "pathq")
        || name.starts_with("http_auth")
}

thread_local! {
    /// Set while an `http-response` rule is parsed (see `SampleFetch::on_response`).
    static RESPONSE_FORMATS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl SampleFetch {
    /// Parses `name` or `name(args)`. ACL-only forms (`path_beg`, `hdr_sub(x)`) are not fetches.
    pub fn parse(word: &str) -> Result<SampleFetch, String> {
        Self::parse_in(word, false)
    }

    /// Parses a sample that may read the client's first data (`req.ssl_sni`), for a rule
    /// that runs after `tcp-request inspect-delay` (a dynamic `use_backend` name).
    pub fn parse_with_payload(word: &str) -> Result<SampleFetch, String> {
        Self::parse_in(word, true)
    }

    /// Whether its sample is binary data rather than text (`req.body`, `req.hdrs_bin`), as
    /// SPOE sends it.
    pub fn is_binary(&self) -> bool {
        self.convs.is_empty()
            && match &self.fetch {
                Fetch::Res(inner) => matches!(**inner, Fetch::HdrsBin | Fetch::Body),
                f => matches!(f, Fetch::HdrsBin | Fetch::Body | Fetch::ReqPayload { .. }),
            }
    }

    /// Whether it reads the client's first data.
    pub fn needs_payload(&self) -> bool {
        self.fetch.is_payload()
    }

    /// Runs `f` (the parsing of an `http-response` rule) with response fetches allowed in
    /// the formats it parses: they are evaluated on the response, never in a log line.
    pub fn on_response<R>(f: impl FnOnce() -> R) -> R {
        RESPONSE_FORMATS.with(|r| r.set(true));
        let out = f();
        RESPONSE_FORMATS.with(|r| r.set(false));
        out
    }

    fn parse_in(word: &str, payload_ok: bool) -> Result<SampleFetch, String> {
        const WHAT: &str = "sample fetch";
        let (fetch_word, _) = converter::split(word)?;
        let (fetch, default_m) = parse_fetch(fetch_word, WHAT)?;
        let (_, _, convs, _) = parse_chain(word, WHAT)?;
        if !matches!(default_m, "str" | "int" | "ip" | "bool") {
            let (name, _) = split_criterion(fetch_word, WHAT)?;
            return Err(format!(
                "unknown {WHAT} '{name}' ('_{default_m}' forms are ACL matches, not fetches)"
            ));
        }
        let on_response = RESPONSE_FORMATS.with(std::cell::Cell::get);
        if on_response {
            let (name, _) = split_criterion(fetch_word, WHAT)?;
            if name.starts_with("capture.req.")
                && !matches!(name, "capture.req.method" | "capture.req.hdr")
            {
                return Err(format!(
                    "{WHAT} '{name}' is not supported by sluice in 'http-response' rules (the \
                     request line is not kept; use 'http-request set-var(txn.NAME)')"
                ));
            }
            if reads_request_head(name) {
                return Err(format!(
                    "{WHAT} '{name}' may not be reliably used here: it reads the request's \
                     head, which is gone when 'http-response' rules run (keep what they need \
                     in a variable with 'http-request set-var(txn.NAME)')"
                ));
            }
        }
        if fetch.is_response() && !on_response {
            let (name, _) = split_criterion(fetch_word, WHAT)?;
            return Err(format!(
                "{WHAT} '{name}' is not supported by sluice in log formats (it reads the \
                 response; '%ST' logs the status)"
            ));
        }
        if fetch.is_payload() && !payload_ok {
            let (name, _) = split_criterion(fetch_word, WHAT)?;
            return Err(format!(
                "{WHAT} '{name}' is not supported by sluice in log formats (it reads the \
                 client's first data, which 'tcp-request content' rules see)"
            ));
        }
        Ok(SampleFetch {
            fetch,
            convs,
            text: word.into(),
        })
    }

    /// Whether it reads the HTTP request (so it must be taken while the request is there).
    pub fn uses_http(&self) -> bool {
        self.fetch.is_http()
    }

    /// Whether it reads the response (`res.hdr`, `status`...).
    pub fn uses_response(&self) -> bool {
        self.fetch.is_response()
    }

    /// The sample as a key of table `t` (of several samples, the last); `None` without one.
    pub fn key(&self, view: &dyn HttpView, t: &crate::stick::Table) -> Option<crate::stick::Key> {
        use crate::stick::KeySample;
        let mut key = None;
        each_sample(&self.fetch, &self.convs, view, &mut |s| {
            key = t.key_of(match s {
                Sample::Str(b) => KeySample::Str(b),
                Sample::Int(n) => KeySample::Int(n),
                Sample::Bool(b) => KeySample::Int(b as i64),
                Sample::Ip(ip) => KeySample::Ip(ip),
            });
            false
        });
        key
    }

    /// The sample with its type (of several, the last); `None` without one.
    pub fn value(&self, view: &dyn HttpView) -> Option<converter::Val> {
        let mut out = None;
        each_sample(&self.fetch, &self.convs, view, &mut |s| {
            out = Some(converter::Val::from_sample(s));
            false
        });
        out
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Appends the sample as text (integers in decimal, addresses in their usual form,
    /// booleans as `0`/`1`); of several, the last one. `false`: no sample (nothing appended).
    pub fn write(&self, view: &dyn HttpView, out: &mut Vec<u8>) -> bool {
        use std::io::Write as _;
        let start = out.len();
        let mut found = false;
        each_sample(&self.fetch, &self.convs, view, &mut |s| {
            out.truncate(start);
            found = true;
            match s {
                Sample::Str(b) => out.extend_from_slice(b),
                Sample::Int(n) => {
                    let _ = write!(out, "{n}");
                }
                Sample::Ip(ip) => {
                    let _ = write!(out, "{}", converter::unmap(ip));
                }
                Sample::Bool(b) => out.push(if b { b'1' } else { b'0' }),
            }
            false
        });
        found
    }
}

/// The token of `Authorization` credentials (`Bearer TOKEN`) as HAProxy's `get_http_auth`
/// reads them: the scheme ends at the first space and is compared with `strncasecmp` on its
/// own length, so any prefix of `Bearer` longer than `B` (a prefix of `Basic`, tried first)
/// counts (`Bea TOKEN`); spaces before the token are skipped.
fn bearer_credentials(v: &[u8]) -> Option<&[u8]> {
    let sp = v.iter().position(|&c| c == b' ').filter(|&p| p > 0)?;
    let scheme = &v[..sp];
    let prefix_of = |word: &[u8]| {
        scheme.len() <= word.len() && word[..scheme.len()].eq_ignore_ascii_case(scheme)
    };
    if prefix_of(b"basic") || !prefix_of(b"bearer") {
        return None;
    }
    let rest = &v[sp..];
    Some(&rest[rest.iter().position(|&c| c != b' ').unwrap_or(rest.len())..])
}

/// The token of a `Bearer TOKEN` value of a named header (`http_auth_bearer(H)`): the whole
/// scheme must be `Bearer` (any case); anything else gives an empty token, as in HAProxy.
fn bearer_in_header(v: &[u8]) -> &[u8] {
    match v.iter().position(|&c| c == b' ') {
        Some(sp) if v[..sp].eq_ignore_ascii_case(b"bearer") => {
            let rest = &v[sp..];
            &rest[rest.iter().position(|&c| c != b' ').unwrap_or(rest.len())..]
        }
        _ => b"",
    }
}

// ---------------------------------------------------------------------------------------------
// Matchers.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StrKind {
    Exact,
    Beg,
    End,
    Sub,
    Dir,
    Dom,
}

/// Inclusive integer range (`N`, `N:M`, `:M`, `N:`, `gt N`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IntRange {
    min: Option<i64>,
    max: Option<i64>,
}

impl IntRange {
    fn contains(&self, v: i64) -> bool {
        self.min.is_none_or(|m| v >= m) && self.max.is_none_or(|m| v <= m)
    }
}

#[derive(Debug, Clone)]
enum Matcher {
    Found,
    Bool,
    /// Each pattern with whether `-i` applies to it.
    Str {
        kind: StrKind,
        pats: Vec<(Box<[u8]>, bool)>,
        sets: Option<Box<StrSets>>,
    },
    Reg(Vec<Regex>),
    /// `-m bin`: the sample's bytes equal one of the patterns (written in hex).
    Bin(Vec<Vec<u8>>),
    Len(Vec<IntRange>),
    Int(Vec<IntRange>),
    Ip(Vec<IpNet>),
    /// A long list of networks (pattern files), indexed.
    IpIndex(Arc<crate::map::NetIndex>),
}

/// The exact patterns of a long list: case-sensitive ones, and lowercased `-i` ones.
#[derive(Debug, Clone)]
struct StrSets {
    exact: std::collections::HashSet<Box<[u8]>>,
    lower: std::collections::HashSet<Box<[u8]>>,
}

/// Calls `f` on the sample as text (HAProxy casts integers, addresses and booleans to strings
/// for string matches).
fn with_text(s: Sample<'_>, f: impl FnOnce(&[u8]) -> bool) -> bool {
    use std::io::Write as _;
    let mut buf = [0u8; 48];
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    let ok = match s {
        Sample::Str(v) => return f(v),
        Sample::Int(n) => write!(cur, "{n}"),
        Sample::Ip(ip) => write!(cur, "{}", converter::unmap(ip)),
        Sample::Bool(b) => write!(cur, "{}", b as u8),
    };
    let n = cur.position() as usize;
    ok.is_ok() && f(&buf[..n])
}

fn eq_bytes(a: &[u8], b: &[u8], icase: bool) -> bool {
    if icase {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

fn find_from(hay: &[u8], pat: &[u8], from: usize, icase: bool) -> Option<usize> {
    if pat.len() > hay.len() {
        return None;
    }
    (from..=hay.len() - pat.len()).find(|&i| eq_bytes(&hay[i..i + pat.len()], pat, icase))
}

/// HAProxy's word match: `pat` (stripped of delimiters) must appear in `s` bounded by
/// delimiters or the ends of the string.
fn match_word(s: &[u8], pat: &[u8], icase: bool, delims: &[u8]) -> bool {
    let is_delim = |c: &u8| delims.contains(c);
    let start = pat.iter().position(|c| !is_delim(c)).unwrap_or(pat.len());
    let end = pat
        .iter()
        .rposition(|c| !is_delim(c))
        .map_or(start, |p| p + 1);
    let pat = &pat[start..end];
    if pat.is_empty() {
        return false;
    }
    let mut from = 0;
    while let Some(i) = find_from(s, pat, from, icase) {
        let before_ok = i == 0 || is_delim(&s[i - 1]);
        let after = i + pat.len();
        let after_ok = after == s.len() || is_delim(&s[after]);
        if before_ok && after_ok {
            return true;
        }
        from = i + 1;
    }
    false
}

pub(crate) fn str_match(kind: StrKind, s: &[u8], p: &[u8], icase: bool) -> bool {
    match kind {
        StrKind::Exact => eq_bytes(s, p, icase),
        StrKind::Beg => s.len() >= p.len() && eq_bytes(&s[..p.len()], p, icase),
        StrKind::End => s.len() >= p.len() && eq_bytes(&s[s.len() - p.len()..], p, icase),
        StrKind::Sub => p.is_empty() || find_from(s, p, 0, icase).is_some(),
        StrKind::Dir => match_word(s, p, icase, b"/?"),
        StrKind::Dom => match_word(s, p, icase, b"/?.:"),
    }
}

/// Whether `ip` is in `net`, comparing IPv4 samples with IPv6 networks through their
/// v4-mapped form (and v4-mapped samples with IPv4 networks), as HAProxy does.
pub(crate) fn ip_in(net: &IpNet, ip: IpAddr) -> bool {
    match (net.addr, ip) {
        (IpAddr::V6(_), IpAddr::V4(v4)) => net.contains(IpAddr::V6(v4.to_ipv6_mapped())),
        _ => net.contains(ip),
    }
}

impl Matcher {
    fn test(&self, s: Sample<'_>) -> bool {
        match self {
            Matcher::Found => true,
            Matcher::Bool => match s {
                Sample::Bool(b) => b,
                Sample::Int(n) => n != 0,
                _ => false,
            },
            Matcher::Str { kind, pats, sets } => with_text(s, |v| match sets {
                Some(sets) => {
                    sets.exact.contains(v)
                        || (!sets.lower.is_empty() && sets.lower.contains(&*v.to_ascii_lowercase()))
                }
                None => pats.iter().any(|(p, i)| str_match(*kind, v, p, *i)),
            }),
            Matcher::Reg(res) => with_text(s, |v| res.iter().any(|r| r.is_match(v))),
            Matcher::Bin(pats) => with_text(s, |v| pats.iter().any(|p| p == v)),
            Matcher::Len(ranges) => {
                with_text(s, |v| ranges.iter().any(|r| r.contains(v.len() as i64)))
            }
            Matcher::Int(ranges) => {
                sample_int(s).is_some_and(|v| ranges.iter().any(|r| r.contains(v)))
            }
            Matcher::Ip(_) | Matcher::IpIndex(_) => {
                let Some(ip) = sample_ip(s) else {
                    return false;
                };
                match self {
                    Matcher::Ip(nets) => nets.iter().any(|n| ip_in(n, ip)),
                    Matcher::IpIndex(idx) => idx.lookup(ip).is_some(),
                    _ => false,
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing.

/// `sc_X`, `scN_X`, `src_X` with a stick-table `X`: the slot (`scN_`), and what is read.
fn stick_fetch_name(name: &str) -> Option<(Option<usize>, StickWhat)> {
    let (prefix, rest) = name.split_once('_')?;
    let slot = match prefix {
        "sc" | "src" => None,
        p => {
            let n: usize = p.strip_prefix("sc")?.parse().ok()?;
            if n >= crate::stick::SLOTS {
                return None;
            }
            Some(n)
        }
    };
    Some((slot, StickWhat::parse(rest)?))
}

/// Criteria sluice understands (for suggestions).
const CRITERIA: &[&str] = &[
    "always_true",
    "uuid",
    "fc_pp_authority",
    "fc_pp_unique_id",
    "fc_rtt",
    "fc_rttvar",
    "cpu_calls",
    "cpu_ns_avg",
    "cpu_ns_tot",
    "lat_ns_avg",
    "lat_ns_tot",
    "fc_unacked",
    "fc_sacked",
    "fc_retrans",
    "fc_fackets",
    "fc_lost",
    "fc_reordering",
    "var",
    "str",
    "int",
    "bool",
    "ipv4",
    "ipv6",
    "always_false",
    "req.proto_http",
    "path",
    "path_beg",
    "path_end",
    "path_sub",
    "path_reg",
    "path_dir",
    "path_dom",
    "path_len",
    "url",
    "url_beg",
    "url_end",
    "url_sub",
    "url_reg",
    "url_dir",
    "url_dom",
    "url_len",
    "method",
    "src",
    "hdr",
    "hdr_beg",
    "hdr_end",
    "hdr_sub",
    "hdr_reg",
    "hdr_dir",
    "hdr_dom",
    "hdr_len",
    "hdr_cnt",
    "hdr_val",
    "hdr_ip",
    "req.hdr",
    "req.hdr_cnt",
    "req.hdr_val",
    "req.hdr_ip",
    "fhdr",
    "fhdr_cnt",
    "req.fhdr",
    "req.fhdr_cnt",
    "ssl_fc",
    "ssl_fc_sni",
    "ssl_fc_sni_end",
    "ssl_fc_sni_reg",
    "ssl_fc_protocol",
    "ssl_fc_cipher",
    "ssl_fc_alpn",
    "ssl_c_used",
    "ssl_fc_has_crt",
    "ssl_fc_has_sni",
    "ssl_c_verify",
    "ssl_c_s_dn",
    "ssl_c_i_dn",
    "req.len",
    "req_len",
    "req.ssl_hello_type",
    "req_ssl_hello_type",
    "req.ssl_sni",
    "req_ssl_sni",
    "req.ssl_alpn",
    "unique-id",
    "http_auth",
    "http_auth_group",
    "http_auth_bearer",
    "src_port",
    "dst",
    "dst_port",
    "fe_name",
    "be_name",
    "base",
    "base_beg",
    "base_end",
    "base_sub",
    "base_reg",
    "base_dir",
    "base_dom",
    "base_len",
    "query",
    "capture.req.uri",
    "capture.req.method",
    "capture.req.hdr",
    "capture.res.hdr",
    "url_ip",
    "url_port",
    "url_param",
    "urlp",
    "cook",
    "req.cook",
    "status",
    "res.cache_hit",
    "res.cache_name",
    "req.ver",
    "req_ver",
    "res.ver",
    "resp_ver",
    "req.hdrs",
    "req.hdrs_bin",
    "res.hdrs",
    "res.hdrs_bin",
    "pathq",
    "req.body",
    "req.body_len",
    "req.body_size",
    "res.body",
    "res.body_len",
    "res.body_size",
    "res.hdr",
    "res.cook",
    "scook",
    "res.fhdr",
    "res.hdr_cnt",
    "res.fhdr_cnt",
    "res.hdr_val",
    "res.hdr_ip",
    "shdr",
    "shdr_beg",
    "shdr_end",
    "shdr_sub",
    "shdr_reg",
    "shdr_dir",
    "shdr_dom",
    "shdr_len",
    "shdr_cnt",
    "shdr_val",
    "sc_tracked",
    "sc_conn_cur",
    "sc_conn_rate",
    "sc_http_req_rate",
    "sc_http_err_rate",
    "sc_get_gpc0",
    "sc_inc_gpc0",
    "sc_get_gpt0",
    "sc0_conn_cur",
    "sc0_conn_rate",
    "sc0_http_req_rate",
    "sc0_get_gpc0",
    "src_conn_cur",
    "src_conn_rate",
    "src_conn_cnt",
    "src_http_req_rate",
    "src_http_err_rate",
    "src_get_gpc0",
    "src_inc_gpc0",
    "table_cnt",
    "table_avl",
];

/// Sample fetches HAProxy has that sluice does not evaluate (yet).
const UNSUPPORTED_FETCHES: &[&str] = &[
    "base32",
    "cook_cnt",
    "cook_val",
    "dst_conn",
    "http_first_req",
    "req.cook_cnt",
    "res.payload",
    "req.rdp_cookie",
    "req.ssl_ver",
    "urlp_val",
];

fn fetch_name_ok(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-')
}

/// Splits `name(args)` → (name, Some(args)), rejecting converters (`,lower`).
fn split_criterion<'a>(word: &'a str, what: &str) -> Result<(&'a str, Option<&'a str>), String> {
    let name_end = word
        .bytes()
        .position(|c| !fetch_name_ok(c))
        .unwrap_or(word.len());
    let name = &word[..name_end];
    let rest = &word[name_end..];
    let (args, after) = if let Some(r) = rest.strip_prefix('(') {
        let Some(close) = r.find(')') else {
            return Err(format!("missing closing ')' in {what} '{word}'"));
        };
        (Some(&r[..close]), &r[close + 1..])
    } else {
        (None, rest)
    };
    if let Some(conv) = after.strip_prefix(',') {
        return Err(format!(
            "converters are not supported by sluice (in {what} '{word}', ',{conv}')"
        ));
    }
    if !after.is_empty() || name.is_empty() {
        return Err(format!("invalid {what} '{word}'"));
    }
    Ok((name, args))
}

/// Resolves a criterion word into a fetch and its default matching method.
/// Returns the fetch and the name of its default matching method.
fn parse_fetch(word: &str, what: &str) -> Result<(Fetch, &'static str), String> {
    let (name, args) = split_criterion(word, what)?;
    if let Some(lua) = name.strip_prefix("lua.") {
        if !crate::lua::has_fetch(lua) {
            return Err(format!(
                "unknown {what} '{name}' (no Lua script registers a fetch '{lua}' with \
                 core.register_fetches)"
            ));
        }
        let args = args
            .filter(|a| !a.is_empty())
            .map(|a| a.split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default();
        return Ok((
            Fetch::Lua {
                name: lua.into(),
                args,
            },
            "str",
        ));
    }
    let no_args = |f: Fetch| -> Result<Fetch, String> {
        if args.is_some_and(|a| !a.is_empty()) {
            Err(format!("{what} '{name}' takes no argument"))
        } else {
            Ok(f)
        }
    };
    let hdr_name = || -> Result<Box<[u8]>, String> {
        let a = args.unwrap_or("").trim();
        let a = a.split_once(',').map_or(a, |(n, _)| n.trim());
        if a.is_empty() {
            return Err(format!(
                "{what} '{name}' requires a header name, as in '{name}(host)'"
            ));
        }
        Ok(a.to_ascii_lowercase().into_bytes().into_boxed_slice())
    };
    // `hdr(NAME,OCC)`: the occurrence, 0 (all) without one.
    let hdr_occ = || -> Result<i32, String> {
        match args.and_then(|a| a.split_once(',')) {
            None => Ok(0),
            Some((_, o)) => o.trim().parse::<i32>().map_err(|_| {
                format!(
                    "{what} '{name}': the occurrence '{}' is not an integer (in '{word}')",
                    o.trim()
                )
            }),
        }
    };
    // A header name alone, for the fetches that take no occurrence.
    let hdr_only = || -> Result<Box<[u8]>, String> {
        if args.is_some_and(|a| a.contains(',')) {
            return Err(format!(
                "{what} '{name}' takes a header name only (in '{word}')"
            ));
        }
        hdr_name()
    };
    // A case-sensitive name argument (`url_param(id)`, `cook(SID)`).
    let plain_arg = || -> Result<Box<[u8]>, String> {
        match args.map(str::trim) {
            Some(a) if !a.is_empty() && !a.contains(',') => Ok(a.as_bytes().into()),
            Some(a) if a.contains(',') => Err(format!(
                "the optional arguments of '{name}' are not supported by sluice (in '{word}')"
            )),
            _ => Err(format!(
                "{what} '{name}' requires a name, as in '{name}(id)'"
            )),
        }
    };
    // Suffixes on path/url/hdr.
    let (base, suffix) = match name.rsplit_once('_') {
        Some((b, s))
            if matches!(
                b,
                "path"
                    | "url"
                    | "base"
                    | "hdr"
                    | "req.hdr"
                    | "shdr"
                    | "fhdr"
                    | "req.fhdr"
                    | "ssl_fc_sni"
                    | "cook"
                    | "req.cook"
                    | "url_param"
                    | "urlp"
            ) && matches!(s, "beg" | "end" | "sub" | "reg" | "dir" | "dom" | "len") =>
        {
            (b, Some(s))
        }
        _ => (name, None),
    };
    if suffix.is_some() && base.starts_with("req.") {
        return Err(format!(
            "unknown {what} '{name}' (did you mean '{}'?)",
            &name[4..]
        ));
    }
    let default_m: &'static str = match suffix {
        Some("reg") => "reg",
        Some("len") => "len",
        Some("beg") => "beg",
        Some("end") => "end",
        Some("sub") => "sub",
        Some("dir") => "dir",
        Some("dom") => "dom",
        _ => "",
    };
    let fetch = match base {
        "always_true" => no_args(Fetch::AlwaysTrue)?,
        "var" => {
            let a = args.unwrap_or("");
            let (n, d) = match a.split_once(',') {
                Some((n, d)) => (n, Some(d.as_bytes().into())),
                None => (a, None),
            };
            Fetch::Var {
                name: crate::vars::VarName::parse(n.trim())?,
                default: d,
            }
        }
        "uuid" => match args.map(str::trim) {
            None | Some("") | Some("4") => Fetch::Uuid,
            Some(v) => {
                return Err(format!(
                    "{what} 'uuid': only version 4 is supported (got '{v}')"
                ));
            }
        },
        "str" => Fetch::Const(converter::Val::Str(args.unwrap_or("").as_bytes().to_vec())),
        "int" | "bool" | "ipv4" | "ipv6" => {
            let a = args.unwrap_or("").trim();
            let v = match base {
                "int" => a.parse().ok().map(converter::Val::Int),
                "bool" => match a {
                    "1" | "true" => Some(converter::Val::Bool(true)),
                    "0" | "false" => Some(converter::Val::Bool(false)),
                    _ => None,
                },
                "ipv4" => a.parse::<std::net::Ipv4Addr>().ok().map(|ip| ip.into()),
                _ => a.parse::<std::net::Ipv6Addr>().ok().map(|ip| ip.into()),
            };
            Fetch::Const(v.ok_or_else(|| format!("{what} '{base}': invalid argument '{a}'"))?)
        }
        "always_false" => no_args(Fetch::AlwaysFalse)?,
        "req.proto_http" | "req_proto_http" => no_args(Fetch::ProtoHttp)?,
        "path" => no_args(Fetch::Path)?,
        "url" => no_args(Fetch::Url)?,
        "method" => no_args(Fetch::Method)?,
        "src" => no_args(Fetch::Src)?,
        "src_port" => no_args(Fetch::SrcPort)?,
        "dst" | "dst_port" => {
            LOCAL_ADDR_USED.store(true, Relaxed);
            no_args(if base == "dst" {
                Fetch::Dst
            } else {
                Fetch::DstPort
            })?
        }
        "fe_name" => no_args(Fetch::FeName)?,
        n if StateFetch::NAMES.contains(&n) => Fetch::State(StateFetch::parse(n, args, what)?),
        "be_name" => no_args(Fetch::BeName)?,
        "base" => no_args(Fetch::Base)?,
        "query" => no_args(Fetch::Query)?,
        "capture.req.hdr" | "capture.res.hdr" => {
            if !RESPONSE_FORMATS.with(std::cell::Cell::get) {
                return Err(format!(
                    "{what} '{name}' is supported by sluice in 'http-response' rules only (the \
                     access log has '%hr' and '%hs')"
                ));
            }
            let idx = args
                .map(str::trim)
                .and_then(|a| a.parse::<usize>().ok())
                .ok_or_else(|| format!("{what} '{name}' needs a capture slot number"))?;
            Fetch::Capture {
                req: name == "capture.req.hdr",
                idx,
            }
        }
        "capture.req.uri" => no_args(Fetch::Url)?,
        "capture.req.method" => no_args(Fetch::Method)?,
        "url_ip" => no_args(Fetch::UrlIp)?,
        "url_port" => no_args(Fetch::UrlPort)?,
        "url_param" | "urlp" => Fetch::UrlParam { name: plain_arg()? },
        "cook" | "req.cook" => Fetch::Cook { name: plain_arg()? },
        "hdr" | "req.hdr" => Fetch::Hdr {
            name: hdr_name()?,
            split: true,
            occ: hdr_occ()?,
        },
        "fhdr" | "req.fhdr" => Fetch::Hdr {
            name: hdr_name()?,
            split: false,
            occ: hdr_occ()?,
        },
        "hdr_cnt" | "req.hdr_cnt" => Fetch::HdrCnt {
            name: hdr_only()?,
            split: true,
        },
        "fhdr_cnt" | "req.fhdr_cnt" => Fetch::HdrCnt {
            name: hdr_only()?,
            split: false,
        },
        "hdr_val" | "req.hdr_val" => Fetch::HdrVal {
            name: hdr_name()?,
            occ: hdr_occ()?,
        },
        "hdr_ip" | "req.hdr_ip" => Fetch::HdrIp {
            name: hdr_name()?,
            occ: hdr_occ()?,
        },
        "status" => no_args(Fetch::Status)?,
        "res.cache_hit" => no_args(Fetch::CacheHit)?,
        "res.cache_name" => no_args(Fetch::CacheName)?,
        "req.ver" | "req_ver" => no_args(Fetch::Ver)?,
        "res.ver" | "resp_ver" => no_args(Fetch::Res(Box::new(Fetch::Ver)))?,
        "req.hdrs" => no_args(Fetch::Hdrs)?,
        "req.hdrs_bin" => no_args(Fetch::HdrsBin)?,
        "res.hdrs" => no_args(Fetch::Res(Box::new(Fetch::Hdrs)))?,
        "res.hdrs_bin" => no_args(Fetch::Res(Box::new(Fetch::HdrsBin)))?,
        "pathq" => no_args(Fetch::PathQ)?,
        "req.body" => no_args(Fetch::Body)?,
        "req.body_len" => no_args(Fetch::BodyLen)?,
        "req.body_size" => no_args(Fetch::BodySize)?,
        "res.body" => no_args(Fetch::Res(Box::new(Fetch::Body)))?,
        "res.body_len" => no_args(Fetch::Res(Box::new(Fetch::BodyLen)))?,
        "res.body_size" => no_args(Fetch::Res(Box::new(Fetch::BodySize)))?,
        "res.hdr" | "shdr" => Fetch::Res(Box::new(Fetch::Hdr {
            name: hdr_name()?,
            split: true,
            occ: hdr_occ()?,
        })),
        "res.cook" | "scook" => Fetch::Res(Box::new(Fetch::SetCook { name: plain_arg()? })),
        "res.fhdr" => Fetch::Res(Box::new(Fetch::Hdr {
            name: hdr_name()?,
            split: false,
            occ: hdr_occ()?,
        })),
        "res.hdr_cnt" | "shdr_cnt" => Fetch::Res(Box::new(Fetch::HdrCnt {
            name: hdr_only()?,
            split: true,
        })),
        "res.fhdr_cnt" => Fetch::Res(Box::new(Fetch::HdrCnt {
            name: hdr_only()?,
            split: false,
        })),
        "res.hdr_val" | "shdr_val" => Fetch::Res(Box::new(Fetch::HdrVal {
            name: hdr_name()?,
            occ: hdr_occ()?,
        })),
        "res.hdr_ip" => Fetch::Res(Box::new(Fetch::HdrIp {
            name: hdr_name()?,
            occ: hdr_occ()?,
        })),
        "ssl_fc" => no_args(Fetch::SslFc)?,
        "ssl_fc_sni" => no_args(Fetch::SslFcSni)?,
        "ssl_fc_protocol" => no_args(Fetch::SslFcProtocol)?,
        "ssl_fc_cipher" => no_args(Fetch::SslFcCipher)?,
        "ssl_fc_alpn" => no_args(Fetch::SslFcAlpn)?,
        // `ssl_fc_has_crt`: the client sent a certificate on this connection; a resumed
        // session counts its first handshake's (as `ssl_c_used` does).
        "ssl_c_used" | "ssl_fc_has_crt" => no_args(Fetch::SslCUsed)?,
        "ssl_fc_has_sni" => no_args(Fetch::SslFcHasSni)?,
        "ssl_c_verify" => no_args(Fetch::SslCVerify)?,
        "ssl_c_s_dn" | "ssl_c_i_dn" if args.is_some_and(|a| !a.trim().is_empty()) => {
            let a = args.unwrap_or("");
            let mut parts = a.split(',').map(str::trim);
            let entry = parts.next().unwrap_or("");
            let occ = match parts.next() {
                None | Some("") => 1,
                Some(o) => o
                    .parse::<i64>()
                    .map_err(|_| format!("{what} '{base}': '{o}' is not an occurrence number"))?,
            };
            if parts.next().is_some() || entry.is_empty() {
                return Err(format!(
                    "{what} '{base}({a})': only ENTRY[,OCC] is supported by sluice (no format \
                     argument)"
                ));
            }
            Fetch::SslCDnEntry {
                issuer: base == "ssl_c_i_dn",
                entry: entry.into(),
                occ,
            }
        }
        "ssl_c_s_dn" => no_args(Fetch::SslCSDn)?,
        "ssl_c_i_dn" => no_args(Fetch::SslCIDn)?,
        "req.len" | "req_len" => no_args(Fetch::ReqLen)?,
        "req.payload" => {
            let a = args.unwrap_or("");
            let bad = || {
                format!("{what} 'req.payload' expects (OFFSET,LENGTH), as in 'req.payload(0,1)'")
            };
            let (o, l) = a.split_once(',').ok_or_else(bad)?;
            // Bounded by the largest buffer there is to read from.
            let num = |s: &str| s.trim().parse::<usize>().ok().filter(|n| *n <= 1 << 24);
            Fetch::ReqPayload {
                off: num(o).ok_or_else(bad)?,
                len: num(l).ok_or_else(bad)?,
            }
        }
        "req.ssl_hello_type" | "req_ssl_hello_type" => no_args(Fetch::ReqSslHelloType)?,
        "req.ssl_sni" | "req_ssl_sni" => no_args(Fetch::ReqSslSni)?,
        "req.ssl_alpn" => no_args(Fetch::ReqSslAlpn)?,
        "unique-id" => no_args(Fetch::UniqueId)?,
        "fc_pp_authority" => no_args(Fetch::PpTlv(0x02))?,
        "fc_pp_unique_id" => no_args(Fetch::PpTlv(0x05))?,
        "fc_rtt" | "fc_rttvar" => {
            let us = match args.map(str::trim) {
                None | Some("" | "ms") => false,
                Some("us") => true,
                Some(u) => return Err(format!("{what} '{name}': unknown unit '{u}' (ms or us)")),
            };
            TCP_INFO_USED.store(true, std::sync::atomic::Ordering::Relaxed);
            Fetch::TcpInfo(if name == "fc_rtt" {
                TcpInfoField::Rtt(us)
            } else {
                TcpInfoField::RttVar(us)
            })
        }
        "fc_unacked" | "fc_sacked" | "fc_retrans" | "fc_fackets" | "fc_lost" | "fc_reordering" => {
            TCP_INFO_USED.store(true, std::sync::atomic::Ordering::Relaxed);
            no_args(Fetch::TcpInfo(match name {
                "fc_unacked" => TcpInfoField::Unacked,
                "fc_sacked" => TcpInfoField::Sacked,
                "fc_retrans" => TcpInfoField::Retrans,
                "fc_fackets" => TcpInfoField::Fackets,
                "fc_lost" => TcpInfoField::Lost,
                _ => TcpInfoField::Reordering,
            }))?
        }
        "cpu_calls" | "cpu_ns_avg" | "cpu_ns_tot" | "lat_ns_avg" | "lat_ns_tot" => {
            use std::sync::atomic::Ordering::Relaxed;
            crate::stream::PROFILE_USED.store(true, Relaxed);
            if name.starts_with("cpu_ns") {
                crate::stream::PROFILE_TIMED.store(true, Relaxed);
            }
            no_args(Fetch::Profile(match name {
                "cpu_calls" => ProfileField::Calls,
                "cpu_ns_avg" => ProfileField::CpuAvg,
                "cpu_ns_tot" => ProfileField::CpuTot,
                _ => ProfileField::Lat,
            }))?
        }
        "table_avl" | "table_cnt" => {
            let t = match args.map(str::trim).filter(|a| !a.is_empty()) {
                Some(a) => crate::stick::reference(a),
                None => crate::stick::current()?,
            };
            if base == "table_avl" {
                Fetch::TableAvl(t)
            } else {
                Fetch::TableCnt(t)
            }
        }
        b if stick_fetch_name(b).is_some() => {
            let (at, op) = stick_fetch_name(b).expect("checked by the guard");
            let mut a: Vec<&str> = args
                .map(|a| a.split(',').map(str::trim).collect())
                .unwrap_or_default();
            if a.len() == 1 && a[0].is_empty() {
                a.clear();
            }
            let at = match at {
                Some(n) => StickAt::Sc(n),
                None if b.starts_with("sc_") => {
                    let Some(n) = a.first() else {
                        return Err(format!(
                            "{what} '{name}' requires a stick counter number, as in '{name}(0)'"
                        ));
                    };
                    let n = match n.parse::<usize>() {
                        Ok(n) if n < crate::stick::SLOTS => n,
                        _ => {
                            return Err(format!(
                                "{what} '{name}': invalid stick counter '{n}' (expected 0 to {})",
                                crate::stick::SLOTS - 1
                            ));
                        }
                    };
                    a.remove(0);
                    StickAt::Sc(n)
                }
                None => StickAt::Src,
            };
            if a.len() > 1 {
                return Err(format!("{what} '{name}': too many arguments in '{word}'"));
            }
            let table = match (a.first(), at) {
                (Some(t), _) => Some(crate::stick::reference(t)),
                (None, StickAt::Src) => Some(crate::stick::current()?),
                (None, StickAt::Sc(_)) => None,
            };
            let (_, w) = b.split_once('_').expect("stick fetch names have a prefix");
            if matches!(at, StickAt::Src) && w == "tracked" {
                return Err(format!(
                    "unknown {what} '{name}' (did you mean 'sc_tracked'?)"
                ));
            }
            if matches!(at, StickAt::Sc(_)) && w == "updt_conn_cnt" {
                return Err(format!(
                    "unknown {what} '{name}' (it exists as 'src_updt_conn_cnt')"
                ));
            }
            Fetch::Stick {
                at,
                what: op,
                table,
            }
        }
        "http_auth_bearer" => Fetch::HttpAuthBearer(args.map(|a| {
            a.trim()
                .to_ascii_lowercase()
                .into_bytes()
                .into_boxed_slice()
        })),
        "http_auth" | "http_auth_group" => {
            let l = args
                .map(str::trim)
                .filter(|a| !a.is_empty() && !a.contains(','));
            let Some(l) = l else {
                return Err(format!(
                    "{what} '{name}' requires a userlist name, as in '{name}(admins)'"
                ));
            };
            let l = crate::userlist::reference(l);
            if name == "http_auth" {
                Fetch::HttpAuth(l)
            } else {
                Fetch::HttpAuthGroup(l)
            }
        }
        _ => {
            if UNSUPPORTED_FETCHES.contains(&name)
                || UNSUPPORTED_FETCHES
                    .iter()
                    .any(|f| name.starts_with(f) && name[f.len()..].starts_with('_'))
            {
                return Err(format!("{what} '{name}' is not supported by sluice"));
            }
            return Err(format!(
                "unknown {what} '{name}'{}",
                did_you_mean(name, CRITERIA.iter().copied())
            ));
        }
    };
    let default_m = if default_m.is_empty() {
        match fetch.out_type() {
            SmpType::Str => "str",
            SmpType::Int => "int",
            SmpType::Ip => "ip",
            SmpType::Bool => "bool",
        }
    } else {
        default_m
    };
    Ok((fetch, default_m))
}

/// A `-m bin` pattern: an even number of hex digits.
fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let bad = || format!("'{s}' is not a valid hex string (two hex digits per byte)");
    if !s.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| bad()))
        .collect()
}

fn parse_int_ranges(values: &[String]) -> Result<Vec<IntRange>, String> {
    let num = |s: &str| -> Result<i64, String> {
        s.parse::<i64>()
            .map_err(|_| format!("'{s}' is not a valid integer pattern"))
    };
    let mut out = Vec::new();
    let mut op: Option<&str> = None;
    for v in values {
        let v = v.as_str();
        if matches!(v, "eq" | "ge" | "gt" | "le" | "lt") {
            if op.is_some() {
                return Err(format!("unexpected operator '{v}' after another operator"));
            }
            op = Some(v);
            continue;
        }
        let r = match op.take() {
            Some(o) => {
                let n = num(v)?;
                match o {
                    "eq" => IntRange {
                        min: Some(n),
                        max: Some(n),
                    },
                    "ge" => IntRange {
                        min: Some(n),
                        max: None,
                    },
                    "gt" => IntRange {
                        min: Some(n.saturating_add(1)),
                        max: None,
                    },
                    "le" => IntRange {
                        min: None,
                        max: Some(n),
                    },
                    _ => IntRange {
                        min: None,
                        max: Some(n.saturating_sub(1)),
                    },
                }
            }
            None => match v.split_once(':') {
                Some((a, b)) => IntRange {
                    min: if a.is_empty() { None } else { Some(num(a)?) },
                    max: if b.is_empty() { None } else { Some(num(b)?) },
                },
                None => {
                    let n = num(v)?;
                    IntRange {
                        min: Some(n),
                        max: Some(n),
                    }
                }
            },
        };
        out.push(r);
    }
    if let Some(o) = op {
        return Err(format!("missing value after operator '{o}'"));
    }
    Ok(out)
}

/// Parses an IPv4/IPv6 address or network (`10.0.0.0/8`, `10.0.0.0/255.0.0.0`, `::1`).
pub(crate) fn parse_ipnet(s: &str) -> Result<IpNet, String> {
    let bad = || format!("'{s}' is not a valid IPv4 or IPv6 address or network");
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => max,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= max => n,
            Ok(_) => return Err(bad()),
            Err(_) => {
                // Dotted IPv4 mask: must be contiguous.
                let m: std::net::Ipv4Addr = p.parse().map_err(|_| bad())?;
                if !addr.is_ipv4() {
                    return Err(bad());
                }
                let m = u32::from(m);
                let ones = m.leading_ones();
                if m.checked_shl(ones).unwrap_or(0) != 0 {
                    return Err(format!("'{s}' has a non-contiguous network mask"));
                }
                ones as u8
            }
        },
    };
    Ok(IpNet { addr, prefix })
}

/// Parses `CRITERION [FLAGS] [VALUES...]`.
pub(crate) fn parse_expr(words: &[String]) -> Result<Expr, String> {
    let Some(crit) = words.first() else {
        return Err("missing ACL criterion".into());
    };
    let (fetch, default_m, convs, ty) = parse_chain(crit, "ACL criterion")?;
    let mut icase = false;
    let mut method: Option<&str> = None;
    // `-f` files, each with the `-i` in force when it was named.
    let mut files: Vec<(Arc<crate::map::PatRef>, bool)> = Vec::new();
    let mut as_map = false;
    let mut had_file = false;
    let mut i = 1;
    while i < words.len() && words[i].starts_with('-') {
        match words[i].as_str() {
            "-i" => icase = true,
            "-n" => {}
            "-M" => as_map = true,
            "-m" => {
                let Some(m) = words.get(i + 1) else {
                    return Err("missing matching method after '-m'".into());
                };
                method = Some(m.as_str());
                i += 1;
            }
            "-f" => {
                let Some(path) = words.get(i + 1) else {
                    return Err("missing file name after '-f'".into());
                };
                files.push((crate::map::load(path, as_map, "acl")?, icase));
                had_file = true;
                i += 1;
            }
            "--" => {
                i += 1;
                break;
            }
            "-u" => {
                return Err(
                    "ACL flag '-u' is not supported by sluice (inline patterns cannot be \
                     changed at runtime; pattern files can, by path: put the patterns in a \
                     file with '-f')"
                        .into(),
                );
            }
            f => {
                return Err(format!(
                    "'{f}' is not a valid ACL option; use '--' before any pattern beginning \
                     with a '-'"
                ));
            }
        }
        i += 1;
    }
    // A pattern file, even an empty one, says the patterns are meant to be there.
    let explicit_end = (i > 1 && words[i - 1] == "--") || had_file;
    let inline = &words[i..];
    let m = method.unwrap_or(default_m);
    // Files are looked up live with the methods pattern files have; the others (`len`,
    // `bin`) take their patterns as they are now.
    let file_match = match m {
        "str" => Some(crate::map::Match::Str),
        "beg" => Some(crate::map::Match::Beg),
        "end" => Some(crate::map::Match::End),
        "sub" => Some(crate::map::Match::Sub),
        "dir" => Some(crate::map::Match::Dir),
        "dom" => Some(crate::map::Match::Dom),
        "reg" => Some(crate::map::Match::Reg),
        "int" => Some(crate::map::Match::Int),
        "ip" => Some(crate::map::Match::Ip),
        _ => None,
    };
    let mut file_pats: Vec<(String, bool)> = Vec::new();
    if let Some(fm) = file_match {
        for (f, icase) in &files {
            f.prepare(fm, *icase)?;
        }
    } else {
        for (f, icase) in std::mem::take(&mut files) {
            file_pats.extend(f.load().entries.iter().map(|e| (e.key.to_string(), icase)));
        }
    }
    let values: Vec<(String, bool)> = file_pats
        .into_iter()
        .chain(inline.iter().map(|v| (v.clone(), icase)))
        .collect();
    let values = &values[..];
    let compatible = match m {
        // HAProxy casts the sample to what the method compares, which exists for all but
        // booleans to addresses.
        "found" | "str" | "beg" | "end" | "sub" | "dir" | "dom" | "reg" | "len" | "int"
        | "bool" => true,
        "ip" => ty != SmpType::Bool,
        "bin" => true,
        "end_bin" => {
            return Err(format!("matching method '{m}' is not supported by sluice"));
        }
        _ => {
            return Err(format!(
                "unknown matching method '{m}'{}",
                did_you_mean(
                    m,
                    [
                        "found", "bool", "int", "ip", "str", "beg", "end", "sub", "reg", "dir",
                        "dom", "len", "bin"
                    ]
                )
            ));
        }
    };
    if !compatible {
        let tn = match ty {
            SmpType::Str => "string",
            SmpType::Int => "integer",
            SmpType::Ip => "address",
            SmpType::Bool => "boolean",
        };
        return Err(format!(
            "matching method '{m}' cannot be used with criterion '{crit}' (its samples are {tn}s)"
        ));
    }
    let needs_values = !matches!(m, "found" | "bool");
    if !needs_values && let Some((f, _)) = files.first() {
        return Err(format!(
            "matching method '{m}' takes no pattern, but file '{}' was given",
            f.path
        ));
    }
    // HAProxy warns and goes on (an unset `${VAR}` leaves no pattern, for example).
    if needs_values && values.is_empty() && files.is_empty() && !explicit_end {
        crate::config::parser::warn(format!(
            "no pattern to match against was provided for '{crit}', so this ACL will never \
             match; use '-m found' to test for existence, or '--' if this is intended"
        ));
    }
    if !needs_values && !values.is_empty() {
        return Err(format!(
            "matching method '{m}' takes no pattern, but '{}' was given",
            values[0].0
        ));
    }
    let texts: Vec<String> = values.iter().map(|v| v.0.clone()).collect();
    let matcher = match m {
        "found" => Matcher::Found,
        "bool" => Matcher::Bool,
        "int" => Matcher::Int(parse_int_ranges(&texts)?),
        "bin" => Matcher::Bin(
            texts
                .iter()
                .map(|t| parse_hex(t))
                .collect::<Result<_, _>>()?,
        ),
        "len" => Matcher::Len(parse_int_ranges(&texts)?),
        "ip" => {
            let nets: Vec<IpNet> = texts
                .iter()
                .map(|v| parse_ipnet(v))
                .collect::<Result<_, _>>()?;
            if nets.len() > 8 {
                Matcher::IpIndex(Arc::new(crate::map::NetIndex::build(
                    nets.into_iter().map(|n| (n, 0)),
                )))
            } else {
                Matcher::Ip(nets)
            }
        }
        "reg" => {
            let mut res = Vec::with_capacity(values.len());
            for (v, icase) in values {
                let r = RegexBuilder::new(v)
                    .case_insensitive(*icase)
                    .build()
                    .map_err(|e| format!("invalid regex '{v}': {}", first_line(&e.to_string())))?;
                res.push(r);
            }
            Matcher::Reg(res)
        }
        _ => {
            let kind = match m {
                "beg" => StrKind::Beg,
                "end" => StrKind::End,
                "sub" => StrKind::Sub,
                "dir" => StrKind::Dir,
                "dom" => StrKind::Dom,
                _ => StrKind::Exact,
            };
            let pats: Vec<(Box<[u8]>, bool)> = values
                .iter()
                .map(|(v, i)| (v.as_bytes().into(), *i))
                .collect();
            // Long exact lists (pattern files) are looked up in sets, as HAProxy's trees.
            let sets = (kind == StrKind::Exact && pats.len() > 8).then(|| {
                let mut exact = std::collections::HashSet::new();
                let mut lower = std::collections::HashSet::new();
                for (p, i) in &pats {
                    if *i {
                        lower.insert(p.to_ascii_lowercase().into_boxed_slice());
                    } else {
                        exact.insert(p.clone());
                    }
                }
                Box::new(StrSets { exact, lower })
            });
            Matcher::Str { kind, pats, sets }
        }
    };
    Ok(Expr {
        fetch,
        convs,
        matcher,
        files: files.into_boxed_slice(),
        file_match: file_match.unwrap_or(crate::map::Match::Str),
    })
}

fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Predefined ACLs (HAProxy section 7.4): `Some(Err)` for those sluice cannot evaluate.
fn predefined(name: &str) -> Option<Result<Expr, String>> {
    let mk = |words: &[&str]| {
        let w: Vec<String> = words.iter().map(|s| s.to_string()).collect();
        parse_expr(&w)
    };
    Some(match name {
        "TRUE" => mk(&["always_true"]),
        "FALSE" => mk(&["always_false"]),
        "HTTP" => mk(&["req.proto_http"]),
        "HTTP_CONTENT" => mk(&["hdr_val(content-length)", "gt", "0"]),
        "HTTP_URL_ABS" => mk(&["url_reg", "^[^/:]*://"]),
        "HTTP_URL_SLASH" => mk(&["url_beg", "/"]),
        "HTTP_URL_STAR" => mk(&["url", "*"]),
        "LOCALHOST" => mk(&["src", "127.0.0.1/8", "::1"]),
        "METH_CONNECT" => mk(&["method", "CONNECT"]),
        "METH_DELETE" => mk(&["method", "DELETE"]),
        "METH_GET" => mk(&["method", "GET", "HEAD"]),
        "METH_HEAD" => mk(&["method", "HEAD"]),
        "METH_OPTIONS" => mk(&["method", "OPTIONS"]),
        "METH_POST" => mk(&["method", "POST"]),
        "METH_PUT" => mk(&["method", "PUT"]),
        "METH_TRACE" => mk(&["method", "TRACE"]),
        "HTTP_1.0" | "HTTP_1.1" | "HTTP_2.0" | "HTTP_3.0" | "RDP_COOKIE" | "REQ_CONTENT"
        | "WAIT_END" => Err(format!(
            "predefined ACL '{name}' is not supported by sluice"
        )),
        _ => return None,
    })
}

const PREDEFINED: &[&str] = &[
    "TRUE",
    "FALSE",
    "HTTP",
    "HTTP_1.0",
    "HTTP_1.1",
    "HTTP_2.0",
    "HTTP_3.0",
    "HTTP_CONTENT",
    "HTTP_URL_ABS",
    "HTTP_URL_SLASH",
    "HTTP_URL_STAR",
    "LOCALHOST",
    "METH_CONNECT",
    "METH_DELETE",
    "METH_GET",
    "METH_HEAD",
    "METH_OPTIONS",
    "METH_POST",
    "METH_PUT",
    "METH_TRACE",
    "RDP_COOKIE",
    "REQ_CONTENT",
    "WAIT_END",
];

fn valid_acl_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b':'))
}

/// The named ACLs of one proxy section. Repeating a name ORs the expressions; rules keep
/// referring to the final definition, as in HAProxy.
#[derive(Debug, Clone, Default)]
pub(crate) struct AclSet {
    map: HashMap<String, Arc<Acl>>,
}

impl AclSet {
    pub(crate) fn new() -> AclSet {
        AclSet::default()
    }

    /// Parses the arguments of an `acl` line: `NAME CRITERION [FLAGS] [VALUES...]`.
    pub(crate) fn add(&mut self, words: &[String]) -> Result<(), String> {
        let Some(name) = words.first() else {
            return Err("missing ACL name".into());
        };
        if !valid_acl_name(name) {
            return Err(format!(
                "invalid ACL name '{name}' (only letters, digits, '_', '.', '-' and ':' are \
                 allowed)"
            ));
        }
        if words.len() < 2 {
            return Err(format!("missing criterion for ACL '{name}'"));
        }
        let expr = parse_expr(&words[1..])?;
        let acl = self.map.entry(name.clone()).or_insert_with(|| {
            Arc::new(Acl {
                name: name.clone(),
                exprs: Vec::new(),
            })
        });
        Arc::make_mut(acl).exprs.push(expr);
        Ok(())
    }

    fn lookup(&self, name: &str) -> Result<Arc<Acl>, String> {
        if let Some(a) = self.map.get(name) {
            return Ok(a.clone());
        }
        match predefined(name) {
            Some(Ok(expr)) => Ok(Arc::new(Acl {
                name: name.to_string(),
                exprs: vec![expr],
            })),
            Some(Err(e)) => Err(e),
            None => {
                let cands = self
                    .map
                    .keys()
                    .map(String::as_str)
                    .chain(PREDEFINED.iter().copied());
                Err(format!("unknown ACL '{name}'{}", did_you_mean(name, cands)))
            }
        }
    }
}

/// Parses `if|unless TERMS...` (`words[0]` is `if` or `unless`) against the ACLs declared so
/// far.
pub(crate) fn parse_cond(words: &[String], acls: &AclSet) -> Result<Cond, String> {
    let unless = match words.first().map(String::as_str) {
        Some("if") => false,
        Some("unless") => true,
        Some(w) => return Err(format!("expected 'if' or 'unless', got '{w}'")),
        None => return Err("missing 'if' or 'unless'".into()),
    };
    let kw = &words[0];
    let rest = &words[1..];
    if rest.is_empty() {
        return Err(format!("missing condition after '{kw}'"));
    }
    let mut groups: Vec<Vec<Term>> = vec![Vec::new()];
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i].as_str();
        if w == "||" || w.eq_ignore_ascii_case("or") {
            if groups.last().is_some_and(Vec::is_empty) {
                return Err(format!("missing ACL before '{w}' in condition"));
            }
            groups.push(Vec::new());
            i += 1;
            continue;
        }
        // Negations, possibly as separate words.
        let mut neg = false;
        let mut w = w;
        loop {
            while let Some(r) = w.strip_prefix('!') {
                neg = !neg;
                w = r;
            }
            if !w.is_empty() {
                break;
            }
            i += 1;
            match rest.get(i) {
                Some(n) => w = n.as_str(),
                None => return Err("missing ACL after '!' in condition".into()),
            }
        }
        let acl = if w == "{" {
            let Some(close) = rest[i + 1..].iter().position(|x| x == "}") else {
                return Err("missing closing '}' of anonymous ACL in condition".into());
            };
            let inner = &rest[i + 1..i + 1 + close];
            if inner.is_empty() {
                return Err("empty anonymous ACL '{ }' in condition".into());
            }
            let expr = parse_expr(inner)?;
            i += close + 2;
            Arc::new(Acl {
                name: format!("{{ {} }}", inner.join(" ")),
                exprs: vec![expr],
            })
        } else {
            if w == "}" {
                return Err("unexpected '}' in condition".into());
            }
            if w.starts_with('{') {
                return Err(format!(
                    "'{w}': braces of anonymous ACLs must be separated by spaces"
                ));
            }
            if w == "&&" || w.eq_ignore_ascii_case("and") {
                return Err(format!(
                    "'{w}' is not an operator in ACL conditions (AND is implicit between terms)"
                ));
            }
            i += 1;
            acls.lookup(w)?
        };
        if let Some(g) = groups.last_mut() {
            g.push(Term { neg, acl });
        }
    }
    if groups.last().is_some_and(Vec::is_empty) {
        return Err("missing ACL after 'or' in condition".into());
    }
    Ok(Cond { unless, groups })
}

impl std::fmt::Display for Cond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.unless { "unless" } else { "if" })?;
        for (gi, g) in self.groups.iter().enumerate() {
            if gi > 0 {
                f.write_str(" ||")?;
            }
            for t in g {
                write!(f, " {}{}", if t.neg { "!" } else { "" }, t.acl.name)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    struct Req {
        method: &'static str,
        uri: &'static str,
        headers: Vec<(&'static str, &'static str)>,
        src: Option<IpAddr>,
    }

    impl HttpView for Req {
        fn method(&self) -> &[u8] {
            self.method.as_bytes()
        }
        fn uri(&self) -> &[u8] {
            self.uri.as_bytes()
        }
        fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
            for (n, v) in &self.headers {
                if n.as_bytes().eq_ignore_ascii_case(name) && f(v.as_bytes()) {
                    return true;
                }
            }
            false
        }
        fn src(&self) -> Option<IpAddr> {
            self.src
        }
    }

    fn req(method: &'static str, uri: &'static str) -> Req {
        Req {
            method,
            uri,
            headers: vec![("Host", "www.example.com:8080")],
            src: Some(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))),
        }
    }

    fn ws(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn cond(acls: &[&str], c: &str) -> Cond {
        let mut set = AclSet::new();
        for a in acls {
            set.add(&ws(a)).unwrap();
        }
        parse_cond(&ws(c), &set).unwrap()
    }

    fn check(acls: &[&str], c: &str, r: &Req) -> bool {
        cond(acls, c).eval(r)
    }

    fn expr_err(s: &str) -> String {
        parse_expr(&ws(s)).unwrap_err()
    }

    #[test]
    fn path_matching() {
        let r = req("GET", "/api/v1/users?id=3");
        assert!(check(&["a path_beg /api"], "if a", &r));
        assert!(!check(&["a path_beg /API"], "if a", &r));
        assert!(check(&["a path_beg -i /API"], "if a", &r));
        assert!(check(&["a path /api/v1/users"], "if a", &r));
        assert!(!check(&["a path /api/v1/users?id=3"], "if a", &r));
        assert!(check(&["a path_end /users"], "if a", &r));
        assert!(check(&["a path_sub v1"], "if a", &r));
        assert!(check(&["a path_reg ^/api/v[0-9]+/"], "if a", &r));
        assert!(!check(&["a path_reg ^/API/"], "if a", &r));
        assert!(check(&["a path_reg -i ^/API/"], "if a", &r));
        assert!(check(&["a path_dir v1"], "if a", &r));
        assert!(check(&["a path_dir /api/v1/"], "if a", &r));
        assert!(!check(&["a path_dir v"], "if a", &r));
        assert!(check(&["a path_len 13"], "if a", &r));
        assert!(!check(&["a path_len 18"], "if a", &r));
        assert!(check(&["a path_len 10:20"], "if a", &r));
        assert!(check(&["a path -m beg /api"], "if a", &r));
        assert!(check(&["a path -m found"], "if a", &r));
        // Absolute form: scheme and authority are not part of the path.
        let r = req("GET", "http://example.com/x/y?q");
        assert!(check(&["a path /x/y"], "if a", &r));
        assert!(check(&["a url_beg http://"], "if a", &r));
        let r = req("GET", "http://example.com");
        assert!(check(&["a path -m len 0"], "if a", &r));
        // "*" has no path.
        let r = req("OPTIONS", "*");
        assert!(!check(&["a path -m found"], "if a", &r));
        assert!(check(&["a url *"], "if a", &r));
        assert!(check(&[], "if HTTP_URL_STAR", &r));
    }

    #[test]
    fn header_matching() {
        let mut r = req("GET", "/");
        r.headers = vec![
            ("Host", "www.example.com"),
            ("Accept", "text/html, image/png ,*/*"),
            ("accept", "application/json"),
            ("X-Forwarded-For", "192.168.1.7, 10.0.0.1"),
            ("Content-Length", "42"),
        ];
        assert!(check(&["h hdr(host) -i WWW.example.com"], "if h", &r));
        assert!(!check(&["h hdr(host) WWW.example.com"], "if h", &r));
        assert!(check(&["h hdr_end(host) .example.com"], "if h", &r));
        assert!(check(&["h hdr_beg(Host) www."], "if h", &r));
        assert!(check(&["h hdr_dom(host) example"], "if h", &r));
        assert!(!check(&["h hdr_dom(host) exam"], "if h", &r));
        assert!(check(&["h hdr(accept) image/png"], "if h", &r));
        assert!(check(&["h hdr(accept) application/json"], "if h", &r));
        assert!(!check(&["h fhdr(accept) image/png"], "if h", &r));
        assert!(check(&["h fhdr(accept) -m sub image/png"], "if h", &r));
        assert!(check(&["h hdr_cnt(accept) 4"], "if h", &r));
        assert!(check(&["h hdr_cnt(accept) gt 3"], "if h", &r));
        assert!(!check(&["h hdr_cnt(accept) gt 4"], "if h", &r));
        assert!(check(&["h fhdr_cnt(accept) eq 2"], "if h", &r));
        assert!(check(&["h hdr_cnt(x-none) 0"], "if h", &r));
        assert!(check(&["h hdr(host) -m found"], "if h", &r));
        assert!(!check(&["h hdr(x-none) -m found"], "if h", &r));
        assert!(check(&["h req.hdr(host) -m reg ^www\\."], "if h", &r));
        assert!(check(&["h hdr_ip(x-forwarded-for) 10.0.0.0/8"], "if h", &r));
        assert!(check(
            &["h hdr(x-forwarded-for) -m ip 192.168.0.0/16"],
            "if h",
            &r
        ));
        assert!(check(&["h hdr_val(content-length) ge 42"], "if h", &r));
        assert!(check(&[], "if HTTP_CONTENT", &r));
        assert!(check(&["h hdr_len(host) 15"], "if h", &r));
        // Occurrences: of values for `hdr`, of field lines for `fhdr`; -1 the last.
        for (acl, want) in [
            ("h hdr(accept,2) image/png", true),
            ("h hdr(accept,1) image/png", false),
            ("h hdr(accept,-1) application/json", true),
            ("h hdr(accept,-2) */*", true),
            ("h hdr(accept,4) application/json", true),
            ("h hdr(accept,5) -m found", false),
            ("h hdr(accept,-9) -m found", false),
            ("h fhdr(accept,2) application/json", true),
            ("h fhdr(accept,-2) -m beg text/html", true),
            ("h req.fhdr(accept,1) application/json", false),
            ("h hdr_ip(x-forwarded-for,-1) 10.0.0.1", true),
            ("h hdr_ip(x-forwarded-for,1) 10.0.0.1", false),
            ("h hdr_val(content-length,1) 42", true),
            ("h hdr_beg(host,1) www.", true),
        ] {
            assert_eq!(check(&[acl], "if h", &r), want, "{acl}");
        }
    }

    #[test]
    fn method_src_and_predefined() {
        let r = req("HEAD", "/");
        assert!(check(&["m method HEAD"], "if m", &r));
        assert!(!check(&["m method head"], "if m", &r));
        assert!(check(&["m method -i head"], "if m", &r));
        assert!(check(&[], "if METH_GET", &r));
        assert!(check(&[], "if METH_HEAD", &r));
        assert!(!check(&[], "if METH_POST", &r));
        assert!(check(&[], "if TRUE", &r));
        assert!(!check(&[], "if FALSE", &r));
        assert!(check(&[], "if HTTP", &r));
        assert!(check(&[], "if HTTP_URL_SLASH", &r));
        assert!(!check(&[], "if LOCALHOST", &r));
        assert!(check(&["s src 10.0.0.0/8"], "if s", &r));
        assert!(check(&["s src 10.1.2.3"], "if s", &r));
        assert!(check(&["s src 10.0.0.0/255.0.0.0"], "if s", &r));
        assert!(!check(&["s src 192.168.0.0/16 ::1"], "if s", &r));
        assert!(check(&["s src ::ffff:10.1.2.0/120"], "if s", &r));
        let mut r6 = req("GET", "/");
        r6.src = Some(IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert!(check(&[], "if LOCALHOST", &r6));
        assert!(check(&["s src 2001:db8::/32 ::1"], "if s", &r6));
        let mut mapped = req("GET", "/");
        mapped.src = Some(IpAddr::V6(Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped()));
        assert!(check(&[], "if LOCALHOST", &mapped));
        // TCP view: no method, so HTTP fetches do not match.
        let tcp = Req {
            method: "",
            uri: "",
            headers: vec![],
            src: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        };
        // `HTTP` reads held data (a mode tcp proxy always holds it for this ACL, see
        // it_tcp_request); with none held, as in mode http, it is true.
        assert!(check(&[], "if HTTP", &tcp));
        assert!(!check(&["p path -m found"], "if p", &tcp));
        assert!(check(&[], "if LOCALHOST", &tcp));
    }

    #[test]
    fn dn_entries() {
        let dn = "/C=FR/O=Acme/OU=ops/OU=web/CN=alice";
        assert_eq!(dn_entry(dn, "CN", 1), Some("alice"));
        assert_eq!(dn_entry(dn, "OU", 2), Some("web"));
        assert_eq!(dn_entry(dn, "OU", -2), Some("ops"));
        assert_eq!(dn_entry(dn, "OU", 3), None);
        assert_eq!(dn_entry(dn, "L", 1), None);
    }

    #[test]
    fn uuid_is_random_version_4() {
        let f = SampleFetch::parse("uuid").unwrap();
        let r = req("GET", "/");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        assert!(f.write(&r, &mut a) && f.write(&r, &mut b));
        let a = String::from_utf8(a).unwrap();
        assert_eq!(a.len(), 36, "{a}");
        assert_eq!(&a[14..15], "4", "{a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert_ne!(a.as_bytes(), &b[..]);
        assert!(SampleFetch::parse("uuid(7)").is_err());
    }

    #[test]
    fn converters_and_pattern_files() {
        let r = req("GET", "/API/v1/Users");
        assert!(check(&["a path,lower -m beg /api/"], "if a", &r));
        assert!(!check(&["a path -m beg /api/"], "if a", &r));
        // The default method follows the last converter's output type.
        assert!(check(&["a path,length gt 10"], "if a", &r));
        assert!(check(&["a src,ipmask(16) 10.1.0.0"], "if a", &r));
        assert!(check(
            &["a hdr(host),host_only www.example.com"],
            "if a",
            &r
        ));
        assert!(check(&["a hdr(host),port_only 8080"], "if a", &r));
        // A string method on an integer sample compares its text.
        assert!(check(&["a hdr_cnt(host) -m str 1"], "if a", &r));
        let dir = std::env::temp_dir().join(format!("sluice-acl-f-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exact = dir.join("exact.lst");
        let noise: String = (0..20).map(|i| format!("/other{i}\n")).collect();
        std::fs::write(
            &exact,
            format!("# paths\n\n  /API/v1/Users\n{noise}/trailing  \n"),
        )
        .unwrap();
        let prefixes = dir.join("beg.lst");
        std::fs::write(&prefixes, "/nope\n/api/\n").unwrap();
        let e = exact.display();
        let b = prefixes.display();
        assert!(check(&[&format!("a path -f {e}")], "if a", &r));
        assert!(!check(&[&format!("a path,lower -f {e}")], "if a", &r));
        // A pattern keeps its trailing blanks, as in HAProxy.
        assert!(!check(
            &[&format!("a path -f {e}")],
            "if a",
            &req("GET", "/trailing")
        ));
        // `-i` applies to the files named after it, not before.
        assert!(check(&[&format!("a path,lower -i -f {e}")], "if a", &r));
        assert!(!check(&[&format!("a path,lower -f {e} -i")], "if a", &r));
        assert!(check(&[&format!("a path -m beg -i -f {b}")], "if a", &r));
        assert!(!check(&[&format!("a path -m beg -f {b}")], "if a", &r));
        // `-M`: the first column of a map file.
        let map = dir.join("m.map");
        std::fs::write(&map, "/API/v1/Users backend_a\n").unwrap();
        assert!(check(
            &[&format!("a path -M -f {}", map.display())],
            "if a",
            &r
        ));
        // A long list of networks is indexed: the same answers.
        let nets = dir.join("nets.lst");
        let many: String = (0..30).map(|i| format!("192.0.{i}.0/24\n")).collect();
        std::fs::write(&nets, format!("{many}10.1.0.0/16\n2001:db8::/32\n")).unwrap();
        let n = nets.display();
        assert!(check(&[&format!("a src -f {n}")], "if a", &r));
        let mut other = req("GET", "/");
        other.src = Some(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)));
        assert!(!check(&[&format!("a src -f {n}")], "if a", &other));
        other.src = Some("2001:db8::7".parse().unwrap());
        assert!(check(&[&format!("a src -f {n}")], "if a", &other));
        other.src = Some("::ffff:192.0.29.9".parse().unwrap());
        assert!(check(&[&format!("a src -f {n}")], "if a", &other));
        let missing = expr_err("path -f /nonexistent/sluice.lst");
        assert!(missing.contains("failed to open pattern file '/nonexistent/sluice.lst'"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn logic() {
        let r = req("GET", "/api/x");
        let acls = [
            "api path_beg /api",
            "get method GET",
            "post method POST",
            "t always_true",
        ];
        assert!(check(&acls, "if api get", &r));
        assert!(!check(&acls, "if api post", &r));
        assert!(check(&acls, "if api post || get", &r));
        assert!(check(&acls, "if post or api", &r));
        assert!(check(&acls, "if post OR api", &r));
        assert!(check(&acls, "if api !post", &r));
        assert!(check(&acls, "if api ! post", &r));
        assert!(!check(&acls, "if !!post", &r));
        assert!(!check(&acls, "unless api", &r));
        assert!(check(&acls, "unless post", &r));
        assert!(check(&acls, "if { path_beg /api } get", &r));
        assert!(check(&acls, "if !{ path_beg /static } { method GET }", &r));
        assert!(!check(&acls, "if ! { path_beg /api }", &r));
        assert!(check(&acls, "if { path_beg -i /API /other }", &r));
        assert!(check(&acls, "if post || { src 10.0.0.0/8 } t", &r));
        // A repeated ACL name ORs its expressions.
        let acls = ["x path_beg /nope", "x method GET"];
        assert!(check(&acls, "if x", &r));
        let c = cond(&acls, "if x !x || TRUE");
        assert!(c.eval(&r));
        // An ACL that was never declared is an error, as in HAProxy.
        let mut set = AclSet::new();
        set.add(&ws("x method GET")).unwrap();
        assert!(
            parse_cond(&ws("if y"), &set)
                .unwrap_err()
                .contains("unknown ACL 'y'")
        );
    }

    #[test]
    fn later_definitions_extend_earlier_uses() {
        let mut set = AclSet::new();
        set.add(&ws("x path_beg /nope")).unwrap();
        let words = ws("if x");
        let early = parse_cond(&words, &set).unwrap();
        set.add(&ws("x path_beg /api")).unwrap();
        let late = parse_cond(&words, &set).unwrap();
        let r = req("GET", "/api");
        assert!(!early.eval(&r));
        assert!(late.eval(&r));
    }

    #[test]
    fn uses_http() {
        assert!(cond(&[], "if { path_beg /a }").uses_http());
        assert!(cond(&[], "if METH_GET").uses_http());
        assert!(!cond(&[], "if { src 1.2.3.4 } TRUE").uses_http());
        assert!(!cond(&[], "unless LOCALHOST").uses_http());
    }

    #[test]
    fn display() {
        let c = cond(&["a path /"], "if a !{ src 1.2.3.4 } || TRUE");
        assert_eq!(c.to_string(), "if a !{ src 1.2.3.4 } || TRUE");
        assert!(!c.is_unless());
    }

    #[test]
    fn parse_errors() {
        let set = AclSet::new();
        let perr = |c: &str| parse_cond(&ws(c), &set).unwrap_err();
        assert_eq!(perr("if nope"), "unknown ACL 'nope'");
        assert_eq!(
            perr("if METH_GTE"),
            "unknown ACL 'METH_GTE' (did you mean 'METH_GET'?)"
        );
        assert_eq!(perr("if"), "missing condition after 'if'");
        assert!(perr("if { path_beg /a").contains("missing closing '}'"));
        assert!(perr("if TRUE ||").contains("missing ACL after 'or'"));
        assert!(perr("if || TRUE").contains("missing ACL before"));
        assert!(perr("if TRUE && TRUE").contains("AND is implicit"));
        assert!(perr("if { date(,us) gt 0 }").contains("an offset must precede the unit"));
        assert!(perr("if { date(0,h) gt 0 }").contains("unknown unit 'h'"));
        assert!(perr("if { fc_rtt(s) gt 0 }").contains("unknown unit 's'"));
        assert!(perr("if !").contains("missing ACL after '!'"));
        assert!(perr("if {path_beg /a }").contains("separated by spaces"));
        assert!(perr("if { }").contains("empty anonymous ACL"));
        assert_eq!(
            perr("if HTTP_1.1"),
            "predefined ACL 'HTTP_1.1' is not supported by sluice"
        );

        assert_eq!(
            expr_err("pth_beg /a"),
            "unknown ACL criterion 'pth_beg' (did you mean 'path_beg'?)"
        );
        assert_eq!(
            expr_err("req.ssl_ver"),
            "ACL criterion 'req.ssl_ver' is not supported by sluice"
        );
        assert!(
            expr_err("res.hdr_beg(a) x").starts_with("unknown ACL criterion 'res.hdr_beg'"),
            "HAProxy spells it shdr_beg"
        );
        assert!(parse_expr(&ws("cook_beg(a) x")).is_ok());
        assert!(expr_err("path,lowr /a").contains("did you mean 'lower'"));
        assert!(expr_err("hdr /a").contains("requires a header name"));
        assert!(expr_err("hdr(host,x) a").contains("not an integer"));
        assert!(expr_err("path -x /a").contains("'-x' is not a valid ACL option"));
        assert!(expr_err("path -u 3 /a").contains("not supported by sluice"));
        assert!(expr_err("path -m foo /a").contains("unknown matching method 'foo'"));
        assert!(expr_err("always_true -m ip 1.2.3.4").contains("cannot be used with criterion"));
        assert!(expr_err("path_reg (").starts_with("invalid regex '('"));
        assert!(expr_err("src 1.2.3.4/33").contains("not a valid IPv4 or IPv6"));
        assert!(expr_err("src 10.0.0.0/255.0.255.0").contains("non-contiguous"));
        // No pattern: a warning (as HAProxy's), and an ACL that never matches.
        let r = req("GET", "/api");
        assert!(!check(&["a path_beg"], "if a", &r));
        assert!(expr_err("hdr_cnt(host) gt").contains("missing value after operator"));
        assert!(expr_err("hdr_cnt(host) abc").contains("not a valid integer"));
        assert!(expr_err("path -m found /x").contains("takes no pattern"));
        assert!(expr_err("path(x) /a").contains("takes no argument"));
        assert!(parse_expr(&ws("path_beg --")).is_ok());
        assert!(parse_expr(&ws("path -- -a")).is_ok());

        let mut set = AclSet::new();
        assert!(
            set.add(&ws("bad!name path /"))
                .unwrap_err()
                .contains("invalid ACL name")
        );
        assert!(set.add(&ws("x")).unwrap_err().contains("missing criterion"));
        set.add(&ws("is_api path_beg /api")).unwrap();
        assert_eq!(
            parse_cond(&ws("if is_ap"), &set).unwrap_err(),
            "unknown ACL 'is_ap' (did you mean 'is_api'?)"
        );
    }

    #[test]
    fn ipnet_parsing() {
        assert_eq!(parse_ipnet("10.0.0.0/8").unwrap().prefix, 8);
        assert_eq!(parse_ipnet("10.0.0.1").unwrap().prefix, 32);
        assert_eq!(parse_ipnet("::1").unwrap().prefix, 128);
        assert_eq!(parse_ipnet("10.0.0.0/255.255.0.0").unwrap().prefix, 16);
        assert!(parse_ipnet("::1/129").is_err());
        assert!(parse_ipnet("nope").is_err());
    }

    #[test]
    fn uri_path_forms() {
        assert_eq!(uri_path(b"/a?b"), Some(&b"/a"[..]));
        assert_eq!(uri_path(b"/"), Some(&b"/"[..]));
        assert_eq!(uri_path(b"https://h:1/p/q?x"), Some(&b"/p/q"[..]));
        assert_eq!(uri_path(b"http://h?x"), Some(&b""[..]));
        assert_eq!(uri_path(b"*"), None);
        assert_eq!(uri_path(b"example.com:443"), None);
        assert_eq!(uri_pathq(b"/a?b#c"), Some(&b"/a?b"[..]));
        assert_eq!(uri_pathq(b"http://h"), Some(&b""[..]));
        assert_eq!(uri_pathq(b"http://h?x"), Some(&b"?x"[..]));
        assert_eq!(uri_pathq(b"https://h:1/p?q"), Some(&b"/p?q"[..]));
        assert_eq!(uri_pathq(b"*"), None);
    }
}

/// Fetches of the proxies' and servers' state and of the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateFetch {
    /// `nbsrv`, `be_conn`, `queue`, `connslots`, `be_id` of the named backend (`None`: the
    /// transaction's).
    Backend(BeWhat, Option<String>),
    /// `fe_conn`, `fe_id` of the named frontend (`None`: the session's).
    Frontend(FeWhat, Option<String>),
    /// `srv_conn(B/S)`, `srv_is_up(B/S)`, `srv_queue(B/S)`.
    Server(SrvWhat, String, String),
    /// `srv_name`, `srv_id`: the transaction's server (a response, or the log).
    CurServer(bool),
    /// `rand([N])`: uniform in 0..N (0..2^32 without N).
    Rand(u64),
    /// `date([OFFSET][,UNIT])`: the epoch in UNIT per second (1, 1000 or 1000000), plus
    /// OFFSET in that unit.
    Date(i64, i64),
    /// `date_us`: the microseconds of the current second.
    DateUs,
    /// `env(NAME)`, `hostname`: read at start-up.
    Text(Box<[u8]>),
    /// `pid`, `nbthread`.
    Pid,
    NbThread,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeWhat {
    NbSrv,
    Conn,
    Queue,
    ConnSlots,
    Id,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeWhat {
    Conn,
    Id,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrvWhat {
    Conn,
    IsUp,
    Queue,
}

thread_local! {
    /// Proxies and servers named by state fetches of the configuration being parsed, checked
    /// once all proxies are known; and how many of them have their line noted.
    static NAMED: std::cell::RefCell<(Vec<ProxyRef>, usize)> =
        const { std::cell::RefCell::new((Vec::new(), 0)) };
}

/// A proxy (and server) a state fetch names.
pub struct ProxyRef {
    pub backend: bool,
    pub name: String,
    pub server: Option<String>,
    pub fetch: &'static str,
    pub at: crate::util::At,
}

fn name_proxy(backend: bool, name: &str, server: Option<&str>, fetch: &'static str) {
    NAMED.with(|n| {
        n.borrow_mut().0.push(ProxyRef {
            backend,
            name: name.to_string(),
            server: server.map(str::to_string),
            fetch,
            at: None,
        })
    });
}

/// Records where the names of the line just parsed were given.
pub fn note_line(file: &str, line: usize) {
    NAMED.with(|n| {
        let (list, done) = &mut *n.borrow_mut();
        for r in &mut list[*done..] {
            r.at = Some((file.to_string(), line));
        }
        *done = list.len();
    });
}

/// The names state fetches gave, for checking; forgets them (the next configuration starts
/// afresh).
pub fn take_named() -> Vec<ProxyRef> {
    NAMED.with(|n| std::mem::take(&mut *n.borrow_mut()).0)
}

/// The index of the proxy called `name` whose kind `ok` accepts.
fn proxy_index(
    sh: &crate::backend::Shared,
    name: &str,
    ok: impl Fn(crate::config::ProxyKind) -> bool,
) -> Option<usize> {
    sh.cfg
        .proxies
        .iter()
        .position(|p| p.name == name && ok(p.kind))
}

/// The static name of a state fetch (for messages).
fn fetch_name(n: &str) -> &'static str {
    StateFetch::NAMES
        .iter()
        .find(|x| **x == n)
        .copied()
        .unwrap_or("fetch")
}

impl StateFetch {
    const NAMES: &'static [&'static str] = &[
        "nbsrv",
        "be_conn",
        "queue",
        "connslots",
        "be_id",
        "fe_conn",
        "fe_id",
        "srv_conn",
        "srv_is_up",
        "srv_queue",
        "srv_name",
        "srv_id",
        "rand",
        "date",
        "date_us",
        "env",
        "hostname",
        "pid",
        "nbthread",
    ];

    fn parse(name: &str, args: Option<&str>, what: &str) -> Result<StateFetch, String> {
        let st = StateFetch::parse_inner(name, args, what)?;
        match &st {
            StateFetch::Backend(_, Some(b)) => name_proxy(true, b, None, fetch_name(name)),
            StateFetch::Frontend(_, Some(f)) => name_proxy(false, f, None, fetch_name(name)),
            StateFetch::Server(_, b, sv) => name_proxy(true, b, Some(sv), fetch_name(name)),
            _ => {}
        }
        Ok(st)
    }

    fn parse_inner(name: &str, args: Option<&str>, what: &str) -> Result<StateFetch, String> {
        let arg = args.map(str::trim).filter(|a| !a.is_empty());
        let none = |v: StateFetch| match arg {
            None => Ok(v),
            Some(a) => Err(format!("{what} '{name}' takes no argument (got '{a}')")),
        };
        let int = |a: &str| {
            a.parse::<i64>()
                .map_err(|_| format!("{what} '{name}': '{a}' is not an integer"))
        };
        Ok(match name {
            "nbsrv" => StateFetch::Backend(BeWhat::NbSrv, arg.map(str::to_string)),
            "be_conn" => StateFetch::Backend(BeWhat::Conn, arg.map(str::to_string)),
            "queue" => StateFetch::Backend(BeWhat::Queue, arg.map(str::to_string)),
            "connslots" => StateFetch::Backend(BeWhat::ConnSlots, arg.map(str::to_string)),
            "be_id" => none(StateFetch::Backend(BeWhat::Id, None))?,
            "fe_conn" => StateFetch::Frontend(FeWhat::Conn, arg.map(str::to_string)),
            "fe_id" => none(StateFetch::Frontend(FeWhat::Id, None))?,
            "srv_conn" | "srv_is_up" | "srv_queue" => {
                let Some((b, sv)) = arg.and_then(|a| a.split_once('/')) else {
                    return Err(format!("{what} '{name}' expects BACKEND/SERVER"));
                };
                let w = match name {
                    "srv_conn" => SrvWhat::Conn,
                    "srv_is_up" => SrvWhat::IsUp,
                    _ => SrvWhat::Queue,
                };
                StateFetch::Server(w, b.to_string(), sv.to_string())
            }
            "srv_name" => none(StateFetch::CurServer(true))?,
            "srv_id" => none(StateFetch::CurServer(false))?,
            "rand" => match arg {
                None => StateFetch::Rand(1 << 32),
                Some(a) => match int(a)? {
                    n if n > 0 => StateFetch::Rand(n as u64),
                    _ => return Err(format!("{what} 'rand': the range must be positive")),
                },
            },
            "date" => match arg {
                None => StateFetch::Date(0, 1),
                Some(a) => {
                    let (off, unit) = match a.split_once(',') {
                        // `date(,us)`: HAProxy wants the offset before a unit.
                        Some((o, _)) if o.trim().is_empty() => {
                            return Err(format!("{what} 'date': an offset must precede the unit"));
                        }
                        Some((o, u)) => (o, Some(u)),
                        None => (a, None),
                    };
                    let per_s = match unit.map(str::trim) {
                        None | Some("s") => 1,
                        Some("ms") => 1_000,
                        Some("us") => 1_000_000,
                        Some(u) => {
                            return Err(format!(
                                "{what} 'date': unknown unit '{u}' (expected s, ms or us)"
                            ));
                        }
                    };
                    let off = off.trim();
                    StateFetch::Date(if off.is_empty() { 0 } else { int(off)? }, per_s)
                }
            },
            "env" => {
                let Some(n) = arg else {
                    return Err(format!("{what} 'env' expects a variable name"));
                };
                StateFetch::Text(
                    crate::config::tokenizer::env_var(n)
                        .unwrap_or_default()
                        .into_bytes()
                        .into(),
                )
            }
            "hostname" => none(StateFetch::Text(
                crate::util::hostname().into_bytes().into(),
            ))?,
            "pid" => none(StateFetch::Pid)?,
            "date_us" => none(StateFetch::DateUs)?,
            _ => none(StateFetch::NbThread)?,
        })
    }

    fn out_type(&self) -> SmpType {
        match self {
            StateFetch::Text(_) | StateFetch::CurServer(true) => SmpType::Str,
            StateFetch::Server(SrvWhat::IsUp, ..) => SmpType::Bool,
            _ => SmpType::Int,
        }
    }

    fn for_each(&self, view: &dyn HttpView, f: &mut dyn FnMut(Sample<'_>) -> bool) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let s = view.sess();
        let int = |f: &mut dyn FnMut(Sample<'_>) -> bool, v: i64| f(Sample::Int(v));
        match self {
            StateFetch::Rand(n) => {
                let r = (u128::from(crate::util::rand_u32()) * u128::from(*n)) >> 32;
                int(f, r as i64)
            }
            StateFetch::Date(off, per_s) => {
                let now = crate::util::since_epoch();
                let v = match per_s {
                    1 => now.as_secs() as i64,
                    1_000 => now.as_millis() as i64,
                    _ => now.as_micros() as i64,
                };
                int(f, v.saturating_add(*off))
            }
            StateFetch::DateUs => int(f, i64::from(crate::util::since_epoch().subsec_micros())),
            StateFetch::Text(t) => f(Sample::Str(t)),
            StateFetch::Pid => int(f, i64::from(std::process::id())),
            StateFetch::NbThread => match s.shared {
                Some(sh) => int(f, sh.nbthread as i64),
                None => false,
            },
            StateFetch::CurServer(name) => match s.server {
                Some(sv) if *name => f(Sample::Str(sv.name.as_bytes())),
                Some(sv) => int(f, i64::from(sv.puid)),
                None => false,
            },
            StateFetch::Backend(w, name) => {
                let Some(sh) = s.shared else { return false };
                let name = name.as_deref().unwrap_or(s.backend);
                // `be_id` before a backend is chosen is the frontend's (as in HAProxy).
                let Some(i) = proxy_index(sh, name, |k| k.has_backend() || *w == BeWhat::Id) else {
                    return false;
                };
                if *w == BeWhat::Id {
                    return int(f, i64::from(sh.proxies[i].uuid));
                }
                let Some(be) = &sh.proxies[i].be else {
                    return false;
                };
                let servers = be.servers.iter();
                let v = match w {
                    BeWhat::NbSrv => {
                        // Usable active servers with a weight (not draining), else usable
                        // backups: HAProxy's count.
                        let act = be.usable_active();
                        if act > 0 {
                            act
                        } else {
                            be.servers
                                .iter()
                                .filter(|x| x.backup && x.usable() && x.eweight() > 0)
                                .count()
                        }
                    }
                    BeWhat::Conn => servers.map(|x| x.served.load(Relaxed) as usize).sum(),
                    BeWhat::Queue => {
                        be.queued.load(Relaxed) as usize
                            + servers
                                .map(|x| x.queued.load(Relaxed) as usize)
                                .sum::<usize>()
                    }
                    BeWhat::ConnSlots => {
                        // Free connection and queue places on usable servers; -1 when one
                        // of them has no limit (as HAProxy).
                        let mut free = 0i64;
                        for x in be.servers.iter().filter(|x| x.usable()) {
                            let m = x.maxconn.load(Relaxed);
                            if m == 0 || x.maxqueue == 0 {
                                return int(f, -1);
                            }
                            free += i64::from(m) - i64::from(x.served.load(Relaxed));
                            free += i64::from(x.maxqueue) - i64::from(x.queued.load(Relaxed));
                        }
                        return int(f, free);
                    }
                    BeWhat::Id => unreachable!("answered above"),
                };
                int(f, v as i64)
            }
            StateFetch::Frontend(w, name) => {
                let Some(sh) = s.shared else { return false };
                let name = name.as_deref().unwrap_or(s.frontend);
                let Some(i) = proxy_index(sh, name, crate::config::ProxyKind::has_frontend) else {
                    return false;
                };
                match w {
                    FeWhat::Id => int(f, i64::from(sh.proxies[i].uuid)),
                    FeWhat::Conn => int(f, i64::from(sh.proxies[i].fe.cur_conns.load(Relaxed))),
                }
            }
            StateFetch::Server(w, b, sv) => {
                let Some(sh) = s.shared else { return false };
                let Some(i) = proxy_index(sh, b, crate::config::ProxyKind::has_backend) else {
                    return false;
                };
                let Some(x) = sh.proxies[i]
                    .be
                    .as_ref()
                    .and_then(|be| be.servers.iter().find(|x| x.name == *sv))
                else {
                    return false;
                };
                match w {
                    SrvWhat::Conn => int(f, i64::from(x.served.load(Relaxed))),
                    SrvWhat::Queue => int(f, i64::from(x.queued.load(Relaxed))),
                    SrvWhat::IsUp => f(Sample::Bool(x.usable())),
                }
            }
        }
    }
}
