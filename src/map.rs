//! `map` files and ACL pattern files: reading a file once however many rules name it, and
//! looking a sample up in it the way HAProxy's `map_*` converters and `acl ... -f FILE` do.
//!
//! A map file holds one `key value` per line (`#` comments and blank lines skipped, leading
//! blanks stripped, the value running to the end of the line without trailing blanks); a
//! pattern file holds one pattern per line. Lookups never allocate and never lock: a file is
//! read when the configuration is, and is immutable afterwards (the runtime API's
//! `add map`/`set map` are not supported). This module knows nothing of requests.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use regex::bytes::{Regex, RegexBuilder};

use crate::config::IpNet;

// ---------------------------------------------------------------------------------------------
// Types.

/// One line of a file: its key (or pattern) and, for a map, its value.
#[derive(Debug)]
pub struct Entry {
    pub key: Box<str>,
    pub value: Box<str>,
    /// Its line in the file, for error messages.
    pub line: usize,
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
            entries.push(Entry {
                key: key.into(),
                value: value.into(),
                line: n + 1,
            });
        }
        PatFile {
            path: path.to_string(),
            entries,
            exact: OnceLock::new(),
            nets: OnceLock::new(),
            ints: OnceLock::new(),
            regs: [OnceLock::new(), OnceLock::new()],
        }
    }

    /// Builds the index `m` needs now, so that a bad key is a configuration error naming its
    /// line rather than a lookup that never matches.
    pub fn prepare(&self, m: Match, icase: bool) -> Result<(), String> {
        match m {
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
            Match::Str => StrKind::Exact,
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
// The configuration's files, by path, while it is read.

thread_local! {
    /// Files read for the configuration being parsed: (path, as a map?) → file.
    static FILES: std::cell::RefCell<HashMap<(String, bool), Arc<PatFile>>> =
        std::cell::RefCell::default();
}

/// Reads `path` (once per configuration): as a map (`key value` lines) or a pattern list.
pub fn load(path: &str, map: bool) -> Result<Arc<PatFile>, String> {
    if let Some(f) = FILES.with(|f| f.borrow().get(&(path.to_string(), map)).cloned()) {
        return Ok(f);
    }
    let text = std::fs::read(path).map_err(|e| {
        let what = if map { "map" } else { "pattern" };
        format!("failed to open {what} file '{path}': {e}")
    })?;
    let text = String::from_utf8_lossy(&text);
    let f = Arc::new(PatFile::parse(path, &text, map));
    FILES.with(|m| m.borrow_mut().insert((path.to_string(), map), f.clone()));
    Ok(f)
}

/// Starts a new configuration (a reload reads the files again).
pub fn reset() {
    FILES.with(|f| f.borrow_mut().clear());
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
