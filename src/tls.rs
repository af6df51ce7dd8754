//! `tls`: everything TLS, on rustls with the aws-lc-rs provider (selected explicitly, never a
//! process default): certificate loading (PEM bundles, directories, `crt-list`), the SNI
//! certificate resolver that `set ssl cert` / `commit ssl cert` swap at run time, `bind ... ssl`
//! and `server ... ssl` option parsing into ready-to-use rustls configurations, session-ticket
//! keys shared by every worker thread, the handshake of accepted connections (bounded by a
//! timeout), what a finished handshake tells rules and logs (`ssl_fc_*`, `ssl_c_*`), and the
//! wrapper that turns a connected server socket into a TLS stream (sessions, health checks).
//!
//! Configurations are built once, at config load (or by the CLI), and shared by all threads
//! through `Arc`s: a handshake on any thread sees the same certificates and ticket keys. It must
//! not touch sockets beyond the handshake, must not block a worker (file reads happen only at
//! load time or on the control thread), and must never panic on bad input: every failure is an
//! error string naming what was wrong.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime,
};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CipherSuite, ClientConfig, DigitallySignedStruct, ProtocolVersion, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite,
};
use tokio::io::{AsyncRead, AsyncWrite};

// =============================================================================================
// Types
// =============================================================================================

/// `verify` on a `bind` line: whether a client certificate is requested and required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// Not requested (HAProxy's default).
    #[default]
    None,
    /// Requested; a client without one is accepted, an invalid one is refused.
    Optional,
    /// Requested and required.
    Required,
}

/// One certificate the resolver can serve: where it came from and the names it answers for.
pub struct LoadedCert {
    /// The path it was loaded from, as named in the configuration (the CLI's handle on it).
    pub path: String,
    /// Exact server names (lower case) and wildcard suffixes (`*.example.com` is stored as
    /// `example.com` in `wild`).
    pub exact: Vec<String>,
    pub wild: Vec<String>,
    /// Names were given by a `crt-list` line rather than read from the certificate.
    pub filtered: bool,
    pub key: Arc<CertifiedKey>,
    /// Index in [`BindTls::configs`] of the settings a handshake serving it uses: 0 (the bind
    /// line's) unless its `crt-list` line has `[options]` of its own.
    pub conf: usize,
}

/// The name → certificates index of one `bind`, swapped whole when a certificate changes.
/// A name may have several certificates (an ECDSA and an RSA one, say): the handshake picks
/// by what the client can verify.
struct CertMap {
    /// In load order; the first one is the default certificate.
    certs: Vec<Arc<LoadedCert>>,
    exact: HashMap<String, Vec<usize>>,
    wild: HashMap<String, Vec<usize>>,
    /// The default certificate and those sharing its first name (its other key types).
    default: Vec<usize>,
}

/// Picks the certificate for a ClientHello by SNI: exact name, then `*.parent`, then the
/// default (the first loaded) unless `strict-sni`.
pub struct CertResolver {
    map: ArcSwap<CertMap>,
    strict_sni: bool,
}

/// A `bind ... ssl` line, ready to handshake.
pub struct BindTls {
    /// One configuration per distinct set of settings: `[0]` is the bind line's, the others
    /// come from `crt-list` lines with `[options]` (lines with the same effective settings
    /// share one). Built at load, never per connection, so that sessions resume across
    /// threads. All share the certificate resolver.
    pub configs: Vec<Arc<ServerConfig>>,
    pub resolver: Arc<CertResolver>,
    /// The bind line's `verify` (a `crt-list` line may override it for its certificate).
    pub verify: Verify,
    /// How logs name the listener: its `name`, else its number in the proxy (HAProxy's
    /// `fe/1` in "SSL handshake failure" lines).
    pub label: String,
}

/// What a `server` connection's SNI is taken from (`sni EXPR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SniExpr {
    /// `str(NAME)`: always this name.
    Str(String),
    /// `req.hdr(host)` / `hdr(host)`: the request's Host header, port removed.
    ReqHost,
}

/// A `server ... ssl` line, ready to connect.
pub struct ServerTls {
    pub config: Arc<ClientConfig>,
    pub sni: Option<SniExpr>,
    pub verify: bool,
}

/// What a finished client handshake tells rules and logs.
#[derive(Debug, Clone, Default)]
pub struct TlsInfo {
    pub sni: Option<Box<str>>,
    /// `TLSv1.2` / `TLSv1.3`.
    pub protocol: &'static str,
    /// OpenSSL's name of the cipher suite (`TLS_AES_128_GCM_SHA256`, `ECDHE-RSA-AES128-GCM-SHA256`).
    pub cipher: &'static str,
    pub alpn: Option<Box<[u8]>>,
    /// A client certificate was presented (and, since the handshake succeeded, verified).
    pub client_cert: bool,
    /// OpenSSL-style one-line DNs of the client certificate (`/C=FR/O=Acme/CN=alice`).
    pub c_s_dn: Option<Box<str>>,
    pub c_i_dn: Option<Box<str>>,
    pub resumed: bool,
}

/// The settings a `crt-list` line may give its certificate in `[...]` (HAProxy's
/// "sslbindconf"); on a `bind` line, the defaults. `None`: not set here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SslConf {
    alpn: Option<Vec<Vec<u8>>>,
    min: Option<ProtocolVersion>,
    max: Option<ProtocolVersion>,
    ciphers: Option<String>,
    ciphersuites: Option<String>,
    ca_file: Option<String>,
    /// `crl-file`: revocation lists the client certificate (and its chain) is checked against.
    crl_file: Option<String>,
    verify: Option<Verify>,
    /// `prefer-client-ciphers` (bind line or `ssl-default-bind-options`).
    prefer_client: bool,
    /// `curves` / `ecdhe` / `ssl-default-bind-curves`: key-exchange groups, in preference order.
    curves: Option<String>,
}

/// What the `global` section sets for every `bind ... ssl` and `server ... ssl` line that
/// follows it: `crt-base`, `ca-base`, `ssl-default-{bind,server}-{ciphers,ciphersuites,options}`
/// and `ssl-server-verify`. A line's own settings win; these fill what it leaves unset.
#[derive(Debug, Clone, Default)]
pub struct TlsDefaults {
    /// `crt-base DIR`: prefixes relative certificate paths.
    pub crt_base: Option<String>,
    /// `ca-base DIR`: prefixes relative `ca-file` and `crl-file` paths.
    pub ca_base: Option<String>,
    pub bind: SideDefaults,
    pub server: SideDefaults,
    /// `ssl-server-verify none`: servers without `verify` do not verify (default: required).
    pub server_verify_none: bool,
    /// `tune.ssl.cachesize N`: sessions kept per bind for session-ID resumption (HAProxy's
    /// default 20000; 0 keeps none).
    pub session_cache: Option<usize>,
    /// `tune.ssl.lifetime`: how long after its full handshake a session may be resumed, by
    /// ticket or from the cache (HAProxy's default 300 s).
    pub session_lifetime: Option<u32>,
}

/// HAProxy's `tune.ssl.cachesize` default.
const SESSION_CACHE_DEFAULT: usize = 20000;
/// HAProxy's `tune.ssl.lifetime` default, in seconds.
const SESSION_LIFETIME_DEFAULT: u32 = 300;

/// `ssl-default-bind-*` or `ssl-default-server-*`.
#[derive(Debug, Clone, Default)]
pub struct SideDefaults {
    pub ciphers: Option<String>,
    pub ciphersuites: Option<String>,
    pub min: Option<ProtocolVersion>,
    pub max: Option<ProtocolVersion>,
    pub no_tickets: bool,
    /// Bind side only.
    pub prefer_client: bool,
    /// `ssl-default-bind-curves` (HAProxy 2.6 has no server-side counterpart).
    pub curves: Option<String>,
}

impl SideDefaults {
    /// Fills a line's unset cipher lists and versions, and its `no-tls-tickets`.
    fn fill(
        &self,
        (ciphers, suites): (&mut Option<String>, &mut Option<String>),
        (min, max): (&mut Option<ProtocolVersion>, &mut Option<ProtocolVersion>),
        no_tickets: &mut bool,
    ) {
        if ciphers.is_none() {
            ciphers.clone_from(&self.ciphers);
        }
        if suites.is_none() {
            suites.clone_from(&self.ciphersuites);
        }
        *min = min.or(self.min);
        *max = max.or(self.max);
        *no_tickets |= self.no_tickets;
    }
}

/// `path` under `base` when it is relative (as HAProxy applies `crt-base` and `ca-base`).
fn based(base: &Option<String>, path: &str) -> String {
    match base {
        Some(b) if !path.starts_with('/') => format!("{}/{path}", b.trim_end_matches('/')),
        _ => path.to_string(),
    }
}

/// Options of a `bind` line's TLS part as parsed, before the configuration is built.
#[derive(Debug, Default)]
pub struct BindTlsOpts {
    pub ssl: bool,
    crt: Vec<String>,
    crt_list: Vec<String>,
    conf: SslConf,
    strict_sni: bool,
    ticket_keys: Option<String>,
    no_tickets: bool,
    /// `crt-base`, for the certificate paths of `crt-list` files.
    crt_base: Option<String>,
    /// `ca-base`, for `ca-file` and `crl-file` on `crt-list` lines.
    ca_base: Option<String>,
    /// Names of the TLS options seen (for "requires 'ssl'").
    seen: Vec<&'static str>,
    /// From `tune.ssl.cachesize` / `tune.ssl.lifetime` (see [`TlsDefaults`]).
    session_cache: Option<usize>,
    session_lifetime: Option<u32>,
}

/// Options of a `server` line's TLS part (also `default-server`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerTlsOpts {
    pub ssl: bool,
    verify: Option<bool>,
    ca_file: Option<String>,
    crl_file: Option<String>,
    sni: Option<SniExpr>,
    /// `verifyhost NAME`: the name checked in the certificate when no SNI was sent.
    verifyhost: Option<String>,
    alpn: Option<Vec<Vec<u8>>>,
    crt: Option<String>,
    min: Option<ProtocolVersion>,
    max: Option<ProtocolVersion>,
    ciphers: Option<String>,
    ciphersuites: Option<String>,
    no_tickets: bool,
}

/// Session-ticket keys from a `tls-ticket-keys` file (HAProxy's format: base64 lines of 48 or
/// 80 bytes: 16 bytes of key name, then key material).
struct FileTicketer {
    /// (key name, AEAD key) of the last three keys in the file, in file order.
    keys: Arc<Vec<([u8; 16], aws_lc_rs::aead::LessSafeKey)>>,
    /// Index in `keys` of the one that encrypts: the penultimate, as HAProxy does, so that
    /// appending a new key and reloading rotates without invalidating live tickets.
    enc: usize,
    /// Authenticated with every ticket (see `ticket_context`).
    context: [u8; 32],
}

/// A `set ssl cert` waiting for `commit` or `abort` (one at a time per process, as in HAProxy).
struct PendingCert {
    path: String,
    key: Arc<CertifiedKey>,
}

// =============================================================================================
// Provider, protocol and cipher names
// =============================================================================================

/// The one crypto provider: aws-lc-rs, with its default suites and groups.
pub fn provider() -> Arc<CryptoProvider> {
    static P: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .clone()
}

/// OpenSSL's cipher names for the suites rustls implements.
const CIPHER_NAMES: &[(&str, CipherSuite)] = &[
    (
        "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// OpenSSL cipher names that rustls does not implement (DHE, CBC, RSA key exchange, PSK...
/// as found in Mozilla's and distributions' recommended lists). As OpenSSL skips the names of
/// a list it cannot use, sluice skips these, with a configuration warning; a name that is in
/// neither list is an error (a typo must not shrink the list unnoticed).
const CIPHERS_UNAVAILABLE: &[&str] = &[
    "DHE-RSA-AES128-GCM-SHA256",
    "DHE-RSA-AES256-GCM-SHA384",
    "DHE-RSA-CHACHA20-POLY1305",
    "DHE-RSA-AES128-SHA256",
    "DHE-RSA-AES256-SHA256",
    "DHE-RSA-AES128-SHA",
    "DHE-RSA-AES256-SHA",
    "DHE-DSS-AES128-GCM-SHA256",
    "DHE-DSS-AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES128-SHA256",
    "ECDHE-ECDSA-AES256-SHA384",
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-RSA-AES128-SHA256",
    "ECDHE-RSA-AES256-SHA384",
    "ECDHE-RSA-AES128-SHA",
    "ECDHE-RSA-AES256-SHA",
    "ECDHE-ECDSA-AES128-CCM",
    "ECDHE-ECDSA-AES256-CCM",
    "AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-SHA256",
    "AES256-SHA256",
    "AES128-SHA",
    "AES256-SHA",
    "DES-CBC3-SHA",
    "ECDHE-RSA-DES-CBC3-SHA",
    "EDH-RSA-DES-CBC3-SHA",
    "CAMELLIA128-SHA",
    "CAMELLIA256-SHA",
    "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
    // Legacy suites old configurations still list (OpenSSL 3 has them compiled out, or
    // disabled at the default security level, and skips them likewise).
    "RC4-SHA",
    "RC4-MD5",
    "ECDHE-RSA-RC4-SHA",
    "ECDHE-ECDSA-RC4-SHA",
    "DES-CBC-SHA",
    "EDH-RSA-DES-CBC-SHA",
    "IDEA-CBC-SHA",
    "SEED-SHA",
];

/// OpenSSL's names of the key-exchange groups rustls (aws-lc-rs) implements.
fn group_by_name(name: &str) -> Option<&'static dyn rustls::crypto::SupportedKxGroup> {
    use rustls::crypto::aws_lc_rs::kx_group as g;
    Some(match name {
        "X25519" | "x25519" => g::X25519,
        "prime256v1" | "P-256" | "secp256r1" => g::SECP256R1,
        "secp384r1" | "P-384" => g::SECP384R1,
        "X25519MLKEM768" => g::X25519MLKEM768,
        "SecP256r1MLKEM768" => g::SECP256R1MLKEM768,
        "MLKEM768" => g::MLKEM768,
        "MLKEM1024" => g::MLKEM1024,
        _ => return None,
    })
}

/// Groups OpenSSL knows that rustls does not implement: skipped with a warning, as in cipher
/// lists.
const CURVES_UNAVAILABLE: &[&str] = &[
    "secp521r1",
    "P-521",
    "X448",
    "x448",
    "ffdhe2048",
    "ffdhe3072",
    "ffdhe4096",
    "ffdhe6144",
    "ffdhe8192",
    "brainpoolP256r1",
    "brainpoolP384r1",
    "brainpoolP512r1",
    "secp256k1",
];

/// Checks a `curves` list where it is written (names rustls lacks: warning; unknown: error).
pub fn check_curves(kw: &str, list: &str) -> Result<(), String> {
    let mut skipped = Vec::new();
    let mut usable = 0;
    for name in list.split(':').filter(|s| !s.is_empty()) {
        if CURVES_UNAVAILABLE.contains(&name) {
            skipped.push(name);
        } else if group_by_name(name).is_some() {
            usable += 1;
        } else {
            return Err(format!(
                "'{kw}': unknown curve '{name}' (sluice supports X25519, prime256v1 (P-256), \
                 secp384r1 (P-384), X25519MLKEM768, SecP256r1MLKEM768, MLKEM768, MLKEM1024)"
            ));
        }
    }
    if usable == 0 {
        return Err(format!(
            "'{kw}': no curve of the list is available in sluice{}",
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({} are not implemented by rustls)", skipped.join(", "))
            }
        ));
    }
    if !skipped.is_empty() {
        crate::config::warn(format!(
            "'{kw}': {} not implemented by rustls, skipped",
            skipped.join(", ")
        ));
    }
    Ok(())
}

/// The key-exchange groups of a checked `curves` list, in its order.
fn select_groups(list: &str) -> Result<Vec<&'static dyn rustls::crypto::SupportedKxGroup>, String> {
    let mut out: Vec<&'static dyn rustls::crypto::SupportedKxGroup> = Vec::new();
    for g in list.split(':').filter_map(group_by_name) {
        if !out.iter().any(|o| o.name() == g.name()) {
            out.push(g);
        }
    }
    if out.is_empty() {
        return Err(format!("'curves {list}': no usable curve"));
    }
    Ok(out)
}

/// The cipher list of Red Hat's packaged haproxy.cfg: "the system-wide crypto policy" of its
/// patched OpenSSL. sluice has no such policy; the list means rustls's defaults.
const SYSTEM_PROFILE: &str = "PROFILE=SYSTEM";

/// The suite rustls implements under OpenSSL's `name`, for option `kw` (`tls13`: a
/// `ciphersuites` list).
fn cipher_by_name(kw: &str, name: &str, tls13: bool) -> Result<CipherSuite, String> {
    let Some((_, cs)) = CIPHER_NAMES.iter().find(|(n, _)| *n == name) else {
        let known: Vec<&str> = CIPHER_NAMES
            .iter()
            .filter(|(n, _)| n.starts_with("TLS_") == tls13)
            .map(|(n, _)| *n)
            .collect();
        return Err(format!(
            "'{kw}': cipher '{name}' is not available in sluice (rustls supports only: {})",
            known.join(":")
        ));
    };
    if name.starts_with("TLS_") != tls13 {
        return Err(format!(
            "'{kw}': '{name}' is a TLSv1.{} suite; use '{}' for it",
            if tls13 { 2 } else { 3 },
            if tls13 { "ciphers" } else { "ciphersuites" }
        ));
    }
    Ok(*cs)
}

/// Checks a `ciphers` (TLS 1.2) or `ciphersuites` (TLS 1.3) list where it is written: every
/// name must be one rustls implements or one it lacks (skipped, with a warning); at least one
/// usable name must remain.
pub fn check_cipher_list(kw: &str, list: &str, tls13: bool) -> Result<(), String> {
    if list == SYSTEM_PROFILE {
        crate::config::warn(format!(
            "'{kw} {SYSTEM_PROFILE}': sluice reads no system-wide crypto policy; rustls's \
             default suites apply"
        ));
        return Ok(());
    }
    let (suites, skipped) = eval_cipher_list(kw, list, tls13)?;
    if suites.is_empty() {
        return Err(if skipped.is_empty() {
            format!("'{kw}': empty cipher list")
        } else {
            format!(
                "'{kw}': none of the listed ciphers is available in sluice ({} are not \
                 implemented by rustls)",
                skipped.join(", ")
            )
        });
    }
    if !skipped.is_empty() {
        let msg = format!(
            "'{kw}': {} not implemented by rustls or not cipher names, skipped (as OpenSSL \
             skips the names it cannot use); the other {} remain",
            skipped.join(", "),
            suites.len()
        );
        crate::config::warn(msg);
    }
    Ok(())
}

/// The TLS 1.2 suites rustls implements, in the order OpenSSL 3.0 lists them for `ALL` or
/// `HIGH` (strongest first, ECDSA before RSA): the order an alias adds them in.
const TLS12_ORDER: &[CipherSuite] = &[
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
];

/// Whether OpenSSL's alias `word` covers TLS 1.2 suite `cs`; `None` when `word` is no alias
/// sluice knows. The categories rustls has no suite in (anonymous, static RSA, DHE, PSK, CBC
/// and legacy ciphers, SHA-1/MD5 MACs, ...) cover nothing: excluding them (`!aNULL:!MD5`)
/// changes nothing, including them adds nothing.
fn alias_covers(word: &str, cs: CipherSuite) -> Option<bool> {
    let name = cipher_name(cs);
    let ecdsa = name.contains("-ECDSA-");
    let (aes128, aes256) = (name.contains("AES128"), name.contains("AES256"));
    Some(match word {
        "ALL" | "DEFAULT" | "HIGH" | "TLSv1.2" | "ECDH" | "ECDHE" | "EECDH" | "kECDHE"
        | "kEECDH" | "AEAD" => true,
        "aRSA" => !ecdsa,
        "aECDSA" | "ECDSA" => ecdsa,
        "AES" | "AESGCM" => aes128 || aes256,
        "AES128" => aes128,
        "AES256" => aes256,
        "CHACHA20" => name.contains("CHACHA20"),
        "aNULL"
        | "eNULL"
        | "NULL"
        | "COMPLEMENTOFDEFAULT"
        | "COMPLEMENTOFALL"
        | "ADH"
        | "AECDH"
        | "aECDH"
        | "kECDH"
        | "kECDHr"
        | "kECDHe"
        | "aDSS"
        | "DSS"
        | "DHE"
        | "EDH"
        | "kDHE"
        | "kEDH"
        | "DH"
        | "kDH"
        | "kDHr"
        | "kDHd"
        | "PSK"
        | "aPSK"
        | "kPSK"
        | "ECDHEPSK"
        | "DHEPSK"
        | "RSAPSK"
        | "kECDHEPSK"
        | "kDHEPSK"
        | "kRSAPSK"
        | "SRP"
        | "kSRP"
        | "aSRP"
        | "RC4"
        | "RC2"
        | "DES"
        | "3DES"
        | "IDEA"
        | "SEED"
        | "CAMELLIA"
        | "CAMELLIA128"
        | "CAMELLIA256"
        | "ARIA"
        | "ARIAGCM"
        | "ARIA128"
        | "ARIA256"
        | "MD5"
        | "SHA1"
        | "SHA"
        | "SHA256"
        | "SHA384"
        | "kRSA"
        | "RSA"
        | "LOW"
        | "MEDIUM"
        | "EXP"
        | "EXPORT"
        | "EXPORT40"
        | "EXPORT56"
        | "CCM"
        | "CCM8"
        | "AESCCM"
        | "AESCCM8"
        | "SSLv3"
        | "TLSv1"
        | "TLSv1.0"
        | "aGOST"
        | "aGOST01"
        | "kGOST"
        | "GOST94"
        | "GOST89MAC"
        | "SUITEB128"
        | "SUITEB128ONLY"
        | "SUITEB192" => false,
        _ => return None,
    })
}

/// A `ciphers` (TLS 1.2) or `ciphersuites` (TLS 1.3) list: the suites rustls implements that
/// it selects, in order, and the names skipped because rustls lacks them. TLS 1.2 lists use
/// OpenSSL's rule language: names and aliases joined by `+` (all must match), prefixed by `!`
/// (removed for good), `-` (removed) or `+` (moved to the end), and `@STRENGTH`
/// (`@SECLEVEL=N` has nothing to remove among these suites). Unknown words are errors.
fn eval_cipher_list(
    kw: &str,
    list: &str,
    tls13: bool,
) -> Result<(Vec<CipherSuite>, Vec<String>), String> {
    // OpenSSL's model: every suite in one list (default order), each active or not; the
    // result is the active ones in list order. Adding appends inactive matches to the tail,
    // `-` deactivates and moves to the head (where a later add finds them first), `!` drops
    // for good, `+` moves active matches to the tail.
    let mut all: Vec<(CipherSuite, bool)> = if tls13 {
        Vec::new()
    } else {
        TLS12_ORDER.iter().map(|c| (*c, false)).collect()
    };
    let mut out: Vec<CipherSuite> = Vec::new();
    let mut skipped = Vec::new();
    for item in list.split([':', ',', ' ']).filter(|s| !s.is_empty()) {
        if CIPHERS_UNAVAILABLE.contains(&item) {
            skipped.push(item.to_string());
            continue;
        }
        if tls13 {
            let cs = cipher_by_name(kw, item, true)?;
            if !out.contains(&cs) {
                out.push(cs);
            }
            continue;
        }
        if item == "@STRENGTH" {
            all.sort_by_key(|(cs, _)| cipher_name(*cs).contains("AES128"));
            continue;
        }
        if item.starts_with("@SECLEVEL=") {
            continue;
        }
        let (op, term) = match item.as_bytes()[0] {
            b'!' | b'-' | b'+' => (item.as_bytes()[0], &item[1..]),
            _ => (0, item),
        };
        let mut covered: Vec<CipherSuite> = TLS12_ORDER.to_vec();
        for part in term.split('+') {
            if CIPHERS_UNAVAILABLE.contains(&part) {
                covered.clear();
                continue;
            }
            if let Some((n, cs)) = CIPHER_NAMES.iter().find(|(n, _)| *n == part) {
                if n.starts_with("TLS_") {
                    cipher_by_name(kw, part, false)?;
                }
                covered.retain(|c| c == cs);
                continue;
            }
            // Whether a word is an alias does not depend on the suite asked about. A word that
            // is neither a suite nor an alias matches nothing: OpenSSL skips it (and HAProxy
            // accepts the list); sluice skips it with the warning of skipped names.
            if alias_covers(part, TLS12_ORDER[0]).is_none() {
                if !skipped.iter().any(|x| x == part) {
                    skipped.push(part.to_string());
                }
                covered.clear();
                continue;
            }
            covered.retain(|c| alias_covers(part, *c) == Some(true));
        }
        let hit = |e: &(CipherSuite, bool), active: bool| covered.contains(&e.0) && e.1 == active;
        match op {
            b'!' => all.retain(|e| !covered.contains(&e.0)),
            b'-' => {
                let (mut moved, rest): (Vec<(CipherSuite, bool)>, Vec<_>) =
                    all.iter().partition(|e| hit(e, true));
                moved.iter_mut().for_each(|e| e.1 = false);
                all = moved.into_iter().chain(rest).collect();
            }
            _ => {
                // Adding takes inactive matches, `+` active ones; both go to the tail.
                let active = op == b'+';
                let (mut moved, rest): (Vec<(CipherSuite, bool)>, Vec<_>) =
                    all.iter().partition(|e| hit(e, active));
                moved.iter_mut().for_each(|e| e.1 = true);
                all = rest.into_iter().chain(moved).collect();
            }
        }
    }
    out.extend(all.iter().filter(|e| e.1).map(|e| e.0));
    Ok((out, skipped))
}

fn cipher_name(s: CipherSuite) -> &'static str {
    CIPHER_NAMES
        .iter()
        .find(|(_, c)| *c == s)
        .map(|(n, _)| *n)
        .unwrap_or("UNKNOWN")
}

fn version_name(v: ProtocolVersion) -> &'static str {
    match v {
        ProtocolVersion::TLSv1_2 => "TLSv1.2",
        ProtocolVersion::TLSv1_3 => "TLSv1.3",
        _ => "UNKNOWN",
    }
}

fn parse_version(kw: &str, v: &str) -> Result<ProtocolVersion, String> {
    match v {
        "TLSv1.2" => Ok(ProtocolVersion::TLSv1_2),
        "TLSv1.3" => Ok(ProtocolVersion::TLSv1_3),
        // A floor below what rustls speaks: its floor, TLSv1.2, said once, as clients of the
        // older versions will be refused.
        "SSLv3" | "TLSv1.0" | "TLSv1.1" if kw == "ssl-min-ver" => {
            crate::config::warn(format!(
                "'ssl-min-ver {v}': sluice speaks TLSv1.2 and TLSv1.3 only (rustls), so the \
                 minimum is TLSv1.2: peers that only speak older versions are refused"
            ));
            Ok(ProtocolVersion::TLSv1_2)
        }
        "SSLv3" | "TLSv1.0" | "TLSv1.1" => Err(format!(
            "'{kw} {v}': {v} is not supported by sluice (rustls implements TLSv1.2 and TLSv1.3 only)"
        )),
        _ => Err(format!(
            "'{kw}': unknown version '{v}' (expected TLSv1.2 or TLSv1.3)"
        )),
    }
}

/// Suites allowed by `ciphers` (TLS 1.2, OpenSSL names) and `ciphersuites` (TLS 1.3), in the
/// configured order; `None` for a list means the provider's default for that version.
fn select_suites(
    ciphers: Option<&str>,
    ciphersuites: Option<&str>,
) -> Result<Vec<SupportedCipherSuite>, String> {
    let p = provider();
    let pick = |list: &str, kw: &str, tls13: bool| -> Result<Vec<SupportedCipherSuite>, String> {
        // Skipped names were warned about where the list was written (`check_cipher_list`).
        let mut out = Vec::new();
        for cs in eval_cipher_list(kw, list, tls13)?.0 {
            if let Some(s) = p.cipher_suites.iter().find(|s| s.suite() == cs) {
                out.push(*s);
            }
        }
        if out.is_empty() {
            return Err(format!("'{kw}': empty cipher list"));
        }
        Ok(out)
    };
    let is13 = |s: &SupportedCipherSuite| matches!(s, SupportedCipherSuite::Tls13(_));
    let ciphers = ciphers.filter(|l| *l != SYSTEM_PROFILE);
    let ciphersuites = ciphersuites.filter(|l| *l != SYSTEM_PROFILE);
    let v13 = match ciphersuites {
        Some(l) => pick(l, "ciphersuites", true)?,
        None => p
            .cipher_suites
            .iter()
            .filter(|s| is13(s))
            .copied()
            .collect(),
    };
    let v12 = match ciphers {
        Some(l) => pick(l, "ciphers", false)?,
        None => p
            .cipher_suites
            .iter()
            .filter(|s| !is13(s))
            .copied()
            .collect(),
    };
    Ok(v13.into_iter().chain(v12).collect())
}

/// The protocol versions between `min` and `max`, checked against the suites left.
fn select_versions(
    min: Option<ProtocolVersion>,
    max: Option<ProtocolVersion>,
    suites: &[SupportedCipherSuite],
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let rank = |v: ProtocolVersion| if v == ProtocolVersion::TLSv1_2 { 0 } else { 1 };
    let lo = min.map(rank).unwrap_or(0);
    let hi = max.map(rank).unwrap_or(1);
    if lo > hi {
        return Err("'ssl-min-ver' is above 'ssl-max-ver'".into());
    }
    let mut out = Vec::new();
    if lo == 0 {
        out.push(&rustls::version::TLS12);
    }
    if hi == 1 {
        out.push(&rustls::version::TLS13);
    }
    let has12 = suites
        .iter()
        .any(|s| matches!(s, SupportedCipherSuite::Tls12(_)));
    let has13 = suites
        .iter()
        .any(|s| matches!(s, SupportedCipherSuite::Tls13(_)));
    if (lo == 0 && !has12 && hi == 0) || (hi == 1 && !has13 && lo == 1) {
        return Err("no cipher suite left for the allowed protocol versions".into());
    }
    Ok(out)
}

/// A comma-separated ALPN protocol list (`alpn`, `check-alpn`, `connect alpn`).
pub fn alpn_list(v: &str) -> Result<Vec<Vec<u8>>, String> {
    let l: Vec<Vec<u8>> = v
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.as_bytes().to_vec())
        .collect();
    if l.is_empty() || l.iter().any(|p| p.len() > 255) {
        return Err(format!("'alpn': invalid protocol list '{v}'"));
    }
    Ok(l)
}

// =============================================================================================
// Certificates
// =============================================================================================

/// A PEM file's certificates and private key.
fn read_pem(
    path: &Path,
    data: &[u8],
) -> Result<(Vec<CertificateDer<'static>>, Option<PrivateKeyDer<'static>>), String> {
    let mut certs = Vec::new();
    let mut key = None;
    for item in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(data) {
        let (kind, der) = item.map_err(|e| format!("'{}': bad PEM: {e}", path.display()))?;
        match kind {
            SectionKind::Certificate => certs.push(CertificateDer::from(der)),
            SectionKind::PrivateKey => key = Some(PrivateKeyDer::Pkcs8(der.into())),
            SectionKind::RsaPrivateKey => key = Some(PrivateKeyDer::Pkcs1(der.into())),
            SectionKind::EcPrivateKey => key = Some(PrivateKeyDer::Sec1(der.into())),
            _ => {}
        }
    }
    Ok((certs, key))
}

/// A certificate chain with its key, checked to belong together.
fn certified_key(
    path: &Path,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    let p = provider();
    let signing = p
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("'{}': unusable private key: {e}", path.display()))?;
    let ck = CertifiedKey::new(certs, signing);
    match ck.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(ck),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(format!(
                "'{}': the private key does not match the certificate",
                path.display()
            ))
        }
        Err(e) => Err(format!("'{}': {e}", path.display())),
    }
}

/// Reads one PEM bundle as HAProxy does: certificate, chain and key in one file, or the key
/// in `FILE.key` beside it.
fn read_bundle(
    path: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
    let (certs, key) = read_pem(path, &data)?;
    if certs.is_empty() {
        return Err(format!(
            "'{}': no certificate found in the file",
            path.display()
        ));
    }
    let key = match key {
        Some(k) => k,
        None => {
            let mut kp = path.as_os_str().to_owned();
            kp.push(".key");
            let kp = PathBuf::from(kp);
            let kdata = std::fs::read(&kp).map_err(|_| {
                format!(
                    "'{}': no private key found in the file (nor in '{}')",
                    path.display(),
                    kp.display()
                )
            })?;
            read_pem(&kp, &kdata)?
                .1
                .ok_or_else(|| format!("'{}': no private key found", kp.display()))?
        }
    };
    Ok((certs, key))
}

/// A bundle loaded and checked: the key parses and belongs to the certificate.
fn load_bundle(path: &Path) -> Result<CertifiedKey, String> {
    let (certs, key) = read_bundle(path)?;
    certified_key(path, certs, key)
}

/// Names a certificate answers for: DNS SANs, and the subject CN (HAProxy indexes both).
fn cert_names(der: &[u8]) -> (Vec<String>, Vec<String>) {
    let mut exact = Vec::new();
    let mut wild = Vec::new();
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return (exact, wild);
    };
    let mut add = |n: &str| {
        let n = n.to_ascii_lowercase();
        if let Some(rest) = n.strip_prefix("*.") {
            if !wild.iter().any(|w| w == rest) {
                wild.push(rest.to_string());
            }
        } else if !n.is_empty() && !exact.contains(&n) {
            exact.push(n);
        }
    };
    for cn in cert.subject().iter_common_name() {
        if let Ok(s) = cn.as_str() {
            add(s);
        }
    }
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for g in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(s) = g {
                add(s);
            }
        }
    }
    (exact, wild)
}

/// OpenSSL's one-line form of a DN: `/C=FR/O=Acme/CN=alice`.
fn oneline_dn(name: &x509_parser::x509::X509Name<'_>) -> String {
    let mut out = String::new();
    for rdn in name.iter_rdn() {
        for a in rdn.iter() {
            let id = a.attr_type().to_id_string();
            // OpenSSL's short names for the attributes certificates use.
            let key = match id.as_str() {
                "2.5.4.3" => "CN",
                "2.5.4.6" => "C",
                "2.5.4.7" => "L",
                "2.5.4.8" => "ST",
                "2.5.4.10" => "O",
                "2.5.4.11" => "OU",
                "2.5.4.5" => "serialNumber",
                "1.2.840.113549.1.9.1" => "emailAddress",
                "0.9.2342.19200300.100.1.25" => "DC",
                "0.9.2342.19200300.100.1.1" => "UID",
                _ => id.as_str(),
            };
            out.push('/');
            out.push_str(key);
            out.push('=');
            out.push_str(a.as_str().unwrap_or("?"));
        }
    }
    out
}

fn loaded(path: String, key: CertifiedKey, filters: Option<&[String]>, conf: usize) -> LoadedCert {
    let (mut exact, mut wild) = key
        .cert
        .first()
        .map(|c| cert_names(c.as_ref()))
        .unwrap_or_default();
    let filtered = match filters {
        Some(f) if f.iter().any(|n| !n.starts_with('!')) => {
            exact.clear();
            wild.clear();
            for n in f.iter().filter(|n| !n.starts_with('!')) {
                let n = n.to_ascii_lowercase();
                match n.strip_prefix("*.") {
                    Some(rest) => wild.push(rest.to_string()),
                    None => exact.push(n),
                }
            }
            true
        }
        Some(f) => {
            // Only negative filters: the certificate's own names minus those.
            for n in f {
                let n = n[1..].to_ascii_lowercase();
                match n.strip_prefix("*.") {
                    Some(rest) => wild.retain(|w| w != rest),
                    None => exact.retain(|e| *e != n),
                }
            }
            true
        }
        None => false,
    };
    LoadedCert {
        path,
        exact,
        wild,
        filtered,
        key: Arc::new(key),
        conf,
    }
}

/// Loads `crt FILE|DIR`: a directory loads every file in it (alphabetical order), except the
/// companion files HAProxy skips (`.key`, `.ocsp`, `.issuer`, `.sctl`).
fn load_crt(spec: &str, out: &mut Vec<LoadedCert>) -> Result<(), String> {
    let path = Path::new(spec);
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("cannot read directory '{spec}': {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                !p.is_dir()
                    && !matches!(
                        p.extension().and_then(|x| x.to_str()),
                        Some("key" | "ocsp" | "issuer" | "sctl")
                    )
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(format!("directory '{spec}' contains no certificate"));
        }
        out.reserve(files.len());
        for f in files {
            let k = load_bundle(&f)?;
            out.push(loaded(f.display().to_string(), k, None, 0));
        }
        Ok(())
    } else if !path.exists() {
        // HAProxy's multi-certificate bundle: `crt site.pem` loads `site.pem.rsa`,
        // `site.pem.ecdsa` and `site.pem.dsa`, whichever exist, as one name with several keys.
        let before = out.len();
        for ext in ["ecdsa", "rsa", "dsa"] {
            let f = format!("{spec}.{ext}");
            if Path::new(&f).is_file() {
                let k = load_bundle(Path::new(&f))?;
                out.push(loaded(f, k, None, 0));
            }
        }
        if out.len() == before {
            return Err(format!(
                "cannot read '{spec}': no such file (nor a multi-certificate bundle '{spec}.ecdsa', '{spec}.rsa', '{spec}.dsa')"
            ));
        }
        Ok(())
    } else {
        let k = load_bundle(path)?;
        out.push(loaded(spec.to_string(), k, None, 0));
        Ok(())
    }
}

/// The options a `crt-list` line accepts in `[...]`.
const CRT_LIST_OPTIONS: &[&str] = &[
    "alpn",
    "ca-file",
    "crl-file",
    "ciphers",
    "ciphersuites",
    "ssl-min-ver",
    "ssl-max-ver",
    "verify",
];

/// The settings of a bind line, or of its `crt-list` lines so far: `[0]` is the bind line's,
/// each other one is distinct, with where it was first seen (for errors while building it).
struct Confs {
    list: Vec<(SslConf, String)>,
}

impl Confs {
    /// The index of `c` (a line's options over the bind line's), added if new.
    fn index(&mut self, c: SslConf, origin: impl FnOnce() -> String) -> usize {
        match self.list.iter().position(|(k, _)| *k == c) {
            Some(i) => i,
            None => {
                self.list.push((c, origin()));
                self.list.len() - 1
            }
        }
    }
}

/// Loads a `crt-list`: one `certfile [[options...]] [sni filters...]` per line, `#` comments.
fn load_crt_list(
    spec: &str,
    crt_base: &Option<String>,
    ca_base: &Option<String>,
    confs: &mut Confs,
    out: &mut Vec<LoadedCert>,
) -> Result<(), String> {
    let text =
        std::fs::read_to_string(spec).map_err(|e| format!("cannot read crt-list '{spec}': {e}"))?;
    for (n, line) in text.lines().enumerate() {
        let at = || format!("crt-list '{spec}' line {}", n + 1);
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (file, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim_start();
        let (opts, filters) = match rest.strip_prefix('[') {
            Some(r) => {
                let (o, f) = r
                    .split_once(']')
                    .ok_or_else(|| format!("{}: missing ']' after the options", at()))?;
                (Some(o), f)
            }
            None => (None, rest),
        };
        let filters: Vec<String> = filters.split_whitespace().map(str::to_string).collect();
        if filters.iter().any(|w| w.starts_with('[')) {
            return Err(format!(
                "{}: options in '[...]' must come right after the certificate file",
                at()
            ));
        }
        let conf = match opts {
            None => 0,
            Some(o) => {
                let mut line_conf = parse_line_opts(o).map_err(|e| format!("{}: {e}", at()))?;
                for f in [&mut line_conf.ca_file, &mut line_conf.crl_file]
                    .into_iter()
                    .flatten()
                {
                    *f = based(ca_base, f);
                }
                let eff = line_conf.over(&confs.list[0].0);
                confs.index(eff, at)
            }
        };
        let file = based(crt_base, file);
        let k = load_bundle(Path::new(&file)).map_err(|e| format!("{}: {e}", at()))?;
        let filters = (!filters.is_empty()).then_some(filters.as_slice());
        out.push(loaded(file, k, filters, conf));
    }
    Ok(())
}

/// The `[...]` of a `crt-list` line.
fn parse_line_opts(text: &str) -> Result<SslConf, String> {
    let w: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    let mut c = SslConf::default();
    let mut i = 0;
    while i < w.len() {
        match parse_conf_opt(&mut c, &w, &mut i) {
            Some(r) => r?,
            None => {
                return Err(format!(
                    "'{}' is not supported by sluice in crt-list per-certificate options \
                     (supported: {})",
                    w[i],
                    CRT_LIST_OPTIONS.join(", ")
                ));
            }
        }
        i += 1;
    }
    Ok(c)
}

impl SslConf {
    /// These settings, completed by `base`'s where unset.
    fn over(&self, base: &SslConf) -> SslConf {
        SslConf {
            alpn: self.alpn.clone().or_else(|| base.alpn.clone()),
            min: self.min.or(base.min),
            max: self.max.or(base.max),
            ciphers: self.ciphers.clone().or_else(|| base.ciphers.clone()),
            ciphersuites: self
                .ciphersuites
                .clone()
                .or_else(|| base.ciphersuites.clone()),
            ca_file: self.ca_file.clone().or_else(|| base.ca_file.clone()),
            crl_file: self.crl_file.clone().or_else(|| base.crl_file.clone()),
            verify: self.verify.or(base.verify),
            prefer_client: self.prefer_client || base.prefer_client,
            curves: self.curves.clone().or_else(|| base.curves.clone()),
        }
    }
}

impl CertMap {
    fn build(certs: Vec<Arc<LoadedCert>>) -> CertMap {
        let mut exact: HashMap<String, Vec<usize>> = HashMap::new();
        let mut wild: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, c) in certs.iter().enumerate() {
            for n in &c.exact {
                exact.entry(n.clone()).or_default().push(i);
            }
            for n in &c.wild {
                wild.entry(n.clone()).or_default().push(i);
            }
        }
        let default = match certs.first() {
            Some(c) => c
                .exact
                .first()
                .and_then(|n| exact.get(n))
                .or_else(|| c.wild.first().and_then(|n| wild.get(n)))
                .cloned()
                .unwrap_or_else(|| vec![0]),
            None => Vec::new(),
        };
        CertMap {
            certs,
            exact,
            wild,
            default,
        }
    }

    /// The certificates for `name`: exact, then `*.parent`.
    fn lookup(&self, name: &str) -> Option<&[usize]> {
        self.exact
            .get(name)
            .or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wild.get(parent)
            })
            .map(Vec::as_slice)
    }

    /// Among certificates `cands` (in load order), the one to serve a client offering
    /// `schemes`: an ECDSA (or EdDSA) one it can verify first, as HAProxy prefers, then any
    /// it can verify, then the first (the handshake then fails as it must).
    fn pick(&self, cands: &[usize], schemes: &[rustls::SignatureScheme]) -> Option<usize> {
        if let [only] = cands {
            return Some(*only);
        }
        let key = |i: &usize| self.certs.get(*i).map(|c| &c.key);
        let fits = |i: &&usize| key(i).is_some_and(|k| k.key.choose_scheme(schemes).is_some());
        let ec = |i: &&usize| {
            key(i).is_some_and(|k| !matches!(k.key.algorithm(), rustls::SignatureAlgorithm::RSA))
        };
        cands
            .iter()
            .find(|i| fits(i) && ec(i))
            .or_else(|| cands.iter().find(fits))
            .or(cands.first())
            .copied()
    }

    /// The certificate (index in `certs`) for a ClientHello: by SNI, exact name then
    /// `*.parent`, else the default unless `strict`.
    fn choose(&self, hello: &ClientHello<'_>, strict: bool) -> Option<usize> {
        if let Some(name) = hello.server_name() {
            // rustls hands over the name as received; clients send lower case in practice.
            let hit = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                self.lookup(&name.to_ascii_lowercase())
            } else {
                self.lookup(name)
            };
            if let Some(c) = hit {
                return self.pick(c, hello.signature_schemes());
            }
        }
        if strict {
            return None;
        }
        self.pick(&self.default, hello.signature_schemes())
    }
}

impl fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CertResolver({} certs)", self.map.load().certs.len())
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let map = self.map.load();
        let i = map.choose(&hello, self.strict_sni)?;
        map.certs.get(i).map(|c| c.key.clone())
    }
}

impl CertResolver {
    /// Which of the bind's configurations a handshake with this ClientHello uses: that of the
    /// certificate it will be served (0 when none, the handshake then fails in `resolve`).
    ///
    /// `resolve` chooses again within the handshake, with the same rules on the same hello,
    /// so both agree unless a `commit ssl cert` lands in between: that handshake then gets the
    /// new certificate under the settings chosen here, as if it had started just before.
    fn conf_for(&self, hello: &ClientHello<'_>) -> usize {
        let map = self.map.load();
        map.choose(hello, self.strict_sni)
            .and_then(|i| map.certs.get(i))
            .map_or(0, |c| c.conf)
    }

    /// Paths of the certificates it serves, in load order.
    pub fn paths(&self) -> Vec<String> {
        self.map
            .load()
            .certs
            .iter()
            .map(|c| c.path.clone())
            .collect()
    }

    pub fn get(&self, path: &str) -> Option<Arc<LoadedCert>> {
        self.map
            .load()
            .certs
            .iter()
            .find(|c| c.path == path)
            .cloned()
    }

    /// Replaces the certificate loaded from `path` for new handshakes (existing connections
    /// keep theirs). Returns whether this resolver had it.
    fn replace(&self, path: &str, key: &Arc<CertifiedKey>) -> bool {
        let cur = self.map.load_full();
        if !cur.certs.iter().any(|c| c.path == path) {
            return false;
        }
        let certs = cur
            .certs
            .iter()
            .map(|c| {
                if c.path != path {
                    return c.clone();
                }
                let (exact, wild) = if c.filtered {
                    (c.exact.clone(), c.wild.clone())
                } else {
                    key.cert
                        .first()
                        .map(|d| cert_names(d.as_ref()))
                        .unwrap_or_default()
                };
                Arc::new(LoadedCert {
                    path: c.path.clone(),
                    exact,
                    wild,
                    filtered: c.filtered,
                    key: key.clone(),
                    conf: c.conf,
                })
            })
            .collect();
        self.map.store(Arc::new(CertMap::build(certs)));
        true
    }
}

// =============================================================================================
// Session tickets
// =============================================================================================

/// The ticket encrypter of a bind without `tls-ticket-keys`: one per bind, built at config
/// load and shared by every worker thread through the bind's `ServerConfig` (a client resumes
/// on whichever thread accepts it); rustls rotates its key.
///
/// Never one for the whole process: rustls does not re-check client authentication when it
/// resumes a session, so a ticket from a bind without `verify` must not open a session on a
/// bind with `verify required`.
fn bind_ticketer() -> Result<Arc<dyn rustls::server::ProducesTickets>, String> {
    rustls::crypto::aws_lc_rs::Ticketer::new()
        .map_err(|e| format!("cannot set up session tickets: {e}"))
}

/// What a ticket sealed with a `tls-ticket-keys` key is bound to besides the key: the bind's
/// client-certificate policy (verify mode, CA file and CRL file contents). Binds (or instances)
/// sharing a key file resume each other's sessions only when they verify clients alike, and a
/// new CRL (reload) invalidates the tickets issued before it, so that a revoked client cannot
/// resume a session it opened earlier.
fn ticket_context(
    verify: Verify,
    ca_file: Option<&str>,
    crl_file: Option<&str>,
) -> Result<[u8; 32], String> {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    ctx.update(&[verify as u8]);
    if let Some(ca) = ca_file {
        let data = std::fs::read(ca).map_err(|e| format!("cannot read ca-file '{ca}': {e}"))?;
        ctx.update(&data);
    }
    if let Some(crl) = crl_file {
        let data = std::fs::read(crl).map_err(|e| format!("cannot read crl-file '{crl}': {e}"))?;
        ctx.update(b"crl");
        ctx.update(&data);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    Ok(out)
}

impl fmt::Debug for FileTicketer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileTicketer({} keys)", self.keys.len())
    }
}

const TICKET_NONCE: usize = 12;

impl FileTicketer {
    fn load(path: &str, context: [u8; 32]) -> Result<FileTicketer, String> {
        use aws_lc_rs::aead::{AES_256_GCM, LessSafeKey, UnboundKey};
        use base64::Engine;
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read tls-ticket-keys '{path}': {e}"))?;
        let mut all = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(line)
                .map_err(|_| format!("tls-ticket-keys '{path}' line {}: not base64", n + 1))?;
            if raw.len() != 48 && raw.len() != 80 {
                return Err(format!(
                    "tls-ticket-keys '{path}' line {}: a key is 48 or 80 bytes, not {}",
                    n + 1,
                    raw.len()
                ));
            }
            all.push(raw);
        }
        if all.len() < 3 {
            return Err(format!(
                "tls-ticket-keys '{path}': at least 3 keys are needed, found {}",
                all.len()
            ));
        }
        let last3 = &all[all.len() - 3..];
        let mut keys = Vec::new();
        for raw in last3 {
            let mut name = [0u8; 16];
            name.copy_from_slice(&raw[..16]);
            // The AEAD key is derived from the whole secret part (AES and HMAC halves).
            let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &raw[16..]);
            let k = UnboundKey::new(&AES_256_GCM, d.as_ref())
                .map_err(|_| format!("tls-ticket-keys '{path}': unusable key"))?;
            keys.push((name, LessSafeKey::new(k)));
        }
        Ok(FileTicketer {
            keys: Arc::new(keys),
            enc: 1,
            context,
        })
    }
}

impl FileTicketer {
    /// The same keys, binding tickets to another client-certificate policy.
    fn with_context(&self, context: [u8; 32]) -> FileTicketer {
        FileTicketer {
            keys: self.keys.clone(),
            enc: self.enc,
            context,
        }
    }

    /// Additional data of a ticket: its key name and the bind's context.
    fn aad(&self, name: &[u8; 16]) -> [u8; 48] {
        let mut a = [0u8; 48];
        a[..16].copy_from_slice(name);
        a[16..].copy_from_slice(&self.context);
        a
    }
}

impl rustls::server::ProducesTickets for FileTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        7200
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        use aws_lc_rs::aead::{Aad, Nonce};
        use aws_lc_rs::rand::SecureRandom;
        let (name, key) = self.keys.get(self.enc)?;
        let mut nonce = [0u8; TICKET_NONCE];
        aws_lc_rs::rand::SystemRandom::new().fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(16 + TICKET_NONCE + plain.len() + 16);
        out.extend_from_slice(name);
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(self.aad(name)),
            &mut body,
        )
        .ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        use aws_lc_rs::aead::{Aad, Nonce};
        if cipher.len() < 16 + TICKET_NONCE + 16 {
            return None;
        }
        let (name, rest) = cipher.split_at(16);
        let (nonce, body) = rest.split_at(TICKET_NONCE);
        let (kname, key) = self.keys.iter().find(|(n, _)| n == name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = key
            .open_in_place(nonce, Aad::from(self.aad(kname)), &mut body)
            .ok()?;
        let n = plain.len();
        body.truncate(n);
        Some(body)
    }
}

// =============================================================================================
// bind ... ssl
// =============================================================================================

/// Bind options this module parses.
pub const BIND_TLS_OPTIONS: &[&str] = &[
    "ssl",
    "crt",
    "crt-list",
    "alpn",
    "ssl-min-ver",
    "ssl-max-ver",
    "ciphers",
    "ciphersuites",
    "ca-file",
    "crl-file",
    "verify",
    "strict-sni",
    "tls-ticket-keys",
    "no-tls-tickets",
    "no-sslv3",
    "no-tlsv10",
    "no-tlsv11",
    "no-tlsv12",
    "no-tlsv13",
    "force-tlsv12",
    "force-tlsv13",
    "prefer-client-ciphers",
    "curves",
    "ecdhe",
];

/// The argument after option `kw` at `w[*i]`, advancing `*i` to it.
fn next_arg(w: &[String], i: &mut usize, kw: &str) -> Result<String, String> {
    *i += 1;
    w.get(*i)
        .cloned()
        .ok_or_else(|| format!("'{kw}' expects an argument"))
}

/// Parses the option at `w[*i]` into `c` if it is one a `crt-list` line may also set
/// (advancing `*i` past its argument). `None` when it is not.
fn parse_conf_opt(c: &mut SslConf, w: &[String], i: &mut usize) -> Option<Result<(), String>> {
    let kw = *CRT_LIST_OPTIONS.iter().find(|k| **k == w[*i])?;
    let val = next_arg(w, i, kw);
    Some(val.and_then(|v| {
        match kw {
            "alpn" => c.alpn = Some(alpn_list(&v)?),
            "ssl-min-ver" => c.min = Some(parse_version(kw, &v)?),
            "ssl-max-ver" => c.max = Some(parse_version(kw, &v)?),
            "ciphers" => {
                check_cipher_list(kw, &v, false)?;
                c.ciphers = Some(v)
            }
            "ciphersuites" => {
                check_cipher_list(kw, &v, true)?;
                c.ciphersuites = Some(v)
            }
            "ca-file" => c.ca_file = Some(v),
            "crl-file" => c.crl_file = Some(v),
            _ => {
                c.verify = Some(match v.as_str() {
                    "none" => Verify::None,
                    "optional" => Verify::Optional,
                    "required" => Verify::Required,
                    v => {
                        return Err(format!(
                            "'verify': unknown mode '{v}' (expected none, optional or required)"
                        ));
                    }
                })
            }
        }
        Ok(())
    }))
}

/// Parses the TLS option at `w[*i]` of a `bind` line into `o` (advancing `*i` past its
/// argument). `None` when `w[*i]` is not a TLS option.
pub fn parse_bind_opt(
    o: &mut BindTlsOpts,
    w: &[String],
    i: &mut usize,
) -> Option<Result<(), String>> {
    let kw = *BIND_TLS_OPTIONS.iter().find(|k| **k == w[*i])?;
    if kw != "ssl" {
        o.seen.push(kw);
    }
    if let Some(r) = parse_conf_opt(&mut o.conf, w, i) {
        return Some(r);
    }
    let mut val = || next_arg(w, i, kw);
    let r = (|| -> Result<(), String> {
        match kw {
            "ssl" => o.ssl = true,
            "crt" => o.crt.push(val()?),
            "crt-list" => o.crt_list.push(val()?),
            "strict-sni" => o.strict_sni = true,
            "tls-ticket-keys" => o.ticket_keys = Some(val()?),
            "no-tls-tickets" => o.no_tickets = true,
            "prefer-client-ciphers" => o.conf.prefer_client = true,
            "curves" | "ecdhe" => {
                let v = val()?;
                if kw == "ecdhe" && v.contains(':') {
                    return Err(format!("'ecdhe' takes one curve (got '{v}'); see 'curves'"));
                }
                check_curves(kw, &v)?;
                o.conf.curves = Some(v);
            }
            _ => version_option(kw, &mut o.conf.min, &mut o.conf.max),
        }
        Ok(())
    })();
    Some(r)
}

impl BindTlsOpts {
    /// Completes the line with the `global` section's settings (HAProxy applies them when it
    /// reads `ssl`; the line's own options win wherever it has them). Paths become absolute
    /// under `crt-base` / `ca-base`.
    pub fn apply_defaults(&mut self, d: &TlsDefaults) {
        let c = &mut self.conf;
        d.bind.fill(
            (&mut c.ciphers, &mut c.ciphersuites),
            (&mut c.min, &mut c.max),
            &mut self.no_tickets,
        );
        c.prefer_client |= d.bind.prefer_client;
        if c.curves.is_none() {
            c.curves.clone_from(&d.bind.curves);
        }
        for crt in &mut self.crt {
            *crt = based(&d.crt_base, crt);
        }
        for f in [&mut c.ca_file, &mut c.crl_file].into_iter().flatten() {
            *f = based(&d.ca_base, f);
        }
        self.crt_base = d.crt_base.clone();
        self.ca_base = d.ca_base.clone();
        self.session_cache = d.session_cache;
        self.session_lifetime = d.session_lifetime;
    }

    /// The bind's TLS configuration (`None` without `ssl`), loading every certificate now.
    /// `label`: how logs name the listener (see [`BindTls::label`]).
    pub fn build(&self, label: String) -> Result<Option<Arc<BindTls>>, String> {
        if !self.ssl {
            // HAProxy accepts them and does nothing with them; so does sluice, saying so.
            if !self.seen.is_empty() {
                crate::config::warn(format!(
                    "{} ignored: no 'ssl' on this bind line",
                    self.seen
                        .iter()
                        .map(|k| format!("'{k}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            return Ok(None);
        }
        if self.crt.is_empty() && self.crt_list.is_empty() {
            return Err("'ssl' requires at least one certificate ('crt' or 'crt-list')".into());
        }
        let mut certs = Vec::new();
        for c in &self.crt {
            load_crt(c, &mut certs)?;
        }
        let mut confs = Confs {
            list: vec![(self.conf.clone(), String::new())],
        };
        for c in &self.crt_list {
            load_crt_list(c, &self.crt_base, &self.ca_base, &mut confs, &mut certs)?;
        }
        let resolver = Arc::new(CertResolver {
            map: ArcSwap::from_pointee(CertMap::build(certs.into_iter().map(Arc::new).collect())),
            strict_sni: self.strict_sni,
        });
        // Sessions are stored per client-certificate policy, never across two: rustls does not
        // re-check client authentication when it resumes, and although it resumes only for
        // the same SNI (hence the same crt-list line), a `commit ssl cert` may move a name
        // to another line. Lines verifying clients alike share one ticketer and cache; keeping
        // the others apart loses nothing, since a session never resumes under another name.
        let file_keys = match (&self.ticket_keys, self.no_tickets) {
            (Some(f), false) => Some(FileTicketer::load(f, [0; 32])?),
            _ => None,
        };
        type Store = (
            Arc<dyn rustls::server::ProducesTickets>,
            Arc<dyn rustls::server::StoresServerSessions>,
        );
        type Policy = (Verify, Option<String>, Option<String>);
        let mut stores: Vec<(Policy, Store)> = Vec::new();
        let mut configs = Vec::with_capacity(confs.list.len());
        for (i, (conf, origin)) in confs.list.iter().enumerate() {
            let verify = conf.verify.unwrap_or_default();
            // As `ticket_context` binds a ticket to them.
            let policy = (verify, conf.ca_file.clone(), conf.crl_file.clone());
            let (ticketer, cache) = match stores.iter().find(|(p, _)| *p == policy) {
                Some((_, s)) => s.clone(),
                None => {
                    let ticketer: Arc<dyn rustls::server::ProducesTickets> =
                        match (&file_keys, self.no_tickets) {
                            (_, true) => Arc::new(NoTickets),
                            (Some(k), _) => Arc::new(k.with_context(ticket_context(
                                verify,
                                conf.ca_file.as_deref(),
                                conf.crl_file.as_deref(),
                            )?)),
                            (None, _) => bind_ticketer()?,
                        };
                    let lifetime = self.session_lifetime.unwrap_or(SESSION_LIFETIME_DEFAULT);
                    let cache: Arc<dyn rustls::server::StoresServerSessions> =
                        match self.session_cache.unwrap_or(SESSION_CACHE_DEFAULT) {
                            0 => Arc::new(rustls::server::NoServerSessionStorage {}),
                            n => Arc::new(Aged {
                                inner: rustls::server::ServerSessionMemoryCache::new(n),
                                lifetime,
                            }),
                        };
                    let ticketer: Arc<dyn rustls::server::ProducesTickets> = if ticketer.enabled() {
                        Arc::new(Aged {
                            inner: ticketer,
                            lifetime,
                        })
                    } else {
                        ticketer
                    };
                    let s: Store = (ticketer, cache);
                    stores.push((policy, s.clone()));
                    s
                }
            };
            let cfg = server_config(conf, resolver.clone(), ticketer, cache)
                .map_err(|e| if i == 0 { e } else { format!("{origin}: {e}") })?;
            configs.push(Arc::new(cfg));
        }
        Ok(Some(Arc::new(BindTls {
            configs,
            resolver,
            verify: self.conf.verify.unwrap_or_default(),
            label,
        })))
    }
}

/// `tune.ssl.lifetime` over a ticketer or a session cache: what it seals or stores starts
/// with the time of sealing (since the epoch, so that tickets sealed with
/// `tls-ticket-keys` keep their age across a reload), and a session older than `lifetime`
/// is not resumed, as OpenSSL refuses a session past its timeout in HAProxy. Milliseconds,
/// so that a lifetime of N seconds is N seconds, not up to N + 1. rustls only
/// hints a ticket's lifetime to the client; this enforces it.
struct Aged<T> {
    inner: T,
    lifetime: u32,
}

impl<T> fmt::Debug for Aged<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Aged({} s)", self.lifetime)
    }
}

impl<T> Aged<T> {
    fn stamp(plain: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + plain.len());
        v.extend_from_slice(&crate::util::unix_ms().to_be_bytes());
        v.extend_from_slice(plain);
        v
    }

    /// The session without its stamp, if it is still young enough (a stamp from the future,
    /// the clock having gone back, counts as young).
    fn fresh(&self, mut v: Vec<u8>) -> Option<Vec<u8>> {
        let stamp = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
        if crate::util::unix_ms().saturating_sub(stamp) > u64::from(self.lifetime) * 1000 {
            return None;
        }
        v.drain(..8);
        Some(v)
    }
}

impl rustls::server::ProducesTickets for Aged<Arc<dyn rustls::server::ProducesTickets>> {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }
    fn lifetime(&self) -> u32 {
        // RFC 8446 4.6.1: a server must not hint more than 7 days (the stamp still enforces
        // a longer `tune.ssl.lifetime`).
        self.lifetime.min(604_800)
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.inner.encrypt(&Self::stamp(plain))
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.fresh(self.inner.decrypt(cipher)?)
    }
}

impl rustls::server::StoresServerSessions for Aged<Arc<rustls::server::ServerSessionMemoryCache>> {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.inner.put(key, Self::stamp(&value))
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.fresh(self.inner.get(key)?)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.fresh(self.inner.take(key)?)
    }
    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

/// `no-tls-tickets`: a ticketer that issues none, as rustls' default one (not public) does.
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// A server configuration for one set of settings.
fn server_config(
    conf: &SslConf,
    resolver: Arc<CertResolver>,
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
    cache: Arc<dyn rustls::server::StoresServerSessions>,
) -> Result<ServerConfig, String> {
    let verify = conf.verify.unwrap_or_default();
    let suites = select_suites(conf.ciphers.as_deref(), conf.ciphersuites.as_deref())?;
    let versions = select_versions(conf.min, conf.max, &suites)?;
    let mut prov = (*provider()).clone();
    prov.cipher_suites = suites;
    if let Some(c) = &conf.curves {
        prov.kx_groups = select_groups(c)?;
    }
    let prov = Arc::new(prov);
    // Read even without `verify` (HAProxy loads it whatever the mode, refusing a bad file).
    let crls = match &conf.crl_file {
        Some(f) => Some((f, load_crls(f)?)),
        None => None,
    };
    let client_verifier = match (verify, &conf.ca_file) {
        (Verify::None, _) => WebPkiClientVerifier::no_client_auth(),
        (_, None) => {
            return Err("'verify optional|required' needs a 'ca-file' to verify against".into());
        }
        (v, Some(ca)) => {
            let roots = Arc::new(load_roots(ca)?);
            let mut b = WebPkiClientVerifier::builder_with_provider(roots, prov.clone());
            if v == Verify::Optional {
                b = b.allow_unauthenticated();
            }
            // OpenSSL's CRL_CHECK | CRL_CHECK_ALL, as HAProxy sets them: every certificate of
            // the chain but the trust anchor needs its issuer's CRL (rustls' default depth, and
            // an unknown status fails by default), and an expired CRL fails the handshake.
            if let Some((_, crls)) = &crls {
                b = b
                    .with_crls(crls.iter().cloned())
                    .enforce_revocation_expiration();
            }
            b.build().map_err(|e| match (&e, &crls) {
                (rustls::server::VerifierBuilderError::InvalidCrl(_), Some((f, _))) => {
                    format!("crl-file '{f}': {e}")
                }
                _ => format!("'ca-file {ca}': {e}"),
            })?
        }
    };
    let mut cfg = ServerConfig::builder_with_provider(prov)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_client_cert_verifier(client_verifier)
        .with_cert_resolver(resolver);
    // Server cipher preference, as HAProxy's default (`prefer-client-ciphers` reverses it).
    cfg.ignore_client_order = !conf.prefer_client;
    cfg.session_storage = cache;
    cfg.ticketer = ticketer;
    cfg.alpn_protocols = conf.alpn.clone().unwrap_or_default();
    Ok(cfg)
}

fn load_roots(ca: &str) -> Result<RootCertStore, String> {
    if ca.starts_with('@') {
        return Err(format!(
            "'ca-file {ca}': special CA stores are not supported by sluice"
        ));
    }
    let data = std::fs::read(ca).map_err(|e| format!("cannot read ca-file '{ca}': {e}"))?;
    let (certs, _) = read_pem(Path::new(ca), &data)?;
    if certs.is_empty() {
        return Err(format!("ca-file '{ca}': no certificate found"));
    }
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| format!("ca-file '{ca}': unusable CA certificate: {e}"))?;
    }
    Ok(roots)
}

/// The revocation lists of a `crl-file`: any number of PEM `X509 CRL` blocks (other PEM blocks,
/// such as certificates, are skipped, as HAProxy skips them), or a single DER CRL.
fn load_crls(path: &str) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read crl-file '{path}': {e}"))?;
    let mut ders = Vec::new();
    let mut pem = false;
    for item in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(&data) {
        let (kind, der) = item.map_err(|e| format!("crl-file '{path}': bad PEM: {e}"))?;
        pem = true;
        if kind == SectionKind::Crl {
            ders.push(der);
        }
    }
    if !pem && data.first() == Some(&0x30) {
        ders.push(data);
    }
    if ders.is_empty() {
        return Err(format!("crl-file '{path}': no CRL found"));
    }
    let n = ders.len();
    ders.into_iter()
        .enumerate()
        .map(|(i, der)| match x509_parser::parse_x509_crl(&der) {
            Ok((&[], _)) => Ok(CertificateRevocationListDer::from(der)),
            r => {
                let which = if n > 1 {
                    format!("CRL #{} ", i + 1)
                } else {
                    "CRL ".into()
                };
                let why = match r {
                    Err(e) => e.to_string(),
                    Ok(_) => "trailing data".into(),
                };
                Err(format!("crl-file '{path}': {which}is not valid: {why}"))
            }
        })
        .collect()
}

impl fmt::Debug for BindTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BindTls")
            .field("certs", &self.resolver.paths())
            .field("verify", &self.verify)
            .finish()
    }
}

/// Configurations compare by identity: two loads of the same files are different objects.
impl PartialEq for BindTls {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for BindTls {}

impl BindTls {
    /// The same bind for `proto h1`, whose clients speak HTTP/1.1 only: `h2` is not
    /// advertised, so a client configured for `alpn h2,http/1.1` falls back to HTTP/1.1
    /// instead of failing.
    pub fn http1_only(self: &Arc<Self>) -> Arc<BindTls> {
        let h2 = |c: &ServerConfig| c.alpn_protocols.iter().any(|p| p == b"h2");
        if !self.configs.iter().any(|c| h2(c)) {
            return self.clone();
        }
        // A clone shares the original's resolver, ticketer and session cache.
        let configs = self
            .configs
            .iter()
            .map(|c| {
                if !h2(c) {
                    return c.clone();
                }
                let mut cfg = (**c).clone();
                cfg.alpn_protocols.retain(|p| p != b"h2");
                Arc::new(cfg)
            })
            .collect();
        Arc::new(BindTls {
            configs,
            resolver: self.resolver.clone(),
            verify: self.verify,
            label: self.label.clone(),
        })
    }
}

// =============================================================================================
// Accepting: the handshake and what it tells
// =============================================================================================

/// Why an accepted TLS handshake did not complete.
#[derive(Debug)]
pub enum HandshakeError {
    Timeout,
    Failed(std::io::Error),
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Timeout => f.write_str("timeout"),
            HandshakeError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// Runs the server side of a handshake on `io`, bounded by `timeout`.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    tls: &BindTls,
    io: S,
    timeout: Option<Duration>,
) -> Result<tokio_rustls::server::TlsStream<S>, HandshakeError> {
    let acc = async {
        let [only] = tls.configs.as_slice() else {
            // Settings per crt-list line: the ClientHello says which certificate, hence which
            // settings, before rustls goes on. Reading it costs no crypto; the handshake
            // scheduling (`handshake`) already waited for it to arrive.
            let start =
                tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io)
                    .await?;
            let i = tls.resolver.conf_for(&start.client_hello());
            let cfg = tls.configs.get(i).or(tls.configs.first()).cloned();
            let cfg = cfg.ok_or_else(|| std::io::Error::other("no TLS configuration"))?;
            return start.into_stream(cfg).await;
        };
        tokio_rustls::TlsAcceptor::from(only.clone())
            .accept(io)
            .await
    };
    match timeout {
        Some(d) => match tokio::time::timeout(d, acc).await {
            Ok(r) => r.map_err(HandshakeError::Failed),
            Err(_) => Err(HandshakeError::Timeout),
        },
        None => acc.await.map_err(HandshakeError::Failed),
    }
}

/// What rules and logs may ask about a finished handshake.
pub fn info_of(conn: &rustls::CommonState, sni: Option<&str>) -> TlsInfo {
    let mut i = TlsInfo {
        sni: sni.map(Into::into),
        protocol: conn.protocol_version().map(version_name).unwrap_or(""),
        cipher: conn
            .negotiated_cipher_suite()
            .map(|s| cipher_name(s.suite()))
            .unwrap_or(""),
        alpn: conn.alpn_protocol().map(Into::into),
        resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        ..Default::default()
    };
    if let Some(c) = conn.peer_certificates().and_then(|c| c.first()) {
        i.client_cert = true;
        if let Ok((_, x)) = x509_parser::parse_x509_certificate(c.as_ref()) {
            i.c_s_dn = Some(oneline_dn(x.subject()).into());
            i.c_i_dn = Some(oneline_dn(x.issuer()).into());
        }
    }
    i
}

/// [`info_of`] for an accepted stream.
pub fn server_info<S>(s: &tokio_rustls::server::TlsStream<S>) -> TlsInfo {
    let conn = s.get_ref().1;
    info_of(conn, conn.server_name())
}

// =============================================================================================
// server ... ssl
// =============================================================================================

/// Server options this module parses.
pub const SERVER_TLS_OPTIONS: &[&str] = &[
    "ssl",
    "no-ssl",
    "verify",
    "ca-file",
    "crl-file",
    "sni",
    "verifyhost",
    "no-verifyhost",
    "alpn",
    "crt",
    "ssl-min-ver",
    "ssl-max-ver",
    "ciphers",
    "ciphersuites",
    "no-tls-tickets",
    "no-sslv3",
    "no-tlsv10",
    "no-tlsv11",
    "no-tlsv12",
    "no-tlsv13",
    "force-tlsv12",
    "force-tlsv13",
];

/// Parses the TLS option at `w[*i]` of a `server` line. `None` when it is not one.
pub fn parse_server_opt(
    o: &mut ServerTlsOpts,
    w: &[String],
    i: &mut usize,
) -> Option<Result<(), String>> {
    let kw = *SERVER_TLS_OPTIONS.iter().find(|k| **k == w[*i])?;
    let mut val = || next_arg(w, i, kw);
    let r = (|| -> Result<(), String> {
        match kw {
            "ssl" => o.ssl = true,
            "no-ssl" => o.ssl = false,
            "verify" => {
                o.verify = Some(match val()?.as_str() {
                    "none" => false,
                    "required" => true,
                    v => {
                        return Err(format!(
                            "'verify': unknown mode '{v}' (expected none or required)"
                        ));
                    }
                })
            }
            "ca-file" => o.ca_file = Some(val()?),
            "crl-file" => o.crl_file = Some(val()?),
            "sni" => o.sni = Some(parse_sni(&val()?)?),
            "verifyhost" => {
                let v = val()?;
                // Wildcards belong to certificates, not to the name checked against them.
                if ServerName::try_from(v.clone()).is_err() || v.contains('*') {
                    return Err(format!("'verifyhost': '{v}' is not a valid host name"));
                }
                o.verifyhost = Some(v)
            }
            "no-verifyhost" => o.verifyhost = None,
            "alpn" => o.alpn = Some(alpn_list(&val()?)?),
            "crt" => o.crt = Some(val()?),
            "ssl-min-ver" => o.min = Some(parse_version(kw, &val()?)?),
            "ssl-max-ver" => o.max = Some(parse_version(kw, &val()?)?),
            "ciphers" => {
                let v = val()?;
                check_cipher_list(kw, &v, false)?;
                o.ciphers = Some(v)
            }
            "ciphersuites" => {
                let v = val()?;
                check_cipher_list(kw, &v, true)?;
                o.ciphersuites = Some(v)
            }
            "no-tls-tickets" => o.no_tickets = true,
            _ => version_option(kw, &mut o.min, &mut o.max),
        }
        Ok(())
    })();
    Some(r)
}

/// `sni` expressions sluice evaluates: `str(NAME)` and the request's Host header.
fn parse_sni(v: &str) -> Result<SniExpr, String> {
    if let Some(name) = v.strip_prefix("str(").and_then(|r| r.strip_suffix(')')) {
        if name.is_empty() || ServerName::try_from(name.to_string()).is_err() {
            return Err(format!("'sni': '{name}' is not a valid server name"));
        }
        return Ok(SniExpr::Str(name.to_string()));
    }
    match v.to_ascii_lowercase().as_str() {
        "req.hdr(host)" | "hdr(host)" | "req.hdr(host,1)" | "hdr(host,1)" => Ok(SniExpr::ReqHost),
        _ => Err(format!(
            "'sni {v}': only 'str(NAME)' and 'req.hdr(host)' are supported by sluice"
        )),
    }
}

impl ServerTlsOpts {
    /// Completes a `server` line with the `global` section's settings (what the line, and its
    /// `default-server`, leave unset), paths under `crt-base` / `ca-base`.
    pub fn apply_defaults(&mut self, d: &TlsDefaults) {
        d.server.fill(
            (&mut self.ciphers, &mut self.ciphersuites),
            (&mut self.min, &mut self.max),
            &mut self.no_tickets,
        );
        if self.verify.is_none() && d.server_verify_none {
            self.verify = Some(false);
        }
        for f in [&mut self.ca_file, &mut self.crl_file]
            .into_iter()
            .flatten()
        {
            *f = based(&d.ca_base, f);
        }
        if let Some(crt) = &mut self.crt {
            *crt = based(&d.crt_base, crt);
        }
    }

    /// The server's TLS client configuration (`None` without `ssl`).
    pub fn build(&self) -> Result<Option<Arc<ServerTls>>, String> {
        if !self.ssl {
            return Ok(None);
        }
        let verify = self.verify.unwrap_or(true);
        // Read even with `verify none` (HAProxy loads it whatever the mode).
        let crls = match &self.crl_file {
            Some(f) => Some((f, load_crls(f)?)),
            None => None,
        };
        let suites = select_suites(self.ciphers.as_deref(), self.ciphersuites.as_deref())?;
        let versions = select_versions(self.min, self.max, &suites)?;
        let mut prov = (*provider()).clone();
        prov.cipher_suites = suites;
        let prov = Arc::new(prov);
        let builder = ClientConfig::builder_with_provider(prov.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| format!("TLS settings: {e}"))?;
        let verifier: Arc<dyn ServerCertVerifier> = if verify {
            let Some(ca) = &self.ca_file else {
                return Err(
                    "verify is enabled by default but no CA file specified. If you're \
                            running on a LAN where you're certain to trust the server's \
                            certificate, please set an explicit 'verify none' statement on the \
                            'server' line, or use 'ssl-server-verify none' in the global section \
                            to disable server-side verifications by default"
                        .into(),
                );
            };
            let roots = Arc::new(load_roots(ca)?);
            let mut b =
                rustls::client::WebPkiServerVerifier::builder_with_provider(roots, prov.clone());
            // As on binds: the whole chain, unknown status and expired CRLs fail.
            if let Some((_, crls)) = &crls {
                b = b
                    .with_crls(crls.iter().cloned())
                    .enforce_revocation_expiration();
            }
            let inner = b.build().map_err(|e| match (&e, &crls) {
                (rustls::client::VerifierBuilderError::InvalidCrl(_), Some((f, _))) => {
                    format!("crl-file '{f}': {e}")
                }
                _ => format!("'ca-file {ca}': {e}"),
            })?;
            Arc::new(ChainVerifier {
                inner,
                verifyhost: self
                    .verifyhost
                    .as_ref()
                    .and_then(|h| ServerName::try_from(h.clone()).ok()),
            })
        } else {
            Arc::new(NoVerify(prov.clone()))
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut cfg = match &self.crt {
            Some(c) => {
                let (certs, key) = read_bundle(Path::new(c))?;
                certified_key(Path::new(c), certs.clone(), key.clone_key())?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| format!("'crt {c}': {e}"))?
            }
            None => builder.with_no_client_auth(),
        };
        if let Some(a) = &self.alpn {
            cfg.alpn_protocols = a.clone();
        }
        cfg.resumption = if self.no_tickets {
            rustls::client::Resumption::in_memory_sessions(64)
                .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOnly)
        } else {
            rustls::client::Resumption::in_memory_sessions(64)
        };
        Ok(Some(Arc::new(ServerTls {
            config: Arc::new(cfg),
            sni: self.sni.clone(),
            verify,
        })))
    }
}

/// `verify required`: the chain must lead to the CA. As in HAProxy, the name checked is the SNI
/// sent, else the `verifyhost` name; with neither, only the chain is checked.
#[derive(Debug)]
struct ChainVerifier {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    verifyhost: Option<ServerName<'static>>,
}

impl ServerCertVerifier for ChainVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // An IP address as the name means no SNI went out (see `server_name`).
        let sni_sent = matches!(server_name, ServerName::DnsName(_));
        let (name, check) = match (&self.verifyhost, sni_sent) {
            (Some(host), false) => (host, true),
            _ => (server_name, sni_sent),
        };
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            // webpki checks the chain before the name: a name error means the chain was good.
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) if !check => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `verify none`: any certificate is accepted, but the handshake signatures are still checked
/// (so the session keys belong to whoever holds the presented certificate's key).
#[derive(Debug)]
pub struct NoVerify(pub Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("sni", &self.sni)
            .field("verify", &self.verify)
            .finish()
    }
}

impl ServerTls {
    /// The same server spoken to in HTTP/1.1 (`proto h1`, or no `h2` in its `alpn` in `mode
    /// http`): `h2` is not offered, so a server that prefers it answers in HTTP/1.1.
    pub fn http1_only(self: &Arc<Self>) -> Arc<ServerTls> {
        if !self.config.alpn_protocols.iter().any(|p| p == b"h2") {
            return self.clone();
        }
        self.with_alpn(|a| a.retain(|p| p != b"h2"))
    }

    /// The same server with `proto h2` and no `alpn`: `h2` is offered, for servers that speak
    /// HTTP/2 over TLS only to clients that say so.
    pub fn offering_h2(self: &Arc<Self>) -> Arc<ServerTls> {
        self.with_alpn(|a| *a = vec![b"h2".to_vec()])
    }

    fn with_alpn(&self, f: impl FnOnce(&mut Vec<Vec<u8>>)) -> Arc<ServerTls> {
        let mut cfg = (*self.config).clone();
        f(&mut cfg.alpn_protocols);
        Arc::new(ServerTls {
            config: Arc::new(cfg),
            sni: self.sni.clone(),
            verify: self.verify,
        })
    }
}

impl PartialEq for ServerTls {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for ServerTls {}

/// The name a server connection is opened for: the SNI value when there is one, else the
/// server's address (rustls sends no SNI for an IP address).
pub fn server_name(sni: Option<&str>, addr: std::net::IpAddr) -> ServerName<'static> {
    sni.and_then(|s| ServerName::try_from(s.to_string()).ok())
        .unwrap_or(ServerName::IpAddress(addr.into()))
}

/// The `no-tlsv1x` / `force-tlsv1x` options of bind and server lines, as version bounds (rustls
/// never speaks SSLv3, TLS 1.0 or 1.1, so their `no-` forms change nothing). Other keywords are
/// left alone.
/// `ssl-default-bind-options` / `ssl-default-server-options`: the words HAProxy accepts there
/// (`bind`: the bind side, which also takes `prefer-client-ciphers`).
pub fn parse_default_options(
    kw: &str,
    d: &mut SideDefaults,
    words: &[String],
    bind: bool,
) -> Result<(), String> {
    if words.is_empty() {
        return Err(format!("'{kw}' expects at least one option"));
    }
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        match w {
            "no-tls-tickets" => d.no_tickets = true,
            "prefer-client-ciphers" if bind => d.prefer_client = true,
            "ssl-min-ver" | "ssl-max-ver" => {
                i += 1;
                let v = words
                    .get(i)
                    .ok_or_else(|| format!("'{kw}': '{w}' expects a version"))?;
                let v = parse_version(w, v)?;
                if w == "ssl-min-ver" {
                    d.min = Some(v);
                } else {
                    d.max = Some(v);
                }
            }
            // The versions rustls never speaks are off already.
            "no-sslv3" | "no-tlsv10" | "no-tlsv11" => {}
            "no-tlsv12" | "no-tlsv13" | "force-tlsv12" | "force-tlsv13" => {
                version_option(w, &mut d.min, &mut d.max)
            }
            "force-sslv3" | "force-tlsv10" | "force-tlsv11" => {
                return Err(format!(
                    "'{kw}': '{w}' is not supported by sluice (rustls implements TLSv1.2 and \
                     TLSv1.3 only)"
                ));
            }
            _ => {
                return Err(format!(
                    "unknown option '{w}' on global statement '{kw}' (supported: no-sslv3, \
                     no-tlsv10, no-tlsv11, no-tlsv12, no-tlsv13, force-tlsv12, force-tlsv13, \
                     ssl-min-ver, ssl-max-ver, no-tls-tickets{})",
                    if bind { ", prefer-client-ciphers" } else { "" }
                ));
            }
        }
        i += 1;
    }
    Ok(())
}

fn version_option(kw: &str, min: &mut Option<ProtocolVersion>, max: &mut Option<ProtocolVersion>) {
    match kw {
        "no-tlsv12" => *min = Some(ProtocolVersion::TLSv1_3),
        "no-tlsv13" => *max = Some(ProtocolVersion::TLSv1_2),
        "force-tlsv12" => {
            *min = Some(ProtocolVersion::TLSv1_2);
            *max = Some(ProtocolVersion::TLSv1_2);
        }
        "force-tlsv13" => {
            *min = Some(ProtocolVersion::TLSv1_3);
            *max = Some(ProtocolVersion::TLSv1_3);
        }
        _ => {}
    }
}

/// Wraps a connected server socket into a TLS stream: the one entry point for sessions and
/// health checks (`check-ssl`). The handshake is bounded by `timeout`.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    tls: &ServerTls,
    io: S,
    name: ServerName<'static>,
    timeout: Option<Duration>,
) -> std::io::Result<tokio_rustls::client::TlsStream<S>> {
    let fut = tokio_rustls::TlsConnector::from(tls.config.clone()).connect(name, io);
    match timeout {
        Some(d) => tokio::time::timeout(d, fut).await.map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timeout")
        })?,
        None => fut.await,
    }
}

/// For health checks that run over TLS (`check-ssl`, inherited from `ssl`, or `connect ssl`;
/// `check::connect` decides): the connected socket with TLS on top, with the server line's
/// client configuration and session store. `sni` is the check's own (`check-sni`, `connect
/// sni`), else the server's `sni str(..)` (a check has no request, so no Host header); `alpn`
/// replaces the server's ALPN list for this connection only (`check-alpn`, `connect alpn`).
pub async fn check_stream(
    tls: &ServerTls,
    tcp: tokio::net::TcpStream,
    sni: Option<&str>,
    alpn: Option<&[Vec<u8>]>,
    timeout: Option<Duration>,
) -> std::io::Result<crate::stream::ServerStream> {
    let ip = tcp.peer_addr()?.ip();
    let sni = sni.or(match &tls.sni {
        Some(SniExpr::Str(s)) => Some(s.as_str()),
        _ => None,
    });
    let name = server_name(sni, ip);
    let s = match alpn {
        None => connect(tls, tcp.into(), name, timeout).await?,
        Some(list) => {
            let fut = tokio_rustls::TlsConnector::from(tls.config.clone())
                .with_alpn(list.to_vec())
                .connect(name, tcp.into());
            match timeout {
                Some(d) => tokio::time::timeout(d, fut).await.map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timeout")
                })??,
                None => fut.await?,
            }
        }
    };
    Ok(crate::stream::ServerStream::Tls(Box::new(s)))
}

/// `check-sni NAME` / `connect sni NAME`: a plain host name (HAProxy takes a string here, not
/// an expression), which rustls must accept as a DNS name.
pub fn check_sni(v: &str) -> Result<String, String> {
    match ServerName::try_from(v.to_string()) {
        Ok(ServerName::DnsName(_)) => Ok(v.to_string()),
        _ => Err(format!("'{v}' is not a valid server name")),
    }
}

// =============================================================================================
// Runtime certificate updates (CLI)
// =============================================================================================

fn pending() -> &'static Mutex<Option<PendingCert>> {
    static P: OnceLock<Mutex<Option<PendingCert>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(None))
}

/// Every bind resolver of a configuration.
fn resolvers(cfg: &crate::config::Config) -> impl Iterator<Item = &Arc<CertResolver>> {
    cfg.proxies
        .iter()
        .flat_map(|p| p.binds.iter())
        .filter_map(|b| b.ssl.as_ref().map(|t| &t.resolver))
}

fn find_cert(cfg: &crate::config::Config, path: &str) -> Option<Arc<LoadedCert>> {
    resolvers(cfg).find_map(|r| r.get(path))
}

/// `set ssl cert PATH <<PEM`: parses the new certificate (and key; without one, the current
/// key is kept if it matches) into the pending transaction.
pub fn cli_set_cert(cfg: &crate::config::Config, path: &str, payload: &str) -> String {
    let Some(cur) = find_cert(cfg, path) else {
        return format!(
            "Can't replace a certificate which is not referenced by the configuration!\n\
             Certificate '{path}' not found.\n"
        );
    };
    let p = Path::new(path);
    let (certs, key) = match read_pem(p, payload.as_bytes()) {
        Ok(x) => x,
        Err(e) => return format!("unable to load certificate: {e}\n"),
    };
    if certs.is_empty() {
        return format!("unable to load certificate: no certificate in the payload for '{path}'\n");
    }
    let ck = match key {
        Some(k) => certified_key(p, certs, k),
        None => {
            let ck = CertifiedKey::new(certs, cur.key.key.clone());
            match ck.keys_match() {
                Ok(()) => Ok(ck),
                Err(_) => Err(format!(
                    "'{path}': the payload has no private key and the current key does not \
                     match the new certificate"
                )),
            }
        }
    };
    match ck {
        Ok(ck) => {
            let mut g = pending().lock().unwrap_or_else(|e| e.into_inner());
            *g = Some(PendingCert {
                path: path.to_string(),
                key: Arc::new(ck),
            });
            format!("Transaction created for certificate {path}!\n")
        }
        Err(e) => format!("unable to load certificate: {e}\n"),
    }
}

/// `commit ssl cert PATH`: new handshakes use the pending certificate from now on; open
/// connections keep the one they negotiated.
pub fn cli_commit_cert(cfg: &crate::config::Config, path: &str) -> String {
    let mut g = pending().lock().unwrap_or_else(|e| e.into_inner());
    match g.as_ref() {
        Some(p) if p.path == path => {}
        Some(p) => {
            return format!(
                "The ongoing transaction is about '{}' but you are trying to set '{path}'\n",
                p.path
            );
        }
        None => return "No ongoing transaction!\n".into(),
    }
    let Some(p) = g.take() else {
        return "No ongoing transaction!\n".into();
    };
    let mut n = 0;
    for r in resolvers(cfg) {
        if r.replace(path, &p.key) {
            n += 1;
        }
    }
    if n == 0 {
        return format!("Certificate '{path}' is no longer referenced by the configuration!\n");
    }
    format!("Committing {path}\nSuccess!\n")
}

/// `abort ssl cert PATH`.
pub fn cli_abort_cert(path: &str) -> String {
    let mut g = pending().lock().unwrap_or_else(|e| e.into_inner());
    match g.as_ref() {
        Some(p) if p.path == path => {
            *g = None;
            format!("Transaction aborted for certificate '{path}'!\n")
        }
        _ => "No ongoing transaction!\n".into(),
    }
}

/// `show ssl cert [PATH]`: the certificate files in use (and the pending one), or one's details.
pub fn cli_show_cert(cfg: &crate::config::Config, path: Option<&str>) -> String {
    use std::fmt::Write;
    let g = pending().lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = path else {
        let mut out = String::new();
        if let Some(p) = g.as_ref() {
            let _ = writeln!(out, "# transaction\n*{}", p.path);
        }
        out.push_str("# filename\n");
        let mut seen: Vec<String> = Vec::new();
        for r in resolvers(cfg) {
            for p in r.paths() {
                if !seen.contains(&p) {
                    let _ = writeln!(out, "{p}");
                    seen.push(p);
                }
            }
        }
        return out;
    };
    let (key, label) = match (path.strip_prefix('*'), g.as_ref()) {
        (Some(p), Some(t)) if t.path == p => (t.key.clone(), format!("*{p}")),
        (Some(_), _) => return "No ongoing transaction!\n".into(),
        (None, _) => match find_cert(cfg, path) {
            Some(c) => (c.key.clone(), path.to_string()),
            None => {
                return "Can't display the certificate: Not found or the certificate is a bundle!
"
                .to_string();
            }
        },
    };
    let mut out = format!("Filename: {label}\nStatus: Used\n");
    if let Some(der) = key.cert.first()
        && let Ok((_, x)) = x509_parser::parse_x509_certificate(der.as_ref())
    {
        let _ = writeln!(
            out,
            "Serial: {}",
            x.raw_serial_as_string().replace(':', "").to_uppercase()
        );
        let _ = writeln!(out, "notBefore: {}", x.validity().not_before);
        let _ = writeln!(out, "notAfter: {}", x.validity().not_after);
        let _ = writeln!(out, "Subject: {}", oneline_dn(x.subject()));
        let _ = writeln!(out, "Issuer: {}", oneline_dn(x.issuer()));
        let (exact, wild) = cert_names(der.as_ref());
        let names: Vec<String> = exact
            .into_iter()
            .chain(wild.into_iter().map(|w| format!("*.{w}")))
            .map(|n| format!("DNS:{n}"))
            .collect();
        let _ = writeln!(out, "Subject Alternative Name: {}", names.join(", "));
    }
    out
}

/// A client's first bytes read as the start of a TLS connection, without a TLS library:
/// what `tcp-request content` rules see (`req.ssl_hello_type`, `req.ssl_sni`) before the
/// connection is passed on as it is.
pub mod peek {
    /// Whether `buf` holds enough to answer: not a TLS handshake record at all, or the whole
    /// first record.
    pub fn complete(buf: &[u8]) -> bool {
        match buf {
            [] => false,
            [t, ..] if *t != 0x16 => true,
            [_, _, _, hi, lo, ..] => buf.len() >= 5 + usize::from(u16::from_be_bytes([*hi, *lo])),
            _ => false,
        }
    }

    /// The type of the handshake message a handshake record starts with (1: ClientHello).
    pub fn hello_type(buf: &[u8]) -> Option<u8> {
        match buf {
            [0x16, 3, _, _, _, t, ..] => Some(*t),
            _ => None,
        }
    }

    /// The `server_name` (host name) of a ClientHello held whole in the first record.
    pub fn sni(buf: &[u8]) -> Option<&[u8]> {
        let mut list = Reader(extension(buf, 0)?);
        let n = list.u16()?;
        let mut names = Reader(list.take(n)?);
        while !names.0.is_empty() {
            let kind = names.u8()?;
            let n = names.u16()?;
            let name = names.take(n)?;
            if kind == 0 {
                return Some(name);
            }
        }
        None
    }

    /// The first protocol of the ALPN extension of a ClientHello held whole in the first
    /// record (`req.ssl_alpn`).
    pub fn alpn(buf: &[u8]) -> Option<&[u8]> {
        let mut list = Reader(extension(buf, 16)?);
        let n = list.u16()?;
        let mut names = Reader(list.take(n)?);
        let n = usize::from(names.u8()?);
        names.take(n)
    }

    /// The data of extension `want` of a ClientHello held whole in the first record.
    fn extension(buf: &[u8], want: usize) -> Option<&[u8]> {
        let rec_len = usize::from(u16::from_be_bytes([*buf.get(3)?, *buf.get(4)?]));
        if hello_type(buf)? != 1 {
            return None;
        }
        let rec = buf.get(5..5 + rec_len)?;
        let body_len = (usize::from(*rec.get(1)?) << 16)
            | (usize::from(*rec.get(2)?) << 8)
            | usize::from(*rec.get(3)?);
        let body = rec.get(4..4 + body_len)?;
        let mut r = Reader(body);
        r.skip(2 + 32)?; // version, random
        let n = usize::from(r.u8()?);
        r.skip(n)?; // session id
        let n = r.u16()?;
        r.skip(n)?; // cipher suites
        let n = usize::from(r.u8()?);
        r.skip(n)?; // compression methods
        let n = r.u16()?;
        let mut ext = Reader(r.take(n)?);
        while !ext.0.is_empty() {
            let ty = ext.u16()?;
            let n = ext.u16()?;
            let data = ext.take(n)?;
            if ty == want {
                return Some(data);
            }
        }
        None
    }

    struct Reader<'a>(&'a [u8]);

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if self.0.len() < n {
                return None;
            }
            let (a, b) = self.0.split_at(n);
            self.0 = b;
            Some(a)
        }
        fn skip(&mut self, n: usize) -> Option<()> {
            self.take(n).map(|_| ())
        }
        fn u8(&mut self) -> Option<u8> {
            self.take(1).map(|b| b[0])
        }
        fn u16(&mut self) -> Option<usize> {
            self.take(2)
                .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(version_name(ProtocolVersion::TLSv1_3), "TLSv1.3");
        assert_eq!(version_name(ProtocolVersion::TLSv1_2), "TLSv1.2");
        assert_eq!(
            cipher_name(CipherSuite::TLS13_AES_128_GCM_SHA256),
            "TLS_AES_128_GCM_SHA256"
        );
    }

    /// OpenSSL's rule language, against `openssl ciphers -tls1_2 RULES` of OpenSSL 3.0.19
    /// (Debian 12) restricted to the suites rustls implements.
    #[test]
    fn cipher_rules_match_openssl() {
        let cases: &[(&str, &[&str])] = &[
            (
                "HIGH",
                &[
                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                    "ECDHE-RSA-AES256-GCM-SHA384",
                    "ECDHE-ECDSA-CHACHA20-POLY1305",
                    "ECDHE-RSA-CHACHA20-POLY1305",
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                    "ECDHE-RSA-AES128-GCM-SHA256",
                ],
            ),
            (
                "HIGH:!aNULL:!MD5",
                &[
                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                    "ECDHE-RSA-AES256-GCM-SHA384",
                    "ECDHE-ECDSA-CHACHA20-POLY1305",
                    "ECDHE-RSA-CHACHA20-POLY1305",
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                    "ECDHE-RSA-AES128-GCM-SHA256",
                ],
            ),
            (
                "ECDH+AESGCM:ECDH+CHACHA20:!aNULL",
                &[
                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                    "ECDHE-RSA-AES256-GCM-SHA384",
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                    "ECDHE-RSA-AES128-GCM-SHA256",
                    "ECDHE-ECDSA-CHACHA20-POLY1305",
                    "ECDHE-RSA-CHACHA20-POLY1305",
                ],
            ),
            (
                "ECDH+AESGCM:DH+AESGCM:ECDH+AES256:DH+AES256:ECDH+AES128:DH+AES:RSA+AESGCM:RSA+AES:!aNULL:!MD5:!DSS",
                &[
                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                    "ECDHE-RSA-AES256-GCM-SHA384",
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                    "ECDHE-RSA-AES128-GCM-SHA256",
                ],
            ),
            (
                "aRSA:-AES128:AES128",
                &[
                    "ECDHE-RSA-AES256-GCM-SHA384",
                    "ECDHE-RSA-CHACHA20-POLY1305",
                    "ECDHE-RSA-AES128-GCM-SHA256",
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                ],
            ),
            (
                "ECDSA+AESGCM:+AES256",
                &[
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                ],
            ),
            (
                "ALL:!aRSA:@STRENGTH",
                &[
                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                    "ECDHE-ECDSA-CHACHA20-POLY1305",
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                ],
            ),
            (
                "EECDH+AESGCM:EDH+AESGCM",
                &[
                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                    "ECDHE-RSA-AES256-GCM-SHA384",
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                    "ECDHE-RSA-AES128-GCM-SHA256",
                ],
            ),
            (
                "ECDHE-RSA-AES128-GCM-SHA256:HIGH:!CHACHA20",
                &[
                    "ECDHE-RSA-AES128-GCM-SHA256",
                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                    "ECDHE-RSA-AES256-GCM-SHA384",
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                ],
            ),
            ("kEECDH+aRSA+AES128:!SHA1", &["ECDHE-RSA-AES128-GCM-SHA256"]),
            (
                "DEFAULT:-AES:+CHACHA20",
                &[
                    "ECDHE-ECDSA-CHACHA20-POLY1305",
                    "ECDHE-RSA-CHACHA20-POLY1305",
                ],
            ),
            ("AES128:AES256:!AESGCM", &[]),
        ];
        for (rules, want) in cases {
            let (got, skipped) = eval_cipher_list("ciphers", rules, false).unwrap();
            let got: Vec<&str> = got.iter().map(|c| cipher_name(*c)).collect();
            assert_eq!(&got, want, "{rules}");
            assert!(skipped.is_empty());
        }
        // Neither a suite nor an alias: skipped, as OpenSSL does (a warning where written).
        let (got, skipped) = eval_cipher_list("ciphers", "HIGH:!aNULLL:AE$", false).unwrap();
        assert_eq!(got.len(), 6);
        assert_eq!(skipped, ["aNULLL", "AE$"]);
        let e = eval_cipher_list("ciphers", "ECDH+TLS_AES_128_GCM_SHA256", false).unwrap_err();
        assert!(e.contains("use 'ciphersuites'"), "{e}");
        // Mozilla's old-style intermediate list: DHE names skipped, the rest kept in order.
        let (got, skipped) = eval_cipher_list(
            "ciphers",
            "ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384",
            false,
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(skipped, ["DHE-RSA-AES128-GCM-SHA256"]);
    }

    #[test]
    fn cipher_lists() {
        assert!(select_suites(Some("ECDHE-RSA-AES128-GCM-SHA256"), None).is_ok());
        // A name rustls lacks is skipped (warned about where it is written); nothing left
        // is an error.
        let e = select_suites(Some("DHE-RSA-AES128-SHA"), None).unwrap_err();
        assert!(e.contains("empty cipher list"), "{e}");
        let s =
            select_suites(Some("DHE-RSA-AES128-SHA:ECDHE-RSA-AES128-GCM-SHA256"), None).unwrap();
        assert!(
            s.iter()
                .any(|s| s.suite() == CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)
        );
        crate::config::take_warnings();
        check_cipher_list("ciphers", "ECDHE-RSA-AES128-GCM-SHA256:BOGUS", false).unwrap();
        let w = crate::config::take_warnings();
        assert!(
            w.iter()
                .any(|m| m.contains("BOGUS not implemented by rustls or not cipher names")),
            "{w:?}"
        );
        let e = check_cipher_list("ciphers", "BOGUS", false).unwrap_err();
        assert!(e.contains("none of the listed ciphers"), "{e}");
        // Red Hat's "system policy": the defaults, with a warning.
        crate::config::take_warnings();
        assert_eq!(
            select_suites(Some("PROFILE=SYSTEM"), Some("PROFILE=SYSTEM")).unwrap(),
            select_suites(None, None).unwrap()
        );
        check_cipher_list("ciphers", "PROFILE=SYSTEM", false).unwrap();
        assert!(crate::config::take_warnings()[0].contains("no system-wide crypto policy"));
        check_cipher_list("ciphers", "AES128-SHA:ECDHE-RSA-AES128-GCM-SHA256", false).unwrap();
        let w = crate::config::take_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("AES128-SHA not implemented by rustls or not cipher names, skipped"),
            "{w:?}"
        );
        let e = select_suites(None, Some("ECDHE-RSA-AES128-GCM-SHA256")).unwrap_err();
        assert!(e.contains("use 'ciphers'"), "{e}");
        let s = select_suites(None, Some("TLS_AES_256_GCM_SHA384")).unwrap();
        assert_eq!(s[0].suite(), CipherSuite::TLS13_AES_256_GCM_SHA384);
    }

    #[test]
    fn versions() {
        let s = select_suites(None, None).unwrap();
        assert_eq!(select_versions(None, None, &s).unwrap().len(), 2);
        assert_eq!(
            select_versions(Some(ProtocolVersion::TLSv1_3), None, &s)
                .unwrap()
                .len(),
            1
        );
        assert!(
            select_versions(
                Some(ProtocolVersion::TLSv1_3),
                Some(ProtocolVersion::TLSv1_2),
                &s
            )
            .is_err()
        );
        assert!(parse_version("ssl-max-ver", "TLSv1.1").is_err());
        let _ = crate::config::take_warnings();
        assert_eq!(
            parse_version("ssl-min-ver", "TLSv1.0"),
            Ok(ProtocolVersion::TLSv1_2)
        );
        let w = crate::config::take_warnings();
        assert!(
            w.len() == 1 && w[0].contains("the minimum is TLSv1.2"),
            "{w:?}"
        );
    }

    /// `tune.ssl.lifetime`: sealed sessions carry their time; an old one is refused; the
    /// hint never exceeds 7 days (RFC 8446) even when the lifetime does.
    #[test]
    fn aged_sessions() {
        use rustls::server::ProducesTickets;
        let t = Aged {
            inner: bind_ticketer().unwrap(),
            lifetime: 30 * 86_400,
        };
        assert_eq!(t.lifetime(), 604_800);
        let sealed = t.encrypt(b"session").unwrap();
        assert_eq!(t.decrypt(&sealed).as_deref(), Some(&b"session"[..]));
        let a = Aged {
            inner: (),
            lifetime: 1,
        };
        let mut old = (crate::util::unix_ms() - 1_500).to_be_bytes().to_vec();
        old.extend_from_slice(b"s");
        assert_eq!(a.fresh(old), None, "1.5 s old with a 1 s lifetime");
        let mut young = (crate::util::unix_ms() - 500).to_be_bytes().to_vec();
        young.extend_from_slice(b"s");
        assert_eq!(a.fresh(young).as_deref(), Some(&b"s"[..]));
        assert_eq!(a.fresh(vec![1, 2]), None, "too short to hold a stamp");
    }

    #[test]
    fn crt_list_options_override_the_bind_line() {
        let w = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let mut bind = BindTlsOpts::default();
        let words = w("alpn h2,http/1.1 ssl-min-ver TLSv1.2 verify optional ca-file ca.pem");
        let mut i = 0;
        while i < words.len() {
            parse_bind_opt(&mut bind, &words, &mut i).unwrap().unwrap();
            i += 1;
        }
        let line = parse_line_opts(" alpn x-b  verify required ").unwrap();
        let eff = line.over(&bind.conf);
        assert_eq!(eff.alpn, Some(vec![b"x-b".to_vec()]));
        assert_eq!(eff.verify, Some(Verify::Required));
        assert_eq!(eff.ca_file.as_deref(), Some("ca.pem"));
        assert_eq!(eff.min, Some(ProtocolVersion::TLSv1_2));
        assert_eq!(parse_line_opts("").unwrap(), SslConf::default());
        let e = parse_line_opts("alpn h2 npn h2").unwrap_err();
        assert!(e.starts_with("'npn' is not supported"), "{e}");
        let e = parse_line_opts("alpn").unwrap_err();
        assert!(e.contains("expects an argument"), "{e}");
    }

    #[test]
    fn sni_exprs() {
        assert_eq!(
            parse_sni("str(a.example)"),
            Ok(SniExpr::Str("a.example".into()))
        );
        assert_eq!(parse_sni("req.hdr(host)"), Ok(SniExpr::ReqHost));
        assert!(parse_sni("ssl_fc_sni").is_err());
    }
}
