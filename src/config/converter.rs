//! Converters: the `,name(args)` steps after a sample fetch (`req.hdr(host),lower,map(f)`),
//! parsed with HAProxy's argument rules and applied with its casts between types.
//!
//! Owns the converter list, their argument checks and their arithmetic; it must not fetch
//! anything (it gets a sample and gives one back) and must not know where a sample came from.
//! Converters are off the default path: a fetch without them never reaches this module, and
//! one with them costs one buffer per sample.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use base64::Engine as _;
use regex::bytes::{Regex, RegexBuilder};

use super::acl::{Sample, SmpType};
use super::jwt::{JsonQuery, Verify};
use crate::map::{Match, PatRef};
use crate::vars::{SetCond, VarName, Vars};

// ---------------------------------------------------------------------------------------------
// Types.

/// A sample a converter produced (it owns its bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    Str(Vec<u8>),
    Int(i64),
    Ip(IpAddr),
    Bool(bool),
}

/// What a converter takes: HAProxy casts the sample to it first. `Bin` differs from `Str` only
/// for integers and addresses, which become their network-order bytes (`src,hex` → `7F000001`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum In {
    Str,
    Bin,
    Int,
    Addr,
    Bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hash {
    Sdbm,
    Djb2,
    Wt6,
    Crc32,
    Crc32c,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Json {
    Ascii,
    Utf8,
    Utf8s,
    Utf8p,
    Utf8ps,
}

/// One converter with its checked arguments.
#[derive(Debug, Clone)]
pub(crate) enum Conv {
    /// `lua.NAME(ARGS)`: a Lua function registered with `core.register_converters`.
    Lua {
        name: Box<str>,
        args: Box<[String]>,
    },
    Lower,
    Upper,
    Length,
    Bytes {
        off: usize,
        len: Option<usize>,
    },
    /// `field` (`words: false`) and `word`.
    Field {
        words: bool,
        idx: i64,
        delims: Box<[u8]>,
        count: i64,
    },
    Regsub {
        re: Regex,
        subst: Box<[u8]>,
        global: bool,
    },
    Ltrim(Box<[u8]>),
    Rtrim(Box<[u8]>),
    CutCrlf,
    Base64,
    B64dec,
    Ub64enc,
    Ub64dec,
    Hex,
    Hex2i,
    UrlDec {
        form: bool,
    },
    Json(Json),
    HostOnly,
    PortOnly,
    Hash {
        f: Hash,
        avalanche: bool,
    },
    /// `xxh32(SEED)`, `xxh64(SEED)`, `xxh3(SEED)`.
    Xxh(u8, u64),
    UrlEnc,
    Arith(Arith, Operand),
    /// `concat([START],[VAR],[END])`.
    Concat(Box<[u8]>, Option<VarName>, Box<[u8]>),
    /// `add_item(DELIM,[VAR][,SUFFIX])`.
    AddItem(Box<[u8]>, Option<VarName>, Box<[u8]>),
    /// `strcmp(VAR)`, `secure_memcmp(VAR)`.
    Strcmp(VarName),
    SecureMemcmp(VarName),
    /// `set-var(VAR[,COND...])`: stores the sample and passes it on.
    SetVar(VarName, Box<[SetCond]>),
    /// `debug([PREFIX[,SINK]])`: the sample goes on unchanged; with SINK `stderr` or
    /// `stdout` it is written there too (`[debug] PREFIX: type=str VALUE`).
    Debug {
        prefix: Box<str>,
        stdout: Option<bool>,
    },
    Neg,
    Cpl,
    Not,
    Bool,
    Odd,
    Even,
    IpMask {
        v4: u32,
        v6: Option<u128>,
    },
    Iif(Box<[u8]>, Box<[u8]>),
    Sha1,
    Sha2(u16),
    HttpDate {
        offset: i64,
        /// Units per second of the input (1, 1000, 1000000).
        per_sec: i64,
    },
    Map {
        file: Arc<PatRef>,
        m: Match,
        /// `map_regm`: the value's `\N` take the key's captures.
        regm: bool,
        out: SmpType,
        default: Option<Val>,
    },
    /// `json_query(PATH[,int])`.
    JsonQuery(JsonQuery),
    /// `jwt_header_query` (part 0) and `jwt_payload_query` (part 1): the decoded part, or
    /// what the query finds in it.
    JwtQuery {
        part: u8,
        query: Option<JsonQuery>,
    },
    /// `jwt_verify(ALG,KEY)`.
    JwtVerify(Box<Verify>),
}

/// An integer argument: a constant or a variable's value.
#[derive(Debug, Clone)]
pub(crate) enum Operand {
    Int(i64),
    Var(VarName),
}

// ---------------------------------------------------------------------------------------------
// Parsing.

/// Converter names with their decoded arguments, as written.
pub(crate) type ConvWords<'a> = Vec<(&'a str, Option<Vec<String>>)>;

/// Splits a sample expression `fetch(args),conv(args),...` into the fetch (as written) and its
/// converters with their arguments decoded (HAProxy's second level of quoting: `'...'`,
/// `"..."`, `\\`, `\'`, `\"`, `\ `, `\r`, `\n`, `\t`; an unquoted `,` or `)` ends an argument).
pub(crate) fn split(word: &str) -> Result<(&str, ConvWords<'_>), String> {
    let b = word.as_bytes();
    let name_end = |from: usize| {
        b[from..]
            .iter()
            .position(|c| !(c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-')))
            .map_or(b.len(), |p| from + p)
    };
    let mut i = name_end(0);
    let mut fetch_end = i;
    if b.get(i) == Some(&b'(') {
        let (_, end) = args(word, i + 1)?;
        i = end;
        fetch_end = i;
    }
    let mut convs = Vec::new();
    while i < b.len() {
        if b[i] != b',' {
            return Err(format!(
                "invalid sample expression '{word}': unexpected '{}' after '{}'",
                &word[i..],
                &word[..i]
            ));
        }
        let start = i + 1;
        let end = name_end(start);
        if end == start {
            return Err(format!(
                "invalid sample expression '{word}': missing converter name after ','"
            ));
        }
        let name = &word[start..end];
        i = end;
        let mut a = None;
        if b.get(i) == Some(&b'(') {
            let (v, e) = args(word, i + 1)?;
            a = Some(v);
            i = e;
        }
        convs.push((name, a));
    }
    Ok((&word[..fetch_end], convs))
}

/// Decodes the arguments starting at `from` (just after `(`) up to the closing `)`; returns
/// them and the index after the `)`.
fn args(word: &str, from: usize) -> Result<(Vec<String>, usize), String> {
    let b = word.as_bytes();
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let (mut sq, mut dq) = (false, false);
    let mut i = from;
    loop {
        let Some(&c) = b.get(i) else {
            return Err(format!("missing closing ')' in '{word}'"));
        };
        if c == b'"' && !sq {
            dq = !dq;
        } else if c == b'\'' && !dq {
            sq = !sq;
        } else if c == b'\\' && !sq && i + 1 < b.len() {
            let esc = match b[i + 1] {
                x @ (b'\\' | b' ' | b'"' | b'\'') => Some(x),
                b'r' => Some(b'\r'),
                b'n' => Some(b'\n'),
                b't' => Some(b'\t'),
                _ => None,
            };
            match esc {
                Some(x) => {
                    cur.push(x);
                    i += 1;
                }
                // A lone backslash stays, and what follows is read as usual.
                None => cur.push(b'\\'),
            }
        } else if !sq && !dq && (c == b',' || c == b')') {
            out.push(String::from_utf8_lossy(&cur).into_owned());
            cur.clear();
            if c == b')' {
                return Ok((out, i + 1));
            }
        } else {
            cur.push(c);
        }
        i += 1;
    }
}

/// What converters sluice knows it does not implement, to say so rather than "unknown".
const UNSUPPORTED: &[&str] = &[
    "51d.single",
    "aes_gcm_dec",
    "be2dec",
    "be2hex",
    "capture-req",
    "capture-res",
    "da-csv-conv",
    "digest",
    "fix_is_valid",
    "fix_tag_value",
    "hmac",
    "htonl",
    "in_table",
    "language",
    "ltime",
    "mqtt_field_value",
    "mqtt_is_valid",
    "nbsrv",
    "protobuf",
    "srv_queue",
    "ungrpc",
    "utime",
    "wurfl-get",
];

const KNOWN: &[&str] = &[
    "lower",
    "upper",
    "length",
    "bytes",
    "field",
    "word",
    "regsub",
    "ltrim",
    "rtrim",
    "cut_crlf",
    "base64",
    "b64dec",
    "ub64enc",
    "ub64dec",
    "hex",
    "hex2i",
    "url_dec",
    "json",
    "host_only",
    "port_only",
    "sdbm",
    "djb2",
    "wt6",
    "crc32",
    "crc32c",
    "add",
    "sub",
    "mul",
    "div",
    "mod",
    "and",
    "or",
    "xor",
    "neg",
    "cpl",
    "not",
    "bool",
    "odd",
    "even",
    "ipmask",
    "iif",
    "sha1",
    "sha2",
    "http_date",
    "map",
    "xxh32",
    "xxh64",
    "xxh3",
    "url_enc",
    "concat",
    "add_item",
    "strcmp",
    "secure_memcmp",
    "set-var",
    "json_query",
    "jwt_header_query",
    "jwt_payload_query",
    "jwt_verify",
];

impl Conv {
    /// Parses converter `name` with its arguments, applied to samples of type `input`; gives
    /// it and the type of what it produces.
    pub(crate) fn parse(
        name: &str,
        args: Option<&[String]>,
        input: SmpType,
    ) -> Result<(Conv, SmpType), String> {
        let a = args.unwrap_or(&[]);
        let n_args = |min: usize, max: usize| -> Result<(), String> {
            if a.len() < min {
                Err(format!(
                    "converter '{name}' needs {min} argument{}",
                    if min == 1 { "" } else { "s" }
                ))
            } else if a.len() > max {
                if max == 0 {
                    Err(format!("converter '{name}' takes no argument"))
                } else {
                    Err(format!("converter '{name}' takes at most {max} arguments"))
                }
            } else {
                Ok(())
            }
        };
        let int = |i: usize| -> Result<i64, String> {
            let s = a[i].trim();
            s.parse::<i64>()
                .map_err(|_| format!("converter '{name}': '{s}' is not an integer"))
        };
        let var = |i: usize| -> Result<Option<VarName>, String> {
            match a.get(i).map(|s| s.trim()) {
                None | Some("") => Ok(None),
                Some(v) => VarName::parse(v)
                    .map(Some)
                    .map_err(|e| format!("converter '{name}': {e}")),
            }
        };
        let text = |i: usize| -> Box<[u8]> { a.get(i).map_or(&b""[..], |s| s.as_bytes()).into() };
        let opt_int = |i: usize, d: i64| -> Result<i64, String> {
            if a.len() > i && !a[i].is_empty() {
                int(i)
            } else {
                Ok(d)
            }
        };
        let avalanche = || -> Result<bool, String> { Ok(opt_int(0, 0)? == 1) };
        use SmpType as T;
        let (conv, in_t, out) = match name {
            n if n.starts_with("lua.") => {
                let lua = &n[4..];
                if !crate::lua::has_converter(lua) {
                    return Err(format!(
                        "unknown converter '{n}' (no Lua script registers a converter '{lua}' \
                         with core.register_converters)"
                    ));
                }
                let conv = Conv::Lua {
                    name: lua.into(),
                    args: a.to_vec().into(),
                };
                (conv, In::Str, T::Str)
            }
            "lower" | "upper" | "cut_crlf" | "base64" | "b64dec" | "ub64enc" | "ub64dec"
            | "hex" | "hex2i" | "host_only" | "port_only" | "length" | "sha1" | "neg" | "cpl"
            | "not" | "bool" | "odd" | "even" => {
                n_args(0, 0)?;
                match name {
                    "lower" => (Conv::Lower, In::Str, T::Str),
                    "upper" => (Conv::Upper, In::Str, T::Str),
                    "cut_crlf" => (Conv::CutCrlf, In::Str, T::Str),
                    "base64" => (Conv::Base64, In::Bin, T::Str),
                    "b64dec" => (Conv::B64dec, In::Str, T::Str),
                    "ub64enc" => (Conv::Ub64enc, In::Bin, T::Str),
                    "ub64dec" => (Conv::Ub64dec, In::Str, T::Str),
                    "hex" => (Conv::Hex, In::Bin, T::Str),
                    "hex2i" => (Conv::Hex2i, In::Str, T::Int),
                    "host_only" => (Conv::HostOnly, In::Str, T::Str),
                    "port_only" => (Conv::PortOnly, In::Str, T::Int),
                    "length" => (Conv::Length, In::Str, T::Int),
                    "sha1" => (Conv::Sha1, In::Bin, T::Str),
                    "neg" => (Conv::Neg, In::Int, T::Int),
                    "cpl" => (Conv::Cpl, In::Int, T::Int),
                    "not" => (Conv::Not, In::Int, T::Bool),
                    "bool" => (Conv::Bool, In::Int, T::Bool),
                    "odd" => (Conv::Odd, In::Int, T::Bool),
                    _ => (Conv::Even, In::Int, T::Bool),
                }
            }
            "bytes" => {
                n_args(1, 2)?;
                let off = int(0)?;
                let len = if a.len() > 1 { Some(int(1)?) } else { None };
                if off < 0 || len.is_some_and(|l| l < 0) {
                    return Err(format!(
                        "converter '{name}': offset and length must be >= 0"
                    ));
                }
                let len = len.map(|l| l as usize);
                (
                    Conv::Bytes {
                        off: off as usize,
                        len,
                    },
                    In::Bin,
                    T::Str,
                )
            }
            "field" | "word" => {
                n_args(2, 3)?;
                let idx = int(0)?;
                if idx == 0 {
                    return Err(format!("converter '{name}': index must not be 0"));
                }
                if a[1].is_empty() {
                    return Err(format!("converter '{name}': no delimiter given"));
                }
                // A negative count means all the rest, as 0 (HAProxy accepts it).
                let count = opt_int(2, 1)?.max(0);
                (
                    Conv::Field {
                        words: name == "word",
                        idx,
                        delims: a[1].as_bytes().into(),
                        count,
                    },
                    In::Str,
                    T::Str,
                )
            }
            "regsub" => {
                n_args(2, 3)?;
                let flags = a.get(2).map_or("", |s| s.as_str());
                let mut global = false;
                let mut icase = false;
                for f in flags.chars() {
                    match f {
                        'g' => global = true,
                        'i' => icase = true,
                        _ => {
                            return Err(format!(
                                "converter 'regsub': invalid flag '{f}' (flags are 'g' and 'i')"
                            ));
                        }
                    }
                }
                let re = RegexBuilder::new(&a[0])
                    .case_insensitive(icase)
                    .build()
                    .map_err(|e| {
                        let m = e.to_string();
                        let m = m.lines().last().unwrap_or("").trim().to_string();
                        format!("converter 'regsub': invalid regex '{}': {m}", a[0])
                    })?;
                (
                    Conv::Regsub {
                        re,
                        subst: a[1].as_bytes().into(),
                        global,
                    },
                    In::Str,
                    T::Str,
                )
            }
            "ltrim" | "rtrim" => {
                n_args(1, 1)?;
                let set: Box<[u8]> = a[0].as_bytes().into();
                let c = if name == "ltrim" {
                    Conv::Ltrim(set)
                } else {
                    Conv::Rtrim(set)
                };
                (c, In::Str, T::Str)
            }
            "url_dec" => {
                n_args(0, 1)?;
                (
                    Conv::UrlDec {
                        form: opt_int(0, 0)? != 0,
                    },
                    In::Str,
                    T::Str,
                )
            }
            "json" => {
                n_args(0, 1)?;
                let mode = match a.first().map_or("", |s| s.as_str()) {
                    "" | "ascii" => Json::Ascii,
                    "utf8" => Json::Utf8,
                    "utf8s" => Json::Utf8s,
                    "utf8p" => Json::Utf8p,
                    "utf8ps" => Json::Utf8ps,
                    o => {
                        return Err(format!(
                            "converter 'json': unknown input code '{o}' (expected ascii, utf8, \
                             utf8s, utf8p or utf8ps)"
                        ));
                    }
                };
                (Conv::Json(mode), In::Str, T::Str)
            }
            "xxh32" | "xxh64" | "xxh3" => {
                n_args(0, 1)?;
                let kind = match name {
                    "xxh32" => 32,
                    "xxh64" => 64,
                    _ => 3,
                };
                (Conv::Xxh(kind, opt_int(0, 0)? as u64), In::Bin, T::Int)
            }
            "url_enc" => {
                n_args(0, 1)?;
                if let Some(t) = a.first().filter(|t| !t.is_empty() && *t != "query") {
                    return Err(format!(
                        "converter 'url_enc': unknown encoding '{t}' (only 'query')"
                    ));
                }
                (Conv::UrlEnc, In::Str, T::Str)
            }
            "sdbm" | "djb2" | "wt6" | "crc32" | "crc32c" => {
                n_args(0, 1)?;
                let f = match name {
                    "sdbm" => Hash::Sdbm,
                    "djb2" => Hash::Djb2,
                    "wt6" => Hash::Wt6,
                    "crc32" => Hash::Crc32,
                    _ => Hash::Crc32c,
                };
                (
                    Conv::Hash {
                        f,
                        avalanche: avalanche()?,
                    },
                    In::Bin,
                    T::Int,
                )
            }
            "add" | "sub" | "mul" | "div" | "mod" | "and" | "or" | "xor" => {
                n_args(1, 1)?;
                let op = match name {
                    "add" => Arith::Add,
                    "sub" => Arith::Sub,
                    "mul" => Arith::Mul,
                    "div" => Arith::Div,
                    "mod" => Arith::Mod,
                    "and" => Arith::And,
                    "or" => Arith::Or,
                    _ => Arith::Xor,
                };
                let arg = a[0].trim();
                let operand = match arg.parse::<i64>() {
                    Ok(n) => Operand::Int(n),
                    Err(_) if arg.contains('.') => Operand::Var(
                        VarName::parse(arg).map_err(|e| format!("converter '{name}': {e}"))?,
                    ),
                    Err(_) => {
                        return Err(format!(
                            "converter '{name}': '{arg}' is not an integer or a variable name"
                        ));
                    }
                };
                (Conv::Arith(op, operand), In::Int, T::Int)
            }
            "concat" => {
                n_args(0, 3)?;
                (Conv::Concat(text(0), var(1)?, text(2)), In::Str, T::Str)
            }
            "add_item" => {
                n_args(2, 3)?;
                (Conv::AddItem(text(0), var(1)?, text(2)), In::Str, T::Str)
            }
            "strcmp" | "secure_memcmp" => {
                n_args(1, 1)?;
                let v = var(0)?.ok_or_else(|| format!("converter '{name}' needs a variable"))?;
                if name == "strcmp" {
                    (Conv::Strcmp(v), In::Str, T::Int)
                } else {
                    (Conv::SecureMemcmp(v), In::Bin, T::Bool)
                }
            }
            "debug" => {
                n_args(0, 2)?;
                let prefix = a.first().map_or("", |p| p.trim());
                let stdout = match a.get(1).map(|s| s.trim()) {
                    Some("stdout") => Some(true),
                    Some("stderr") => Some(false),
                    other => {
                        crate::config::parser::warn(format!(
                            "converter 'debug': ring '{}' is not kept by sluice (it has no \
                             rings): the sample goes on and is not traced; name 'stderr' or \
                             'stdout' to see it",
                            other.unwrap_or("buf0")
                        ));
                        None
                    }
                };
                return Ok((
                    Conv::Debug {
                        prefix: prefix.into(),
                        stdout,
                    },
                    input,
                ));
            }
            "set-var" => {
                if a.is_empty() || a.len() > 5 {
                    return Err(
                        "converter 'set-var' takes a variable name and up to 4 conditions"
                            .to_string(),
                    );
                }
                let v =
                    var(0)?.ok_or_else(|| "converter 'set-var' needs a variable".to_string())?;
                let conds = a[1..]
                    .iter()
                    .map(|c| SetCond::parse(c.trim()))
                    .collect::<Result<Box<[_]>, _>>()?;
                return Ok((Conv::SetVar(v, conds), input));
            }
            "ipmask" => {
                n_args(1, 2)?;
                let v4 = mask4(&a[0])
                    .ok_or_else(|| format!("converter 'ipmask': invalid IPv4 mask '{}'", a[0]))?;
                let v6 =
                    match a.get(1) {
                        Some(m) if !m.is_empty() => Some(mask6(m).ok_or_else(|| {
                            format!("converter 'ipmask': invalid IPv6 mask '{m}'")
                        })?),
                        _ => None,
                    };
                (Conv::IpMask { v4, v6 }, In::Addr, T::Ip)
            }
            "iif" => {
                n_args(2, 2)?;
                (
                    Conv::Iif(a[0].as_bytes().into(), a[1].as_bytes().into()),
                    In::Bool,
                    T::Str,
                )
            }
            "sha2" => {
                n_args(0, 1)?;
                let bits = opt_int(0, 256)?;
                if !matches!(bits, 224 | 256 | 384 | 512) {
                    return Err(format!(
                        "converter 'sha2': unsupported number of bits {bits} (224, 256, 384 \
                         or 512)"
                    ));
                }
                (Conv::Sha2(bits as u16), In::Bin, T::Str)
            }
            "http_date" => {
                n_args(0, 2)?;
                let offset = opt_int(0, 0)?;
                let per_sec = match a.get(1).map_or("", |s| s.as_str()) {
                    "" | "s" => 1,
                    "ms" => 1000,
                    "us" => 1_000_000,
                    u => {
                        return Err(format!(
                            "converter 'http_date': unknown unit '{u}' (s, ms or us)"
                        ));
                    }
                };
                (Conv::HttpDate { offset, per_sec }, In::Int, T::Str)
            }
            "json_query" => {
                if a.len() > 2 {
                    return Err(format!("converter '{name}' takes at most 2 arguments"));
                }
                let path = a.first().map_or("", String::as_str);
                if path.is_empty() {
                    return Err(format!("converter '{name}': json_path must not be empty"));
                }
                let q = JsonQuery::parse(name, path, a.get(1).map(String::as_str))?;
                let out = if q.int() { T::Int } else { T::Str };
                (Conv::JsonQuery(q), In::Str, out)
            }
            "jwt_header_query" | "jwt_payload_query" => {
                n_args(0, 2)?;
                // An empty path is accepted here (HAProxy's check is json_query's only): it
                // finds nothing.
                let query = match a.first() {
                    Some(p) => Some(JsonQuery::parse(name, p, a.get(1).map(String::as_str))?),
                    None => None,
                };
                let out = if query.as_ref().is_some_and(JsonQuery::int) {
                    T::Int
                } else {
                    T::Str
                };
                let part = u8::from(name == "jwt_payload_query");
                (Conv::JwtQuery { part, query }, In::Str, out)
            }
            "jwt_verify" => {
                n_args(2, 2)?;
                let v = Verify::parse(&a[0], &a[1])?;
                (Conv::JwtVerify(Box::new(v)), In::Str, T::Int)
            }
            n if n == "map" || n.starts_with("map_") => return parse_map(n, a, input),
            n if UNSUPPORTED.contains(&n) || n.starts_with("table_") => {
                return Err(format!("converter '{n}' is not supported by sluice"));
            }
            n => {
                return Err(format!(
                    "unknown converter '{n}'{}",
                    super::did_you_mean(n, KNOWN.iter().copied())
                ));
            }
        };
        if !castable(input, in_t) {
            return Err(format!(
                "converter '{name}' cannot be applied to {} samples",
                type_name(input)
            ));
        }
        Ok((conv, out))
    }
}

fn parse_map(name: &str, a: &[String], input: SmpType) -> Result<(Conv, SmpType), String> {
    let mut parts = name.split('_').skip(1);
    let (m_name, o_name) = (parts.next(), parts.next());
    if parts.next().is_some() {
        return Err(format!("unknown converter '{name}'"));
    }
    let (m, regm) = match m_name.unwrap_or("str") {
        "str" => (Match::Str, false),
        "beg" => (Match::Beg, false),
        "sub" => (Match::Sub, false),
        "dir" => (Match::Dir, false),
        "dom" => (Match::Dom, false),
        "end" => (Match::End, false),
        "reg" => (Match::Reg, false),
        "regm" => (Match::Reg, true),
        "int" => (Match::Int, false),
        "ip" => (Match::Ip, false),
        "bin" | "len" | "found" | "bool" => {
            return Err(format!("converter '{name}' is not supported by sluice"));
        }
        _ => return Err(format!("unknown converter '{name}'")),
    };
    let out = match o_name.unwrap_or("str") {
        "str" => SmpType::Str,
        "int" => SmpType::Int,
        "ip" => SmpType::Ip,
        _ => return Err(format!("unknown converter '{name}'")),
    };
    if a.is_empty() || a[0].is_empty() {
        return Err(format!("converter '{name}' needs a map file"));
    }
    if a.len() > 2 {
        return Err(format!("converter '{name}' takes at most 2 arguments"));
    }
    let in_t = match m {
        Match::Int => In::Int,
        Match::Ip => In::Addr,
        _ => In::Str,
    };
    if !castable(input, in_t) {
        return Err(format!(
            "converter '{name}' cannot be applied to {} samples",
            type_name(input)
        ));
    }
    let file = crate::map::load(&a[0], true, "map")?;
    file.prepare(m, false)?;
    if !regm {
        file.need_values(match out {
            SmpType::Int => crate::map::ValueType::Int,
            SmpType::Ip => crate::map::ValueType::Ip,
            _ => crate::map::ValueType::Str,
        });
    }
    // Every value must read as the output type, as HAProxy checks when it loads the file.
    let typed = |s: &str| -> Option<Val> {
        match out {
            SmpType::Int => s.trim().parse().ok().map(Val::Int),
            SmpType::Ip => s.trim().parse().ok().map(Val::Ip),
            _ => Some(Val::Str(s.as_bytes().to_vec())),
        }
    };
    if !regm {
        for e in &file.load().entries {
            if typed(&e.value).is_none() {
                return Err(format!(
                    "{}:{}: value '{}' is not a valid {} (converter '{name}')",
                    a[0],
                    e.line,
                    e.value,
                    type_name(out)
                ));
            }
        }
    }
    let default = match a.get(1) {
        Some(d) => Some(typed(d).ok_or_else(|| {
            format!(
                "converter '{name}': default value '{d}' is not a valid {}",
                type_name(out)
            )
        })?),
        None => None,
    };
    Ok((
        Conv::Map {
            file,
            m,
            regm,
            out,
            default,
        },
        out,
    ))
}

fn type_name(t: SmpType) -> &'static str {
    match t {
        SmpType::Str => "string",
        SmpType::Int => "integer",
        SmpType::Ip => "address",
        SmpType::Bool => "boolean",
    }
}

/// Whether HAProxy casts samples of type `from` to what a converter takes.
fn castable(from: SmpType, to: In) -> bool {
    match to {
        In::Str | In::Bin => true,
        In::Int => true,
        In::Addr => from != SmpType::Bool,
        In::Bool => from != SmpType::Ip,
    }
}

fn mask4(s: &str) -> Option<u32> {
    let s = s.trim();
    if let Ok(n) = s.parse::<u32>() {
        return (n <= 32).then(|| u32::MAX.checked_shl(32 - n).unwrap_or(0));
    }
    s.parse::<Ipv4Addr>().ok().map(u32::from)
}

fn mask6(s: &str) -> Option<u128> {
    let s = s.trim();
    if let Ok(n) = s.parse::<u32>() {
        return (n <= 128).then(|| u128::MAX.checked_shl(128 - n).unwrap_or(0));
    }
    s.parse::<Ipv6Addr>().ok().map(u128::from)
}

// ---------------------------------------------------------------------------------------------
// Casts.

impl Val {
    pub(crate) fn from_sample(s: Sample<'_>) -> Val {
        match s {
            Sample::Str(b) => Val::Str(b.to_vec()),
            Sample::Int(n) => Val::Int(n),
            Sample::Ip(ip) => Val::Ip(unmap(ip)),
            Sample::Bool(b) => Val::Bool(b),
        }
    }

    pub(crate) fn as_sample(&self) -> Sample<'_> {
        match self {
            Val::Str(b) => Sample::Str(b),
            Val::Int(n) => Sample::Int(*n),
            Val::Ip(ip) => Sample::Ip(*ip),
            Val::Bool(b) => Sample::Bool(*b),
        }
    }

    /// The sample as text (HAProxy's cast to string).
    fn into_str(self) -> Vec<u8> {
        match self {
            Val::Str(b) => b,
            Val::Int(n) => n.to_string().into_bytes(),
            Val::Ip(ip) => ip.to_string().into_bytes(),
            Val::Bool(b) => vec![if b { b'1' } else { b'0' }],
        }
    }

    /// The sample as binary: integers as 8 bytes and addresses as 4 or 16, network order.
    fn into_bin(self) -> Vec<u8> {
        match self {
            Val::Str(b) => b,
            Val::Int(n) => n.to_be_bytes().to_vec(),
            Val::Bool(b) => (b as i64).to_be_bytes().to_vec(),
            Val::Ip(IpAddr::V4(v4)) => v4.octets().to_vec(),
            Val::Ip(IpAddr::V6(v6)) => v6.octets().to_vec(),
        }
    }

    fn to_int(&self) -> Option<i64> {
        match self {
            Val::Int(n) => Some(*n),
            Val::Bool(b) => Some(*b as i64),
            Val::Str(b) => str_to_int(b),
            Val::Ip(IpAddr::V4(v4)) => Some(u32::from(*v4) as i64),
            Val::Ip(IpAddr::V6(_)) => None,
        }
    }

    fn to_ip(&self) -> Option<IpAddr> {
        match self {
            Val::Ip(ip) => Some(*ip),
            Val::Int(n) => Some(IpAddr::V4(Ipv4Addr::from(*n as u32))),
            Val::Str(b) => std::str::from_utf8(b).ok()?.parse().ok().map(unmap),
            Val::Bool(_) => None,
        }
    }

    fn to_bool(&self) -> Option<bool> {
        match self {
            Val::Bool(b) => Some(*b),
            v => v.to_int().map(|n| n != 0),
        }
    }
}

/// v4-mapped IPv6 addresses are their IPv4 address, as HAProxy sees a client.
pub(crate) fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// HAProxy's string-to-integer cast: an optional sign, then digits up to the first non-digit
/// (none: 0); an empty string is no integer.
fn str_to_int(b: &[u8]) -> Option<i64> {
    if b.is_empty() {
        return None;
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    // Accumulated negative so that i64::MIN is reachable; saturates on overflow.
    let mut n: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            break;
        }
        n = n.saturating_mul(10).saturating_sub((c - b'0') as i64);
    }
    Some(if neg { n } else { n.saturating_neg() })
}

// ---------------------------------------------------------------------------------------------
// Applying.

/// Runs the converters on a sample; `None`: one of them failed (no sample).
pub(crate) fn run(convs: &[Conv], s: Sample<'_>, vars: Option<&Vars>) -> Option<Val> {
    let mut v = Val::from_sample(s);
    for c in convs {
        v = c.apply(v, vars)?;
    }
    Some(v)
}

/// A variable's value; `None` without a session (a check, the configuration).
fn var_of(vars: Option<&Vars>, name: &VarName) -> Option<Val> {
    match vars {
        Some(v) => v.get(name),
        None => crate::vars::Vars::default().get(name),
    }
}

impl Conv {
    fn apply(&self, v: Val, vars: Option<&Vars>) -> Option<Val> {
        Some(match self {
            Conv::Lua { name, args } => crate::lua::run_converter(name, args, &v)?,
            Conv::Lower => {
                let mut b = v.into_str();
                b.make_ascii_lowercase();
                Val::Str(b)
            }
            Conv::Upper => {
                let mut b = v.into_str();
                b.make_ascii_uppercase();
                Val::Str(b)
            }
            Conv::Length => Val::Int(v.into_str().len() as i64),
            Conv::Bytes { off, len } => {
                let b = v.into_bin();
                if *off >= b.len() {
                    return Some(Val::Str(Vec::new()));
                }
                let end = len.map_or(b.len(), |l| (off + l).min(b.len()));
                Val::Str(b[*off..end].to_vec())
            }
            Conv::Field {
                words,
                idx,
                delims,
                count,
            } => Val::Str(field(&v.into_str(), *words, *idx, delims, *count)?),
            Conv::Regsub { re, subst, global } => {
                let b = v.into_str();
                let limit = if *global { 0 } else { 1 };
                let out = re.replacen(&b, limit, |caps: &regex::bytes::Captures<'_>| {
                    crate::http::expand_groups(subst, caps)
                });
                Val::Str(out.into_owned())
            }
            Conv::Ltrim(set) => {
                let b = v.into_str();
                let start = b.iter().position(|c| !set.contains(c)).unwrap_or(b.len());
                Val::Str(b[start..].to_vec())
            }
            Conv::Rtrim(set) => {
                let mut b = v.into_str();
                let end = b
                    .iter()
                    .rposition(|c| !set.contains(c))
                    .map_or(0, |p| p + 1);
                b.truncate(end);
                Val::Str(b)
            }
            Conv::CutCrlf => {
                let mut b = v.into_str();
                if let Some(p) = b.iter().position(|&c| c == b'\r' || c == b'\n') {
                    b.truncate(p);
                }
                Val::Str(b)
            }
            Conv::Base64 => Val::Str(
                base64::engine::general_purpose::STANDARD
                    .encode(v.into_bin())
                    .into_bytes(),
            ),
            Conv::B64dec => Val::Str(
                base64::engine::general_purpose::STANDARD
                    .decode(v.into_str())
                    .ok()?,
            ),
            Conv::Ub64enc => Val::Str(
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(v.into_bin())
                    .into_bytes(),
            ),
            Conv::Ub64dec => {
                let b = v.into_str();
                let t: &[u8] = match b.iter().position(|&c| c == b'=') {
                    Some(p) => &b[..p],
                    None => &b,
                };
                Val::Str(
                    base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(t)
                        .ok()?,
                )
            }
            Conv::Hex => {
                const H: &[u8; 16] = b"0123456789ABCDEF";
                let b = v.into_bin();
                let mut out = Vec::with_capacity(b.len() * 2);
                for c in b {
                    out.push(H[(c >> 4) as usize]);
                    out.push(H[(c & 15) as usize]);
                }
                Val::Str(out)
            }
            Conv::Hex2i => {
                let b = v.into_str();
                let mut n: i64 = 0;
                for c in b {
                    n = (n << 4).wrapping_add((c as char).to_digit(16)? as i64);
                }
                Val::Int(n)
            }
            Conv::UrlDec { form } => Val::Str(url_dec(&v.into_str(), *form)?),
            Conv::Json(mode) => Val::Str(json(&v.into_str(), *mode)?),
            Conv::HostOnly => {
                let mut b = host_part(&v.into_str()).to_vec();
                b.make_ascii_lowercase();
                Val::Str(b)
            }
            Conv::PortOnly => {
                let b = v.into_str();
                let host = host_part(&b).len();
                let port = b.get(host + 1..).unwrap_or(b"");
                Val::Int(str_to_int(port).unwrap_or(0))
            }
            Conv::Hash { f, avalanche } => {
                let b = v.into_bin();
                let h = match f {
                    Hash::Sdbm => crate::lb::hash_sdbm(&b),
                    Hash::Djb2 => crate::lb::hash_djb2(&b),
                    Hash::Wt6 => crate::lb::hash_wt6(&b),
                    Hash::Crc32 => crate::lb::hash_crc32(&b),
                    Hash::Crc32c => crate::lb::hash_crc32c(&b),
                };
                let h = if *avalanche {
                    crate::lb::full_hash(h)
                } else {
                    h
                };
                Val::Int(h as i64)
            }
            Conv::Concat(start, var, end) => {
                let mut b = v.into_str();
                b.extend_from_slice(start);
                if let Some(x) = var.as_ref().and_then(|n| var_of(vars, n)) {
                    b.extend_from_slice(&x.into_str());
                }
                b.extend_from_slice(end);
                Val::Str(b)
            }
            Conv::AddItem(delim, var, suffix) => {
                let mut b = v.into_str();
                let item = var
                    .as_ref()
                    .and_then(|n| var_of(vars, n))
                    .map(Val::into_str)
                    .unwrap_or_default();
                if item.is_empty() && suffix.is_empty() {
                    return Some(Val::Str(b));
                }
                if !b.is_empty() {
                    b.extend_from_slice(delim);
                }
                b.extend_from_slice(&item);
                b.extend_from_slice(suffix);
                Val::Str(b)
            }
            Conv::Strcmp(name) => {
                let a = v.into_str();
                let b = var_of(vars, name)?.into_str();
                let n = a.len().min(b.len());
                let d = a[..n]
                    .iter()
                    .zip(&b[..n])
                    .find(|(x, y)| x != y)
                    .map_or(0, |(x, y)| *x as i64 - *y as i64);
                Val::Int(if d == 0 {
                    a.len() as i64 - b.len() as i64
                } else {
                    d
                })
            }
            Conv::SecureMemcmp(name) => {
                let b = var_of(vars, name)?.into_bin();
                Val::Bool(v.into_bin() == b)
            }
            Conv::Debug { prefix, stdout } => {
                if let Some(out) = stdout {
                    let (t, text) = match &v {
                        Val::Str(b) => {
                            ("str", String::from_utf8_lossy(b).escape_debug().to_string())
                        }
                        Val::Int(n) => ("sint", n.to_string()),
                        Val::Bool(b) => ("bool", u8::from(*b).to_string()),
                        Val::Ip(ip @ std::net::IpAddr::V4(_)) => ("ipv4", ip.to_string()),
                        Val::Ip(ip) => ("ipv6", ip.to_string()),
                    };
                    let line = format!("[debug] {prefix}: type={t} <{text}>\n");
                    use std::io::Write as _;
                    if *out {
                        let _ = std::io::stdout().write_all(line.as_bytes());
                    } else {
                        let _ = std::io::stderr().write_all(line.as_bytes());
                    }
                }
                v
            }
            Conv::SetVar(name, conds) => {
                if let Some(vs) = vars {
                    vs.set(name, v.clone(), conds);
                } else if name.scope == crate::vars::Scope::Proc {
                    crate::vars::proc_set(&name.name, v.clone(), conds);
                }
                v
            }
            Conv::Xxh(kind, seed) => {
                let b = v.into_bin();
                Val::Int(match kind {
                    32 => xxhash_rust::xxh32::xxh32(&b, *seed as u32) as i64,
                    64 => xxhash_rust::xxh64::xxh64(&b, *seed) as i64,
                    _ => xxhash_rust::xxh3::xxh3_64_with_seed(&b, *seed) as i64,
                })
            }
            Conv::UrlEnc => {
                const H: &[u8; 16] = b"0123456789ABCDEF";
                let b = v.into_str();
                let mut out = Vec::with_capacity(b.len());
                for c in b {
                    if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
                        out.push(c);
                    } else {
                        out.extend_from_slice(&[b'%', H[(c >> 4) as usize], H[(c & 15) as usize]]);
                    }
                }
                Val::Str(out)
            }
            Conv::Arith(op, b) => {
                let a = v.to_int()?;
                let b = match b {
                    Operand::Int(n) => *n,
                    Operand::Var(n) => var_of(vars, n)?.to_int()?,
                };
                Val::Int(match op {
                    Arith::Add => a.saturating_add(b),
                    Arith::Sub => a.saturating_sub(b),
                    Arith::Mul => a.saturating_mul(b),
                    Arith::Div => {
                        if b == 0 {
                            i64::MAX
                        } else {
                            a.checked_div(b).unwrap_or(i64::MAX)
                        }
                    }
                    Arith::Mod => a.checked_rem(b).unwrap_or(0),
                    Arith::And => a & b,
                    Arith::Or => a | b,
                    Arith::Xor => a ^ b,
                })
            }
            Conv::Neg => Val::Int(v.to_int()?.saturating_neg()),
            Conv::Cpl => Val::Int(!v.to_int()?),
            Conv::Not => Val::Bool(v.to_int()? == 0),
            Conv::Bool => Val::Bool(v.to_int()? != 0),
            Conv::Odd => Val::Bool(v.to_int()? & 1 == 1),
            Conv::Even => Val::Bool(v.to_int()? & 1 == 0),
            Conv::IpMask { v4, v6 } => match v.to_ip()? {
                IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & v4)).into(),
                IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & (*v6)?)).into(),
            },
            Conv::Iif(t, f) => Val::Str(if v.to_bool()? { t } else { f }.to_vec()),
            Conv::Sha1 => Val::Str(
                aws_lc_rs::digest::digest(
                    &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
                    &v.into_bin(),
                )
                .as_ref()
                .to_vec(),
            ),
            Conv::Sha2(bits) => {
                use aws_lc_rs::digest;
                let alg = match bits {
                    224 => &digest::SHA224,
                    384 => &digest::SHA384,
                    512 => &digest::SHA512,
                    _ => &digest::SHA256,
                };
                Val::Str(digest::digest(alg, &v.into_bin()).as_ref().to_vec())
            }
            Conv::HttpDate { offset, per_sec } => {
                let t = v.to_int()?.saturating_add(*offset);
                Val::Str(http_date(t.div_euclid(*per_sec)).into_bytes())
            }
            Conv::Map {
                file,
                m,
                regm,
                out,
                default,
            } => {
                let file = file.load();
                let hit = match m {
                    Match::Int => file.find_int(v.to_int()?),
                    Match::Ip => file.find_ip(v.to_ip()?),
                    _ => {
                        let b = v.into_str();
                        let hit = file.find_str(*m, &b, false);
                        if *regm && let Some(i) = hit {
                            let mut o = Vec::new();
                            file.regm_value(i, &b, &mut o);
                            return typed(&o, *out);
                        }
                        hit
                    }
                };
                match hit {
                    Some(i) => return typed(file.entries[i].value.as_bytes(), *out),
                    None => default.clone()?,
                }
            }
            Conv::JsonQuery(q) => q.query(&v.into_str())?,
            Conv::JwtQuery { part, query } => {
                let decoded = super::jwt::jwt_part(&v.into_str(), usize::from(*part))?;
                match query {
                    Some(q) => q.query(&decoded)?,
                    None => Val::Str(decoded),
                }
            }
            Conv::JwtVerify(vf) => {
                let var = |n: &VarName| var_of(vars, n).map(Val::into_str);
                Val::Int(vf.run(&v.into_str(), &var)?)
            }
        })
    }
}

impl From<IpAddr> for Val {
    fn from(ip: IpAddr) -> Val {
        Val::Ip(ip)
    }
}

impl From<Ipv4Addr> for Val {
    fn from(ip: Ipv4Addr) -> Val {
        Val::Ip(IpAddr::V4(ip))
    }
}

impl From<Ipv6Addr> for Val {
    fn from(ip: Ipv6Addr) -> Val {
        Val::Ip(IpAddr::V6(ip))
    }
}

/// A map value read as the map's output type.
fn typed(b: &[u8], out: SmpType) -> Option<Val> {
    let s = || std::str::from_utf8(b).ok().map(str::trim);
    match out {
        SmpType::Int => s()?.parse().ok().map(Val::Int),
        SmpType::Ip => s()?.parse().ok().map(Val::Ip),
        _ => Some(Val::Str(b.to_vec())),
    }
}

/// `field`/`word`: the `count` fields (0: all the rest) from index `idx` (negative: from the
/// end), with the delimiters between them kept. `words`: empty fields do not count.
fn field(s: &[u8], words: bool, idx: i64, delims: &[u8], count: i64) -> Option<Vec<u8>> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, c) in s.iter().enumerate() {
        if delims.contains(c) {
            spans.push((start, i));
            start = i + 1;
        }
    }
    spans.push((start, s.len()));
    if words {
        spans.retain(|(a, b)| a < b);
    }
    let n = spans.len() as i64;
    // Out of range: no sample for `field`, an empty one for `word` (as HAProxy).
    let missing = || if words { Some(Vec::new()) } else { None };
    if idx > 0 {
        let first = idx - 1;
        if first >= n {
            return missing();
        }
        let start = spans[first as usize].0;
        // Count 0: everything after, trailing delimiters included.
        let end = if count == 0 {
            s.len()
        } else {
            spans[first.saturating_add(count - 1).min(n - 1) as usize].1
        };
        Some(s[start..end].to_vec())
    } else {
        let last = n + idx;
        if last < 0 {
            return missing();
        }
        let end = spans[last as usize].1;
        let start = if count == 0 {
            0
        } else {
            spans[last.saturating_sub(count - 1).max(0) as usize].0
        };
        Some(s[start..end].to_vec())
    }
}

/// Percent-decoding; `+` is a space in a form, or after a `?`. A bad `%` escape fails.
fn url_dec(s: &[u8], form: bool) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut in_query = form;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                let h = |c: u8| (c as char).to_digit(16);
                let hi = h(*s.get(i + 1)?)?;
                let lo = h(*s.get(i + 2)?)?;
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
            b'+' if in_query => out.push(b' '),
            b'?' => {
                in_query = true;
                out.push(b'?');
            }
            c => out.push(c),
        }
        i += 1;
    }
    Some(out)
}

/// The host of a `Host` header value: up to `]` for an IPv6 literal, else up to the `:`.
fn host_part(b: &[u8]) -> &[u8] {
    if b.first() == Some(&b'[') {
        return match b.iter().position(|&c| c == b']') {
            Some(p) => &b[..p + 1],
            None => b,
        };
    }
    match b.iter().rposition(|&c| c == b':') {
        Some(p) => &b[..p],
        None => b,
    }
}

/// JSON string escaping; non-ASCII bytes as `\uXXXX` of their code point in the utf8 modes,
/// of the byte in ascii mode.
fn json(s: &[u8], mode: Json) -> Option<Vec<u8>> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(s.len() + 8);
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c < 0x80 || mode == Json::Ascii {
            match c {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'/' => out.extend_from_slice(b"\\/"),
                b'\x08' => out.extend_from_slice(b"\\b"),
                b'\x0c' => out.extend_from_slice(b"\\f"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                c if !(0x20..0x7f).contains(&c) => {
                    let _ = write!(out, "\\u{c:04x}");
                }
                c => out.push(c),
            }
            i += 1;
            continue;
        }
        // A UTF-8 sequence.
        let len = match c {
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => 0,
        };
        let seq = if len > 0 { s.get(i..i + len) } else { None };
        let decoded = seq.and_then(|q| std::str::from_utf8(q).ok().and_then(|t| t.chars().next()));
        match decoded {
            Some(ch) if (ch as u32) <= 0xffff => {
                let _ = write!(out, "\\u{:04x}", ch as u32);
                i += len;
            }
            Some(_) => match mode {
                Json::Utf8s | Json::Utf8ps => i += len,
                _ => return None,
            },
            None => match mode {
                Json::Utf8s | Json::Utf8ps => i += 1,
                _ => return None,
            },
        }
    }
    Some(out)
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`) from seconds since the epoch (dates
/// before it are the epoch).
pub(crate) fn http_date(secs: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let secs = secs.max(0);
    let tm = crate::log::Tm::from_system(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64),
    );
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[(secs / 86400 % 7) as usize],
        tm.day,
        crate::log::MONTHS[(tm.month - 1) as usize],
        tm.year,
        tm.hour,
        tm.min,
        tm.sec
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(expr: &str, input: &str) -> Option<Val> {
        let (_, convs) = split(expr).unwrap();
        let mut t = SmpType::Str;
        let mut cs = Vec::new();
        for (n, a) in convs {
            let (c, o) = Conv::parse(n, a.as_deref(), t).unwrap();
            cs.push(c);
            t = o;
        }
        run(&cs, Sample::Str(input.as_bytes()), None)
    }

    fn s(expr: &str, input: &str) -> String {
        match conv(expr, input) {
            Some(v) => String::from_utf8(v.into_str()).unwrap(),
            None => "<none>".into(),
        }
    }

    #[test]
    fn argument_quoting() {
        let (f, c) = split("hdr(x-path),regsub('/+','/','g'),lower").unwrap();
        assert_eq!(f, "hdr(x-path)");
        assert_eq!(c[0].0, "regsub");
        assert_eq!(c[0].1.as_ref().unwrap(), &["/+", "/", "g"]);
        assert_eq!(c[1], ("lower", None));
        let (_, c) = split(r#"url,regsub("(foo|bar)([0-9]+)?","\2\1",i)"#).unwrap();
        assert_eq!(
            c[0].1.as_ref().unwrap(),
            &["(foo|bar)([0-9]+)?", r"\2\1", "i"]
        );
        let (_, c) = split(r"str(x),field(1,','),regsub(\.,\\)").unwrap();
        assert_eq!(c[0].1.as_ref().unwrap(), &["1", ","]);
        assert_eq!(c[1].1.as_ref().unwrap(), &[r"\.", r"\"]);
        assert!(split("path,lower(").is_err());
        assert!(split("path,").is_err());
        assert!(split("path;lower").is_err());
    }

    #[test]
    fn fields_and_words_as_documented() {
        let i = "f1_f2_f3__f5";
        assert_eq!(s("x,field(5,_)", i), "f5");
        assert_eq!(s("x,field(2,_,0)", i), "f2_f3__f5");
        assert_eq!(s("x,field(2,_,2)", i), "f2_f3");
        assert_eq!(s("x,field(-2,_,3)", i), "f2_f3_");
        assert_eq!(s("x,field(-3,_,0)", i), "f1_f2_f3");
        assert_eq!(s("x,field(6,_)", i), "<none>");
        assert_eq!(s("x,word(4,_)", i), "f5");
        assert_eq!(s("x,word(2,_,0)", i), "f2_f3__f5");
        assert_eq!(s("x,word(3,_,2)", i), "f3__f5");
        assert_eq!(s("x,word(-2,_,3)", i), "f1_f2_f3");
        assert_eq!(s("x,word(-3,_,0)", i), "f1_f2");
        assert_eq!(s("x,word(1,/)", "/f1/f2/f3/f4"), "f1");
        assert_eq!(s("x,word(9,_)", i), "");
        assert_eq!(s("x,word(1,_)", "___"), "");
        assert_eq!(s("x,word(2,_,0)", "__a__b__"), "b__");
        assert_eq!(s("x,field(2,_,-1)", i), "f2_f3__f5");
        assert_eq!(s("x,field(3,_,9223372036854775807)", i), "f3__f5");
        assert_eq!(s("x,field(-3,_,9223372036854775807)", i), "f1_f2_f3");
    }

    #[test]
    fn strings() {
        assert_eq!(s("x,lower", "AbC"), "abc");
        assert_eq!(s("x,upper", "AbC"), "ABC");
        assert_eq!(s("x,length", "héllo"), "6");
        assert_eq!(s("x,regsub('/+','/','g')", "/////a///b/c/"), "/a/b/c/");
        assert_eq!(s("x,regsub(a,b)", "aaa"), "baa");
        assert_eq!(
            s(r#"x,regsub("(foo|bar)([0-9]+)?","\2\1",i)"#, "/FOO12x"),
            "/12FOOx"
        );
        assert_eq!(s("x,ltrim(' /'),rtrim(x)", "  /a/bxx"), "a/b");
        assert_eq!(s("x,base64", "hello"), "aGVsbG8=");
        assert_eq!(s("x,b64dec", "aGVsbG8="), "hello");
        assert_eq!(s("x,b64dec", "!!"), "<none>");
        assert_eq!(s("x,hex", "A\n"), "410A");
        assert_eq!(s("x,hex2i", "ff"), "255");
        assert_eq!(s("x,hex2i", "fz"), "<none>");
        assert_eq!(s("x,hex2i", ""), "0");
        assert_eq!(s("x,url_dec", "a%20b+c?d+e"), "a b+c?d e");
        assert_eq!(s("x,url_dec(1)", "a+b"), "a b");
        assert_eq!(s("x,url_dec", "a%2"), "<none>");
        assert_eq!(s("x,host_only", "WWW.Example.com:8080"), "www.example.com");
        assert_eq!(s("x,host_only", "[::1]:80"), "[::1]");
        assert_eq!(s("x,port_only", "[::1]:80"), "80");
        assert_eq!(s("x,port_only", "example.com"), "0");
        assert_eq!(s("x,json", "a\"b\\c\n"), "a\\\"b\\\\c\\n");
        assert_eq!(s("x,json(utf8)", "é"), "\\u00e9");
    }

    #[test]
    fn integers() {
        assert_eq!(s("x,add(2)", "40"), "42");
        assert_eq!(s("x,add(1)", "12abc"), "13");
        assert_eq!(s("x,add(1)", ""), "<none>");
        assert_eq!(s("x,add(0)", "99999999999999999999"), i64::MAX.to_string());
        assert_eq!(s("x,add(0)", "-99999999999999999999"), i64::MIN.to_string());
        assert_eq!(s("x,div(0)", "5"), i64::MAX.to_string());
        assert_eq!(s("x,mod(0)", "5"), "0");
        assert_eq!(s("x,mul(2)", &i64::MAX.to_string()), i64::MAX.to_string());
        assert_eq!(s("x,neg", "5"), "-5");
        assert_eq!(s("x,cpl", "0"), "-1");
        assert_eq!(s("x,odd", "3"), "1");
        assert_eq!(s("x,even", "3"), "0");
        assert_eq!(s("x,not", "0"), "1");
        assert_eq!(s("x,bool,iif(yes,no)", "7"), "yes");
    }

    #[test]
    fn addresses_and_hashes() {
        assert_eq!(s("x,ipmask(24)", "10.1.2.3"), "10.1.2.0");
        assert_eq!(s("x,ipmask(255.255.0.0)", "10.1.2.3"), "10.1.0.0");
        assert_eq!(s("x,ipmask(24)", "2001:db8::1"), "<none>");
        assert_eq!(s("x,ipmask(24,32)", "2001:db8::1"), "2001:db8::");
        assert_eq!(s("x,crc32", "123456789"), 0xcbf43926u32.to_string());
        assert_eq!(s("x,crc32c", "123456789"), 0xe3069283u32.to_string());
        assert_eq!(s("x,djb2", ""), "5381");
        // An address hashes as its 4 network-order bytes.
        let v = run(
            &[Conv::Hex],
            Sample::Ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
            None,
        );
        assert_eq!(v, Some(Val::Str(b"7F000001".to_vec())));
    }

    #[test]
    fn dates() {
        assert_eq!(http_date(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(s("x,http_date(1)", "0"), "Thu, 01 Jan 1970 00:00:01 GMT");
    }

    /// `json_query`: the answers HAProxy 2.6.12 gave on the same document, except where
    /// marked (sluice reads documents as JSON defines them: `docs/compat.md`).
    #[test]
    fn json_query_as_haproxy() {
        let doc = r#"{"s":"str","i":4,"f":0.5,"big":1700000000,"t":true,"fa":false,"nul":null,"a":[10,"x",[1,2],{"k":"v"}],"o":{"p":{"q":"deep"}},"my.key":"dotted","e":"a\"b\\c\nd\u0041","sl":"a\/b","u":"\u20ac","neg":-12,"exp":1e3,"fr":-1.5e-7,"huge":9007199254740993,"max":9007199254740991,"ovf":99999999999999999999,"d":1,"d":2}"#;
        let q = |path: &str| s(&format!("x,json_query('{path}')"), doc);
        let qi = |path: &str| s(&format!("x,json_query('{path}',int)"), doc);
        for (path, want) in [
            ("$.s", "str"),
            ("$.i", "4"),
            ("$.f", "0.5"),
            ("$.big", "1.7e+09"),
            ("$.t", "1"),
            ("$.fa", "0"),
            ("$.nul", "<none>"),
            ("$.a", "<none>"),
            ("$.a[0]", "10"),
            ("$.a[1]", "x"),
            ("$.a[2]", "<none>"),
            ("$.a[2][1]", "2"),
            ("$.a[3].k", "v"),
            ("$.a[4]", "<none>"),
            ("$.o", "<none>"),
            ("$.o.p.q", "deep"),
            (r"$.my\.key", "dotted"),
            ("$.my.key", "<none>"),
            ("$.neg", "-12"),
            ("$.exp", "1000"),
            ("$.fr", "-1.5e-07"),
            ("$.huge", "9.0072e+15"),
            ("$.ovf", "1e+20"),
            ("$.zz", "<none>"),
            ("$['s']", "<none>"),
            ("$", "<none>"),
            ("s", "<none>"),
            ("$.a[-1]", "<none>"),
            // HAProxy: no value for `\/` and `\u` above 00FF; the last of two equal keys
            // here, the first there; `[1x]` is no index here (HAProxy reads it as `[1]`).
            ("$.sl", "a/b"),
            ("$.u", "\u{20ac}"),
            ("$.d", "2"),
            ("$.a[1x]", "<none>"),
        ] {
            assert_eq!(q(path), want, "{path}");
        }
        let e = conv("x,json_query('$.e')", doc).unwrap();
        assert_eq!(e, Val::Str(b"a\"b\\c\ndA".to_vec()));
        assert_eq!(conv("x,json_query('$.t')", doc), Some(Val::Bool(true)));
        for (path, want) in [
            ("$.i", "4"),
            ("$.f", "0"),
            ("$.big", "1700000000"),
            ("$.neg", "-12"),
            ("$.fr", "0"),
            ("$.huge", "<none>"),
            ("$.max", "9007199254740991"),
            ("$.ovf", "<none>"),
            ("$.s", "str"),
            ("$.t", "1"),
            ("$.nul", "<none>"),
            // HAProxy reads the token with strtoll: `1e3` gives 1 there.
            ("$.exp", "1000"),
        ] {
            assert_eq!(qi(path), want, "{path},int");
        }
        assert_eq!(conv("x,json_query('$.i',int)", doc), Some(Val::Int(4)));
        let one = |path: &str, doc: &str| s(&format!("x,json_query('{path}')"), doc);
        let int = |doc: &str| s("x,json_query('$.a','int')", doc);
        // What follows the first value is not read (as in HAProxy); what comes before the
        // end of that value must be JSON (HAProxy stops at the value it was asked for).
        assert_eq!(one("$.a", r#"{"a":1}junk"#), "1");
        assert_eq!(one("$.a", r#"{"a":1, garbage"#), "<none>");
        assert_eq!(one("$.a", r#"{"a":"x"#), "<none>");
        assert_eq!(one("$.a", "[1,2"), "<none>");
        assert_eq!(one("$.a", ""), "<none>");
        assert_eq!(one("$.a", r#"{"a":tru}"#), "<none>");
        assert_eq!(one("$.a", r#"{a:1}"#), "<none>");
        assert_eq!(one("$.a", r#"{"x":{"a":1},"a":2}"#), "2");
        assert_eq!(one("$.a b", r#"{"a b":1}"#), "1");
        assert_eq!(one("$.", r#"{"":1}"#), "1");
        assert_eq!(one("$.a[11]", "{\"a\":[1,2,3,4,5,6,7,8,9,10,11,12]}"), "12");
        assert_eq!(one("$[1][0]", "[1,[2,3]]"), "2");
        assert_eq!(one("$", "42"), "42");
        assert_eq!(one("$", r#""s""#), "s");
        assert_eq!(one("$.a", "{\"a\":-0}"), "-0");
        // The nearest double, then `%g`; HAProxy's reader computes a slightly different
        // double for this one and prints `1.23457e-05`.
        assert_eq!(one("$.a", "{\"a\":0.00001234565}"), "1.23456e-05");
        assert_eq!(one("$.a", "{\"a\":123456.5}"), "123456");
        assert_eq!(one("$.a", "{\"a\":999999.5}"), "1e+06");
        assert_eq!(one("$.a", "{\"a\":2.5e-5}"), "2.5e-05");
        assert_eq!(int("{\"a\":12345678.9}"), "12345678");
        assert_eq!(int("{\"a\":-2.5}"), "-2");
        assert_eq!(int("{\"a\":1e300}"), "<none>");
    }

    /// C's `%g`, on values HAProxy printed.
    #[test]
    fn printf_g() {
        use super::super::jwt::fmt_g;
        for (v, want) in [
            (4.0, "4"),
            (1_700_000_000.0, "1.7e+09"),
            (0.5, "0.5"),
            (-1.5e-7, "-1.5e-07"),
            (123_456.5, "123456"),
            (999_999.5, "1e+06"),
            (1_234_565.0, "1.23456e+06"),
            (12_345_678.9, "1.23457e+07"),
            (0.0001, "0.0001"),
            // The nearest double is below ...565 (HAProxy prints 1.23457e-05 for the JSON
            // number: its reader computes a double above it).
            (0.000_012_345_65, "1.23456e-05"),
            (100_000.0, "100000"),
            (1_000_000.0, "1e+06"),
            (1.5e300, "1.5e+300"),
            (1.234_567_89, "1.23457"),
            (9.999_999_5, "10"),
            (0.0, "0"),
            (-0.0, "-0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(fmt_g(v), want, "{v}");
        }
    }

    /// The JWT converters on tokens HAProxy 2.6.12 answered (HS256 with the secret
    /// `secret`); keys from files are in tests/it_jwt.rs.
    #[test]
    fn jwt_parts_and_hmac() {
        const HS: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
                          eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.\
                          WhLjQHtBSrU4D_3_GMPysOzYkYvGAa-QT2mBJEuEFRE";
        assert_eq!(s("x,jwt_header_query('$.alg')", HS), "HS256");
        assert_eq!(
            s("x,jwt_header_query", HS),
            r#"{"alg":"HS256","typ":"JWT"}"#
        );
        assert_eq!(s("x,jwt_payload_query('$.iss')", HS), "sluice");
        assert_eq!(s("x,jwt_payload_query('$.n','int')", HS), "4");
        assert_eq!(s("x,jwt_payload_query('')", HS), "<none>");
        assert_eq!(s("x,jwt_header_query('$.a')", "eyJhIjoxfQ"), "1");
        assert_eq!(s("x,jwt_payload_query('$.b')", "x.eyJiIjoyfQ"), "2");
        assert_eq!(s("x,jwt_payload_query('$.b')", "eyJhIjoxfQ"), "<none>");
        assert_eq!(s("x,jwt_payload_query('$.b')", "a.eyJiIjoyfQ.c.d"), "2");
        assert_eq!(s("x,jwt_header_query('$.a')", "eyJhIjoxfR"), "1");
        assert_eq!(s("x,jwt_header_query('$.a')", "eyJhIjoxfQ=A.x"), "1");
        assert_eq!(s("x,jwt_header_query('$.a')", "eyJhIjoxf.x"), "<none>");
        assert_eq!(s("x,jwt_header_query('$.a')", "eyJhIjoxfQ+.x"), "<none>");
        // HAProxy's base64url: `=` is `_`, bits after the last byte are ignored.
        let b = |t: &str| super::super::jwt::b64url_dec(t.as_bytes());
        assert_eq!(b("eyJhIjoxfQ=="), Some(b"{\"a\":1}\x0f\xff".to_vec()));
        assert_eq!(b("A==="), Some(vec![0x03, 0xff, 0xff]));
        assert_eq!(b("=="), Some(vec![0xff]));
        assert_eq!(b("="), None);
        assert_eq!(b(""), Some(vec![]));

        let v = |alg: &str, key: &str, t: &str| s(&format!("x,jwt_verify({alg},{key})"), t);
        assert_eq!(v("HS256", "secret", HS), "1");
        assert_eq!(v("HS256", "wrong", HS), "0");
        assert_eq!(v("HS384", "secret", HS), "0");
        let tampered = HS.replacen("eyJpc3Mi", "eyJpc3Ni", 1);
        assert_eq!(v("HS256", "secret", &tampered), "0");
        assert_eq!(v("HS256", "secret", &format!("{HS}.x")), "-3");
        for t in ["a.b", "a.b.", "a.b.c", "a.b.!!", ""] {
            assert_eq!(v("HS256", "secret", t), "-3", "{t}");
        }
        let none = "eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0";
        assert_eq!(v("none", "x", &format!("{none}.")), "1");
        assert_eq!(v("none", "x", none), "1");
        assert_eq!(v("none", "x", &format!("{none}.abc")), "0");
        assert_eq!(v("none", "x", HS), "0");
        assert_eq!(v("none", "x", "abc"), "-3");
        // A key file that was never read: -5 (here for a path no file has).
        assert_eq!(v("txn.alg", "/nonexistent/k.pem", HS), "<none>");
    }

    #[test]
    fn parse_errors() {
        let e = |x: &str| {
            let (_, c) = split(x).unwrap();
            let (n, a) = &c[0];
            Conv::parse(n, a.as_deref(), SmpType::Str).unwrap_err()
        };
        assert!(e("x,lowr").contains("did you mean 'lower'"));
        assert!(e("x,add(tx.x)").contains("unknown scope"));
        assert!(e("x,add(abc)").contains("not an integer or a variable"));
        assert!(e("x,field(0,_)").contains("index"));
        assert!(e("x,regsub(a,b,q)").contains("flag"));
        assert!(e("x,xxh3(1,2)").contains("at most 1"));
        assert!(e("x,ltime(%Y)").contains("not supported"));
        assert!(e("x,map(/nonexistent/x.map)").contains("failed to open map file"));
        assert!(e("x,json_query").contains("json_path must not be empty"));
        assert!(e("x,json_query('')").contains("json_path must not be empty"));
        assert!(e("x,json_query('$.a',str)").contains("output_type only supports"));
        assert!(e("x,jwt_header_query('$.a',str)").contains("output_type only supports"));
        assert!(e("x,jwt_verify(HS256)").contains("needs 2 arguments"));
        assert!(e("x,jwt_verify(FOO,k)").contains("unknown JWT algorithm: FOO"));
        assert!(e("x,jwt_verify(hs256,k)").contains("unknown JWT algorithm"));
        assert!(e("x,jwt_verify(ES256,/nonexistent/k.pem)").contains("/nonexistent/k.pem"));
    }
}
