//! `cache`: HAProxy's small-object RAM cache — the `cache NAME` sections, what
//! `http-request cache-use` may serve and `http-response cache-store` may keep, the shared
//! store, and `show cache`.
//!
//! One store per `cache` section, shared by every thread behind one mutex: lookups happen
//! only in proxies that say `cache-use`, hold the lock for a hash lookup, and hand out an
//! `Arc` of the object, whose bytes are then written without the lock. Objects are immutable
//! once stored. This module decides and stores; it must not do I/O (the HTTP session in
//! `stream::http` serves objects and feeds the ones being stored).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::UNIX_EPOCH;

use crate::config::Origin;
use crate::http::header_eq;

// ---------------------------------------------------------------------------------------------
// Configuration

/// HAProxy's block: the unit of `total-max-size` accounting and `show cache`'s sizes.
const BLOCK: u64 = 1024;

/// A `cache` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConf {
    pub name: String,
    /// `total-max-size`, in bytes (given in megabytes).
    pub total_max_size: u64,
    /// `max-object-size`, in bytes (default: a 256th of the total).
    pub max_object_size: u64,
    /// `max-age`, in seconds (default 60): no object is fresh for longer.
    pub max_age: u32,
    /// `process-vary on`: responses with `Vary` on managed headers are kept, one per
    /// variant.
    pub process_vary: bool,
    /// `max-secondary-entries` (default 10): variants kept per URL.
    pub max_secondary_entries: u32,
    pub origin: Origin,
}

/// A `cache` section being read.
#[derive(Debug)]
pub struct Draft {
    pub name: String,
    pub origin: Origin,
    total_mb: Option<u64>,
    max_object_size: Option<u64>,
    max_age: u32,
    process_vary: bool,
    max_secondary_entries: Option<u32>,
}

impl Draft {
    pub fn new(name: &str, origin: Origin) -> Draft {
        Draft {
            name: name.to_string(),
            origin,
            total_mb: None,
            max_object_size: None,
            max_age: 60,
            process_vary: false,
            max_secondary_entries: None,
        }
    }

    /// One line of the section.
    pub fn keyword(&mut self, w: &[String]) -> Result<(), String> {
        let kw = w[0].as_str();
        let one = || -> Result<&str, String> {
            match w {
                [_, v] => Ok(v.as_str()),
                [_] => Err(format!("'{kw}' expects an argument")),
                _ => Err(format!("'{kw}': unexpected argument '{}'", w[2])),
            }
        };
        let number = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("'{kw}' expects a positive integer (got '{v}')"))
        };
        match kw {
            "total-max-size" => {
                let mb = number(one()?)?;
                if mb == 0 || mb > 4095 {
                    return Err(format!(
                        "'total-max-size' must be between 1 and 4095 megabytes (got {mb})"
                    ));
                }
                self.total_mb = Some(mb);
            }
            "max-object-size" => {
                // 0 means the default, as in HAProxy.
                let n = number(one()?)?;
                self.max_object_size = (n > 0).then_some(n);
            }
            "max-age" => {
                let v = one()?;
                let digits = v.bytes().take_while(u8::is_ascii_digit).count();
                if digits > 0 && digits < v.len() {
                    return Err(format!(
                        "'max-age' takes a number of seconds, without a unit (got '{v}', which \
                         HAProxy would read as {} seconds)",
                        &v[..digits]
                    ));
                }
                let n = number(v)?;
                self.max_age = u32::try_from(n)
                    .map_err(|_| format!("'max-age' is too large (got {n} seconds)"))?;
            }
            "process-vary" => {
                self.process_vary = match one()? {
                    "on" => true,
                    "off" => false,
                    v => return Err(format!("'process-vary' expects 'on' or 'off' (got '{v}')")),
                };
            }
            "max-secondary-entries" => {
                let n = number(one()?)?;
                if n == 0 || n > u64::from(u32::MAX) {
                    return Err(format!(
                        "'max-secondary-entries' expects a strictly positive integer (got {n})"
                    ));
                }
                self.max_secondary_entries = Some(n as u32);
            }
            _ => {
                let known = [
                    "total-max-size",
                    "max-object-size",
                    "max-age",
                    "process-vary",
                    "max-secondary-entries",
                ];
                return Err(format!(
                    "unknown keyword '{kw}' in cache section{}",
                    crate::config::did_you_mean(kw, known)
                ));
            }
        }
        Ok(())
    }

    /// The section's settings once it is read.
    pub fn finish(self) -> Result<CacheConf, String> {
        let Some(mb) = self.total_mb else {
            return Err(format!(
                "cache '{}': 'total-max-size' is mandatory (the cache's size in megabytes)",
                self.name
            ));
        };
        let total = mb * 1024 * 1024;
        let max_object_size = self.max_object_size.unwrap_or(total / 256);
        if max_object_size > total / 2 {
            return Err(format!(
                "cache '{}': 'max-object-size' ({max_object_size} bytes) cannot be greater \
                 than half of 'total-max-size' ({} bytes)",
                self.name,
                total / 2
            ));
        }
        Ok(CacheConf {
            name: self.name,
            total_max_size: total,
            max_object_size,
            max_age: self.max_age,
            process_vary: self.process_vary,
            max_secondary_entries: self.max_secondary_entries.unwrap_or(10),
            origin: self.origin,
        })
    }
}

/// A cache named by a rule, filled when its section is read (before or after the rule).
pub type CacheRef = Arc<OnceLock<Arc<Cache>>>;

/// `cache-use NAME`, `cache-store NAME`: the cache, compared by name.
#[derive(Debug, Clone)]
pub struct Use {
    pub name: String,
    pub cache: CacheRef,
}

impl PartialEq for Use {
    fn eq(&self, o: &Use) -> bool {
        self.name == o.name
    }
}

impl Eq for Use {}

impl Use {
    /// The cache (declared: the configuration was refused otherwise).
    pub fn get(&self) -> &Arc<Cache> {
        self.cache
            .get()
            .expect("cache sections are resolved at load")
    }
}

thread_local! {
    /// The caches referred to or declared by the configuration being parsed.
    static REFS: std::cell::RefCell<crate::util::NameRefs<Arc<Cache>>> =
        std::cell::RefCell::default();
    /// The declared ones, in order (`show cache` lists them so).
    static DECLARED: std::cell::RefCell<Vec<Arc<Cache>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A rule's reference to cache `name`.
pub fn reference(name: &str) -> Use {
    Use {
        name: name.to_string(),
        cache: REFS.with(|r| r.borrow_mut().reference(name)),
    }
}

/// Records where the references of the line just parsed were made.
pub fn note_line(file: &str, line: usize) {
    REFS.with(|r| r.borrow_mut().note_line(file, line));
}

/// Declares a cache; `Err` when a section of that name was read before.
pub fn declare(conf: CacheConf) -> Result<(), String> {
    let name = conf.name.clone();
    let c = Arc::new(Cache::new(conf));
    REFS.with(|r| r.borrow_mut().declare(&name, c.clone()))
        .map_err(|prev| {
            format!(
                "cache '{name}' is already defined at {}:{}",
                prev.conf.origin.file, prev.conf.origin.line
            )
        })?;
    DECLARED.with(|d| d.borrow_mut().push(c));
    Ok(())
}

/// Starts a new configuration.
pub fn reset() {
    REFS.with(|r| r.borrow_mut().clear());
    DECLARED.with(|d| d.borrow_mut().clear());
}

/// Caches referred to but never declared, with where they were first named.
pub fn undeclared() -> Vec<(String, crate::util::At)> {
    REFS.with(|r| r.borrow().undeclared())
}

/// The declared caches, in order (for the configuration).
pub fn take_declared() -> Vec<Arc<Cache>> {
    DECLARED.with(|d| std::mem::take(&mut *d.borrow_mut()))
}

// ---------------------------------------------------------------------------------------------
// The store

/// A stored response.
#[derive(Debug)]
pub struct Object {
    /// The status line, without its CRLF.
    pub status_line: Box<[u8]>,
    /// The header fields as `cache-store` saw them, each line with its CRLF, without framing
    /// (`content-length`, `transfer-encoding`) nor hop-by-hop fields.
    pub fields: Box<[u8]>,
    /// `fields` has the `content-length` (else the length is added when it is served).
    pub has_length: bool,
    /// The payload (de-chunked).
    pub body: bytes::Bytes,
    /// Unix time (s) it was stored, minus the `Age` the server reported.
    pub born: i64,
    /// Unix time (s) past which it is not served.
    pub expires: i64,
    /// Its variant (`process-vary`): which managed request headers it varies on, and their
    /// values' digest in the request that stored it.
    pub vary: Vary,
    /// `ETag`, and `Last-Modified` (else `Date`, else when it was stored): conditional
    /// requests.
    pub etag: Option<Box<[u8]>>,
    pub last_modified: i64,
    /// HAProxy's key digest, shown by `show cache`.
    pub hash: u32,
    blocks: u64,
}

impl Object {
    /// Bytes held (`show cache`'s size).
    pub fn size(&self) -> usize {
        self.status_line.len() + self.fields.len() + self.body.len()
    }
}

/// The variant part of a stored object (`process-vary on`): which managed request headers
/// its `Vary` names, the content coding of the response (`accept-encoding`: a request
/// matches when it accepts that coding, as in HAProxy), and a digest of the `Referer` of the
/// request that stored it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Vary {
    pub sig: u8,
    /// The response's content codings, as [`CODINGS`] bits (identity when none).
    pub encoding: u32,
    pub referer: u32,
}

/// `Vary: accept-encoding`.
pub const VARY_AE: u8 = 1;
/// `Vary: referer`.
pub const VARY_REFERER: u8 = 2;

/// What a request says of the headers a response may vary on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReqVary {
    /// `Accept-Encoding`, if the request has one.
    pub accept: Option<Accept>,
    pub referer: u32,
}

/// A request's `Accept-Encoding`: the codings it accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accept {
    pub codings: u32,
    /// `*` (with a non-zero weight): any coding.
    pub any: bool,
    /// `identity;q=0`.
    pub no_identity: bool,
}

impl Vary {
    /// Whether the object may answer a request saying `r`.
    pub fn matches(&self, r: &ReqVary) -> bool {
        if self.sig & VARY_REFERER != 0 && self.referer != r.referer {
            return false;
        }
        if self.sig & VARY_AE == 0 {
            return true;
        }
        let Some(a) = r.accept else { return true };
        (0..32).filter(|b| self.encoding & (1 << b) != 0).all(|b| {
            let bit = 1u32 << b;
            if bit == IDENTITY {
                !a.no_identity
            } else {
                a.any || a.codings & bit != 0
            }
        })
    }

    /// `show cache`'s `vary:` column: the coding bits (little-endian), then the referer
    /// digest; zero without `Vary`.
    fn shown(&self) -> u64 {
        if self.sig == 0 {
            return 0;
        }
        let e = self.encoding.to_le_bytes();
        let r = self.referer.to_be_bytes();
        u64::from_be_bytes([e[0], e[1], e[2], e[3], r[0], r[1], r[2], r[3]])
    }
}

/// One cache: its settings and its objects.
pub struct Cache {
    pub conf: CacheConf,
    store: Mutex<Store>,
    /// Lookups and hits, for `show cache` (the proxies count theirs for the stats).
    pub lookups: AtomicU64,
    pub hits: AtomicU64,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cache({})", self.conf.name)
    }
}

/// The variants stored under one key, each with its place in the use order.
type Variants = Vec<(u64, Arc<Object>)>;

#[derive(Default)]
struct Store {
    /// Objects by primary key (host and URI), one per variant.
    entries: HashMap<Box<[u8]>, Variants, foldhash::fast::RandomState>,
    /// Least recently used first: use number -> primary key.
    lru: BTreeMap<u64, Box<[u8]>>,
    next: u64,
    used_blocks: u64,
}

impl Store {
    fn touch(&mut self, key: &[u8], i: usize) {
        let Some(list) = self.entries.get_mut(key) else {
            return;
        };
        let old = list[i].0;
        self.next += 1;
        list[i].0 = self.next;
        if let Some(k) = self.lru.remove(&old) {
            self.lru.insert(self.next, k);
        }
    }

    fn remove(&mut self, key: &[u8], i: usize) {
        let Some(list) = self.entries.get_mut(key) else {
            return;
        };
        let (seq, obj) = list.swap_remove(i);
        self.lru.remove(&seq);
        self.used_blocks -= obj.blocks;
        if list.is_empty() {
            self.entries.remove(key);
        }
    }

    /// Frees the least recently used object.
    fn evict_one(&mut self) -> bool {
        let Some((&seq, _)) = self.lru.iter().next() else {
            return false;
        };
        let key = self.lru.get(&seq).cloned().unwrap_or_default();
        match self
            .entries
            .get(&key)
            .and_then(|l| l.iter().position(|e| e.0 == seq))
        {
            Some(i) => self.remove(&key, i),
            None => {
                self.lru.remove(&seq);
            }
        }
        true
    }
}

impl Cache {
    pub fn new(conf: CacheConf) -> Cache {
        Cache {
            conf,
            store: Mutex::default(),
            lookups: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        // A panic elsewhere while the lock was held leaves a consistent store (every
        // mutation completes before it can fail): keep serving.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fresh object for `key` matching the request's variant digests, if any.
    pub fn get(&self, key: &[u8], vary: &ReqVary, now: i64) -> Option<Arc<Object>> {
        let mut st = self.store();
        loop {
            let list = st.entries.get(key)?;
            let i = list.iter().position(|(_, o)| o.vary.matches(vary))?;
            if list[i].1.expires <= now {
                // Expired: gone, and another variant may still match.
                st.remove(key, i);
                continue;
            }
            let obj = list[i].1.clone();
            st.touch(key, i);
            return Some(obj);
        }
    }

    /// Stores `obj` under `key`, in place of the object of the same variant; older objects
    /// make room. `false` when it cannot be kept (the URL has its `max-secondary-entries`
    /// variants, all fresh).
    fn insert(&self, key: Box<[u8]>, mut obj: Object, now: i64) -> bool {
        obj.blocks = (obj.size() as u64).div_ceil(BLOCK).max(1);
        let total_blocks = self.conf.total_max_size / BLOCK;
        let mut st = self.store();
        if let Some(list) = st.entries.get(&*key) {
            if let Some(i) = list.iter().position(|(_, o)| o.vary == obj.vary) {
                st.remove(&key, i);
            } else if list.len() as u64 >= u64::from(self.conf.max_secondary_entries) {
                // Expired variants give their place; fresh ones keep it.
                match list.iter().position(|(_, o)| o.expires <= now) {
                    Some(i) => st.remove(&key, i),
                    None => return false,
                }
            }
        }
        while st.used_blocks + obj.blocks > total_blocks {
            if !st.evict_one() {
                return false;
            }
        }
        st.used_blocks += obj.blocks;
        st.next += 1;
        let seq = st.next;
        st.lru.insert(seq, key.clone());
        st.entries
            .entry(key)
            .or_default()
            .push((seq, Arc::new(obj)));
        true
    }

    /// Forgets every variant stored under `key` (a successful unsafe request on it).
    pub fn invalidate(&self, key: &[u8]) {
        let mut st = self.store();
        while st.entries.contains_key(key) {
            st.remove(key, 0);
        }
    }

    /// `show cache`: this cache's lines, in HAProxy's layout (addresses are ids). The lock
    /// is held only to copy what is printed.
    pub fn show(&self, out: &mut String, now: i64) {
        use std::fmt::Write;
        let total_blocks = self.conf.total_max_size / BLOCK;
        // (id, hash, vary, size, blocks, readers, expires): one per key, as HAProxy's list
        // does not show the other variants.
        let mut rows: Vec<(usize, u32, u64, usize, u64, usize, i64)> = {
            let st = self.store();
            st.entries
                .values()
                .filter_map(|l| l.first())
                .map(|(_, o)| {
                    let o: &Arc<Object> = o;
                    (
                        Arc::as_ptr(o) as usize,
                        o.hash,
                        o.vary.shown(),
                        o.size(),
                        o.blocks,
                        Arc::strong_count(o) - 1,
                        o.expires,
                    )
                })
                .collect()
        };
        // HAProxy walks its tree of keys: by hash.
        rows.sort_by_key(|r| (r.1, r.0));
        // HAProxy counts the blocks of objects no transaction is reading as available (they
        // may be reused).
        let busy: u64 = rows.iter().filter(|r| r.5 > 0).map(|r| r.4).sum();
        let base = self as *const Cache as usize;
        let _ = writeln!(
            out,
            "{:#x}: {} (shctx:{:#x}, available blocks:{})",
            base,
            self.conf.name,
            base + 0x1000,
            total_blocks.saturating_sub(busy)
        );
        for (id, hash, vary, size, blocks, readers, expires) in rows {
            let _ = writeln!(
                out,
                "{id:#x} hash:{hash} vary:{vary:#018x} size:{size} ({blocks} blocks), \
                 refcount:{readers}, expire:{}",
                expires - now
            );
        }
    }
}

/// `show cache`: every cache and its objects.
pub fn cli_show(caches: &[Arc<Cache>]) -> String {
    let now = now();
    let mut out = String::new();
    for c in caches {
        c.show(&mut out, now);
    }
    out.push('\n');
    out
}

/// Unix time in seconds, signed: objects' ages and expiry dates are differences.
fn now() -> i64 {
    crate::backend::unix_now() as i64
}

// ---------------------------------------------------------------------------------------------
// What may be served and stored (HAProxy 2.6's rules, checked against it)

/// What a request allows, as `cache-use` judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPolicy {
    /// A stored object may answer it.
    pub serve: bool,
    /// Its response may be stored.
    pub store: bool,
}

/// Comma-separated directives of a header value, trimmed.
fn directives(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|d| !d.is_empty())
}

fn starts_with_ci(v: &[u8], p: &[u8]) -> bool {
    v.len() >= p.len() && v[..p.len()].eq_ignore_ascii_case(p)
}

/// A request may use the cache if it is a GET or a HEAD in HTTP/1.1 without credentials.
/// `Cache-Control: no-cache`, `max-age`, `max-stale`, `min-fresh` (or a lone `Pragma:
/// no-cache`) skip the lookup but let the response be stored; `no-store` is the reverse.
/// Only a GET's response is stored.
pub fn request_policy<'a>(
    method: &[u8],
    version_minor: u8,
    headers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> RequestPolicy {
    let no = RequestPolicy {
        serve: false,
        store: false,
    };
    let get = method == b"GET";
    if !(get || method == b"HEAD") || version_minor == 0 {
        return no;
    }
    let (mut ignore, mut no_store, mut cc, mut pragma) = (false, false, false, false);
    for (n, v) in headers {
        if header_eq(n, b"authorization") {
            return no;
        } else if header_eq(n, b"pragma") {
            pragma |= v.trim_ascii().eq_ignore_ascii_case(b"no-cache");
        } else if header_eq(n, b"cache-control") {
            cc = true;
            for d in directives(v) {
                if [&b"max-age"[..], b"no-cache", b"max-stale", b"min-fresh"]
                    .iter()
                    .any(|p| starts_with_ci(d, p))
                {
                    ignore = true;
                } else if starts_with_ci(d, b"no-store") {
                    no_store = true;
                }
            }
        }
    }
    // RFC 9111 §5.4: Pragma is ignored when Cache-Control is present.
    ignore |= pragma && !cc;
    RequestPolicy {
        serve: !ignore,
        store: get && !no_store,
    }
}

/// The primary key: the `Host` header and the request target, as received.
pub fn key(host: &[u8], uri: &[u8]) -> Box<[u8]> {
    let mut k = Vec::with_capacity(host.len() + uri.len());
    k.extend_from_slice(host);
    k.extend_from_slice(uri);
    k.into_boxed_slice()
}

/// The 32 bits `show cache` prints of a key.
pub fn key_hash(key: &[u8]) -> u32 {
    xxhash_rust::xxh32::xxh32(key, 0)
}

/// Content codings HAProxy's cache knows, by bit (its order: `show cache` prints them).
const CODINGS: &[(&[u8], u32)] = &[
    (b"gzip", 1 << 0),
    (b"x-gzip", 1 << 0),
    (b"deflate", 1 << 1),
    (b"br", 1 << 2),
    (b"compress", 1 << 3),
    (b"x-compress", 1 << 3),
    (b"aes128gcm", 1 << 4),
    (b"exi", 1 << 5),
    (b"pack200-gzip", 1 << 6),
    (b"zstd", 1 << 7),
    (b"identity", IDENTITY),
];
const IDENTITY: u32 = 1 << 8;

fn coding_bit(c: &[u8]) -> Option<u32> {
    CODINGS
        .iter()
        .find(|(k, _)| c.eq_ignore_ascii_case(k))
        .map(|&(_, b)| b)
}

/// The request's side of the headers a response may vary on (`process-vary on`).
pub fn request_vary<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> ReqVary {
    let mut v = ReqVary::default();
    for (n, val) in headers {
        if header_eq(n, b"accept-encoding") {
            let a = v.accept.get_or_insert_with(Accept::default);
            for d in directives(val) {
                let mut parts = d.split(|&b| b == b';');
                let coding = parts.next().unwrap_or(b"").trim_ascii();
                // `;q=0` refuses the coding.
                let refused = parts.any(|p| {
                    let p = p.trim_ascii();
                    p.len() > 2
                        && starts_with_ci(p, b"q=")
                        && p[2..].iter().all(|&b| b == b'0' || b == b'.')
                });
                if coding == b"*" {
                    a.any |= !refused;
                } else if let Some(bit) = coding_bit(coding) {
                    if refused {
                        a.no_identity |= bit == IDENTITY;
                    } else {
                        a.codings |= bit;
                    }
                }
            }
        } else if header_eq(n, b"referer") {
            v.referer = xxhash_rust::xxh32::xxh32(val, 1);
        }
    }
    v
}

/// A response `cache-store` may keep: until when, and what the object records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storable {
    pub born: i64,
    pub expires: i64,
    /// Which managed request headers it varies on.
    pub vary: Vary,
    pub etag: Option<Box<[u8]>>,
    /// `Last-Modified`, else `Date`, else now (what `If-Modified-Since` is compared with).
    pub last_modified: i64,
}

/// An HTTP date (IMF-fixdate, RFC 850 or asctime) as Unix seconds.
pub fn parse_date(v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.trim();
    let t = httpdate::parse_http_date(s).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64)
}

/// Whether a 200 response may be stored, per HAProxy 2.6: not `private`, `no-store`,
/// `no-cache`, `max-age=0`, `s-maxage=0` nor `Pragma: no-cache`; fresh for a while
/// (`s-maxage`, else `max-age`, else `Expires`, capped by the section's `max-age`, minus the
/// `Age` it already has) or carrying a validator (`ETag`, `Last-Modified`: fresh for the
/// section's `max-age`); no `Vary`, or (`process-vary on`) one on managed headers only.
pub fn storable<'a>(
    conf: &CacheConf,
    status: u16,
    headers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    req: &ReqVary,
    now: i64,
) -> Option<Storable> {
    if status != 200 {
        return None;
    }
    let mut s_maxage: Option<i64> = None;
    let mut max_age: Option<i64> = None;
    let mut expires: Option<Option<i64>> = None;
    let mut age: i64 = 0;
    let mut validator = false;
    let mut etag = None;
    let mut last_modified = None;
    let mut date = None;
    let mut encoding = 0u32;
    let mut vary_sig = 0u8;
    let mut vary_seen = false;
    for (n, v) in headers {
        if header_eq(n, b"cache-control") {
            for d in directives(v) {
                let l = d.to_ascii_lowercase();
                if starts_with_ci(&l, b"private")
                    || starts_with_ci(&l, b"no-store")
                    || starts_with_ci(&l, b"no-cache")
                {
                    return None;
                }
                let num = |p: &[u8]| -> Option<Option<i64>> {
                    let rest = l.strip_prefix(p)?;
                    Some(std::str::from_utf8(rest).ok().and_then(|t| t.parse().ok()))
                };
                if let Some(x) = num(b"s-maxage=") {
                    match x {
                        Some(0) => return None,
                        Some(x) => s_maxage = s_maxage.or(Some(x)),
                        None => {}
                    }
                } else if let Some(x) = num(b"max-age=") {
                    match x {
                        Some(0) => return None,
                        Some(x) => max_age = max_age.or(Some(x)),
                        None => {}
                    }
                }
            }
        } else if header_eq(n, b"pragma") {
            if v.trim_ascii().eq_ignore_ascii_case(b"no-cache") {
                return None;
            }
        } else if header_eq(n, b"expires") {
            expires.get_or_insert(parse_date(v));
        } else if header_eq(n, b"age") {
            // An `Age` that is not a number makes the response unusable.
            age = std::str::from_utf8(v.trim_ascii()).ok()?.parse().ok()?;
        } else if header_eq(n, b"etag") {
            validator = true;
            etag.get_or_insert_with(|| Box::<[u8]>::from(v.trim_ascii()));
        } else if header_eq(n, b"last-modified") {
            validator = true;
            last_modified = last_modified.or(parse_date(v));
        } else if header_eq(n, b"date") {
            date = date.or(parse_date(v));
        } else if header_eq(n, b"content-encoding") {
            // An unknown coding counts as none, as in HAProxy.
            for c in directives(v) {
                encoding |= coding_bit(c).unwrap_or(0);
            }
        } else if header_eq(n, b"vary") {
            vary_seen = true;
            if !conf.process_vary {
                return None;
            }
            for d in directives(v) {
                if d.eq_ignore_ascii_case(b"accept-encoding") {
                    vary_sig |= VARY_AE;
                } else if d.eq_ignore_ascii_case(b"referer") {
                    vary_sig |= VARY_REFERER;
                } else {
                    return None;
                }
            }
        }
    }
    if vary_seen && vary_sig == 0 {
        // `Vary:` with nothing in it.
        return None;
    }
    // The freshness the response states, capped by the section's `max-age`; a validator
    // alone gets the section's. An `Age` beyond what the response states makes it stale;
    // below, it does not shorten the object's life here (HAProxy counts it only in the
    // `Age` it serves).
    let explicit = s_maxage
        .or(max_age)
        .or_else(|| expires.flatten().map(|e| e - now));
    let ttl = match explicit {
        Some(t) if t <= 0 || age > t => return None,
        Some(t) => t.min(i64::from(conf.max_age)),
        None if validator => i64::from(conf.max_age),
        None => return None,
    };
    if ttl <= 0 {
        return None;
    }
    let vary = if vary_sig == 0 {
        Vary::default()
    } else {
        Vary {
            sig: vary_sig,
            encoding: if encoding == 0 { IDENTITY } else { encoding },
            referer: req.referer,
        }
    };
    Some(Storable {
        born: now - age,
        expires: now + ttl,
        vary,
        etag,
        last_modified: last_modified.or(date).unwrap_or(now),
    })
}

/// Whether a conditional request is answered `304 Not Modified` by the object: an
/// `If-None-Match` listing its entity tag (weak comparison) or `*`; without one, an
/// `If-Modified-Since` no earlier than its `Last-Modified`.
pub fn not_modified<'a>(obj: &Object, headers: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> bool {
    let weak = |t: &[u8]| -> Vec<u8> { t.strip_prefix(b"W/").unwrap_or(t).to_vec() };
    let mut inm: Option<bool> = None;
    let mut ims: Option<i64> = None;
    for (n, v) in headers {
        if header_eq(n, b"if-none-match") {
            let hit = directives(v)
                .any(|t| t == b"*" || obj.etag.as_deref().is_some_and(|e| weak(t) == weak(e)));
            inm = Some(inm.unwrap_or(false) || hit);
        } else if header_eq(n, b"if-modified-since") {
            ims = ims.or(parse_date(v));
        }
    }
    match inm {
        Some(m) => m,
        None => ims.is_some_and(|since| obj.last_modified <= since),
    }
}

/// What `cache-use` found for a request, kept with its transaction.
pub struct Lookup {
    pub cache: Arc<Cache>,
    pub key: Box<[u8]>,
    pub vary: ReqVary,
    /// Its response may be stored (a GET that did not say `no-store`).
    pub store: bool,
    /// The object that answers it.
    pub hit: Option<Arc<Object>>,
}

/// A response on its way into the cache: its head as `cache-store` saw it, its body as it
/// passes.
pub struct Filling {
    cache: Arc<Cache>,
    key: Box<[u8]>,
    obj: Object,
    body: Vec<u8>,
    /// `false` once the object outgrew `max-object-size`.
    ok: bool,
}

impl Filling {
    /// Starts storing a response: `status_line` without CRLF, `fields` the header lines
    /// (each with its CRLF, framing and hop-by-hop fields left out).
    pub fn start(
        cache: &Arc<Cache>,
        key: &[u8],
        status_line: &[u8],
        fields: Vec<u8>,
        s: Storable,
    ) -> Option<Filling> {
        let limit = cache.conf.max_object_size as usize;
        if status_line.len() + fields.len() >= limit {
            return None;
        }
        let has_length = fields
            .split(|&b| b == b'\n')
            .any(|line| starts_with_ci(line, b"content-length:"));
        Some(Filling {
            cache: cache.clone(),
            key: key.into(),
            obj: Object {
                status_line: status_line.into(),
                fields: fields.into_boxed_slice(),
                has_length,
                body: bytes::Bytes::new(),
                born: s.born,
                expires: s.expires,
                vary: s.vary,
                etag: s.etag,
                last_modified: s.last_modified,
                hash: key_hash(key),
                blocks: 0,
            },
            body: Vec::new(),
            ok: true,
        })
    }

    /// Whether a body of `len` bytes may be stored at all.
    pub fn fits(&self, len: u64) -> bool {
        (self.obj.size() as u64).saturating_add(len) < self.cache.conf.max_object_size
    }

    /// Still to be stored (`false` once it outgrew `max-object-size`).
    pub fn ok(&self) -> bool {
        self.ok
    }

    /// Payload bytes as they pass.
    pub fn push(&mut self, data: &[u8]) {
        if !self.ok {
            return;
        }
        if self.obj.size() + self.body.len() + data.len()
            >= self.cache.conf.max_object_size as usize
        {
            self.ok = false;
            self.body = Vec::new();
            return;
        }
        self.body.extend_from_slice(data);
    }

    /// The whole body has passed: the object is stored.
    pub fn finish(mut self, now: i64) {
        if !self.ok {
            return;
        }
        // Exactly its size: the store counts what objects hold.
        self.obj.body = bytes::Bytes::from(self.body.into_boxed_slice());
        self.cache.insert(self.key, self.obj, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdrs<'a>(h: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        h.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()))
    }

    fn conf(process_vary: bool) -> CacheConf {
        let mut d = Draft::new(
            "c",
            Origin {
                file: "f".into(),
                line: 1,
            },
        );
        d.keyword(&["total-max-size".into(), "1".into()]).unwrap();
        if process_vary {
            d.keyword(&["process-vary".into(), "on".into()]).unwrap();
        }
        d.finish().unwrap()
    }

    #[test]
    fn request_cache_control_decides_lookup_and_storage() {
        let p = |m: &str, v: u8, h: &[(&str, &str)]| request_policy(m.as_bytes(), v, hdrs(h));
        let both = RequestPolicy {
            serve: true,
            store: true,
        };
        assert_eq!(p("GET", 1, &[]), both);
        assert!(!p("GET", 0, &[]).serve);
        assert_eq!(
            p("POST", 1, &[]),
            RequestPolicy {
                serve: false,
                store: false
            }
        );
        assert_eq!(
            p("HEAD", 1, &[]),
            RequestPolicy {
                serve: true,
                store: false
            }
        );
        assert!(!p("GET", 1, &[("Authorization", "Basic x")]).serve);
        for cc in [
            "no-cache",
            "max-age=5",
            "max-stale",
            "min-fresh=3",
            "public, Max-Age=1",
        ] {
            let r = p("GET", 1, &[("Cache-Control", cc)]);
            assert_eq!(
                r,
                RequestPolicy {
                    serve: false,
                    store: true
                },
                "{cc}"
            );
        }
        let r = p("GET", 1, &[("Cache-Control", "no-store")]);
        assert_eq!(
            r,
            RequestPolicy {
                serve: true,
                store: false
            }
        );
        assert!(!p("GET", 1, &[("Pragma", "no-cache")]).serve);
        // Pragma is ignored next to a Cache-Control.
        assert!(
            p(
                "GET",
                1,
                &[("Pragma", "no-cache"), ("Cache-Control", "only-if-cached")]
            )
            .serve
        );
    }

    #[test]
    fn freshness_comes_from_s_maxage_then_max_age_then_expires_capped_by_the_section() {
        let c = conf(false);
        let now = 1_800_000_000;
        let ttl = |h: &[(&str, &str)]| {
            storable(&c, 200, hdrs(h), &ReqVary::default(), now).map(|s| s.expires - now)
        };
        assert_eq!(ttl(&[("Cache-Control", "s-maxage=4, max-age=30")]), Some(4));
        assert_eq!(ttl(&[("Cache-Control", "max-age=30, s-maxage=4")]), Some(4));
        assert_eq!(ttl(&[("Cache-Control", "max-age=100")]), Some(60));
        assert_eq!(
            ttl(&[("Cache-Control", "max-age=6"), ("Age", "2")]),
            Some(6)
        );
        assert_eq!(ttl(&[("Cache-Control", "max-age=6"), ("Age", "7")]), None);
        assert_eq!(ttl(&[("Cache-Control", "max-age=6"), ("Age", "x")]), None);
        assert_eq!(ttl(&[("ETag", "\"a\"")]), Some(60));
        assert_eq!(ttl(&[("Last-Modified", "garbage")]), Some(60));
        assert_eq!(ttl(&[("Cache-Control", "public")]), None);
        assert_eq!(ttl(&[("Cache-Control", "max-age=abc")]), None);
        let in_30 = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(now as u64 + 30));
        assert_eq!(ttl(&[("Expires", &in_30)]), Some(30));
        assert_eq!(
            ttl(&[("Expires", "0"), ("Cache-Control", "max-age=9")]),
            Some(9)
        );
        for blocked in [
            "private",
            "no-store",
            "no-cache=\"set-cookie\"",
            "max-age=0",
        ] {
            assert_eq!(ttl(&[("Cache-Control", blocked), ("ETag", "\"a\"")]), None);
        }
        assert_eq!(ttl(&[("Pragma", "no-cache"), ("ETag", "\"a\"")]), None);
        assert_eq!(ttl(&[("Vary", "accept-encoding"), ("ETag", "\"a\"")]), None);
        assert_eq!(
            storable(
                &c,
                404,
                hdrs(&[("ETag", "\"a\"")]),
                &ReqVary::default(),
                now
            ),
            None
        );
    }

    use std::time::Duration;

    #[test]
    fn accept_encoding_matches_the_coding_of_the_stored_response() {
        let c = conf(true);
        let stored = |ce: Option<&str>| {
            let mut h = vec![("Vary", "Accept-Encoding"), ("ETag", "\"a\"")];
            if let Some(ce) = ce {
                h.push(("Content-Encoding", ce));
            }
            storable(&c, 200, hdrs(&h), &ReqVary::default(), 0)
                .unwrap()
                .vary
        };
        let req = |ae: Option<&str>| match ae {
            Some(v) => request_vary(hdrs(&[("Accept-Encoding", v)])),
            None => request_vary(hdrs(&[])),
        };
        let gzip = stored(Some("gzip"));
        for ok in [
            Some("gzip"),
            Some("GZip, br"),
            Some("*"),
            Some("x-gzip"),
            None,
        ] {
            assert!(gzip.matches(&req(ok)), "{ok:?}");
        }
        for no in ["br", "gzip;q=0", "identity", "br, *;q=0"] {
            assert!(!gzip.matches(&req(Some(no))), "{no}");
        }
        let plain = stored(None);
        assert!(plain.matches(&req(Some("br"))));
        assert!(!plain.matches(&req(Some("gzip, identity;q=0"))));
        let both = stored(Some("gzip, br"));
        assert!(both.matches(&req(Some("br, gzip"))));
        assert!(!both.matches(&req(Some("gzip"))));
        // An unknown coding counts as identity.
        assert_eq!(stored(Some("xyz")).encoding, IDENTITY);
        assert_eq!(plain.shown(), 0x0001_0000_0000_0000);
        assert_eq!(gzip.shown(), 0x0100_0000_0000_0000);
    }

    #[test]
    fn least_recently_used_goes_first_and_variants_are_bounded() {
        let mut c = conf(true);
        c.max_secondary_entries = 2;
        c.max_object_size = 400_000;
        let cache = Cache::new(c);
        let obj = |size: usize, referer: u32| Object {
            status_line: b"HTTP/1.1 200 OK"[..].into(),
            fields: Box::default(),
            has_length: false,
            body: bytes::Bytes::from(vec![0u8; size]),
            born: 0,
            expires: 100,
            vary: Vary {
                sig: VARY_REFERER,
                encoding: IDENTITY,
                referer,
            },
            etag: None,
            last_modified: 0,
            hash: 0,
            blocks: 0,
        };
        let r = |referer| ReqVary {
            accept: None,
            referer,
        };
        for k in [&b"a"[..], b"b", b"c"] {
            assert!(cache.insert(k.into(), obj(300_000, 0), 1));
        }
        assert!(cache.get(b"a", &r(0), 1).is_some());
        assert!(cache.insert(b"d"[..].into(), obj(300_000, 0), 1));
        assert!(
            cache.get(b"b", &r(0), 1).is_none(),
            "b was the least recently used"
        );
        assert!(cache.get(b"a", &r(0), 1).is_some());
        // Variants: two per key; a third is refused while they are fresh.
        assert!(cache.insert(b"v"[..].into(), obj(10, 1), 1));
        assert!(cache.insert(b"v"[..].into(), obj(10, 2), 1));
        assert!(!cache.insert(b"v"[..].into(), obj(10, 3), 1));
        assert!(cache.get(b"v", &r(2), 1).is_some());
        assert!(cache.get(b"v", &r(3), 1).is_none());
        // Expired: not served, and gone.
        assert!(cache.get(b"v", &r(1), 100).is_none());
        cache.invalidate(b"v");
        assert!(cache.get(b"v", &r(2), 1).is_none());
    }

    #[test]
    fn section_settings_and_their_errors() {
        let mut d = Draft::new(
            "c",
            Origin {
                file: "f".into(),
                line: 1,
            },
        );
        let kw = |d: &mut Draft, w: &[&str]| {
            d.keyword(&w.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert!(kw(&mut d, &["total-max-size", "4096"]).is_err());
        assert!(kw(&mut d, &["total-max-size", "4m"]).is_err());
        assert!(
            kw(&mut d, &["max-age", "1m"])
                .unwrap_err()
                .contains("read as 1 seconds")
        );
        assert!(
            kw(&mut d, &["max-age", "5é"]).is_err(),
            "no panic on a multi-byte unit"
        );
        assert!(kw(&mut d, &["max-age", "é"]).is_err());
        assert!(kw(&mut d, &["process-vary", "yes"]).is_err());
        assert!(kw(&mut d, &["max-secondary-entries", "0"]).is_err());
        assert!(kw(&mut d, &["total-max-size", "2"]).is_ok());
        assert!(kw(&mut d, &["max-object-size", "0"]).is_ok());
        let c = d.finish().unwrap();
        assert_eq!(c.total_max_size, 2 << 20);
        assert_eq!(c.max_object_size, (2 << 20) / 256, "0 means the default");
        assert_eq!(
            (c.max_age, c.process_vary, c.max_secondary_entries),
            (60, false, 10)
        );
    }
}
