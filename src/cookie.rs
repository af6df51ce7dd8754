//! Cookie persistence: a backend's `cookie NAME ...` and its servers' `cookie VALUE`.
//!
//! Owns the cookie's reading and writing: which server a request's cookie names (and whether
//! that name still counts: a known, running server, a date within `maxidle`/`maxlife`), the
//! edits of the request's `Cookie` header (`prefix` strips `SRV~`, `insert indirect` removes
//! the cookie), and the response's `Set-Cookie` fields (deleted, rewritten, prefixed or
//! inserted), with the two cookie letters of the log's termination state. It keeps no state:
//! what a request learned travels with its transaction as a [`Seen`].
//!
//! It must not pick servers: it names one, and `backend` takes that server's slot (or queues
//! for it) like any other preferred server.

use crate::config::{CookieCfg, CookieMode};

/// What the request's cookie said, for the server choice, the response and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The log's third termination-state letter: `N` no cookie, `I` invalid (names no server),
    /// `D` names a server that is down, `V` valid, `E` expired (`maxidle`), `O` too old
    /// (`maxlife`).
    pub req: u8,
    /// The server the request goes to because of its cookie (valid, or down with
    /// `option persist`).
    pub server: Option<usize>,
    /// The dates the cookie carried (Unix seconds, multiples of 4; 0 = none).
    pub last_date: u32,
    pub first_date: u32,
}

impl Seen {
    /// A request of a backend without cookie persistence: the log shows `--`.
    pub const NONE: Seen = Seen {
        req: b'-',
        server: None,
        last_date: 0,
        first_date: 0,
    };
}

/// A server as cookie persistence sees it.
pub struct Candidate<'a> {
    pub cookie: Option<&'a str>,
    /// Not stopped: up, or draining (maintenance and failed checks stop a server).
    pub running: bool,
}

/// The response's side of persistence: what to write and the log's fourth letter.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Answer {
    /// Indices (in the response's header list) of `Set-Cookie` fields to delete.
    pub delete: Vec<usize>,
    /// `Set-Cookie` fields whose value is replaced: (index, new value).
    pub replace: Vec<(usize, String)>,
    /// A `Set-Cookie` value to append, and whether `Cache-control: private` goes with it.
    pub insert: Option<String>,
    pub cache_private: bool,
    /// `N` none, `P` the server's passed as is, `D` deleted, `I` inserted, `R` rewritten,
    /// `U` only its date refreshed.
    pub letter: u8,
}

/// Separator of the server id and the application's value in `prefix` mode.
const PREFIX_DELIM: u8 = b'~';
/// Separator of the server id and the dates when `maxidle`/`maxlife` are set.
const DATE_DELIM: u8 = b'|';

/// One `NAME=VALUE` of a `Cookie` header: byte ranges into the header value.
#[derive(Debug, Clone, Copy)]
struct Crumb {
    /// The whole element, from its first non-blank byte to its end (before `;`/`,`).
    whole: (usize, usize),
    name: (usize, usize),
    value: (usize, usize),
}

/// Splits a `Cookie` header value into its elements (`;` or `,` between them, as HAProxy).
fn crumbs(v: &[u8]) -> impl Iterator<Item = Crumb> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        while pos < v.len() {
            let start = pos;
            let end = v[start..]
                .iter()
                .position(|&c| c == b';' || c == b',')
                .map_or(v.len(), |i| start + i);
            pos = end + 1;
            let (s, e) = trim(v, start, end);
            if s == e {
                continue;
            }
            let (name, value) = match v[s..e].iter().position(|&c| c == b'=') {
                Some(i) => (trim(v, s, s + i), trim(v, s + i + 1, e)),
                None => ((s, e), (e, e)),
            };
            return Some(Crumb {
                whole: (s, e),
                name,
                value,
            });
        }
        None
    })
}

fn trim(v: &[u8], mut s: usize, mut e: usize) -> (usize, usize) {
    while s < e && matches!(v[s], b' ' | b'\t') {
        s += 1;
    }
    while e > s && matches!(v[e - 1], b' ' | b'\t') {
        e -= 1;
    }
    (s, e)
}

/// Reads the persistence cookie from the request's `Cookie` header values and rewrites them
/// as the mode requires. `cookies` holds each `Cookie` field's value; an edited one is
/// replaced in place, one left empty is to be removed. `now` is the Unix time in seconds.
pub fn read_request<'s>(
    cfg: &CookieCfg,
    servers: (usize, &dyn Fn(usize) -> Candidate<'s>),
    persist: bool,
    cookies: &mut [Vec<u8>],
    now: u32,
) -> Seen {
    let mut seen = Seen {
        req: b'N',
        server: None,
        last_date: 0,
        first_date: 0,
    };
    let mut decided = false;
    let strip_prefix = cfg.mode == CookieMode::Prefix;
    let remove = cfg.mode == CookieMode::Insert && cfg.indirect;
    for field in cookies.iter_mut() {
        let mut edits: Vec<Edit> = Vec::new();
        for c in crumbs(field) {
            if &field[c.name.0..c.name.1] != cfg.name.as_bytes() {
                continue;
            }
            let value = &field[c.value.0..c.value.1];
            // The server id: before `~` in prefix mode, before the dates otherwise.
            let id_len = if strip_prefix {
                value.iter().position(|&b| b == PREFIX_DELIM)
            } else {
                value.iter().position(|&b| b == DATE_DELIM)
            }
            .unwrap_or(value.len());
            if !decided {
                decided = true;
                seen = judge(cfg, servers, persist, value, id_len, now);
            }
            if remove {
                edits.push(Edit::Drop(c.whole));
            } else if strip_prefix && id_len < value.len() {
                // `NAME=SRV~app` reaches the server as `NAME=app`.
                edits.push(Edit::Cut((c.value.0, c.value.0 + id_len + 1)));
            }
        }
        if !edits.is_empty() {
            *field = apply_edits(field, &edits);
        }
    }
    seen
}

/// The verdict on the first persistence cookie: `value[..id_len]` is the server id.
fn judge<'s>(
    cfg: &CookieCfg,
    servers: (usize, &dyn Fn(usize) -> Candidate<'s>),
    persist: bool,
    value: &[u8],
    id_len: usize,
    now: u32,
) -> Seen {
    let mut seen = Seen {
        req: b'I',
        server: None,
        last_date: 0,
        first_date: 0,
    };
    if cfg.mode != CookieMode::Prefix && id_len < value.len() {
        let mut dates = value[id_len + 1..].split(|&b| b == DATE_DELIM);
        seen.last_date = dates.next().and_then(decode_date).unwrap_or(0);
        seen.first_date = dates.next().and_then(decode_date).unwrap_or(0);
    }
    // A date more than a day ahead is as bad as one too old (a forged or broken clock).
    let stale = |date: u32, max: Option<u32>| {
        date != 0
            && max
                .is_some_and(|m| now.saturating_sub(date) > m || date.saturating_sub(now) > 86_400)
    };
    if stale(seen.first_date, cfg.maxlife) {
        return Seen {
            req: b'O',
            ..Seen::NONE
        };
    }
    if stale(seen.last_date, cfg.maxidle) {
        return Seen {
            req: b'E',
            ..Seen::NONE
        };
    }
    let id = &value[..id_len];
    // An empty value names nobody, even servers without a cookie.
    if id.is_empty() {
        return seen;
    }
    // The first running server with this value; else a stopped one under `option persist`.
    let (n, server) = servers;
    for (i, s) in (0..n).map(|i| (i, server(i))) {
        if s.cookie.map(str::as_bytes) != Some(id) {
            continue;
        }
        if s.running || persist {
            seen.req = if s.running { b'V' } else { b'D' };
            seen.server = Some(i);
            return seen;
        }
        seen.req = b'D';
    }
    seen
}

/// A change to a `Cookie` header value: byte ranges, in order.
#[derive(Debug, Clone, Copy)]
enum Edit {
    /// A whole element goes, with the separator after it.
    Drop((usize, usize)),
    /// These bytes go (`SRV~` in prefix mode).
    Cut((usize, usize)),
}

/// Rebuilds a header value with the edits applied.
fn apply_edits(v: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut at = 0;
    for &edit in edits {
        let (Edit::Drop((s, e)) | Edit::Cut((s, e))) = edit;
        out.extend_from_slice(&v[at..s]);
        at = e;
        if let Edit::Drop(_) = edit {
            // Drop the separator after the element too, and the blanks before the next.
            if at < v.len() && matches!(v[at], b';' | b',') {
                at += 1;
            }
            while at < v.len() && matches!(v[at], b' ' | b'\t') {
                at += 1;
            }
        }
    }
    out.extend_from_slice(&v[at..]);
    // A removed last element leaves `a=1; ` behind.
    while out
        .last()
        .is_some_and(|&c| matches!(c, b' ' | b'\t' | b';' | b','))
    {
        out.pop();
    }
    out
}

/// What the response needs: `set_cookies` lists (index in the header list, value) of the
/// server's `Set-Cookie` fields. `server_cookie` is the cookie value of the server that
/// answered, `direct` whether the request's valid cookie brought it there.
#[allow(clippy::too_many_arguments)]
pub fn answer(
    cfg: &CookieCfg,
    seen: &Seen,
    direct: bool,
    server_cookie: Option<&str>,
    set_cookies: &[(usize, &[u8])],
    is_post: bool,
    cacheable: bool,
    now: u32,
) -> Answer {
    let mut a = Answer {
        letter: b'N',
        ..Answer::default()
    };
    let mut found = false;
    for &(idx, v) in set_cookies {
        // A `Set-Cookie` holds one cookie: its first `NAME=VALUE`, attributes after `;`.
        let end = v.iter().position(|&c| c == b';').unwrap_or(v.len());
        let Some(eq) = v[..end].iter().position(|&c| c == b'=') else {
            continue;
        };
        let (ns, ne) = trim(v, 0, eq);
        if &v[ns..ne] != cfg.name.as_bytes() {
            continue;
        }
        found = true;
        a.letter = b'P';
        if cfg.preserve {
            // The application's own cookie (say, a logout clearing it) is left alone.
        } else if cfg.mode == CookieMode::Insert || (direct && cfg.indirect) {
            a.delete.push(idx);
            a.letter = b'D';
        } else if let Some(sc) = server_cookie
            && matches!(cfg.mode, CookieMode::Rewrite | CookieMode::Prefix)
        {
            let (vs, ve) = trim(v, eq + 1, end);
            let mut nv = Vec::with_capacity(v.len() + sc.len() + 1);
            nv.extend_from_slice(&v[..vs]);
            nv.extend_from_slice(sc.as_bytes());
            if cfg.mode == CookieMode::Prefix {
                nv.push(PREFIX_DELIM);
                nv.extend_from_slice(&v[vs..ve]);
            }
            nv.extend_from_slice(&v[ve..]);
            a.replace
                .push((idx, String::from_utf8_lossy(&nv).into_owned()));
            a.letter = b'R';
        }
    }
    let refresh = (cfg.maxidle.is_some() || seen.last_date != 0)
        && (seen.last_date == 0 || seen.last_date < now)
        || (cfg.maxlife.is_some() && seen.first_date == 0)
        || (cfg.maxlife.is_none() && seen.first_date != 0);
    if cfg.mode == CookieMode::Insert
        && !(found && cfg.preserve)
        && (!direct || refresh)
        && (!cfg.postonly || is_post)
    {
        let mut s = String::with_capacity(64);
        s.push_str(&cfg.name);
        s.push('=');
        match server_cookie {
            // A server without a cookie (a backup, often) clears the client's.
            None => s.push_str("; Expires=Thu, 01-Jan-1970 00:00:01 GMT"),
            Some(sc) => {
                s.push_str(sc);
                if cfg.maxidle.is_some() || cfg.maxlife.is_some() {
                    s.push(DATE_DELIM as char);
                    encode_date(now, &mut s);
                    if cfg.maxlife.is_some() {
                        s.push(DATE_DELIM as char);
                        let first = if seen.first_date != 0 {
                            seen.first_date
                        } else {
                            now
                        };
                        encode_date(first, &mut s);
                    }
                }
            }
        }
        s.push_str("; path=/");
        for d in &cfg.domains {
            s.push_str("; domain=");
            s.push_str(d);
        }
        if cfg.httponly {
            s.push_str("; HttpOnly");
        }
        if cfg.secure {
            s.push_str("; Secure");
        }
        for at in &cfg.attrs {
            s.push_str("; ");
            s.push_str(at);
        }
        a.insert = Some(s);
        a.letter = if server_cookie.is_some() && direct {
            b'U'
        } else {
            b'I'
        };
        a.cache_private = cfg.nocache && cacheable;
    }
    a
}

/// The digits of HAProxy's cookie dates: base64's alphabet, most significant first.
const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A Unix time as 5 base64 digits of its value in units of 4 s (rounded up), as HAProxy
/// writes `maxidle`/`maxlife` dates.
pub fn encode_date(unix: u32, out: &mut String) {
    let v = (unix.saturating_add(3) >> 2) & 0x3fff_ffff;
    for shift in [24, 18, 12, 6, 0] {
        out.push(B64[((v >> shift) & 63) as usize] as char);
    }
}

/// The Unix time of a 5-digit date (`None`: not a date).
pub fn decode_date(s: &[u8]) -> Option<u32> {
    if s.len() < 5 {
        return None;
    }
    let mut v: u32 = 0;
    for &c in &s[..5] {
        let d = B64.iter().position(|&b| b == c)? as u32;
        v = (v << 6) | d;
    }
    (v != 0).then_some(v << 2)
}

/// Whether a response may be stored by a shared cache, as far as `nocache` cares (HAProxy's
/// rule): a GET or HEAD (`get_or_head`) answered with a status caches keep, carrying an
/// expiry (`max-age`, `s-maxage`, `Expires`) or a validator (`ETag`, `Last-Modified`), and
/// nothing that forbids storing it (`private`, `no-cache`, `no-store`, `max-age=0`,
/// `s-maxage=0`, `Pragma: no-cache`). `headers` are the response's (name, value) pairs.
pub fn cacheable<'a>(
    get_or_head: bool,
    status: u16,
    headers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> bool {
    if !get_or_head
        || !matches!(
            status,
            200 | 203 | 204 | 206 | 300 | 301 | 404 | 405 | 410 | 414 | 501
        )
    {
        return false;
    }
    let mut fresh_or_validated = false;
    for (n, v) in headers {
        if n.eq_ignore_ascii_case(b"cache-control") {
            for d in v.split(|&c| c == b',') {
                let (s, e) = trim(d, 0, d.len());
                let d = d[s..e].to_ascii_lowercase();
                match d.as_slice() {
                    b"private" | b"no-cache" | b"no-store" | b"max-age=0" | b"s-maxage=0" => {
                        return false;
                    }
                    d if d.starts_with(b"max-age") || d.starts_with(b"s-maxage") => {
                        fresh_or_validated = true;
                    }
                    _ => {}
                }
            }
        } else if n.eq_ignore_ascii_case(b"pragma") {
            if v.eq_ignore_ascii_case(b"no-cache") {
                return false;
            }
        } else if n.eq_ignore_ascii_case(b"expires")
            || n.eq_ignore_ascii_case(b"etag")
            || n.eq_ignore_ascii_case(b"last-modified")
        {
            fresh_or_validated = true;
        }
    }
    fresh_or_validated
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(mode: CookieMode) -> CookieCfg {
        CookieCfg {
            mode,
            ..CookieCfg::new("SRV")
        }
    }

    fn servers() -> Vec<Candidate<'static>> {
        vec![
            Candidate {
                cookie: Some("s1"),
                running: true,
            },
            Candidate {
                cookie: Some("s2"),
                running: false,
            },
            Candidate {
                cookie: None,
                running: true,
            },
        ]
    }

    fn read(c: &CookieCfg, persist: bool, hdrs: &[&str], now: u32) -> (Seen, Vec<String>) {
        let mut v: Vec<Vec<u8>> = hdrs.iter().map(|h| h.as_bytes().to_vec()).collect();
        let all = servers();
        let pick = |i: usize| Candidate {
            cookie: all[i].cookie,
            running: all[i].running,
        };
        let seen = read_request(c, (all.len(), &pick), persist, &mut v, now);
        let v = v
            .into_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect();
        (seen, v)
    }

    #[test]
    fn request_verdicts() {
        let c = cfg(CookieMode::Insert);
        let (s, _) = read(&c, false, &["a=1; SRV=s1"], 0);
        assert_eq!((s.req, s.server), (b'V', Some(0)));
        let (s, _) = read(&c, false, &["a=1"], 0);
        assert_eq!((s.req, s.server), (b'N', None));
        let (s, _) = read(&c, false, &["SRV=nope"], 0);
        assert_eq!((s.req, s.server), (b'I', None));
        // An empty value never matches the server without a cookie.
        let (s, _) = read(&c, false, &["SRV="], 0);
        assert_eq!((s.req, s.server), (b'I', None));
        let (s, _) = read(&c, false, &["SRV=s2"], 0);
        assert_eq!((s.req, s.server), (b'D', None));
        let (s, _) = read(&c, true, &["SRV=s2"], 0);
        assert_eq!((s.req, s.server), (b'D', Some(1)), "option persist");
        // The first occurrence decides.
        let (s, _) = read(&c, false, &["SRV=s1", "SRV=s2"], 0);
        assert_eq!(s.server, Some(0));
    }

    #[test]
    fn request_edits() {
        let mut c = cfg(CookieMode::Insert);
        // Plain insert: the server sees the cookie.
        let (_, v) = read(&c, false, &["a=1; SRV=s1; b=2"], 0);
        assert_eq!(v, ["a=1; SRV=s1; b=2"]);
        c.indirect = true;
        let (_, v) = read(&c, false, &["a=1; SRV=s1; b=2", "SRV=x", "c=3;SRV=s1"], 0);
        assert_eq!(v, ["a=1; b=2", "", "c=3"]);
        let c = cfg(CookieMode::Prefix);
        let (s, v) = read(&c, false, &["a=1; SRV=s1~abc; b=2"], 0);
        assert_eq!((s.req, s.server), (b'V', Some(0)));
        assert_eq!(v, ["a=1; SRV=abc; b=2"]);
        // No `~`: the whole value is the id, nothing is stripped.
        let (s, v) = read(&c, false, &["SRV=s1"], 0);
        assert_eq!((s.req, v), (b'V', vec!["SRV=s1".to_string()]));
    }

    #[test]
    fn dates_round_trip_and_expire() {
        let now = 1_764_000_000;
        let mut d = String::new();
        encode_date(now, &mut d);
        assert_eq!(d.len(), 5);
        let back = decode_date(d.as_bytes()).unwrap();
        assert!(back >= now && back < now + 4, "{back} vs {now}");
        let mut c = cfg(CookieMode::Insert);
        c.maxidle = Some(60);
        c.maxlife = Some(3600);
        let date = |t: u32| {
            let mut s = String::new();
            encode_date(t, &mut s);
            s
        };
        let fresh = format!("SRV=s1|{}|{}", date(now - 30), date(now - 100));
        let (s, _) = read(&c, false, &[&fresh], now);
        assert_eq!((s.req, s.server), (b'V', Some(0)));
        assert!(s.last_date != 0 && s.first_date != 0);
        let idle = format!("SRV=s1|{}|{}", date(now - 120), date(now - 200));
        assert_eq!(read(&c, false, &[&idle], now).0.req, b'E');
        let old = format!("SRV=s1|{}|{}", date(now - 10), date(now - 7200));
        assert_eq!(read(&c, false, &[&old], now).0.req, b'O');
        let future = format!("SRV=s1|{}", date(now + 90_000));
        assert_eq!(read(&c, false, &[&future], now).0.req, b'E');
    }

    #[test]
    fn insert_and_its_attributes() {
        let mut c = cfg(CookieMode::Insert);
        c.domains = vec![".example.com".into(), ".example.net".into()];
        c.httponly = true;
        c.secure = true;
        c.attrs = vec!["SameSite=Lax".into()];
        c.nocache = true;
        let none = Seen {
            req: b'N',
            ..Seen::NONE
        };
        let a = answer(&c, &none, false, Some("s1"), &[], false, true, 0);
        assert_eq!(
            a.insert.as_deref(),
            Some(
                "SRV=s1; path=/; domain=.example.com; domain=.example.net; HttpOnly; Secure; \
                 SameSite=Lax"
            )
        );
        assert_eq!((a.letter, a.cache_private), (b'I', true));
        // Direct access: nothing to insert.
        let v = Seen {
            req: b'V',
            server: Some(0),
            ..Seen::NONE
        };
        assert_eq!(
            answer(&c, &v, true, Some("s1"), &[], false, true, 0).insert,
            None
        );
        // A server without a cookie clears the client's.
        let a = answer(
            &cfg(CookieMode::Insert),
            &none,
            false,
            None,
            &[],
            false,
            false,
            0,
        );
        assert_eq!(
            a.insert.as_deref(),
            Some("SRV=; Expires=Thu, 01-Jan-1970 00:00:01 GMT; path=/")
        );
        // postonly.
        c.postonly = true;
        assert_eq!(
            answer(&c, &none, false, Some("s1"), &[], false, true, 0).insert,
            None
        );
        assert!(
            answer(&c, &none, false, Some("s1"), &[], true, true, 0)
                .insert
                .is_some()
        );
    }

    #[test]
    fn server_cookies_in_each_mode() {
        let none = Seen {
            req: b'N',
            ..Seen::NONE
        };
        let sc: &[(usize, &[u8])] = &[(3, b"SRV=app; Path=/x"), (5, b"other=1")];
        // A GET without a cookie, answered by server s1 (cookie value "s1").
        let first_visit = |c: &CookieCfg| answer(c, &none, false, Some("s1"), sc, false, false, 0);
        let a = first_visit(&cfg(CookieMode::Rewrite));
        assert_eq!(
            (a.replace, a.letter),
            (vec![(3, "SRV=s1; Path=/x".into())], b'R')
        );
        let a = first_visit(&cfg(CookieMode::Prefix));
        assert_eq!(a.replace, vec![(3, "SRV=s1~app; Path=/x".into())]);
        let a = first_visit(&cfg(CookieMode::Insert));
        assert_eq!((a.delete, a.letter), (vec![3], b'I'));
        assert!(a.insert.is_some());
        let mut p = cfg(CookieMode::Insert);
        p.preserve = true;
        let a = first_visit(&p);
        assert_eq!((a.delete.len(), a.insert, a.letter), (0, None, b'P'));
        let a = first_visit(&cfg(CookieMode::Passive));
        assert_eq!((a.replace.len(), a.letter), (0, b'P'));
    }

    #[test]
    fn dated_cookies_are_refreshed() {
        let mut c = cfg(CookieMode::Insert);
        c.maxidle = Some(600);
        let now = 1_764_000_000;
        let seen = Seen {
            req: b'V',
            server: Some(0),
            last_date: now - 100,
            first_date: 0,
        };
        let a = answer(&c, &seen, true, Some("s1"), &[], false, false, now);
        let v = a.insert.expect("refreshed");
        assert_eq!(a.letter, b'U');
        let date = decode_date(&v.as_bytes()[7..12]).unwrap();
        assert!(date >= now, "{v}");
    }

    #[test]
    fn cacheability() {
        fn h<'a>(
            v: &'a [(&'static str, &'static str)],
        ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
            v.iter().copied().map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        }
        let age = ("Cache-Control", "max-age=60");
        assert!(cacheable(true, 200, h(&[age])));
        assert!(cacheable(true, 200, h(&[("ETag", "\"x\"")])));
        assert!(cacheable(
            true,
            404,
            h(&[("expires", "Wed, 21 Oct 2035 07:28:00 GMT")])
        ));
        // Neither an expiry nor a validator: caches would not store it anyway.
        assert!(!cacheable(true, 200, h(&[])));
        assert!(!cacheable(true, 200, h(&[("Cache-Control", "public")])));
        assert!(!cacheable(false, 200, h(&[age])));
        assert!(!cacheable(true, 302, h(&[age])));
        assert!(!cacheable(
            true,
            200,
            h(&[age, ("cache-control", "no-cache")])
        ));
        assert!(!cacheable(
            true,
            200,
            h(&[("Cache-Control", "public, Max-Age=0")])
        ));
        assert!(!cacheable(true, 200, h(&[age, ("Pragma", "no-cache")])));
    }
}
