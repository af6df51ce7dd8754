//! `map` files and ACL pattern files: reading a file once however many rules name it, and
//! looking a sample up in it the way HAProxy's `map_*` converters and `acl ... -f FILE` do.
//!
//! A map file holds one `key value` per line (`#` comments and blank lines skipped, leading
//! blanks stripped, the value running to the end of the line without trailing blanks); a
//! pattern file holds one pattern per line. Lookups never lock: a file is read when the
//! configuration is, and each file is a pattern reference ([`PatRef`]) that the runtime API
//! (`show|get|add|set|del|clear|prepare|commit map|acl`) changes by building a new version of
//! the whole file, with the indexes its users need, and swapping it in atomically: a lookup
//! sees the old contents or the new, never a mix. A change costs time in proportion to the
//! file's size, on the CLI's side. This module knows nothing of requests.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use regex::bytes::{Regex, RegexBuilder};

use crate::config::IpNet;

// ---------------------------------------------------------------------------------------------
// Types.

/// One line of a file: its key (or pattern) and, for a map, its value.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: Box<str>,
    pub value: Box<str>,
    /// Its line in the file, for error messages (0: added at run time).
    pub line: usize,
    /// Unique in the process: the first column of `show map`, and the `#<ref>` of
    /// `set map`/`del map`.
    pub uid: u64,
}

/// The next [`Entry::uid`].
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

impl Entry {
    pub fn new(key: &str, value: &str, line: usize) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
            line,
            uid: NEXT_UID.fetch_add(1, Relaxed),
        }
    }
}

/// What a sample looked up in a map is turned into (the map converter's output type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Str,
    Int,
    Ip,
}

impl ValueType {
    /// Whether `v` reads as this type, as HAProxy checks when it loads or adds a value.
    pub fn accepts(self, v: &str) -> bool {
        match self {
            ValueType::Str => true,
            ValueType::Int => v.trim().parse::<i64>().is_ok(),
            ValueType::Ip => v.trim().parse::<IpAddr>().is_ok(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            ValueType::Str => "string",
            ValueType::Int => "integer",
            ValueType::Ip => "address",
        }
    }
}

/// A pattern file as the configuration and the runtime API share it (HAProxy's pattern
/// reference). Lookups load the current version; the CLI replaces it whole.
#[derive(Debug)]
pub struct PatRef {
    /// `#<id>` in `show map` / `show acl`: unique among the configuration's files.
    pub id: usize,
    pub path: String,
    /// Read as a map (`key value` lines) rather than one pattern per line.
    pub map: bool,
    cur: ArcSwap<PatFile>,
    /// Where the configuration uses it, and what its users need of every version.
    users: Mutex<Users>,
    /// Serialises changes, and holds the versions being prepared.
    edit: Mutex<Versions>,
}

#[derive(Debug, Default)]
struct Users {
    /// ("map" or "acl", file, line) of each use.
    at: Vec<(&'static str, String, usize)>,
    /// The indexes lookups use: (match, -i), each once.
    idx: Vec<(Match, bool)>,
    /// The types values must read as (map converters' output types).
    values: Vec<ValueType>,
}

/// `prepare`/`commit` versions: entries added to a version become the file at its commit.
#[derive(Debug, Default)]
struct Versions {
    curr: u32,
    next: u32,
    pending: BTreeMap<u32, Vec<Entry>>,
}

/// How a sample is compared with the keys (`map_<match>`, or an ACL's `-m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Match {
    Str,
    Beg,
    Sub,
    Dir,
    Dom,
    End,
    Reg,
    Int,
    Ip,
}

/// Networks indexed by prefix length: a lookup masks the address once per length present
/// (a few, even for a 100k-line blocklist) instead of testing every network. v4-mapped
/// IPv6 networks and addresses count as IPv4, as HAProxy compares them.
#[derive(Debug, Default)]
pub struct NetIndex {
    /// Most specific first; masked address → the first entry with that network.
    v4: Vec<(u8, HashMap<u32, usize>)>,
    v6: Vec<(u8, HashMap<u128, usize>)>,
}

impl NetIndex {
    pub fn build(nets: impl IntoIterator<Item = (IpNet, usize)>) -> NetIndex {
        let mut v4: HashMap<u8, HashMap<u32, usize>> = HashMap::new();
        let mut v6: HashMap<u8, HashMap<u128, usize>> = HashMap::new();
        for (n, i) in nets {
            match n.addr {
                IpAddr::V4(a) => {
                    v4.entry(n.prefix)
                        .or_default()
                        .entry(u32::from(a) & mask32(n.prefix))
                        .or_insert(i);
                }
                IpAddr::V6(a) => match a.to_ipv4_mapped() {
                    Some(m) if n.prefix >= 96 => {
                        let p = n.prefix - 96;
                        v4.entry(p)
                            .or_default()
                            .entry(u32::from(m) & mask32(p))
                            .or_insert(i);
                    }
                    _ => {
                        v6.entry(n.prefix)
                            .or_default()
                            .entry(u128::from(a) & mask128(n.prefix))
                            .or_insert(i);
                    }
                },
            }
        }
        let mut v4: Vec<_> = v4.into_iter().collect();
        let mut v6: Vec<_> = v6.into_iter().collect();
        v4.sort_by_key(|e| std::cmp::Reverse(e.0));
        v6.sort_by_key(|e| std::cmp::Reverse(e.0));
        NetIndex { v4, v6 }
    }

    /// The entry of the most specific network holding `ip`.
    pub fn lookup(&self, ip: IpAddr) -> Option<usize> {
        let ip = crate::config::converter::unmap(ip);
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4
                    .iter()
                    .find_map(|(p, h)| h.get(&(a & mask32(*p))).copied())
                    .or_else(|| {
                        // An IPv6 network wide enough to hold v4-mapped addresses.
                        let m = u128::from(std::net::Ipv4Addr::from(a).to_ipv6_mapped());
                        self.v6
                            .iter()
                            .find_map(|(p, h)| h.get(&(m & mask128(*p))).copied())
                    })
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6
                    .iter()
                    .find_map(|(p, h)| h.get(&(a & mask128(*p))).copied())
            }
        }
    }
}

fn mask32(p: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(p)).unwrap_or(0)
}

fn mask128(p: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(p)).unwrap_or(0)
}

/// Integer keys as inclusive ranges, with their entry, in file order.
type IntKeys = Vec<(i64, i64, usize)>;

/// A loaded file and the indexes its lookups need, built at most once per kind.
#[derive(Debug)]
pub struct PatFile {
    /// The path as the configuration wrote it (what `show map` prints).
    pub path: String,
    pub entries: Vec<Entry>,
    /// Exact keys → the first entry with that key (HAProxy keeps the first of duplicates).
    exact: OnceLock<HashMap<Box<[u8]>, usize>>,
    /// Networks: the first of the most specific match.
    nets: OnceLock<Result<NetIndex, String>>,
    /// Integer keys or ranges, file order.
    ints: OnceLock<Result<IntKeys, String>>,
    /// Compiled regexes, file order, case-sensitive and insensitive.
    regs: [OnceLock<Result<Vec<Regex>, String>>; 2],
    /// Lowercased exact keys → the first entry (`-i` exact matches).
    exact_lower: OnceLock<HashMap<Box<[u8]>, usize>>,
}

// ---------------------------------------------------------------------------------------------
// Loading.

impl PatFile {
    /// Parses a file's text. `map`: two columns; else each line is one pattern.
    fn parse(path: &str, text: &str, map: bool) -> PatFile {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            // As HAProxy: `#` is a comment in the first column only, leading blanks go, and
            // a pattern keeps its trailing blanks (a map value does not).
            if line.starts_with('#') {
                continue;
            }
            let l = line.trim_start_matches([' ', '\t']).trim_end_matches('\r');
            if l.is_empty() {
                continue;
            }
            let (key, value) = if map {
                match l.find([' ', '\t']) {
                    Some(i) => (&l[..i], l[i..].trim_matches([' ', '\t'])),
                    None => (l, ""),
                }
            } else {
                (l, "")
            };
            entries.push(Entry::new(key, value, n + 1));
        }
        PatFile::from_entries(path, entries)
    }

    fn from_entries(path: &str, entries: Vec<Entry>) -> PatFile {
        PatFile {
            path: path.to_string(),
            entries,
            exact: OnceLock::new(),
            nets: OnceLock::new(),
            ints: OnceLock::new(),
            regs: [OnceLock::new(), OnceLock::new()],
            exact_lower: OnceLock::new(),
        }
    }

    /// Builds the index `m` needs now, so that a bad key is a configuration error naming its
    /// line rather than a lookup that never matches.
    pub fn prepare(&self, m: Match, icase: bool) -> Result<(), String> {
        match m {
            Match::Str if icase => {
                self.exact_lower();
            }
            Match::Str => {
                self.exact();
            }
            Match::Ip => {
                self.nets().map_err(|e| format!("{}: {e}", self.path))?;
            }
            Match::Int => {
                self.ints().map_err(|e| format!("{}: {e}", self.path))?;
            }
            Match::Reg => {
                self.regs(icase)
                    .map_err(|e| format!("{}: {e}", self.path))?;
            }
            _ => {}
        }
        Ok(())
    }

    fn exact(&self) -> &HashMap<Box<[u8]>, usize> {
        self.exact.get_or_init(|| {
            let mut h = HashMap::with_capacity(self.entries.len());
            for (i, e) in self.entries.iter().enumerate() {
                h.entry(e.key.as_bytes().into()).or_insert(i);
            }
            h
        })
    }

    fn exact_lower(&self) -> &HashMap<Box<[u8]>, usize> {
        self.exact_lower.get_or_init(|| {
            let mut h = HashMap::with_capacity(self.entries.len());
            for (i, e) in self.entries.iter().enumerate() {
                h.entry(e.key.as_bytes().to_ascii_lowercase().into())
                    .or_insert(i);
            }
            h
        })
    }

    fn nets(&self) -> Result<&NetIndex, &String> {
        self.nets
            .get_or_init(|| {
                let mut v = Vec::with_capacity(self.entries.len());
                for (i, e) in self.entries.iter().enumerate() {
                    let net = crate::config::acl::parse_ipnet(&e.key)
                        .map_err(|m| format!("line {}: {m}", e.line))?;
                    v.push((net, i));
                }
                Ok(NetIndex::build(v))
            })
            .as_ref()
    }

    fn ints(&self) -> Result<&IntKeys, &String> {
        self.ints
            .get_or_init(|| {
                let mut v = Vec::with_capacity(self.entries.len());
                for (i, e) in self.entries.iter().enumerate() {
                    let bad = || {
                        format!(
                            "line {}: '{}' is not a valid integer or range",
                            e.line, e.key
                        )
                    };
                    let num = |s: &str, d: i64| -> Result<i64, String> {
                        if s.is_empty() {
                            Ok(d)
                        } else {
                            s.parse().map_err(|_| bad())
                        }
                    };
                    // HAProxy reads a leading '-' as an open range: `-5` is `:5`.
                    let key = match e.key.strip_prefix('-') {
                        Some(rest) => format!(":{rest}"),
                        None => e.key.to_string(),
                    };
                    let (lo, hi) = match key.split_once(':') {
                        Some((a, b)) => (num(a, i64::MIN)?, num(b, i64::MAX)?),
                        None => {
                            let n = num(&key, 0)?;
                            (n, n)
                        }
                    };
                    v.push((lo, hi, i));
                }
                Ok(v)
            })
            .as_ref()
    }

    fn regs(&self, icase: bool) -> Result<&Vec<Regex>, &String> {
        self.regs[icase as usize]
            .get_or_init(|| {
                self.entries
                    .iter()
                    .map(|e| {
                        RegexBuilder::new(&e.key)
                            .case_insensitive(icase)
                            .build()
                            .map_err(|err| {
                                let msg = err.to_string();
                                let msg = msg.lines().last().unwrap_or("").trim().to_string();
                                format!("line {}: invalid regex '{}': {msg}", e.line, e.key)
                            })
                    })
                    .collect()
            })
            .as_ref()
    }

    // -----------------------------------------------------------------------------------------
    // Lookups.

    /// The first entry whose key matches text `s` by `m` (not `Int` or `Ip`).
    pub fn find_str(&self, m: Match, s: &[u8], icase: bool) -> Option<usize> {
        use crate::config::acl::{StrKind, str_match};
        let kind = match m {
            Match::Str if !icase => return self.exact().get(s).copied(),
            Match::Str if s.len() <= 256 => {
                let mut low = [0u8; 256];
                for (d, c) in low.iter_mut().zip(s) {
                    *d = c.to_ascii_lowercase();
                }
                return self.exact_lower().get(&low[..s.len()]).copied();
            }
            Match::Str => {
                return self.exact_lower().get(&*s.to_ascii_lowercase()).copied();
            }
            // HAProxy keeps prefixes in a tree: the longest matching one wins.
            Match::Beg => {
                return self
                    .entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| str_match(StrKind::Beg, s, e.key.as_bytes(), icase))
                    .max_by_key(|(i, e)| (e.key.len(), std::cmp::Reverse(*i)))
                    .map(|(i, _)| i);
            }
            Match::Sub => StrKind::Sub,
            Match::Dir => StrKind::Dir,
            Match::Dom => StrKind::Dom,
            Match::End => StrKind::End,
            Match::Reg => {
                return self.regs(icase).ok()?.iter().position(|r| r.is_match(s));
            }
            Match::Int => {
                let n = std::str::from_utf8(s).ok()?.parse().ok()?;
                return self.find_int(n);
            }
            Match::Ip => {
                let ip = std::str::from_utf8(s).ok()?.parse().ok()?;
                return self.find_ip(ip);
            }
        };
        self.entries
            .iter()
            .position(|e| str_match(kind, s, e.key.as_bytes(), icase))
    }

    /// The first entry whose integer key or range holds `n`.
    pub fn find_int(&self, n: i64) -> Option<usize> {
        self.ints()
            .ok()?
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&n))
            .map(|e| e.2)
    }

    /// The entry with the most specific network holding `ip` (the first of those).
    pub fn find_ip(&self, ip: IpAddr) -> Option<usize> {
        self.nets().ok()?.lookup(ip)
    }

    /// For `map_regm`: the value of entry `i` with `\N` replaced by the key's captures in `s`.
    pub fn regm_value(&self, i: usize, s: &[u8], out: &mut Vec<u8>) {
        let value = self.entries[i].value.as_bytes();
        let caps = self
            .regs(false)
            .ok()
            .and_then(|r| r.get(i))
            .and_then(|r| r.captures(s));
        match caps {
            Some(caps) => out.extend_from_slice(&crate::http::expand_groups(value, &caps)),
            None => out.extend_from_slice(value),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pattern references: what the configuration and the CLI share.

impl PatRef {
    /// The current version, for one lookup (lock-free).
    pub fn load(&self) -> arc_swap::Guard<Arc<PatFile>> {
        self.cur.load()
    }

    /// Records that lookups use match `m` (with `-i` or not) and builds that index now, so
    /// that a bad key is a configuration error naming its line.
    pub fn prepare(&self, m: Match, icase: bool) -> Result<(), String> {
        self.cur.load().prepare(m, icase)?;
        let mut u = lock(&self.users);
        if !u.idx.contains(&(m, icase)) {
            u.idx.push((m, icase));
        }
        Ok(())
    }

    /// Records that values are read as `t` (a map converter's output type).
    pub fn need_values(&self, t: ValueType) {
        let mut u = lock(&self.users);
        if !u.values.contains(&t) {
            u.values.push(t);
        }
    }

    fn used_as(&self, kind: &str) -> bool {
        lock(&self.users).at.iter().any(|u| u.0 == kind)
    }

    /// Checks a key and value added at run time as the configuration checks the file's.
    fn validate(&self, key: &str, value: &str) -> Result<(), String> {
        self.validate_key(key)?;
        self.validate_value(value)
    }

    fn validate_value(&self, value: &str) -> Result<(), String> {
        for t in &lock(&self.users).values {
            if !t.accepts(value) {
                return Err(format!("'{value}' is not a valid {}", t.name()));
            }
        }
        Ok(())
    }

    fn validate_key(&self, key: &str) -> Result<(), String> {
        let u = lock(&self.users);
        for (m, icase) in &u.idx {
            match m {
                Match::Ip => {
                    crate::config::acl::parse_ipnet(key)?;
                }
                Match::Int => {
                    let probe = PatFile::from_entries(&self.path, vec![Entry::new(key, "", 0)]);
                    if probe.ints().is_err() {
                        return Err(format!("'{key}' is not a valid integer or range"));
                    }
                }
                Match::Reg => {
                    RegexBuilder::new(key)
                        .case_insensitive(*icase)
                        .build()
                        .map_err(|_| format!("'{key}' is not a valid regular expression"))?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Replaces the current version with `entries`, its indexes built here rather than by the
    /// first lookup on a worker.
    fn publish(&self, entries: Vec<Entry>) {
        let f = PatFile::from_entries(&self.path, entries);
        let idx = lock(&self.users).idx.clone();
        for (m, icase) in idx {
            // Keys were validated as they came: this cannot fail.
            let _ = f.prepare(m, icase);
        }
        self.cur.store(Arc::new(f));
    }
}

impl PatRef {
    /// `set-map` from a rule: the value of every entry with `key`, or a new entry. Keys and
    /// values the file's users could not read are ignored, as a CLI command would refuse them.
    pub fn rule_set(&self, key: &str, value: &str) {
        if self.validate(key, value).is_err() {
            return;
        }
        let _ed = lock(&self.edit);
        let cur = self.load();
        let mut same = cur.entries.iter().filter(|e| &*e.key == key).peekable();
        let entries = if same.peek().is_none() {
            let mut v = cur.entries.clone();
            v.push(Entry::new(key, value, 0));
            v
        } else if same.all(|e| &*e.value == value) {
            return; // nothing changes: no copy
        } else {
            let mut v = cur.entries.clone();
            for e in v.iter_mut().filter(|e| &*e.key == key) {
                e.value = value.into();
            }
            v
        };
        self.publish(entries);
    }

    /// `add-acl` from a rule: the pattern, unless the file has it.
    pub fn rule_add(&self, key: &str) {
        if self.validate_key(key).is_err() {
            return;
        }
        let _ed = lock(&self.edit);
        if self.load().entries.iter().any(|e| &*e.key == key) {
            return;
        }
        let mut entries = self.load().entries.clone();
        entries.push(Entry::new(key, "", 0));
        self.publish(entries);
    }

    /// `del-map` / `del-acl` from a rule: every entry with `key`.
    pub fn rule_del(&self, key: &str) {
        let _ed = lock(&self.edit);
        if !self.load().entries.iter().any(|e| &*e.key == key) {
            return;
        }
        let mut entries = self.load().entries.clone();
        entries.retain(|e| &*e.key != key);
        self.publish(entries);
    }
}

/// Locks a mutex, a poisoned one included (its data are plain lists, valid at every step).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// Files read for the configuration being parsed: (path, as a map?) → reference, and
    /// the configuration line being read (for `show map`'s "used by").
    static FILES: std::cell::RefCell<(Vec<Arc<PatRef>>, String, usize)> =
        std::cell::RefCell::default();
}

/// Notes the configuration line being parsed.
pub fn note_line(file: &str, line: usize) {
    FILES.with(|f| {
        let mut f = f.borrow_mut();
        if f.1 != file {
            f.1 = file.to_string();
        }
        f.2 = line;
    });
}

/// Reads `path` (once per configuration): as a map (`key value` lines) or a pattern list.
/// `user`: "map" (a converter) or "acl".
pub fn load(path: &str, map: bool, user: &'static str) -> Result<Arc<PatRef>, String> {
    let found = FILES.with(|f| {
        let f = f.borrow();
        let r = f.0.iter().find(|r| r.path == path && r.map == map).cloned();
        (r, f.1.clone(), f.2)
    });
    let (file, line) = (found.1, found.2);
    if let Some(r) = found.0 {
        lock(&r.users).at.push((user, file, line));
        return Ok(r);
    }
    let text = std::fs::read(path).map_err(|e| {
        let what = if map { "map" } else { "pattern" };
        format!("failed to open {what} file '{path}': {e}")
    })?;
    let text = String::from_utf8_lossy(&text);
    let id = FILES.with(|f| f.borrow().0.len());
    let r = Arc::new(PatRef {
        id,
        path: path.to_string(),
        map,
        cur: ArcSwap::from_pointee(PatFile::parse(path, &text, map)),
        users: Mutex::new(Users {
            at: vec![(user, file, line)],
            ..Users::default()
        }),
        edit: Mutex::default(),
    });
    FILES.with(|f| f.borrow_mut().0.push(r.clone()));
    Ok(r)
}

/// Starts a new configuration (a reload reads the files again).
pub fn reset() {
    FILES.with(|f| *f.borrow_mut() = Default::default());
}

/// The files of the configuration just read, by id.
pub fn take_refs() -> Vec<Arc<PatRef>> {
    FILES.with(|f| std::mem::take(&mut f.borrow_mut().0))
}

// ---------------------------------------------------------------------------------------------
// The runtime API: `show|get|add|set|del|clear|prepare|commit map|acl`.

/// Runs one map or ACL command (`verb`, then "map" or "acl", then its arguments) on the
/// configuration's files, with HAProxy's wording for answers and errors.
pub fn cli(refs: &[Arc<PatRef>], verb: &str, kind: &str, args: &[&str]) -> String {
    let is_map = kind == "map";
    let (ident, noun) = if is_map {
        ("map identifier", "map")
    } else {
        ("ACL identifier", "ACL")
    };
    let unknown = || format!("Unknown {noun} identifier. Please use #<id> or <file>.\n");
    // `@<ver>` first (show, add, clear, commit).
    let (ver, args) = match args.first().and_then(|a| a.strip_prefix('@')) {
        Some(v) if matches!(verb, "show" | "add" | "clear" | "commit") => {
            (Some(v.parse::<u32>().ok()), &args[1..])
        }
        _ => (None, args),
    };
    if verb == "show" && args.is_empty() {
        return list(refs, kind);
    }
    let find = |name: &str| -> Option<&Arc<PatRef>> {
        let r = match name.strip_prefix('#') {
            Some(id) => refs.iter().find(|r| id.parse() == Ok(r.id)),
            None => refs.iter().find(|r| r.path == name && r.used_as(kind)),
        }?;
        r.used_as(kind).then_some(r)
    };
    match verb {
        "show" => {
            let Some(r) = find(args[0]) else {
                return unknown();
            };
            let e = lock(&r.edit);
            let shown: Vec<Entry> = match ver {
                Some(Some(v)) if v != e.curr => e.pending.get(&v).cloned().unwrap_or_default(),
                _ => r.load().entries.clone(),
            };
            let mut out = String::new();
            for en in &shown {
                out.push_str(&format!("0x{:012x} {}", en.uid, en.key));
                if r.map {
                    out.push(' ');
                    out.push_str(&en.value);
                }
                out.push('\n');
            }
            out
        }
        "get" => {
            let (Some(name), Some(sample)) = (args.first(), args.get(1)) else {
                return format!("Missing {ident} and/or key.\n");
            };
            let Some(r) = find(name) else {
                return unknown();
            };
            get(r, is_map, sample)
        }
        "add" => {
            let Some(r) = args.first().and_then(|n| find(n)) else {
                return if args.is_empty() {
                    add_usage(is_map)
                } else {
                    unknown()
                };
            };
            let mut new = Vec::new();
            match (is_map, &args[1..]) {
                (true, [k, v]) => new.push(Entry::new(k, v, 0)),
                (true, [payload]) if payload.contains('\n') || payload.is_empty() => {
                    for l in payload.lines().filter(|l| !l.trim().is_empty()) {
                        let l = l.trim_start_matches([' ', '\t']);
                        match l.find([' ', '\t']) {
                            Some(i) => {
                                new.push(Entry::new(&l[..i], l[i..].trim_matches([' ', '\t']), 0))
                            }
                            None => return format!("Missing value for key '{l}'.\n"),
                        }
                    }
                }
                (false, [k]) => new.push(Entry::new(k, "", 0)),
                _ => return add_usage(is_map),
            }
            for e in &new {
                if let Err(m) = r.validate(&e.key, &e.value) {
                    return format!("{m}.\n");
                }
            }
            let mut ed = lock(&r.edit);
            match ver {
                None => {
                    let mut entries = r.load().entries.clone();
                    entries.extend(new);
                    r.publish(entries);
                }
                Some(Some(v)) if v == ed.curr => {
                    let mut entries = r.load().entries.clone();
                    entries.extend(new);
                    r.publish(entries);
                }
                Some(Some(v)) if in_range(ed.curr, ed.next, v) => {
                    ed.pending.entry(v).or_default().extend(new)
                }
                Some(Some(_)) => {
                    return format!(
                        "Version number in the future, please use 'prepare {kind}' before.\n"
                    );
                }
                Some(None) => return "Version number is not valid.\n".into(),
            }
            String::new()
        }
        "set" => {
            if !is_map {
                return unknown();
            }
            let [name, key, value] = args else {
                return "'set map' expects three parameters: map identifier, key and value.\n"
                    .into();
            };
            let Some(r) = find(name) else {
                return unknown();
            };
            if let Err(m) = r.validate_value(value) {
                return format!("{m}.\n");
            }
            let _ed = lock(&r.edit);
            let mut entries = r.load().entries.clone();
            let by_ref = parse_ref(key);
            let mut hit = false;
            for e in entries.iter_mut() {
                if by_ref.map_or(&*e.key == *key, |u| e.uid == u) {
                    e.value = (*value).into();
                    hit = true;
                }
            }
            if !hit {
                return if by_ref.is_some() {
                    "key or pattern not found.\n".into()
                } else {
                    "entry not found.\n".into()
                };
            }
            r.publish(entries);
            String::new()
        }
        "del" => {
            let [name, key] = args else {
                return format!("This command expects two parameters: {ident} and key.\n");
            };
            let Some(r) = find(name) else {
                return unknown();
            };
            let _ed = lock(&r.edit);
            let mut entries = r.load().entries.clone();
            let before = entries.len();
            let by_ref = parse_ref(key);
            entries.retain(|e| !by_ref.map_or(&*e.key == *key, |u| e.uid == u));
            if entries.len() == before {
                return "Key not found.\n".into();
            }
            r.publish(entries);
            String::new()
        }
        "clear" => {
            let Some(r) = args.first().and_then(|n| find(n)) else {
                return unknown();
            };
            let mut ed = lock(&r.edit);
            match ver {
                Some(Some(v)) if v != ed.curr => {
                    ed.pending.remove(&v);
                }
                Some(None) => return "Version number is not valid.\n".into(),
                _ => r.publish(Vec::new()),
            }
            String::new()
        }
        "prepare" => {
            let Some(r) = args.first().and_then(|n| find(n)) else {
                return unknown();
            };
            let mut ed = lock(&r.edit);
            ed.next = ed.next.wrapping_add(1);
            format!("New version created: {}\n", ed.next)
        }
        "commit" => {
            let Some(v) = ver else {
                return "Missing version number.\n".into();
            };
            let Some(name) = args.first() else {
                return format!("Missing {ident}.\n");
            };
            let Some(r) = find(name) else {
                return unknown();
            };
            let mut ed = lock(&r.edit);
            let Some(v) = v.filter(|v| in_range(ed.curr, ed.next, *v)) else {
                return "Version number out of range.\n".into();
            };
            let entries = ed.pending.remove(&v).unwrap_or_default();
            // Older versions being prepared are dropped with the commit, as in HAProxy.
            let curr = ed.curr;
            ed.pending
                .retain(|k, _| k.wrapping_sub(curr) > v.wrapping_sub(curr));
            ed.curr = v;
            r.publish(entries);
            String::new()
        }
        _ => unknown(),
    }
}

fn add_usage(is_map: bool) -> String {
    if is_map {
        "'add map' expects three parameters (map identifier, key and value) or one parameter \
         (map identifier) and a payload\n"
            .into()
    } else {
        "'add acl' expects two parameters: ACL identifier and pattern.\n".into()
    }
}

/// `#<ref>`: an entry's unique id, as `show map` prints it.
fn parse_ref(key: &str) -> Option<u64> {
    let h = key.strip_prefix('#')?;
    u64::from_str_radix(h.strip_prefix("0x").unwrap_or(h), 16).ok()
}

/// Whether version `v` lies in (curr, next], with wrapping as HAProxy's versions wrap.
fn in_range(curr: u32, next: u32, v: u32) -> bool {
    let d = v.wrapping_sub(curr);
    d != 0 && d <= next.wrapping_sub(curr)
}

/// `show map` / `show acl`: the files and where they are used.
fn list(refs: &[Arc<PatRef>], kind: &str) -> String {
    let mut out = String::from("# id (file) description\n");
    for r in refs.iter().filter(|r| r.used_as(kind)) {
        let users = lock(&r.users);
        let by: Vec<String> = users
            .at
            .iter()
            .filter(|u| u.0 == kind)
            .map(|(k, f, l)| format!("by {k} at file '{f}' line {l}"))
            .collect();
        // Never hold `users` while taking `edit`: changes take them the other way round.
        drop(users);
        let ed = lock(&r.edit);
        let count = r.load().entries.len() + ed.pending.values().map(Vec::len).sum::<usize>();
        out.push_str(&format!(
            "{} ({}) pattern loaded from file '{}' used {}. curr_ver={} next_ver={} \
             entry_cnt={}\n",
            r.id,
            r.path,
            r.path,
            by.join(", "),
            ed.curr,
            ed.next,
            count
        ));
    }
    out
}

/// `get map|acl`: the sample looked up as each user of the file looks it up.
fn get(r: &PatRef, is_map: bool, sample: &str) -> String {
    let f = r.load();
    let users = lock(&r.users);
    let mut out = String::new();
    for (m, icase) in &users.idx {
        let hit = match m {
            Match::Int => sample.parse().ok().and_then(|n| f.find_int(n)),
            Match::Ip => sample.parse().ok().and_then(|ip| f.find_ip(ip)),
            _ => f.find_str(*m, sample.as_bytes(), *icase),
        };
        let case = if *icase { "insensitive" } else { "sensitive" };
        out.push_str(&format!("type={}, case={case}, ", m.name()));
        let found = if is_map { "found" } else { "match" };
        let Some(i) = hit else {
            out.push_str(&format!("{found}=no\n"));
            continue;
        };
        let e = &f.entries[i];
        let idx = match m {
            Match::Str | Match::Beg | Match::Ip => "tree",
            _ => "list",
        };
        if is_map {
            let ty = match users.values.first() {
                Some(ValueType::Int) => "sint",
                Some(ValueType::Ip) => "ip",
                _ => "str",
            };
            out.push_str(&format!(
                "{found}=yes, idx={idx}, key=\"{}\", value=\"{}\", type=\"{ty}\"\n",
                e.key, e.value
            ));
        } else {
            out.push_str(&format!("{found}=yes, idx={idx}, pattern=\"{}\"\n", e.key));
        }
    }
    out
}

impl Match {
    /// The match method's name (`-m NAME`, `map_NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Match::Str => "str",
            Match::Beg => "beg",
            Match::Sub => "sub",
            Match::Dir => "dir",
            Match::Dom => "dom",
            Match::End => "end",
            Match::Reg => "reg",
            Match::Int => "int",
            Match::Ip => "ip",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> PatFile {
        PatFile::parse("t.map", text, true)
    }

    #[test]
    fn map_lines() {
        let f = file("# c\n\n   k1   some value  \t\nk2\tv2\nk1 dup\nlonely\n  #k3 v3\n");
        let kv: Vec<_> = f
            .entries
            .iter()
            .map(|e| (&*e.key, &*e.value, e.line))
            .collect();
        assert_eq!(
            kv,
            [
                ("k1", "some value", 3),
                ("k2", "v2", 4),
                ("k1", "dup", 5),
                ("lonely", "", 6),
                ("#k3", "v3", 7)
            ]
        );
        assert_eq!(f.find_str(Match::Str, b"k1", false), Some(0));
        assert_eq!(f.find_str(Match::Str, b"K1", true), Some(0));
        assert_eq!(f.find_str(Match::Str, b"K1", false), None);
    }

    #[test]
    fn ip_most_specific_first() {
        let f = file("10.0.0.0/8 wide\n10.1.0.0/16 narrow\n10.1.0.0/16 later\n");
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(f.find_ip(ip("10.1.2.3")), Some(1));
        assert_eq!(f.find_ip(ip("10.2.2.3")), Some(0));
        assert_eq!(f.find_ip(ip("11.2.2.3")), None);
        assert_eq!(f.find_ip(ip("::ffff:10.1.2.3")), Some(1));
        let f = file("::ffff:10.0.0.0/104 mapped\n2001:db8::/32 doc\n::/0 any\n");
        assert_eq!(f.find_ip(ip("10.9.9.9")), Some(0));
        assert_eq!(f.find_ip(ip("2001:db8::5")), Some(1));
        assert_eq!(
            f.find_ip(ip("11.0.0.1")),
            Some(2),
            "::/0 holds v4-mapped addresses"
        );
        let bad = file("10.0.0.0/8 a\nnope b\n");
        assert!(
            bad.prepare(Match::Ip, false)
                .unwrap_err()
                .contains("line 2")
        );
    }

    #[test]
    fn regm_backrefs() {
        let f = file("^/u/([a-z]+)/(\\d+) user=\\1,id=\\2\n");
        f.prepare(Match::Reg, false).unwrap();
        let i = f.find_str(Match::Reg, b"/u/bob/42", false).unwrap();
        let mut out = Vec::new();
        f.regm_value(i, b"/u/bob/42", &mut out);
        assert_eq!(out, b"user=bob,id=42");
    }

    #[test]
    fn versions_and_refs() {
        assert!(in_range(0, 2, 1) && in_range(0, 2, 2));
        assert!(!in_range(0, 2, 0) && !in_range(0, 2, 3));
        // Versions wrap at 2^32, as HAProxy's.
        assert!(in_range(u32::MAX, 1, 0) && in_range(u32::MAX, 1, 1));
        assert!(!in_range(u32::MAX, 1, 2));
        assert_eq!(parse_ref("#0x00000000002a"), Some(42));
        assert_eq!(parse_ref("#2a"), Some(42));
        assert_eq!(parse_ref("2a"), None);
        assert_eq!(parse_ref("#zz"), None);
    }

    #[test]
    fn int_ranges() {
        let f = file("1:5 low\n6 six\n7: high\n-0 minus\n");
        assert_eq!(f.find_int(3), Some(0));
        assert_eq!(f.find_int(6), Some(1));
        assert_eq!(f.find_int(1000), Some(2));
        assert_eq!(f.find_int(0), Some(3));
        assert_eq!(f.find_int(-1), Some(3));
        let f = file("/a short\n/ab long\n/a again\n");
        assert_eq!(f.find_str(Match::Beg, b"/abc", false), Some(1));
        assert_eq!(f.find_str(Match::Beg, b"/ax", false), Some(0));
        let p = PatFile::parse("p.lst", "beta  \n", false);
        assert_eq!(&*p.entries[0].key, "beta  ");
    }
}
