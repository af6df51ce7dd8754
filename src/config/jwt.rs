//! The JSON and JSON Web Token converters: `json_query(PATH[,int])`,
//! `jwt_header_query([PATH[,int]])`, `jwt_payload_query(...)` and `jwt_verify(ALG,KEY)`.
//!
//! Owns their JSON reading, their base64url decoding and the signature checks (aws-lc-rs:
//! HMAC, RSA PKCS#1 v1.5 and PSS, ECDSA), and the public keys `jwt_verify` loads while the
//! configuration is read. It must not know where a sample comes from: the converter module
//! hands it bytes and the values of the variables its arguments name.
//!
//! Documents are read with serde_json, as JSON defines them; HAProxy 2.6's own reader is more
//! lenient in places (it stops reading at the value it was asked for) and stricter in others
//! (`\/`, `\u` above `\u00FF`): `docs/compat.md` lists what differs. Its base64url decoder's
//! quirk (`=` read as `_`) and OpenSSL's reading of ECDSA signatures of any even length are
//! kept, since tokens that pass or fail depend on them. Nothing here runs unless a rule uses
//! these converters.

use std::sync::{Arc, RwLock};

use aws_lc_rs::signature::{self as sig, ParsedPublicKey};

use super::converter::Val;
use crate::vars::VarName;

// ---------------------------------------------------------------------------------------------
// Types.

/// A JSON path query: `json_query(PATH[,int])`, or what the JWT query converters ask of a
/// decoded part.
#[derive(Debug, Clone)]
pub(crate) struct JsonQuery {
    /// The path's steps (`$.a.b`, `$.a[0]`, `$.my\.key`); `None` if it designates nothing.
    steps: Option<Vec<Step>>,
    /// `int`: a number is read as an integer instead of printed with `%g`.
    int: bool,
}

/// One step of a JSON path: an object's member, or an array's element.
#[derive(Debug, Clone)]
enum Step {
    Key(Box<str>),
    Index(usize),
}

/// The JWS algorithms of RFC 7518 section 3.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    None,
    Hs(Sha),
    Rs(Sha),
    Es(Sha),
    Ps(Sha),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sha {
    S256,
    S384,
    S512,
}

/// An argument of `jwt_verify`: text, or a variable read when the converter runs (HAProxy
/// takes any argument that parses as a variable name as one).
#[derive(Debug, Clone)]
enum Arg {
    Text(Box<[u8]>),
    Var(VarName),
}

/// `jwt_verify(ALG,KEY)` with its checked arguments.
#[derive(Debug, Clone)]
pub(crate) struct Verify {
    alg: Arg,
    key: Arg,
    /// The public key read from KEY at startup, when KEY is a constant path to one.
    pem: Option<Arc<PublicKey>>,
}

/// A public key from a PEM file, parsed once for each algorithm it can verify.
#[derive(Debug)]
pub(crate) struct PublicKey {
    verifiers: Vec<(Alg, ParsedPublicKey)>,
}

/// `jwt_verify`'s results, as HAProxy numbers them.
const VRFY_OK: i64 = 1;
const VRFY_KO: i64 = 0;
const VRFY_UNKNOWN_ALG: i64 = -1;
const VRFY_INVALID_TOKEN: i64 = -3;
const VRFY_UNKNOWN_CERT: i64 = -5;

/// The public keys read by `jwt_verify` converters, by path: HAProxy's certificate tree, in
/// which a KEY taken from a variable is looked up (so it must name a file some `jwt_verify`
/// of the configuration names). A reload replaces the entries it reads again; the others
/// stay, unused unless a variable names them.
static KEYS: RwLock<Vec<KeyEntry>> = RwLock::new(Vec::new());

/// A key file's path and its key.
type KeyEntry = (Box<[u8]>, Arc<PublicKey>);

// ---------------------------------------------------------------------------------------------
// Parsing.

impl JsonQuery {
    /// `PATH` and the optional output type (`int`, or nothing), as `json_query` and the JWT
    /// query converters take them.
    pub(crate) fn parse(name: &str, path: &str, out: Option<&str>) -> Result<JsonQuery, String> {
        let int = match out {
            None | Some("") => false,
            Some("int") => true,
            Some(_) => {
                return Err(format!(
                    "converter '{name}': output_type only supports \"int\" as argument"
                ));
            }
        };
        Ok(JsonQuery {
            steps: JsonQuery::steps(path),
            int,
        })
    }

    /// Whether the query's result is an integer when it is a number (the converter's type).
    pub(crate) fn int(&self) -> bool {
        self.int
    }
}

impl Alg {
    /// HAProxy's `jwt_parse_alg`: the exact, case-sensitive names.
    fn parse(s: &[u8]) -> Option<Alg> {
        if s == b"none" {
            return Some(Alg::None);
        }
        let (&kind, sha) = s.split_first()?;
        let sha = match sha {
            b"S256" => Sha::S256,
            b"S384" => Sha::S384,
            b"S512" => Sha::S512,
            _ => return None,
        };
        Some(match kind {
            b'H' => Alg::Hs(sha),
            b'R' => Alg::Rs(sha),
            b'E' => Alg::Es(sha),
            b'P' => Alg::Ps(sha),
            _ => return None,
        })
    }

    /// Whether KEY names a public key file (else it is the HMAC secret, or unused).
    fn asymmetric(self) -> bool {
        matches!(self, Alg::Rs(_) | Alg::Es(_) | Alg::Ps(_))
    }
}

impl Arg {
    /// A variable if the text parses as one (`txn.alg`), else the text.
    fn parse(s: &str) -> Arg {
        match VarName::parse(s) {
            Ok(v) => Arg::Var(v),
            Err(_) => Arg::Text(s.as_bytes().into()),
        }
    }
}

impl Verify {
    /// `jwt_verify(ALG,KEY)`. A constant unknown ALG is refused, as HAProxy does. A constant
    /// KEY is read as a PEM file at once when ALG is a constant RSA or ECDSA algorithm (a
    /// file that cannot be used is an error, where HAProxy would answer -5 to every token);
    /// with an ALG from a variable it is tried too, silently, since it may as well be an
    /// HMAC secret. With a constant HMAC or `none` ALG, KEY is not taken for a path.
    pub(crate) fn parse(alg: &str, key: &str) -> Result<Verify, String> {
        let alg = Arg::parse(alg);
        let const_alg = match &alg {
            Arg::Text(t) => Some(Alg::parse(t).ok_or_else(|| {
                format!(
                    "converter 'jwt_verify': unknown JWT algorithm: {}",
                    String::from_utf8_lossy(t)
                )
            })?),
            Arg::Var(_) => None,
        };
        let key = Arg::parse(key);
        let mut pem = None;
        if let Arg::Text(path) = &key
            && const_alg.is_none_or(Alg::asymmetric)
        {
            match load_key(&String::from_utf8_lossy(path)) {
                Ok(k) => {
                    let k = Arc::new(k);
                    register(path, &k);
                    pem = Some(k);
                }
                Err(e) if const_alg.is_some() => {
                    return Err(format!("converter 'jwt_verify': {e}"));
                }
                Err(_) => {}
            }
        }
        Ok(Verify { alg, key, pem })
    }
}

/// Remembers `key` as read from `path`, for KEYs taken from variables.
fn register(path: &[u8], key: &Arc<PublicKey>) {
    let mut keys = KEYS.write().unwrap_or_else(|e| e.into_inner());
    match keys.iter_mut().find(|(p, _)| **p == *path) {
        Some(e) => e.1 = key.clone(),
        None => keys.push((path.into(), key.clone())),
    }
}

/// The key read from `path` by a `jwt_verify` of the configuration.
fn registered(path: &[u8]) -> Option<Arc<PublicKey>> {
    let keys = KEYS.read().unwrap_or_else(|e| e.into_inner());
    keys.iter().find(|(p, _)| **p == *path).map(|e| e.1.clone())
}

/// The public key of PEM file `path`: its first `PUBLIC KEY` block (what HAProxy reads), else
/// the key of its first certificate. RSA and ECDSA on P-256, P-384 and P-521 are kept.
fn load_key(path: &str) -> Result<PublicKey, String> {
    use rustls::pki_types::pem::{PemObject, SectionKind};
    let data = std::fs::read(path).map_err(|e| format!("cannot read key file '{path}': {e}"))?;
    let mut spki = None;
    let mut cert = None;
    for item in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(&data) {
        let (kind, der) = item.map_err(|e| format!("key file '{path}': bad PEM: {e}"))?;
        match kind {
            SectionKind::PublicKey if spki.is_none() => spki = Some(der),
            SectionKind::Certificate if cert.is_none() => cert = Some(der),
            _ => {}
        }
    }
    let spki = match (spki, cert) {
        (Some(k), _) => k,
        (None, Some(c)) => {
            let (_, x) = x509_parser::parse_x509_certificate(&c)
                .map_err(|e| format!("key file '{path}': bad certificate: {e}"))?;
            x.tbs_certificate.subject_pki.raw.to_vec()
        }
        (None, None) => {
            return Err(format!(
                "key file '{path}' holds no 'PUBLIC KEY' nor 'CERTIFICATE' PEM block"
            ));
        }
    };
    let verifiers = verifiers(&spki);
    if verifiers.is_empty() {
        return Err(format!(
            "key file '{path}': not an RSA key nor an ECDSA key on P-256, P-384 or P-521"
        ));
    }
    Ok(PublicKey { verifiers })
}

/// The algorithms a SubjectPublicKeyInfo can verify, each with the key parsed for it. ECDSA
/// takes any of the three hashes on the key's curve, as OpenSSL does (HAProxy does not tie
/// ES256 to P-256); RSA keys from 1024 bits are read where aws-lc-rs has such a variant
/// (RS256, RS512), OpenSSL reading any size.
fn verifiers(spki: &[u8]) -> Vec<(Alg, ParsedPublicKey)> {
    type Table = [(Alg, &'static dyn sig::VerificationAlgorithm); 3];
    let rsa: [(Alg, &'static dyn sig::VerificationAlgorithm); 6] = [
        (
            Alg::Rs(Sha::S256),
            &sig::RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY,
        ),
        (Alg::Rs(Sha::S384), &sig::RSA_PKCS1_2048_8192_SHA384),
        (
            Alg::Rs(Sha::S512),
            &sig::RSA_PKCS1_1024_8192_SHA512_FOR_LEGACY_USE_ONLY,
        ),
        (Alg::Ps(Sha::S256), &sig::RSA_PSS_2048_8192_SHA256),
        (Alg::Ps(Sha::S384), &sig::RSA_PSS_2048_8192_SHA384),
        (Alg::Ps(Sha::S512), &sig::RSA_PSS_2048_8192_SHA512),
    ];
    let curves: [Table; 3] = [
        [
            (Alg::Es(Sha::S256), &sig::ECDSA_P256_SHA256_ASN1),
            (Alg::Es(Sha::S384), &sig::ECDSA_P256_SHA384_ASN1),
            (Alg::Es(Sha::S512), &sig::ECDSA_P256_SHA512_ASN1),
        ],
        [
            (Alg::Es(Sha::S256), &sig::ECDSA_P384_SHA256_ASN1),
            (Alg::Es(Sha::S384), &sig::ECDSA_P384_SHA384_ASN1),
            (Alg::Es(Sha::S512), &sig::ECDSA_P384_SHA512_ASN1),
        ],
        [
            (Alg::Es(Sha::S256), &sig::ECDSA_P521_SHA256_ASN1),
            (Alg::Es(Sha::S384), &sig::ECDSA_P521_SHA384_ASN1),
            (Alg::Es(Sha::S512), &sig::ECDSA_P521_SHA512_ASN1),
        ],
    ];
    let parse = |table: &[(Alg, &'static dyn sig::VerificationAlgorithm)]| {
        table
            .iter()
            .filter_map(|(a, v)| ParsedPublicKey::new(*v, spki).ok().map(|k| (*a, k)))
            .collect::<Vec<_>>()
    };
    let out = parse(&rsa);
    if !out.is_empty() {
        return out;
    }
    curves
        .iter()
        .map(|t| parse(t))
        .find(|v| !v.is_empty())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// JSON.

impl JsonQuery {
    /// The steps of `path`: `$`, then `.KEY` (a `\` makes the next character part of the key,
    /// as in `$.my\.key`) and `[N]`. `None`: a path that designates nothing (it does not
    /// start with `$`, or has another kind of step): the query never gives a value, as in
    /// HAProxy, which accepts such paths too.
    fn steps(path: &str) -> Option<Vec<Step>> {
        let b = path.as_bytes();
        if b.first() != Some(&b'$') {
            return None;
        }
        let mut steps = Vec::new();
        let mut i = 1;
        while i < b.len() {
            match b[i] {
                b'.' => {
                    let mut key = Vec::new();
                    i += 1;
                    while i < b.len() && b[i] != b'.' && b[i] != b'[' {
                        if b[i] == b'\\' && i + 1 < b.len() {
                            i += 1;
                        }
                        key.push(b[i]);
                        i += 1;
                    }
                    steps.push(Step::Key(String::from_utf8(key).ok()?.into()));
                }
                b'[' => {
                    let close = i + b[i..].iter().position(|&c| c == b']')?;
                    let n = &path[i + 1..close];
                    if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
                        return None;
                    }
                    steps.push(Step::Index(n.parse().ok()?));
                    i = close + 1;
                }
                _ => return None,
            }
        }
        Some(steps)
    }

    /// The value the path designates in `json`, as HAProxy 2.6 types it: a string
    /// unescaped, `true`/`false` as booleans, a number as C's `%g` text or (with `int`) its
    /// integer part within ±(2^53-1); nothing for `null`, arrays, objects, no match or a
    /// document that is not JSON up to the end of its first value (what follows that value
    /// is not read).
    pub(crate) fn query(&self, json: &[u8]) -> Option<Val> {
        let steps = self.steps.as_deref()?;
        let root: serde_json::Value = serde_json::Deserializer::from_slice(json)
            .into_iter()
            .next()?
            .ok()?;
        let mut v = &root;
        for step in steps {
            v = match step {
                Step::Key(k) => v.as_object()?.get(&**k)?,
                Step::Index(n) => v.as_array()?.get(*n)?,
            };
        }
        match v {
            serde_json::Value::String(s) => Some(Val::Str(s.as_bytes().to_vec())),
            serde_json::Value::Bool(b) => Some(Val::Bool(*b)),
            serde_json::Value::Number(n) if self.int => {
                // HAProxy's bound: the integers a double holds exactly.
                const MAX: i64 = (1 << 53) - 1;
                let i = match n.as_i64() {
                    Some(i) => i,
                    None => {
                        let f = n.as_f64()?.trunc();
                        if f.abs() > MAX as f64 {
                            return None;
                        }
                        f as i64
                    }
                };
                (-MAX..=MAX).contains(&i).then_some(Val::Int(i))
            }
            serde_json::Value::Number(n) => Some(Val::Str(fmt_g(n.as_f64()?).into_bytes())),
            _ => None,
        }
    }
}

/// C's `printf("%g")` (6 significant digits, trailing zeros removed, an exponent from 1e-5
/// or 1e6 on).
pub(crate) fn fmt_g(v: f64) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    // The exponent is the one of the value rounded to 6 digits (999999.5 is 1e+06).
    let e = format!("{v:.5e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let x: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&x) {
        let sign = if x < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mant), x.unsigned_abs())
    } else {
        strip(&format!("{v:.*}", (5 - x) as usize))
    }
}

// ---------------------------------------------------------------------------------------------
// JSON Web Tokens.

/// HAProxy's `base64urldec`: the URL alphabet without padding (a length of 4n+1 fails), bits
/// past the last byte ignored, and `=` read as `_` (its decoding table has it so).
pub(crate) fn b64url_dec(s: &[u8]) -> Option<Vec<u8>> {
    const PAD: u8 = 64;
    let val = |c: u8| -> Option<u8> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' | b'=' => 63,
            _ => return None,
        })
    };
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 2);
    for chunk in s.chunks(4) {
        let mut t = [PAD; 4];
        for (d, &c) in t.iter_mut().zip(chunk) {
            *d = val(c)?;
        }
        let t = t.map(u32::from);
        out.push(((t[0] << 2) + (t[1] >> 4)) as u8);
        if t[2] != u32::from(PAD) {
            out.push(((t[1] << 4) + (t[2] >> 2)) as u8);
            if t[3] != u32::from(PAD) {
                out.push(((t[2] << 6) + t[3]) as u8);
            }
        }
    }
    Some(out)
}

/// Part `n` (0: header, 1: payload) of a token, base64url-decoded: the header is what comes
/// before the first dot (all of it without one), the payload what follows up to the next.
pub(crate) fn jwt_part(token: &[u8], n: usize) -> Option<Vec<u8>> {
    let part = token.split(|&c| c == b'.').nth(n)?;
    b64url_dec(part)
}

/// The bytes of an argument: its text, or its variable's value as text (no variable: `None`,
/// and the converter gives no sample).
fn arg_bytes<'a>(
    a: &'a Arg,
    var: &dyn Fn(&VarName) -> Option<Vec<u8>>,
) -> Option<std::borrow::Cow<'a, [u8]>> {
    match a {
        Arg::Text(t) => Some(std::borrow::Cow::Borrowed(t)),
        Arg::Var(v) => var(v).map(std::borrow::Cow::Owned),
    }
}

impl Verify {
    /// `jwt_verify` on `token`; `var` reads a variable as text. HAProxy's results: 1 verified,
    /// 0 not, -1 unknown algorithm, -3 invalid token, -5 unknown key file (never -2: the PS
    /// algorithms, which HAProxy 2.6 does not manage, are verified; nor -4).
    pub(crate) fn run(
        &self,
        token: &[u8],
        var: &dyn Fn(&VarName) -> Option<Vec<u8>>,
    ) -> Option<i64> {
        let alg = arg_bytes(&self.alg, var)?;
        let key = arg_bytes(&self.key, var)?;
        Some(self.verify(token, &alg, &key))
    }

    fn verify(&self, token: &[u8], alg: &[u8], key: &[u8]) -> i64 {
        let Some(alg) = Alg::parse(alg) else {
            return VRFY_UNKNOWN_ALG;
        };
        let parts: Vec<&[u8]> = token.splitn(4, |&c| c == b'.').collect();
        let sig_b64 = match (parts.len(), alg) {
            (3, _) => parts[2],
            // `none` may leave the signature out, dot included.
            (2, Alg::None) => b"",
            _ => return VRFY_INVALID_TOKEN,
        };
        if alg == Alg::None {
            return if sig_b64.is_empty() { VRFY_OK } else { VRFY_KO };
        }
        if sig_b64.is_empty() {
            return VRFY_INVALID_TOKEN;
        }
        let Some(signature) = b64url_dec(sig_b64) else {
            return VRFY_INVALID_TOKEN;
        };
        // What is signed: the header, the dot and the payload, as received.
        let signed = &token[..parts[0].len() + 1 + parts[1].len()];
        if let Alg::Hs(sha) = alg {
            use aws_lc_rs::hmac;
            let h = match sha {
                Sha::S256 => hmac::HMAC_SHA256,
                Sha::S384 => hmac::HMAC_SHA384,
                Sha::S512 => hmac::HMAC_SHA512,
            };
            let ok = hmac::verify(&hmac::Key::new(h, key), signed, &signature).is_ok();
            return if ok { VRFY_OK } else { VRFY_KO };
        }
        let pem = match &self.key {
            Arg::Text(_) => self.pem.clone(),
            Arg::Var(_) => registered(key),
        };
        let Some(pem) = pem else {
            return VRFY_UNKNOWN_CERT;
        };
        let signature = if let Alg::Es(_) = alg {
            // JWS gives R and S side by side; OpenSSL (and so HAProxy) takes them as two
            // halves of any even length, re-encoded in DER.
            if signature.len() % 2 != 0 {
                return VRFY_INVALID_TOKEN;
            }
            let (r, s) = signature.split_at(signature.len() / 2);
            ecdsa_der(r, s)
        } else {
            signature
        };
        let ok = pem
            .verifiers
            .iter()
            .find(|(a, _)| *a == alg)
            .is_some_and(|(_, k)| k.verify_sig(signed, &signature).is_ok());
        if ok { VRFY_OK } else { VRFY_KO }
    }
}

/// The DER `ECDSA-Sig-Value` of big-endian unsigned R and S.
fn ecdsa_der(r: &[u8], s: &[u8]) -> Vec<u8> {
    fn int(v: &[u8], out: &mut Vec<u8>) {
        let v = &v[v.iter().position(|&b| b != 0).unwrap_or(v.len())..];
        let pad = v.first().is_none_or(|&b| b & 0x80 != 0);
        out.push(0x02);
        der_len(v.len() + usize::from(pad), out);
        if pad {
            out.push(0);
        }
        out.extend_from_slice(v);
    }
    let mut body = Vec::with_capacity(r.len() + s.len() + 8);
    int(r, &mut body);
    int(s, &mut body);
    let mut out = Vec::with_capacity(body.len() + 4);
    out.push(0x30);
    der_len(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

fn der_len(n: usize, out: &mut Vec<u8>) {
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = n.to_be_bytes();
        let skip = bytes
            .iter()
            .position(|&b| b != 0)
            .unwrap_or(bytes.len() - 1);
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}
