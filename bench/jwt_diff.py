#!/usr/bin/env python3
"""Differential test of the JSON / JWT sample converters and fetch: sluice vs HAProxy 2.6.

`json_query`, `jwt_header_query`, `jwt_payload_query`, `jwt_verify` and `http_auth_bearer`,
on the same configuration in both proxies. Standard library only, loopback only, bounded in
time (a few seconds); it reuses converter_diff.py's machinery (one frontend, each case /cN
answered by `http-request return ... lf-string "[%[E]]"` when `E -m found`, else
"NOSAMPLE:[...]"; each case checked alone with `-c` first, a case both refuse being equal).

    python3 bench/jwt_diff.py [--sluice PATH] [--haproxy PATH] [--only SUBSTR] [-v]

The public keys below (and the tokens signed with their private keys, generated once with
`openssl` and not kept) are written to a temporary directory; HMAC tokens are signed here.
Differences sluice keeps on purpose (docs/compat.md) are marked in the cases (`known=`) and
listed apart; the exit status is 1 only for the others.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import converter_diff as cd  # noqa: E402

KEYS = {
    'ec256.pub': (
        '-----BEGIN PUBLIC KEY-----\n'
        'MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEfrQqsQin+bbXJ8NTkp9+ejRT392x\n'
        '0sLs05z31nDFePAtUBoHHPom0+f28PvMYBlqvAkzY/1w9mgskAH+o2X1Kg==\n'
        '-----END PUBLIC KEY-----\n'
    ),
    'ec384.pub': (
        '-----BEGIN PUBLIC KEY-----\n'
        'MHYwEAYHKoZIzj0CAQYFK4EEACIDYgAExp3e7gQJu1VdznG5CLRF38L2PDGxRxzt\n'
        '/WHy+mQiKAh/DUftPT6COD8CKiFTh3C0vkgtGKbUDlznYCpjX1TWErbYBFj+E86p\n'
        'YpZ8RBCNP4bwIG4Iz0UvJEwn2kh8qVaw\n'
        '-----END PUBLIC KEY-----\n'
    ),
    'ec521.pub': (
        '-----BEGIN PUBLIC KEY-----\n'
        'MIGbMBAGByqGSM49AgEGBSuBBAAjA4GGAAQAh33CkbUnp2oiqB9KsTxUAPIVT9Lr\n'
        '7IVLE4Kolss15B8E0yGY6ASbycohjNlDv3Lebvo+avlqZlcaS3y2h9yO7w0AbRXl\n'
        'yrTqvpI1m4h+M8+72oO8t+9mkdVtRT+LFw0/bKdxZ2iWXRNcBc47mdn5QKwyz/11\n'
        'mSa3AhU1F4ECdVTld0o=\n'
        '-----END PUBLIC KEY-----\n'
    ),
    'rsa.pub': (
        '-----BEGIN PUBLIC KEY-----\n'
        'MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAsuNDO8PIbPxh/myfK+SG\n'
        'zYFGVAcQOCo8FM3LWuiHnv103lp/PNwblg+uRpMp/odHIKZvUaZU/0PBPAC1IQ1V\n'
        'jcuFc/i5ZUD44lx8H4jQWePgdEuqEOZcaFG35UruwV6oUFTh0MlJ2I5mJvBeQcMe\n'
        'EhpjNv5y5fPq3VTBmtutRS5t9Ai0PA2hxy0FFpyl2ZaMYmxiBDJEUXA7HiXTHjZW\n'
        'JVZghfioMPJtODeMmBtKR3R6YfzVH/C+K5R51nNlxPeCL/L9qAijvNaawUPdH1sz\n'
        '0QzG9NBqY5ia0cisv3b/noEzb4G3RZpS9BU8KSeAgplYO7XHahHlf3pM5Jk/7XQ9\n'
        '1QIDAQAB\n'
        '-----END PUBLIC KEY-----\n'
    ),
    'ec256.crt': (
        '-----BEGIN CERTIFICATE-----\n'
        'MIIBcDCCARegAwIBAgIUDo7cATB0b2H30neQKPHForIEy6IwCgYIKoZIzj0EAwIw\n'
        'DjEMMAoGA1UEAwwDand0MB4XDTI2MTEyODAyMjc1OFoXDTM2MTEyNTAyMjc1OFow\n'
        'DjEMMAoGA1UEAwwDand0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEfrQqsQin\n'
        '+bbXJ8NTkp9+ejRT392x0sLs05z31nDFePAtUBoHHPom0+f28PvMYBlqvAkzY/1w\n'
        '9mgskAH+o2X1KqNTMFEwHQYDVR0OBBYEFJ3XZItv+QOX9yognk6YQQG967ZBMB8G\n'
        'A1UdIwQYMBaAFJ3XZItv+QOX9yognk6YQQG967ZBMA8GA1UdEwEB/wQFMAMBAf8w\n'
        'CgYIKoZIzj0EAwIDRwAwRAIgDsbnx0MvDMl8700bY4AodIwPGuVlzyIsFsgpIAyz\n'
        'm6MCICFqJ7NThMFbByKpIlGF2PGGawdVccnWfgDNX6zy6MoV\n'
        '-----END CERTIFICATE-----\n'
    ),
}
TOKENS = {
    'ES256': ('eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'ZJoHIQAKGV9sOYydozWiStwaOOu8qZnqtBbQ-xxv1WnD4UMyt5CVKyQaXZdABeo1kx_qig3kXiccwBuZ4XizWQ'),
    'ES384': ('eyJhbGciOiJFUzM4NCIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'T8c38iNHwPz5rKpwoFHyEEiXModFG4Lq1ME4iFGvaffoRx7kDcuvjp0Bk7025Fxwm0KwvZ4fJfTTKLTAVlkyyi6OEV_Xu9eISSayzcVI2EhgD6CxG3qT2uA9XjaMGAy0'),
    'ES512': ('eyJhbGciOiJFUzUxMiIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'ART2pBn6iQbayuEgHzDvZMuvdDCi75wsxG3xDavig2-TzUQ5d7Tks9OEidbtwCrlPGRrpIWTH0heoy2M57S9zxaLAfwD1sSIW_3iHaNPIcaay_7vFCO9YjO9GixkBFojFCjiG9cmoxfsPjd8mnT2zhZdq3QFrgMVHhGlkbI4NV8o6HaG'),
    'RS256': ('eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'duIeUEX7RUDI9I7wizrS3DzkkyD-fE1wqGmxM3WDGA5M2O4LDwaE3Y3vAbPZIQ45uzvLzS8UPVfcKqguJRLMWhx5CDNMAxrw4gLfmwB5D6WzWQWguGdybWSbk5nWk7Hv5-tk0LXuCoMdPpFn-qJQWDRcGKeZ9vh4LKYqI6ozvkfSOE0CWKtRz1MZ5_b9pVqtUxBx9lYebDEFVRZaY0ikOH1lG0bE6z5XajSgqEh0UdpWfRl9pvZvOG45UCOhh0d6-VxZzk6y6GJhvYxrVgU1l-iroZTqBvUeB3PVWoN7lZIHsVOl7BwjW8IRbSktMzj3sJ3tNQ89DWAtg2nYEGN1tQ'),
    'RS384': ('eyJhbGciOiJSUzM4NCIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'bB3Z09TxM__AwNZyuAH-GKVp6Exu6XHHbhDpjypHWAJ_KB3viSge835bBIZcbLNdBexLrNLhUuwF3hatoJ7845CONbUiOGkm0tb7Vn9CKfAfFUGrANKmifgR8ZBljfyuL1G83f5yZoVmoMazoZq5GBRd-wXtQLS-DNk1WGUo91jPzxArcLqbFuAnrn0k6O_9u4ATKTn9sEvoDcg6cVHNTX6QU55Ip7l0cNhGzDmS1U1vc7wKVud8XO1un4LP34QUlKRouXzwz5OB9FNfpiLmQN3foNSdWLcVMOi--cCky32jyMo7lvuM_CB5SVWt26Ex9F6mWlCyLWWbl_5LUiGfXQ'),
    'RS512': ('eyJhbGciOiJSUzUxMiIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'WSRX9nFK_zs25lA_VoDa7R-cMuIr7C1IKY3pXMO7cP_ZGz4hBghHq84oNjbOvXJ0jdL2Zb4MIH2DwEQ2AobocuSr5DlwkdSBYoHM2g9aQBkhjzT6FPglix7JBV0LBhT1MmIvo-Hsvs2ODtNOLyaZiDiTLV1qjzsUGFe-9C1Yl_dHtJB5b4w4kBUgoP9fPaSAJxuWPJiuSwh2XAP3gEZ8dQaFJmyFZh7mnadpcYx-IUiDT3lC2Phv4BI0OiAoCWyli2eNbwOT4v6gZZlccOHiVCDEomGpYlfEQl9FlWA9bGXm356Do_3cyh8EIPlLJj-Iuv5NCyXcnV6GgbU2xE6URQ'),
    'PS256': ('eyJhbGciOiJQUzI1NiIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'NOQlCg_QwNBdlDTJ7anTLuOCC19RBr21Hlg7Qj8fmVvxiEe10Sy4xlKZ2NvpysQE_d7ekAarMdpKIFhWYUAS6lHkajYD0oeWQo9daZRhtgS0Kcc4SkHwI-WvxZJQ2vUH3K6T3a2HmMPTPk6LBgw58jpJ2yGGKoF4Gcbsk1l_vdVrEFjMdtJqD8SR9HBoWAleZCaHcEM29jjCRYTRDMC-wwui-8J1DJUR3AnXjt4E2lqDTAd5rrTdHBaZ_J6K4-UmR5ko9tgcD-f0ualv9kF7og2SV3NqcljJ4IivQSxWvl003_q-3gaCPLc6XBYIYoNvFwKFBKeaB2yL6VynDQlDNw'),
    'PS384': ('eyJhbGciOiJQUzM4NCIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'MghTkCTSCmcEjJdDN5R0AryjTfeXkH_prahD7vzCs6CfnpI18Y7yJHyme_1HSeHZHhHaeLm3CSkCjzgNUgWAMOitPaOi_1tme8mvPXJbCZ1U5lRcTbT-HM1PSYBHSOYj4aD6_pdYuiEd9ABRqzbqyKXDPgVU_jTWLtK5X_IvGAg5Eynnv1Slsq4sm7ZOEX0YJwi_Nc_GvW_28R3fm3r75TmSk88J-nNgjk6bwemJ40_SjkSbdQG1eu6Eg7AuxRkF86wizNsit_2_YR2yjmXqpyMKKr1a2zmgJG6lvPp1JY89LaxwUZ3B5qJyUNIS6fzVmGd9guiZmX0Ns4NjBkFqVA'),
    'PS512': ('eyJhbGciOiJQUzUxMiIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'PQgjs6tyUAFNoBFzB7XygpCT43ax8PqQq6RiU2qq2f_fP-33lMAP-swB6JrS7YbvleAL0uxhFrpgdby3Ha5Q1cPB_DCLH67bEhdZmTfcEMDQlRmCF1_RcrpGvxjdUDKSDyENGVQ_macty9i8RqGbZ4sZluwskYjGjvQf8lLQ6yLbs1VvN-rksFKrYZNPwscbEb9N2xtMh5TsSd5t_mEpIUw9phOgKTaLB-XD-0v04JaX4GlSE5ZP3HEfeqotP0stjpr1pdnv2rtTkXH94KQegG_ToYEbE_9Vupa7g1hAWlY9cm1abyfzP45hZgPmjcooVreAwttScHU59v9DG8HnNA'),
    'ES384_P256': ('eyJhbGciOiJFUzM4NCIsInR5cCI6IkpXVCJ9.'
             'eyJpc3MiOiJzbHVpY2UiLCJzdWIiOiJ1MSIsIm4iOjR9.'
             'AAAAAAAAAAAAAAAAAAAAAGbipYBUb8IKkwo1qmgYFPMgbucgUTqSc_OC2ui0gJOrAAAAAAAAAAAAAAAAAAAAAC7lnEutw7XHx0nvwYf1pWZD0U56Zi7cBwMFC1PSF861'),
}


IN = cd.IN   # header x-in, never split at commas


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def tok(name):
    return "".join(TOKENS[name])


def hs(alg, secret, payload=b'{"iss":"sluice","sub":"u1","n":4}'):
    h = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    si = b64u(json.dumps({"alg": alg, "typ": "JWT"}, separators=(",", ":")).encode()) + "." + b64u(payload)
    return si + "." + b64u(hmac.new(secret.encode(), si.encode(), h).digest())


def tamper(t):
    h, _, s = t.split(".")
    return h + "." + b64u(b'{"iss":"evil"}') + "." + s


# Why sluice's json_query answer may differ from HAProxy 2.6.12's (docs/compat.md, "JSON"):
# sluice reads documents as JSON defines them (serde_json), HAProxy with its lenient reader.
def json_known(expr, doc):
    import json as _j, math as _m, re as _re
    seen_dup = []

    def pairs(kv):
        keys = [k for k, _ in kv]
        if len(set(keys)) != len(keys):
            seen_dup.append(True)
        return dict(kv)

    def bad_const(x):
        raise ValueError(x)
    try:
        v = _j.loads(doc, object_pairs_hook=pairs, parse_constant=bad_const)
    except Exception:
        return "not JSON: HAProxy reads up to the value asked for, sluice the document as JSON"
    if _re.search(r'\\/|\\u(?!00[0-7])', doc):
        return "escapes: HAProxy has no \\/ nor \\u above 00FF, and \\u0080-00FF as one byte"
    if _re.search(r'[0-9][eE][+-]?[0-9]{3}', doc):
        return "a number out of the double's range: no sample in sluice (inf or 0 in HAProxy)"
    if seen_dup:
        return "two equal keys: the first wins in HAProxy, the last in sluice"
    if _re.search(r"\[(0[0-9]|[0-9]+[^0-9\]])", expr):
        return "a path step that is no index: nothing in sluice, HAProxy reads its digits"
    if "'int'" in expr and _re.search(r'[0-9][.eE]', doc):
        return "int: the number's integer part in sluice, strtoll on its text in HAProxy"
    if "00001234565" in doc:
        return "rounding: HAProxy's reader computes another double for this number"
    if doc.count('{"a":') > 20:
        return "depth: HAProxy reads 20 levels, sluice 128"
    return None


def corpus():
    cases = []

    def E(group, expr, inp=None, pre=(), headers=(), raw=False, known=None):
        """An expression; one starting with ',' applies to IN. raw: written on the config
        line as is (for backslashes and quotes as a user writes them)."""
        if expr.startswith(","):
            expr = IN + expr
        hdrs = [] if inp is None else [("x-in", inp.encode() if isinstance(inp, str) else inp)]
        hdrs += [(n, v if isinstance(v, bytes) else v.encode()) for n, v in headers]
        shown = expr.replace(IN, "IN")
        name = shown
        if pre:
            name = "[%s] %s" % ("; ".join(pre), name)
        if inp is not None:
            name += " <- " + cd._short(inp, 50)
        for n, v in headers:
            name += " %s: %s" % (n, cd._short(v, 40))
        c = cd.Case(group, "expr", name, expr=expr, pre=pre, headers=hdrs)
        c.raw = raw
        if known is None and group == "json_query" and inp is not None:
            known = json_known(expr, inp)
        c.known = known
        cases.append(c)

    # ---- json_query
    g = "json_query"
    doc = ('{"s":"str","i":4,"f":0.5,"big":1700000000,"t":true,"fa":false,"nul":null,'
           '"a":[10,"x",[1,2],{"k":"v"}],"o":{"p":{"q":"deep"}},"my.key":"dotted",'
           '"e":"a\\"b\\\\c\\nd\\u0041\\u00e9","sl":"a\\/b","u":"\\u20ac","neg":-12,"exp":1e3,'
           '"fr":-1.5e-7,"huge":9007199254740993,"max":9007199254740991,'
           '"min":-9007199254740991,"ovf":99999999999999999999,"d":1,"d":2}')
    for p in ("$.s", "$.i", "$.f", "$.big", "$.t", "$.fa", "$.nul", "$.a", "$.a[0]", "$.a[1]",
              "$.a[2]", "$.a[2][1]", "$.a[3].k", "$.a[4]", "$.o", "$.o.p.q", "$.my.key",
              "$.sl", "$.u", "$.neg", "$.exp", "$.fr", "$.huge", "$.ovf", "$.d", "$.zz",
              "$['s']", "$", "s", "$.a[00]", "$.a[-1]", "$.a[1x]"):
        E(g, ",json_query('%s')" % p, doc)
    # strings with control bytes through hex: log-format escapes them differently in
    # HAProxy (`%0A`) and sluice (as they are), which is not what is compared here
    E(g, ",json_query('$.e'),hex", doc)
    for p in ("$.i", "$.f", "$.big", "$.neg", "$.exp", "$.fr", "$.huge", "$.max", "$.min",
              "$.ovf", "$.s", "$.t", "$.nul"):
        E(g, ",json_query('%s','int')" % p, doc)
    # the escaped dot, as HAProxy's documentation writes it
    E(g, IN + ",json_query('$.my\\\\.key')", doc, raw=True)
    E(g, ",json_query('$.my\\\\.key')", doc)
    for v in ("1e400", "-1e400", "-0", "0", "1.7", "0.1", "123456.5", "1234565", "999999.5",
              "0.0001", "0.00001234565", "2.5e-5", "1E+2", "3.14159265358979", "-2.5",
              "1.5e300", "0x10", "010", "08", "1e-400", "12345678.9", "123456789012",
              "-9007199254740992", "-", "1.", "1e", ".5", "01"):
        E(g, ",json_query('$.a')", '{"a":%s}' % v)
        E(g, ",json_query('$.a','int')", '{"a":%s}' % v)
    for j, p in (('{"a":[1,2,3,4,5,6,7,8,9,10,11,12]}', "$.a[11]"),
                 ('[1,[2,3]]', "$[1][0]"), ('{"a":{"b":[{"c":true}]}}', "$.a.b[0].c"),
                 ('{"a b":1}', "$.a b"), ('{"x":{"a":1},"a":2}', "$.a"), ('{"":1}', "$."),
                 ('{"a":[{"b":1},{"b":2}]}', "$.a[1].b"), ('{"a":[[1,2],[3,4]]}', "$.a[1][1]"),
                 ('{"a":"\\u00","b":1}', "$.a"), ('{"a":"x\\\\"}', "$.a"),
                 ('{"a":"\\u004A\\u004a"}', "$.a"),
                 ('{"a":"\\u00zz"}', "$.a"), ('{"a":"\\ud83d\\ude00"}', "$.a"),
                 ('[]', "$"), ('"s"', "$"), ('42', "$"),
                 ('true', "$"), ('{"a":1}', "$.a.b"), ('{"a":[1,]}', "$.a[0]"),
                 ('{"a":1,}', "$.a"), ('{"a":[1}', "$.a[0]"), ('{"a":"x"', "$.a"),
                 ('{"a":"x', "$.a"), ('{"a" "x"}', "$.a"), ('{a:1}', "$.a"),
                 ('{"a":1, garbage', "$.a"), ('{"a":1}junk', "$.a"), ('[1,2', "$.a"),
                 ('', "$.a"), ('xx', "$.a"), ('{"a":tru}', "$.a"), ('{ "a" : "sp" }', "$.a"),
                 ('{"a":{}}', "$.a"), ('{"a":[]}', "$.a"), ('{"b":1.,"a":2}', "$.a")):
        E(g, ",json_query('%s')" % p, j)
    for j in ('{"a":"\\b\\f\\r\\t"}', '{"a":"x\\u0000y"}', '{"a":"\\u00e9\\u00FF"}'):
        E(g, ",json_query('$.a'),hex", j)
    for n in (20, 21):
        E(g, ",json_query('$%s')" % (".a" * n), '{"a":' * n + "1" + "}" * n)
    E(g, ",json_query('$.a','str')", '{"a":1}')
    E(g, ",json_query('')", '{"a":1}')
    E(g, ",json_query", '{"a":1}')

    # ---- jwt_header_query / jwt_payload_query
    g = "jwt_query"
    known_noarg = "no PATH: HAProxy 2.6.12 gives no sample (a bug); sluice the decoded JSON"
    for t in (hs("HS256", "secret"), "eyJhIjoxfQ", "eyJhIjoxfQ.eyJiIjoyfQ", "x.eyJiIjoyfQ",
              "eyJhIjoxfQ==.x", "eyJhIjoxfQ=A.x", "eyJhIjoxfR.eyJiIjoyfR", "!!.x",
              "eyJhIjoxfQ.eyJiIjoyfQ.c.d", "", ".", "eyJ", "eyJhIjoxf.x", "eyJhIjoxfQ+.x",
              "eyJhIjoxfQ-.x", "eyJh=IjoxfQ.x"):
        E(g, ",jwt_header_query", t, known=known_noarg)
        E(g, ",jwt_header_query('$.alg')", t)
        E(g, ",jwt_header_query('$.a','int')", t)
        E(g, ",jwt_payload_query('$.iss')", t)
        E(g, ",jwt_payload_query('$.b')", t)
        E(g, ",jwt_payload_query('$.n','int')", t)
    E(g, ",jwt_payload_query", hs("HS256", "secret"), known=known_noarg)
    E(g, ",jwt_header_query('')", hs("HS256", "secret"))
    E(g, ",jwt_header_query()", hs("HS256", "secret"))
    E(g, ",jwt_header_query('$.alg','str')", hs("HS256", "secret"))

    # ---- jwt_verify
    g = "jwt_verify"
    K = lambda n: "{%s}" % n  # noqa: E731  a key file's path
    known_ps = "PS*: HAProxy 2.6 refuses them (\"not managed yet\"); sluice verifies them"
    known_crt = "a certificate file: HAProxy 2.6 reads only PUBLIC KEY blocks (-5)"
    known_nofile = "a constant RSA/ECDSA ALG with a key file that cannot be used: a config error in sluice, -5 at run time in HAProxy"
    HS = hs("HS256", "secret")
    ES = tok("ES256")
    none_tok = b64u(b'{"alg":"none"}') + "." + b64u(b'{"iss":"x"}')
    V = lambda a, k: ",jwt_verify(%s,%s)" % (a, k)  # noqa: E731
    for t, a, k, known in (
            (HS, "HS256", "secret", None), (HS, "HS256", "wrong", None),
            (tamper(HS), "HS256", "secret", None), (hs("HS384", "secret"), "HS384", "secret", None),
            (hs("HS512", "secret"), "HS512", "secret", None), (HS, "HS384", "secret", None),
            (ES, "ES256", K("ec256.pub"), None), (tamper(ES), "ES256", K("ec256.pub"), None),
            (ES, "ES256", K("ec256.crt"), known_crt), (ES, "ES256", K("nosuch.pem"), known_nofile),
            (ES, "ES256", K("rsa.pub"), None), (ES, "ES384", K("ec256.pub"), None),
            (tok("ES384"), "ES384", K("ec384.pub"), None), (tok("ES512"), "ES512", K("ec521.pub"), None),
            (tok("ES384"), "ES256", K("ec384.pub"), None),
            (tok("ES384_P256"), "ES384", K("ec256.pub"), None),
            (tok("RS256"), "RS256", K("rsa.pub"), None), (tamper(tok("RS256")), "RS256", K("rsa.pub"), None),
            (tok("RS256"), "RS256", K("ec256.pub"), None), (tok("RS384"), "RS384", K("rsa.pub"), None),
            (tok("RS512"), "RS512", K("rsa.pub"), None), (tok("RS256"), "RS384", K("rsa.pub"), None),
            (tok("PS256"), "PS256", K("rsa.pub"), known_ps), (tok("PS384"), "PS384", K("rsa.pub"), known_ps),
            (tok("PS512"), "PS512", K("rsa.pub"), known_ps),
            (none_tok + ".", "none", "x", None), (none_tok + ".abc", "none", "x", None),
            (none_tok, "none", "x", None), (HS, "none", "x", None), (HS, "FOO", "x", None),
            (HS, "HS2566", "x", None), (HS, "hs256", "secret", None),
            (HS + ".x", "HS256", "secret", None), ("a.b", "HS256", "secret", None),
            ("a.b.", "HS256", "secret", None), ("a.b.c", "HS256", "secret", None),
            ("a.b.!!", "HS256", "secret", None), ("a.b.A", "HS256", "secret", None),
            ("", "HS256", "secret", None), ("abc", "none", "x", None),
            (ES.rsplit(".", 1)[0] + ".AAA", "ES256", K("ec256.pub"), None),
            (ES.rsplit(".", 1)[0] + ".AAAA", "ES256", K("ec256.pub"), None),
            (ES.rsplit(".", 1)[0] + ".AAAA", "ES256", K("rsa.pub"), None),
            (ES + "==", "ES256", K("ec256.pub"), None)):
        E(g, V(a, k), t, known=known)
    E(g, ",jwt_verify(HS256, secret)", HS)
    E(g, ",jwt_verify( HS256,secret)", HS)
    E(g, ",jwt_verify('HS256','secret')", HS)
    E(g, ",jwt_verify(HS256)", HS)
    E(g, ",jwt_verify", HS)
    # ALG and KEY from variables
    for t in (HS, none_tok + "."):
        for alg in ("HS256", "''", "n", "no", "none", "nonex", "ES256", "HS25", "HS256x", "NONE",
                    "PS256"):
            known = known_ps if alg == "PS256" and t == HS else None
            E(g, ",jwt_verify(txn.alg,secret)", t, pre=["set-var(txn.alg) str(%s)" % alg],
              known=known)
    E(g, ",jwt_verify(txn.alg,secret)", HS, pre=["set-var(txn.alg) int(5)"])
    E(g, ",jwt_verify(txn.nope,secret)", HS)
    E(g, ",jwt_verify(txn.alg,%s)" % K("rsa.pub"), tok("PS256"), pre=["set-var(txn.alg) str(PS256)"],
      known=known_ps)
    E(g, ",jwt_verify(txn.alg,%s)" % K("rsa.pub"), tok("RS256"), pre=["set-var(txn.alg) str(RS256)"])
    E(g, ",jwt_verify(txn.alg,%s)" % K("ec256.pub"), ES, pre=["set-var(txn.alg) str(ES256)"])
    E(g, ",jwt_verify(txn.alg,%s)" % K("nosuch2.pem"), ES, pre=["set-var(txn.alg) str(ES256)"])
    E(g, ",jwt_verify(HS256,txn.key)", HS, pre=["set-var(txn.key) str(secret)"])
    E(g, ",jwt_verify(ES256,txn.key)", ES, pre=["set-var(txn.key) str(%s)" % K("ec256.pub")])
    E(g, ",jwt_verify(ES256,txn.key)", ES, pre=["set-var(txn.key) str(%s)" % K("unused.pub")])
    E(g, ",jwt_verify(txn.alg,txn.key)", ES,
      pre=["set-var(txn.alg) str(ES256)", "set-var(txn.key) str(%s)" % K("ec256.pub")])

    # ---- http_auth_bearer
    g = "bearer"
    B = "http_auth_bearer"
    for hv in (b"Bearer tok", b"bearer tok", b"BEARER  tok", b"Bearer", b"Bea tok", b"B tok",
               b"Be tok", b"Be  tok", b"Bearerx tok", b"Basic dXNlcjpwYXNz", b"Bearer a,b",
               b"Bearer\ttok", b"Bearer tok  ", b", Bearer tok", b"Bearer tok, Basic x",
               b'Bearer "a,b"', b"Bearer x y", b"Token first"):
        E(g, B, headers=[("authorization", hv)])
        E(g, B + "(x-tok)", headers=[("x-tok", hv)])
    E(g, B)
    E(g, B + "(x-tok)")
    E(g, B, headers=[("authorization", b"Basic x"), ("authorization", b"Bearer second")])
    E(g, B, headers=[("authorization", b"Bearer first"), ("authorization", b"Bearer second")])
    E(g, B + "(x-tok)", headers=[("x-tok", b"Bearer first"), ("x-tok", b"Bearer second")])
    E(g, B + "()", headers=[("authorization", b"Bearer tok")])
    E(g, B + "(Authorization)", headers=[("authorization", b"bearer tok")])
    E(g, B, headers=[("proxy-authorization", b"Bearer ptok")])
    E(g, B + ",jwt_payload_query('$.iss')", headers=[("authorization", "Bearer " + HS)])
    E(g, B + ",jwt_verify(HS256,secret)", headers=[("authorization", "Bearer " + HS)])

    for i, c in enumerate(cases):
        c.id = "c%d" % (i + 1)
    return cases


_case_lines = cd.case_lines


def case_lines(c, files):
    """converter_diff's lines, or for a raw case the expression written as is."""
    if not getattr(c, "raw", False):
        return _case_lines(c, files)
    cond = "if { path %s }" % c.path
    ret = "http-request return status 200 content-type text/plain"
    e = cd.fill(c.expr, files)
    http = ["http-request %s %s" % (cd.fill(p, files), cond) for p in c.pre]
    # In double quotes `$` would start an environment variable.
    q = e.replace("$", "\\$")
    http.append('%s lf-string "[%%[%s]]" %s { %s -m found }' % (ret, q, cond, e))
    http.append('%s lf-string "NOSAMPLE:[%%[%s]]" %s' % (ret, q, cond))
    return http, []


cd.case_lines = case_lines


def write_keys(workdir):
    paths = {}
    for n, text in KEYS.items():
        p = os.path.join(workdir, n)
        with open(p, "w") as f:
            f.write("".join(text) if isinstance(text, tuple) else text)
        paths[n] = p
    for n in ("nosuch.pem", "nosuch2.pem", "unused.pub"):
        paths[n] = os.path.join(workdir, n)     # never written
    return paths


def main():
    ap = argparse.ArgumentParser(description="JSON/JWT converters: sluice vs HAProxy 2.6")
    ap.add_argument("--sluice", default=os.path.join(os.path.dirname(cd.BENCH), "target", "release", "sluice"))
    ap.add_argument("--haproxy", default="/usr/sbin/haproxy")
    ap.add_argument("--only", default=None, help="only the cases whose name or group contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="jwt_diff.")
    files = write_keys(work)
    cases = corpus()
    if args.only:
        cases = [c for c in cases if args.only in c.name or args.only == c.group]
    t0 = time.monotonic()
    print("workdir %s; %d cases; %s vs %s" % (work, len(cases), args.haproxy, args.sluice))
    hres, _, hinfo = cd.run_proxy("haproxy", args.haproxy, cases, files, work)
    if hinfo.get("note"):
        print("HAProxy: " + hinfo["note"])
        sys.exit(2)
    sres, _, sinfo = cd.run_proxy("sluice", args.sluice, cases, files, work)
    same, known, unknown = 0, [], []
    for c in cases:
        h, s = hres[c.id], sres[c.id]
        if ("refused" in h) == ("refused" in s) and ("refused" in h or cd.comparable(h) == cd.comparable(s)):
            same += 1
            if args.verbose:
                print("%-5s == %-70s %s" % (c.id, c.name[:70], cd.show(h)[:50]))
            continue
        (known if c.known else unknown).append((c, h, s))
    for title, rows in (("KNOWN DIFFERENCES (docs/compat.md)", known), ("DIFFERENCES", unknown)):
        print()
        print("=" * 110)
        print("%s (%d)" % (title, len(rows)))
        print("=" * 110)
        for c, h, s in rows:
            print("%-5s %-11s %s" % (c.id, c.group, c.name[:92]))
            print("      haproxy: %s" % cd.show(h)[:100])
            print("      sluice:  %s" % cd.show(s)[:100])
            if c.known:
                print("      why:     %s" % c.known)
    print()
    print("cases: %d; same: %d; known differences: %d; other differences: %d (%.1f s)" % (
        len(cases), same, len(known), len(unknown), time.monotonic() - t0))
    alive = sinfo.get("alive_at_end", True)
    if not alive:
        print("sluice died: " + str(sinfo.get("note")))
    sys.exit(1 if unknown or not alive else 0)


if __name__ == "__main__":
    main()
