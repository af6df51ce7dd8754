//! JSON Web Tokens as an API gateway checks them with HAProxy's converters:
//! `http_auth_bearer` takes the token, `jwt_header_query('$.alg')` its algorithm,
//! `jwt_verify(ALG,KEY)` its signature and `jwt_payload_query('$.iss')` a claim; and
//! `json_query` on a request body. The real binary, keys made by the test (ECDSA P-256 and
//! RSA with aws-lc-rs, a certificate with rcgen, an HMAC secret), tokens it signs itself.
//! The return codes are those HAProxy 2.6.12 gave for the same cases (bench/jwt_diff.py).

mod common;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair as _};
use base64::Engine as _;
use common::*;

fn b64u(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// A `PUBLIC KEY` PEM block of a SubjectPublicKeyInfo.
fn pem(spki: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(spki);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        lines.join("\n")
    )
}

/// A compact JWS: header `{"alg":ALG,"typ":"JWT"}`, `payload`, and `sign` of the two.
fn jws(alg: &str, payload: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let signed = format!(
        "{}.{}",
        b64u(format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#).as_bytes()),
        b64u(payload.as_bytes())
    );
    let sig = sign(signed.as_bytes());
    format!("{signed}.{}", b64u(&sig))
}

/// The token with its payload replaced, its signature kept.
fn tampered(token: &str, payload: &str) -> String {
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    parts[1] = b64u(payload.as_bytes());
    parts.join(".")
}

struct Keys {
    es: EcdsaKeyPair,
    es_pkcs8: Vec<u8>,
    rsa: aws_lc_rs::rsa::KeyPair,
}

impl Keys {
    fn new() -> Keys {
        let rng = SystemRandom::new();
        let es_pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                .unwrap()
                .as_ref()
                .to_vec();
        let es = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &es_pkcs8)
            .unwrap();
        let rsa = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        Keys { es, es_pkcs8, rsa }
    }

    fn es256(&self, payload: &str) -> String {
        jws("ES256", payload, |m| {
            self.es
                .sign(&SystemRandom::new(), m)
                .unwrap()
                .as_ref()
                .to_vec()
        })
    }

    fn rsa(&self, alg: &str, payload: &str) -> String {
        let enc: &'static dyn signature::RsaEncoding = match alg {
            "RS256" => &signature::RSA_PKCS1_SHA256,
            "RS512" => &signature::RSA_PKCS1_SHA512,
            "PS256" => &signature::RSA_PSS_SHA256,
            _ => panic!("{alg}"),
        };
        jws(alg, payload, |m| {
            let mut sig = vec![0; self.rsa.public_modulus_len()];
            self.rsa
                .sign(enc, &SystemRandom::new(), m, &mut sig)
                .unwrap();
            sig
        })
    }

    fn es_pem(&self) -> String {
        pem(self.es.public_key().as_der().unwrap().as_ref())
    }

    fn rsa_pem(&self) -> String {
        pem(self.rsa.public_key().as_der().unwrap().as_ref())
    }

    /// A self-signed certificate of the ECDSA key.
    fn es_cert(&self) -> String {
        let kp = rcgen::KeyPair::try_from(self.es_pkcs8.as_slice()).unwrap();
        rcgen::CertificateParams::new(vec!["jwt.test".to_string()])
            .unwrap()
            .self_signed(&kp)
            .unwrap()
            .pem()
    }
}

fn hs256(secret: &str, payload: &str) -> String {
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret.as_bytes());
    jws("HS256", payload, |m| {
        aws_lc_rs::hmac::sign(&key, m).as_ref().to_vec()
    })
}

/// `GET /` with `extra` header lines (each ending in `\r\n`).
fn get(port: u16, extra: &str) -> Response {
    http_raw(
        port,
        format!("GET / HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n"),
    )
}

fn bearer(port: u16, token: &str) -> Response {
    get(port, &format!("Authorization: Bearer {token}\r\n"))
}

/// The gateway of HAProxy's documentation: the algorithm is read from the token and must be
/// the expected one, then the signature is checked against the public key file and a claim
/// is passed on; a tampered token, another algorithm, no token are denied.
#[test]
fn gateway_accepts_signed_tokens_and_denies_the_rest() {
    let keys = Keys::new();
    let dir = TempDir::new();
    let es_pem = dir.write("es.pem", keys.es_pem());
    let rsa_pem = dir.write("rsa.pem", keys.rsa_pem());
    let es_crt = dir.write("es.crt", keys.es_cert());
    let (port, rs, hs, crt) = (free_port(), free_port(), free_port(), free_port());
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend es\n    bind 127.0.0.1:{port}\n\
         \x20   http-request set-var(txn.alg) http_auth_bearer,jwt_header_query('$.alg')\n\
         \x20   http-request deny unless {{ var(txn.alg) -m str ES256 }}\n\
         \x20   http-request deny unless {{ http_auth_bearer,jwt_verify(txn.alg,\"{es}\") -m int 1 }}\n\
         \x20   http-request set-var(txn.iss) http_auth_bearer,jwt_payload_query('$.iss')\n\
         \x20   http-request return status 200 content-type text/plain lf-string \"%[var(txn.iss)]\"\n\
         frontend rs\n    bind 127.0.0.1:{rs}\n\
         \x20   http-request deny unless {{ http_auth_bearer,jwt_verify(RS256,{rsa}) -m int 1 }}\n\
         \x20   http-request return status 200 content-type text/plain lf-string \
         \"n+1=%[http_auth_bearer,jwt_payload_query('$.n','int'),add(1)]\"\n\
         frontend hs\n    bind 127.0.0.1:{hs}\n\
         \x20   http-request deny unless {{ http_auth_bearer(x-token),jwt_verify(HS256,s3cret) 1 }}\n\
         \x20   http-request return status 200 content-type text/plain lf-string \
         \"%[req.hdr(x-token),word(2,' '),jwt_payload_query('$.sub')]\"\n\
         frontend crt\n    bind 127.0.0.1:{crt}\n\
         \x20   http-request return status 200 content-type text/plain lf-string \
         \"%[http_auth_bearer,jwt_verify(ES256,{es_crt})]\"\n",
        es = es_pem.display(),
        rsa = rsa_pem.display(),
        es_crt = es_crt.display(),
    );
    let _s = Sluice::start(&cfg);

    let good = keys.es256(r#"{"iss":"https://idp.example","sub":"u1"}"#);
    let r = bearer(port, &good);
    assert_eq!(
        (r.status, r.body_str().as_str()),
        (200, "https://idp.example")
    );
    // The scheme is matched in any case, and spaces before the token are skipped.
    let r = get(port, &format!("Authorization: bearer   {good}\r\n"));
    assert_eq!(r.status, 200, "{r:?}");
    let bad = tampered(&good, r#"{"iss":"https://evil.example","sub":"u1"}"#);
    assert_eq!(bearer(port, &bad).status, 403);
    // Right signature, other algorithm in the header: refused before jwt_verify.
    assert_eq!(bearer(port, &keys.rsa("RS256", "{}")).status, 403);
    assert_eq!(get(port, "").status, 403);
    assert_eq!(
        get(port, &format!("Authorization: Basic {good}\r\n")).status,
        403
    );
    assert_eq!(bearer(port, "not.a.token").status, 403);

    let r = bearer(rs, &keys.rsa("RS256", r#"{"n":41}"#));
    assert_eq!((r.status, r.body_str().as_str()), (200, "n+1=42"));
    let t = keys.rsa("RS256", r#"{"n":41}"#);
    assert_eq!(bearer(rs, &tampered(&t, r#"{"n":1}"#)).status, 403);
    // An ES256 token on the RSA key: not verified (0).
    assert_eq!(bearer(rs, &good).status, 403);

    let t = hs256("s3cret", r#"{"sub":"svc-7"}"#);
    let r = get(hs, &format!("X-Token: Bearer {t}\r\n"));
    assert_eq!((r.status, r.body_str().as_str()), (200, "svc-7"));
    let r = get(hs, &format!("X-Token: Bearer {}\r\n", hs256("other", "{}")));
    assert_eq!(r.status, 403);
    // The named header, not Authorization, is read.
    assert_eq!(bearer(hs, &t).status, 403);

    // A certificate's key verifies as the bare key does.
    assert_eq!(bearer(crt, &good).body_str(), "1");
    assert_eq!(bearer(crt, &bad).body_str(), "0");
}

/// `jwt_verify`'s integers for each kind of failure, with the algorithm from a header: as
/// HAProxy 2.6.12 numbers them (PS256, which it refuses, is verified by sluice).
#[test]
fn verify_return_codes() {
    let keys = Keys::new();
    let dir = TempDir::new();
    let es_pem = dir.write("es.pem", keys.es_pem());
    let rsa_pem = dir.write("rsa.pem", keys.rsa_pem());
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n\
         \x20   http-request set-var(txn.alg) req.hdr(x-alg)\n\
         \x20   http-request set-var(txn.key) req.hdr(x-key)\n\
         \x20   http-request return status 200 content-type text/plain lf-string \
         \"%[req.hdr(x-jwt),jwt_verify(txn.alg,txn.key)]\" if {{ req.hdr(x-key) -m found }}\n\
         \x20   http-request return status 200 content-type text/plain lf-string \
         \"%[req.hdr(x-jwt),jwt_verify(txn.alg,{es})]|%[req.hdr(x-jwt),jwt_verify(txn.alg,{rsa})]\"\n",
        es = es_pem.display(),
        rsa = rsa_pem.display(),
    );
    let _s = Sluice::start(&cfg);
    let code = |alg: &str, token: &str| {
        let r = get(port, &format!("X-Alg: {alg}\r\nX-Jwt: {token}\r\n"));
        assert_eq!(r.status, 200, "{r:?}");
        r.body_str()
    };
    let es = keys.es256(r#"{"a":1}"#);
    let rs = keys.rsa("RS256", r#"{"a":1}"#);
    let ps = keys.rsa("PS256", r#"{"a":1}"#);
    assert_eq!(code("ES256", &es), "1|0");
    assert_eq!(code("RS256", &rs), "0|1");
    assert_eq!(code("RS512", &keys.rsa("RS512", "{}")), "0|1");
    assert_eq!(code("PS256", &ps), "0|1");
    assert_eq!(code("RS256", &ps), "0|0");
    assert_eq!(code("ES384", &es), "0|0");
    assert_eq!(code("ES256", &tampered(&es, r#"{"a":2}"#)), "0|0");
    assert_eq!(code("FOO", &es), "-1|-1");
    assert_eq!(code("es256", &es), "-1|-1");
    assert_eq!(code("ES256", &format!("{es}.x")), "-3|-3");
    assert_eq!(code("ES256", "a.b"), "-3|-3");
    assert_eq!(code("ES256", "a.b."), "-3|-3");
    // An odd signature length cannot be R and S.
    let (signed, _) = es.rsplit_once('.').unwrap();
    assert_eq!(code("ES256", &format!("{signed}.AAAA")), "-3|-3");
    assert_eq!(code("ES256", &format!("{signed}.AAA")), "0|0");
    let none = format!("{}.{}", b64u(br#"{"alg":"none"}"#), b64u(b"{}"));
    assert_eq!(code("none", &format!("{none}.")), "1|1");
    assert_eq!(code("none", &none), "1|1");
    assert_eq!(code("none", &es), "0|0");
    // A key from a variable: a file some jwt_verify names, else -5.
    let with_key = |key: &str| {
        get(
            port,
            &format!("X-Alg: ES256\r\nX-Key: {key}\r\nX-Jwt: {es}\r\n"),
        )
        .body_str()
    };
    assert_eq!(with_key(&es_pem.display().to_string()), "1");
    assert_eq!(with_key(&rsa_pem.display().to_string()), "0");
    assert_eq!(with_key("/nonexistent/k.pem"), "-5");
    // No variable: no sample.
    let r = get(port, &format!("X-Jwt: {es}\r\n"));
    assert_eq!(r.body_str(), "|");
}

/// `json_query` on a buffered request body (HAProxy's documented use), and what it gives for
/// each JSON type.
#[test]
fn json_query_on_a_body() {
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    option http-buffer-request\n\
         \x20   http-request set-var(txn.n) req.body,json_query('$.integer','int'),add(1)\n\
         \x20   http-request return status 200 content-type text/plain lf-string \
         \"%[var(txn.n)]|%[req.body,json_query('$.my\\\\.key')]|%[req.body,json_query('$.f')]\
         |%[req.body,json_query('$.t')]|%[req.body,json_query('$.a[1].b')]\
         |%[req.body,json_query('$.o')]|%[req.body,json_query('$.none')]\"\n",
    );
    let _s = Sluice::start(&cfg);
    let body =
        r#"{"integer":4,"my.key":"myvalue","f":1700000000,"t":false,"a":[0,{"b":"x"}],"o":{}}"#;
    let r = http_raw(
        port,
        format!(
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body_str(), "5|myvalue|1.7e+09|0|x||");
}

/// Configuration errors name what is wrong, as HAProxy's do (and, unlike HAProxy, a key
/// file a constant RSA or ECDSA algorithm cannot use).
#[test]
fn configuration_errors() {
    let check = |rule: &str| {
        let cfg = format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{}\n    {rule}\n",
            free_port()
        );
        Sluice::check(&cfg)
    };
    let dir = TempDir::new();
    let junk = dir.write("junk.pem", "not a key\n");
    for (rule, want) in [
        (
            "http-request set-var(txn.x) req.body,json_query('$.a','str')".to_string(),
            "output_type only supports \"int\"",
        ),
        (
            "http-request set-var(txn.x) req.body,json_query".to_string(),
            "json_path must not be empty",
        ),
        (
            "http-request deny unless { http_auth_bearer,jwt_verify(FOO,x) 1 }".to_string(),
            "unknown JWT algorithm: FOO",
        ),
        (
            "http-request deny unless { http_auth_bearer,jwt_verify(ES256,/nonexistent/k.pem) 1 }"
                .to_string(),
            "/nonexistent/k.pem",
        ),
        (
            format!(
                "http-request deny unless {{ http_auth_bearer,jwt_verify(RS256,{}) 1 }}",
                junk.display()
            ),
            "junk.pem",
        ),
    ] {
        let (code, err) = check(&rule);
        assert_ne!(code, 0, "{rule}");
        assert!(err.contains(want), "{rule}: {err}");
    }
    // An algorithm from a variable: the key may be a secret, nothing is read or refused.
    let (code, err) = check(
        "http-request deny unless { http_auth_bearer,jwt_verify(txn.alg,/nonexistent/k.pem) 1 }",
    );
    assert_eq!(code, 0, "{err}");
}
