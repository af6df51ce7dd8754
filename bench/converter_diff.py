#!/usr/bin/env python3
"""Differential test of sample converters, map files and ACL pattern files: sluice vs HAProxy 2.6.

Self-contained (standard library only), loopback only, bounded in time (a few seconds).

    python3 bench/converter_diff.py [--sluice PATH] [--haproxy PATH] [--only SUBSTR] [-v]
    python3 bench/converter_diff.py --haproxy-only [--golden FILE]

What it does:
  * writes the map and pattern files of FILES into a temporary directory, and ONE config:
    a `mode http` frontend on a loopback port with no origin server, in which every case is
    evaluated by the proxy itself and answered with `http-request return`, keyed by its path
    /cN. Kinds of case:
      - expr: a sample expression E (a fetch and converters), two rules:
            http-request return ... lf-string "[%[E]]"          if { path /cN } { E -m found }
            http-request return ... lf-string "NOSAMPLE:[%[E]]" if { path /cN }
        so the body tells a sample (even an empty one: "[]") from no sample, and also shows
        what log-format prints for no sample;
      - acl: an anonymous ACL (converters in the fetch, `-f FILE`, `-M -f MAP`, ...): the
        answer is "T" or "F";
      - backend: `use_backend` lines with a log-format name (`%[...]`), before
        `default_backend be_default`; backends be_default, be_a, be_b and be_fallback each
        answer their own name;
  * checks every case alone with `-c` on each proxy (a config with only that case's rules):
    a case HAProxy refuses is kept in the report as "refused" with HAProxy's message; a case
    sluice refuses while HAProxy accepts is a difference. Each proxy then runs the config of
    the cases it accepts (a failed `-c` of sluice is a reported result, not a crash);
  * sends each case's request (GET /cN, the input in header `x-in`, or in `?in=` for bytes
    a header cannot carry, or in `Host`/`x-be`), one connection per request, and records
    status and body;
  * compares HAProxy and sluice case by case, prints a table of the differences, and exits
    1 on any difference (2 when HAProxy itself cannot run the config).

  --haproxy-only runs HAProxy alone and writes every case with HAProxy's answer (and the map
  and pattern files' contents) to bench/results/converters-haproxy-2.6.12.json, the golden
  data for sluice's own tests.
"""

import argparse
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote_from_bytes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftool import HOST, ProxyRun, check_config, free_port  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(BENCH, "results", "converters-haproxy-2.6.12.json")
CLIENT_WAIT = 3.0        # the client gives up on a response after this

# ==========================================================================
# map and pattern files (written to the work directory; {name} in a case = its path)
# ==========================================================================

FILES = {
    # string map: comments (also indented), blank lines, leading spaces, a duplicated key,
    # values with inner and trailing spaces/tabs, a key without a value, case of keys
    "str.map": (
        "# string map\n"
        "\n"
        "   alpha    value one   \n"
        "beta\ttwo\n"
        "dup first\n"
        "dup second\n"
        "Mixed MixedCase\n"
        "spaced   a  b   c  \t \n"
        "   # indented comment\n"
        "#hash notkey\n"
        "k#1 hash-inside\n"
        "bare\n"
        "tabkey\t\t  tabbed value\n"
        "\t\n"
        "last no-newline"),
    "crlf.map": "k1 v1\r\nk2  v two \r\n# c\r\n\r\nk3 v3\r\n",
    # beg: the shorter prefix first, then the other way round
    "beg1.map": "/a short\n/ab long\n",
    "beg2.map": "/ab long\n/a short\n",
    "begint.map": "/a 1\n/ab 2\n",
    "sub.map": "foo F\nbar B\noo OO\n",
    "dir.map": "/api api\n/api/v1 v1\n",
    "dom.map": "example.com ex\nsub.example.com sub\n",
    "end.map": ".jpg img\ng G\n",
    "reg.map": "^/img/.*\\.png$ png\n^/img/ img\n",
    "regm.map": "^/u/([a-z]+)/([0-9]+)$ user=\\1 id=\\2\n^/p/(.*) page:\\1:\\1\n",
    "int.map": "10 ten\n20 twenty\n-1 minus one\n100:199 hundreds\n",
    # ip: the /8 before the /16, then the other way round
    "ip1.map": ("10.0.0.0/8 eight\n10.1.0.0/16 sixteen\n192.168.1.1 host\n127.0.0.0/8 loop\n"
                "2001:db8::/32 v6net\n"),
    "ip2.map": ("2001:db8::/32 v6net\n127.0.0.0/8 loop\n192.168.1.1 host\n10.1.0.0/16 sixteen\n"
                "10.0.0.0/8 eight\n"),
    "ipint.map": "10.0.0.0/8 8\n10.1.0.0/16 16\n",
    "intout.map": "a 42\nb -7\n",
    "ipout.map": "a 10.0.0.1\nb 2001:db8::1\n",
    "badint.map": "a notanumber\n",
    "be.map": "alpha be_a\nbeta be_b\nghost be_missing\n",
    # ACL pattern file: comment, blank line, leading spaces, trailing spaces, an indented '#'
    "pat.txt": (
        "# patterns\n"
        "\n"
        "  alpha\n"
        "beta  \n"
        "Gamma\n"
        "two words\n"
        "  #indented\n"
        "/ab\n"),
    "ips.txt": "# loopback\n127.0.0.0/8\n\n10.0.0.0/8\n",
}

# ==========================================================================
# cases
# ==========================================================================

IN = "req.fhdr(x-in)"              # the input: header x-in, never split at commas
QIN = "url_param(in),url_dec"      # the input as ?in=<percent-encoded bytes>


class Case:
    def __init__(self, group, kind, name, expr=None, cond=None, switch=(), pre=(),
                 headers=(), query=None, note="", fe="fe"):
        self.group = group
        self.kind = kind          # expr | acl | backend
        self.name = name
        self.expr = expr          # expr: the sample expression as the sample parser sees it
        self.cond = cond          # acl: the words of the ACL, as the ACL parser sees them
        self.switch = list(switch)   # backend: use_backend lines (without the condition)
        self.pre = list(pre)      # extra `http-request` actions run before (e.g. set-var)
        self.headers = list(headers)  # [(name, bytes)]
        self.query = query        # bytes for ?in=
        self.note = note
        self.fe = fe              # fe, or fe_nodef (backend cases only: no default_backend)
        self.id = None            # c1, c2, ...: set by corpus()

    @property
    def path(self):
        return "/" + self.id


def _b(v):
    return v if isinstance(v, bytes) else v.encode()


def _short(v, n=40):
    if v is None:
        return "(absent)"
    s = repr(v)[2:-1] if isinstance(v, bytes) else repr(v)[1:-1]
    if v != v.strip():
        s = '"%s"' % s
    return s if len(s) <= n else s[:n - 3] + "..."


def corpus():
    cases = []

    def E(group, expr, inp=None, name=None, host=None, q=None, pre=(), note=""):
        """An expression case; an expr starting with ',' applies to IN (header x-in)."""
        if expr.startswith(","):
            expr = IN + expr
        if expr.startswith("QIN"):
            expr = QIN + expr[3:]
        hdrs = []
        if inp is not None:
            hdrs.append(("x-in", _b(inp)))
        if host is not None:
            hdrs.append(("host", _b(host)))
        shown = expr.replace(IN, "IN").replace(QIN, "QIN")
        if name is None:
            if q is not None:
                name = "%s <- ?in=%s" % (shown, _short(q))
            elif host is not None:
                name = "%s <- Host: %s" % (shown, _short(host))
            elif "x-in" in expr or "IN" in shown:
                name = "%s <- %s" % (shown, _short(inp))
            else:
                name = shown
        cases.append(Case(group, "expr", name, expr=expr, pre=pre, headers=hdrs,
                          query=None if q is None else _b(q), note=note))

    def A(group, cond, inp=None, q=None, note=""):
        hdrs = [] if inp is None else [("x-in", _b(inp))]
        shown = " ".join(cond).replace(IN, "IN").replace(QIN, "QIN")
        name = "acl { %s } <- %s" % (shown, ("?in=" + _short(q)) if q is not None else _short(inp))
        cases.append(Case(group, "acl", name, cond=cond, headers=hdrs,
                          query=None if q is None else _b(q), note=note))

    def B(switch, be, note="", fe="fe"):
        hdrs = [] if be is None else [("x-be", _b(be))]
        name = "%s%s <- x-be: %s" % ("[no default_backend] " if fe != "fe" else "",
                                      " ; ".join(switch), _short(be))
        cases.append(Case("use_backend", "backend", name, switch=switch, headers=hdrs, note=note,
                          fe=fe))

    # ---- string converters
    g = "string"
    E(g, ",lower", "HeLLo WoRLD-09")
    E(g, ",lower", "\u00c0\u00c9 X")
    E(g, ",lower", None)
    E(g, ",lower", "")
    E(g, ",upper", "abc-Def_1 \u00e9")
    E(g, ",length", "hello")
    E(g, ",length", "")
    E(g, ",length", "\u00e9\u20ac")
    E(g, ",bytes(2)", "abcdef")
    E(g, ",bytes(2,3)", "abcdef")
    E(g, ",bytes(0,0)", "abcdef")
    E(g, ",bytes(6)", "abcdef")
    E(g, ",bytes(10)", "abc")
    E(g, ",bytes(1,100)", "abcdef")
    E(g, ",bytes(4,2)", "abc")
    for idx in ("5,_", "4,_", "2,_,0", "2,_,2", "-2,_,3", "-3,_,0", "-1,_", "6,_", "-6,_",
                "1,_,9", "0,_", "2,_,-1"):
        E(g, ",field(%s)" % idx, "f1_f2_f3__f5")
    E(g, ",field(1,_)", "nodelim")
    E(g, ",field(2,_)", "nodelim")
    E(g, ",field(2,/-)", "a/b-c")
    E(g, ",field(1,_)", "")
    for idx in ("4,_", "2,_,0", "3,_,2", "-2,_,3", "-3,_,0", "5,_", "-5,_", "0,_"):
        E(g, ",word(%s)" % idx, "f1_f2_f3__f5")
    E(g, ",word(1,/)", "/f1/f2/f3/f4")
    E(g, ",word(-1,/)", "/a/b/")
    E(g, ",word(1,_)", "___")
    E(g, ",word(2,_,0)", "__a__b__")
    E(g, ",ltrim(x)", "xxabcxx")
    E(g, ",rtrim(x)", "xxabcxx")
    E(g, ",ltrim(xy)", "xyyxabcyx")
    E(g, ",rtrim(xy)", "xyabcxyyx")
    E(g, ",ltrim(x)", "xxxx")
    E(g, "QIN,ltrim(' ')", q="  a b  ")
    E(g, "QIN,rtrim(' ')", q="  a b  ")
    E(g, "QIN,cut_crlf", q="abc\r\ndef")
    E(g, "QIN,cut_crlf", q="abc\ndef")
    E(g, "QIN,cut_crlf", q="\r\nabc")
    E(g, "QIN,cut_crlf", q="abc")
    E(g, "str(AbC),lower")

    # ---- regsub
    g = "regsub"
    E(g, ",regsub(a,X)", "banana")
    E(g, ",regsub(a,X,g)", "banana")
    E(g, ",regsub(A,X)", "banana")
    E(g, ",regsub(A,X,i)", "banana")
    E(g, ",regsub(A,X,gi)", "banana")
    E(g, ",regsub('/+','/','g')", "//a///b/c/")
    E(g, ',regsub("a,b",x)', "za,by")
    E(g, r",regsub('(\w+)-(\w+)','\2-\1')", "foo-bar baz")
    E(g, r',regsub("(foo|bar)([0-9]+)?","\2\1",i)', "xFOO12y")
    E(g, ",regsub('[aeiou]','_','g')", "education")
    E(g, ",regsub('x*','-','g')", "abc")
    E(g, ",regsub('^','>')", "abc")
    E(g, ",regsub(b,,g)", "abcb")
    E(g, ",regsub('(',x)", "a(b", note="invalid regex")

    # ---- encodings
    g = "encoding"
    E(g, ",base64", "hello")
    E(g, ",base64", "")
    E(g, ",base64", b"\xfb\xff\xbf?>")
    E(g, ",b64dec", "aGVsbG8=")
    E(g, ",b64dec", "aGVsbG8")
    E(g, ",b64dec", "aGVs!G8=")
    E(g, ",b64dec", "")
    E(g, ",b64dec,hex", "+/+/")
    E(g, ",ub64enc", b"\xfb\xff\xbf?>")
    E(g, ",ub64enc", "hello")
    E(g, ",ub64dec", "aGVsbG8")
    E(g, ",ub64dec", "aGVsbG8=")
    E(g, ",ub64dec,hex", "aGVsbG8=")
    E(g, ",ub64dec,hex", "-_-_Pz4")
    E(g, ",ub64dec", "a+b/")
    E(g, ",hex", "AbC \u00e9")
    E(g, ",hex", "")
    for v in ("ff", "1A2b", "xyz", "", "ffffffffffffffff", "12xy", "8000000000000000"):
        E(g, ",hex2i", v)
    E(g, ",url_dec", "a%20b+c")
    E(g, ",url_dec", "a+b?c+d")
    E(g, ",url_dec(1)", "a+b%2Bc")
    E(g, ",url_dec", "100%")
    E(g, ",url_dec", "%zz")
    E(g, ",url_dec", "%C3%A9")
    E(g, ",url_enc", "a b&c=d/\u00e9~")
    E(g, ",json", 'a"b\\c/d')
    E(g, ",json", "a\tb")
    E(g, ",json", "\u00e9")
    E(g, ",json('utf8')", "\u00e9\u20ac")
    E(g, ",json('utf8')", b"a\xffb")
    E(g, ",json('utf8s')", b"a\xffb")
    E(g, ",json('utf8s')", "\u00e9")
    E(g, ",json('ascii')", "\u00e9")
    E(g, ",json('utf8')", "\U0001F600")
    E(g, ",json(utf8p)", b"\xc0\xaf")
    E(g, ",json(utf8ps)", b"x\xc0\xafy\xffz")
    E(g, ",sha1,hex", "abc")
    E(g, ",sha2(256),hex", "abc")

    # ---- host_only / port_only
    g = "host"
    E(g, "req.hdr(host)", host="Example.COM:80")
    for h in ("example.com:8080", "example.com", "[::1]:443", "[::1]", "Example.COM:80"):
        E(g, "req.hdr(host),host_only", host=h)
    for h in ("example.com:8080", "example.com", "[::1]:443", "[::1]", "host:", "host:abc",
              "host:99999"):
        E(g, "req.hdr(host),port_only", host=h)

    # ---- integers
    g = "int"
    for v in ("5", "12abc", "-5", "", "abc", "+7", "0x10", None):
        E(g, ",add(3)", v)
    E(g, ",add(1)", "9223372036854775807")
    E(g, ",add(0)", "99999999999999999999")
    E(g, ",add(0)", "-99999999999999999999")
    E(g, ",add(-1)", "-9223372036854775808")
    E(g, ",sub(10)", "3")
    E(g, ",sub(1)", "-9223372036854775808")
    E(g, ",mul(3)", "-4")
    E(g, ",mul(2)", "9223372036854775807")
    E(g, ",mul(-1)", "-9223372036854775808")
    E(g, ",div(2)", "7")
    E(g, ",div(2)", "-7")
    E(g, ",div(-2)", "-7")
    E(g, ",div(0)", "7")
    E(g, ",div(0)", "-7")
    E(g, ",div(-1)", "-9223372036854775808")
    E(g, ",mod(3)", "7")
    E(g, ",mod(3)", "-7")
    E(g, ",mod(-3)", "7")
    E(g, ",mod(0)", "7")
    E(g, ",and(6)", "12")
    E(g, ",or(3)", "12")
    E(g, ",xor(5)", "12")
    E(g, ",neg", "5")
    E(g, ",neg", "-9223372036854775808")
    E(g, ",cpl", "0")
    E(g, ",cpl", "-1")
    for c, v in (("not", "0"), ("not", "5"), ("bool", "0"), ("bool", "-3"), ("odd", "3"),
                 ("odd", "-3"), ("even", "4"), ("even", "0")):
        E(g, "," + c, v)
    E(g, ",add(txn.ten)", "5", pre=["set-var(txn.ten) int(10)"])
    E(g, ",add(txn.nope)", "5", note="variable never set")
    E(g, ",mul(txn.s)", "5", pre=["set-var(txn.s) str(4x)"], note="variable holds a string")

    # ---- hashes
    g = "hash"
    for h in ("sdbm", "djb2", "wt6", "crc32", "crc32c"):
        E(g, "," + h, "hello")
        E(g, ",%s(1)" % h, "hello")
    E(g, ",crc32", "")
    E(g, ",djb2", "The quick brown fox")
    E(g, ",xxh32", "hello")
    E(g, ",xxh32(1)", "hello")
    E(g, ",xxh64", "hello")
    E(g, ",xxh64(1)", "hello")
    E(g, ",xxh3", "hello")

    # ---- ipmask
    g = "ipmask"
    E(g, "src,ipmask(24)")
    E(g, "src,ipmask(255.255.0.0)")
    E(g, "src,ipmask(24,64)")
    E(g, "src,ipmask(0)")
    E(g, "src,ipmask(255.0.255.0)", note="non-contiguous mask")
    hip = "req.hdr_ip(x-in)"
    E(g, hip, "10.1.2.3")
    E(g, hip + ",ipmask(24)", "192.168.1.77")
    E(g, hip + ",ipmask(24)", "2001:db8:1:2::5")
    E(g, hip + ",ipmask(24,64)", "2001:db8:1:2::5")
    E(g, hip + ",ipmask(24,64)", "192.168.1.77")
    E(g, hip + ",ipmask(16,ffff:ffff::)", "2001:db8:1:2::5")
    E(g, hip + ",ipmask(24)", "::ffff:10.1.2.3")
    E(g, hip + ",ipmask(24)", "10.1.2.3:8080")
    E(g, hip + ",ipmask(32)", "garbage")
    E(g, ",ipmask(24)", "10.20.30.40")
    E(g, ",ipmask(24)", "garbage")
    E(g, ",ipmask(24,64)", "2001:db8::7")
    E(g, ",ipmask(8),lower", "10.20.30.40")

    # ---- maps
    g = "map"
    for v in ("alpha", "beta", "dup", "Mixed", "mixed", "spaced", "bare", "tabkey", "#hash",
              "k#1", "last", "zzz", None):
        E(g, ",map({str.map})", v)
    E(g, ",map({str.map},DEF)", "zzz")
    E(g, ",map({str.map},DEF)", None)
    E(g, ",map_str({str.map})", "alpha")
    E(g, ",lower,map({str.map})", "ALPHA")
    E(g, ",map({str.map}),upper", "alpha")
    for v in ("k1", "k2", "k3"):
        E(g, ",map({crlf.map})", v)
    E(g, ",map_beg({beg1.map})", "/abc")
    E(g, ",map_beg({beg2.map})", "/abc")
    E(g, ",map_beg({beg1.map})", "/a")
    E(g, ",map_beg({beg1.map})", "/b")
    E(g, ",map_beg_int({begint.map})", "/abc")
    E(g, ",map_sub({sub.map})", "xbarfoo")
    E(g, ",map_sub({sub.map})", "xboo")
    for v in ("/api/v1/users", "/x/api/y", "/apix", "/api"):
        E(g, ",map_dir({dir.map})", v)
    for v in ("www.example.com", "example.com", "notexample.com", "a.sub.example.com",
              "EXAMPLE.com"):
        E(g, ",map_dom({dom.map})", v)
    E(g, ",map_end({end.map})", "photo.jpg")
    E(g, ",map_end({end.map})", "x.png")
    for v in ("/img/x.png", "/img/x.gif", "/other"):
        E(g, ",map_reg({reg.map})", v)
    for v in ("/u/bob/42", "/p/abc", "/u/Bob/42"):
        E(g, ",map_regm({regm.map})", v)
    for v in ("10", "10abc", "150", "-1", "x", "99", "0", "1", "2", "-5"):
        E(g, ",map_int({int.map})", v)
    for m, v in (("ip1", "10.1.2.3"), ("ip2", "10.1.2.3"), ("ip1", "10.2.3.4"),
                 ("ip2", "10.2.3.4"), ("ip1", "192.168.1.1"), ("ip1", "2001:db8::1"),
                 ("ip1", "11.0.0.1"), ("ip1", "::ffff:10.1.2.3"), ("ip1", "garbage")):
        E(g, ",map_ip({%s.map})" % m, v)
    E(g, "src,map_ip({ip1.map})")
    E(g, ",map_str_int({intout.map})", "a")
    E(g, ",map_str_int({intout.map})", "b")
    E(g, ",map_str_int({intout.map},7)", "zz")
    E(g, ",map_str_ip({ipout.map})", "a")
    E(g, ",map_str_ip({ipout.map})", "b")
    E(g, ",map_ip_int({ipint.map})", "10.9.9.9")
    E(g, ",map_ip_int({ipint.map})", "10.1.9.9")
    E(g, ",map_str_int({badint.map})", "a", note="map value is not an integer")
    E(g, ",map({nosuch.map})", "a", note="map file does not exist")

    # ---- iif, concat, add_item
    g = "iif-concat"
    E(g, ",bool,iif(yes,no)", "1")
    E(g, ",bool,iif(yes,no)", "0")
    E(g, "req.hdr_cnt(x-in),iif(yes,no)", "v")
    E(g, "req.hdr_cnt(x-in),iif(yes,no)", None)
    E(g, ",iif(yes,no)", "abc", note="string input")
    E(g, ",concat(pre-,,-post)", "mid")
    E(g, ",concat(<,txn.name,>)", "mid", pre=["set-var(txn.name) str(bob)"])
    E(g, ",concat(<,txn.nope,>)", "mid")
    E(g, ",add_item(-,,sfx)", "a")
    E(g, ",add_item(-,,sfx)", "")
    E(g, ",add_item(-,txn.name)", "a", pre=["set-var(txn.name) str(bob)"])
    E(g, ",add_item(-,txn.nope)", "a")

    # ---- casts
    g = "cast"
    E(g, "req.hdr_cnt(x-in),lower", "v")
    E(g, "src,lower")
    E(g, ",bool,upper", "5")
    E(g, "src,add(1)")
    E(g, ",hex2i,ipmask(32)", "0a000001")
    E(g, ",length,map_int({int.map})", "0123456789")

    # ---- ACLs with converters
    g = "acl"
    for v in ("ABC", "abd", None):
        A(g, [IN + ",lower", "-m", "str", "abc"], v)
    A(g, [IN + ",length", "gt", "3"], "abcd")
    A(g, [IN + ",length", "gt", "3"], "abc")
    A(g, ["src,ipmask(8)", "-m", "ip", "127.0.0.0/8"])
    A(g, ["src,ipmask(8)", "-m", "ip", "10.0.0.0/8"])
    A(g, [IN + ",map({str.map})", "-m", "found"], "alpha")
    A(g, [IN + ",map({str.map})", "-m", "found"], "zzz")
    A(g, [IN + ",map({str.map})", "-m", "str", "two"], "beta")
    A(g, [IN + ",upper", "-i", "abc"], "aBc")
    A(g, [IN + ",add(1)", "eq", "5"], "4")
    A(g, [IN + ",b64dec", "-m", "found"], "!!")
    A(g, [IN + ",field(2,.)", "-m", "str", "b"], "a.b.c")
    A(g, [IN + ",map_int({int.map})", "-m", "str", "ten"], "10")

    # ---- ACL pattern files
    g = "acl-file"
    for v in ("alpha", "beta", "Gamma", "gamma", "two words", "#indented", "# patterns", ""):
        A(g, [IN, "-f", "{pat.txt}"], v)
    A(g, [QIN, "-f", "{pat.txt}"], q="beta  ")
    A(g, [IN, "-i", "-f", "{pat.txt}"], "GAMMA")
    A(g, [IN, "-m", "beg", "-f", "{pat.txt}"], "alphabet")
    A(g, [IN, "-m", "beg", "-f", "{pat.txt}"], "/abc")
    A(g, [IN + ",lower", "-m", "sub", "-f", "{pat.txt}"], "XXALPHAXX")
    A(g, [IN, "-f", "{pat.txt}", "zeta"], "zeta")
    for v in ("alpha", "value", "dup", "bare"):
        A(g, [IN, "-M", "-f", "{str.map}"], v)
    A(g, ["src", "-f", "{ips.txt}"])

    # ---- dynamic use_backend
    dyn_map = "use_backend %[req.fhdr(x-be),lower,map({be.map},be_default)]"
    for v in ("ALPHA", "beta", "zzz", "ghost", None):
        B([dyn_map], v)
    for v in ("a", "c", None):
        B(["use_backend be_%[req.fhdr(x-be)]"], v)
    B(["use_backend be_%[req.fhdr(x-be)]", "use_backend be_fallback"], "c",
      note="missing dynamic backend, then a static rule")
    for v in ("be_b", "BE_B", "fe", ""):
        B(["use_backend %[req.fhdr(x-be)]"], v)
    B(["use_backend %[req.fhdr(x-be),map({be.map})]", "use_backend be_fallback"], "zzz",
      note="no sample, then a static rule")
    # a frontend without default_backend
    B(["use_backend be_%[req.fhdr(x-be)]"], "a", fe="fe_nodef")
    B(["use_backend be_%[req.fhdr(x-be)]"], "c", fe="fe_nodef")

    for i, c in enumerate(cases):
        c.id = "c%d" % (i + 1)
    return cases


# ==========================================================================
# config
# ==========================================================================

SAFE_WORD = re.compile(r"^[A-Za-z0-9_.,:/()\[\]%=<>+*^|?!@~{}&;-]+$")


def cfg_word(w):
    """`w` written so that HAProxy's line parser gives back exactly `w` as one word."""
    if SAFE_WORD.match(w):
        return w
    if "'" not in w and "\n" not in w and "\r" not in w:
        return "'" + w + "'"
    return '"' + w.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def fill(text, files):
    """Replaces {name} of a FILES entry with its path."""
    for n, p in files.items():
        text = text.replace("{%s}" % n, p)
    return text


VIA = "lf-string"       # how an expression's value comes back: set from --via
REDIR_PREFIX = "/r?"    # --via redirect: Location is this, then the value


def case_lines(c, files):
    """(http-request lines, use_backend lines) of one case."""
    cond = "if { path %s }" % c.path
    ret = "http-request return status 200 content-type text/plain"
    http, switch = [], []
    for p in c.pre:
        http.append("http-request %s %s" % (fill(p, files), cond))
    if c.kind == "expr" and VIA == "redirect":
        e = fill(c.expr, files)
        redir = "http-request redirect code 302 location"
        http.append("%s %s %s { %s -m found }"
                    % (redir, cfg_word(REDIR_PREFIX + "[%[" + e + "]]"), cond, cfg_word(e)))
        http.append("%s %s %s" % (redir, cfg_word(REDIR_PREFIX + "NOSAMPLE:[%[" + e + "]]"), cond))
    elif c.kind == "expr":
        e = fill(c.expr, files)
        http.append("%s lf-string %s %s { %s -m found }"
                    % (ret, cfg_word("[%[" + e + "]]"), cond, cfg_word(e)))
        http.append("%s lf-string %s %s" % (ret, cfg_word("NOSAMPLE:[%[" + e + "]]"), cond))
    elif c.kind == "acl":
        words = " ".join(cfg_word(fill(w, files)) for w in c.cond)
        http.append("%s string T %s { %s }" % (ret, cond, words))
        http.append("%s string F %s" % (ret, cond))
    else:
        for s in c.switch:
            kw, arg = s.split(" ", 1)
            switch.append("%s %s %s" % (kw, cfg_word(fill(arg, files)), cond))
    return http, switch


BACKENDS = ("be_default", "be_a", "be_b", "be_fallback")


def frontends(cases):
    """The frontends a set of cases needs: fe always, fe_nodef when a case uses it."""
    return ["fe"] + (["fe_nodef"] if any(c.fe == "fe_nodef" for c in cases) else [])


def make_config(ports, cases, files):
    """ports: {frontend name: port} for frontends(cases)."""
    http, switch, nodef = [], [], []
    for c in cases:
        h, s = case_lines(c, files)
        http += h
        if c.fe == "fe_nodef":
            nodef += s
        else:
            switch += s
    out = ["global",
           "    tune.bufsize 16384",
           "",
           "defaults",
           "    mode http",
           "    timeout connect 1s",
           "    timeout client 5s",
           "    timeout server 5s",
           "",
           "frontend fe",
           "    bind %s:%d" % (HOST, ports["fe"])]
    out += ["    " + l for l in http + switch]
    out.append("    default_backend be_default")
    if "fe_nodef" in ports:
        out += ["", "frontend fe_nodef", "    bind %s:%d" % (HOST, ports["fe_nodef"])]
        out += ["    " + l for l in nodef]
    for b in BACKENDS:
        out += ["", "backend " + b,
                "    http-request return status 200 content-type text/plain string " + b]
    return "\n".join(out) + "\n"


def check_cases(binary, cases, files, workdir, tag):
    """{case id: (accepted, message)} from `BINARY -c` on a config with that case alone."""
    def one(c):
        path = os.path.join(workdir, "check-%s-%s.cfg" % (tag, c.id))
        with open(path, "w") as f:
            f.write(make_config({fe: free_port() for fe in frontends([c])}, [c], files))
        try:
            rc, out = check_config(binary, path)
        except (OSError, subprocess.SubprocessError) as e:
            return c.id, (False, "could not run %s -c: %r" % (binary, e))
        os.unlink(path)
        return c.id, (rc == 0, clean_msg(out, path))

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
        return dict(ex.map(one, cases))


def clean_msg(out, path):
    """The ALERT/WARNING lines of a check, without pids and the temporary path."""
    keep = []
    for l in out.splitlines():
        if "[NOTICE]" in l or "Fatal errors found" in l or "Configuration file is valid" in l:
            continue
        l = re.sub(r"^\[(ALERT|WARNING)\]\s+\([^)]*\)\s+:\s+", r"\1: ", l)
        l = l.replace(path, "CFG").replace(os.path.dirname(path) + "/", "")
        keep.append(l.strip())
    return "\n".join(keep)


# ==========================================================================
# client
# ==========================================================================

def request_bytes(c):
    target = c.path
    if c.query is not None:
        target += "?in=" + quote_from_bytes(c.query, safe="")
    hdrs = [(n, v) for n, v in c.headers]
    if not any(n == "host" for n, _ in hdrs):
        hdrs.insert(0, ("host", b"test.local"))
    raw = b"GET " + target.encode() + b" HTTP/1.1\r\n"
    for n, v in hdrs:
        raw += n.encode() + b": " + v + b"\r\n"
    return raw + b"Connection: close\r\n\r\n"


def do_request(port, raw):
    """{status, body (bytes)} or {error}."""
    s = socket.create_connection((HOST, port), timeout=CLIENT_WAIT)
    try:
        s.settimeout(CLIENT_WAIT)
        s.sendall(raw)
        buf = b""
        deadline = time.monotonic() + CLIENT_WAIT
        while time.monotonic() < deadline:
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            except OSError as e:
                if not buf:
                    return {"error": "recv: %s" % e}
                break
            if not d:
                break
            buf += d
            m = re.search(rb"\r\n\r\n", buf)
            if m:
                cl = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", buf[:m.start()])
                if cl and len(buf) >= m.end() + int(cl.group(1)):
                    break
    finally:
        s.close()
    m = re.search(rb"\r\n\r\n", buf)
    if not buf:
        return {"error": "no response"}
    if not m:
        return {"error": "incomplete response: %r" % buf[:200]}
    sl = buf.split(b"\r\n", 1)[0].split(b" ")
    try:
        status = int(sl[1])
    except (IndexError, ValueError):
        return {"error": "bad status line: %r" % buf[:100]}
    body = buf[m.end():]
    cl = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", buf[:m.start()])
    if cl:
        body = body[:int(cl.group(1))]
    loc = re.search(rb"(?im)^location:[ \t]*(.*?)\r?$", buf[:m.start()])
    return {"status": status, "body": body, "location": loc.group(1) if loc else None}


def interpret(c, r):
    """What a response means for its case: a dict that is compared and stored."""
    if "error" in r:
        return {"error": r["error"]}
    out = {"status": r["status"]}
    body = r["body"]
    if c.kind == "expr" and VIA == "redirect":
        loc = r.get("location")
        if r["status"] == 302 and loc is not None and loc.startswith(REDIR_PREFIX.encode()):
            out["status"] = 200      # the same result as with lf-string
            body = loc[len(REDIR_PREFIX):]
        else:
            out["location"] = None if loc is None else text_or_hex(loc)
    if out["status"] != 200:
        out["body"] = text_or_hex(body)
        return out
    if c.kind == "expr":
        if body.startswith(b"NOSAMPLE:[") and body.endswith(b"]"):
            out["sample"] = False
            out["lf"] = text_or_hex(body[len(b"NOSAMPLE:["):-1])
        elif body.startswith(b"[") and body.endswith(b"]"):
            out["sample"] = True
            out["out"] = text_or_hex(body[1:-1])
        else:
            out["body"] = text_or_hex(body)
    elif c.kind == "acl":
        out["match"] = {b"T": True, b"F": False}.get(body, text_or_hex(body))
    else:
        out["backend"] = text_or_hex(body)
    return out


def text_or_hex(b):
    """A string when the bytes are UTF-8, else {"hex": ...}."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": b.hex()}


def comparable(res):
    """What is compared: everything but the body of an error status (error pages may differ)."""
    if res.get("status", 200) != 200:
        return {k: v for k, v in res.items() if k != "body"}
    return res


def show(res):
    """One line for a result in the table."""
    if res is None:
        return "-"
    if "refused" in res:
        return "REFUSED: " + first_error(res["refused"])
    if "error" in res:
        return "ERROR: " + res["error"]
    if "sample" in res:
        v = res.get("out") if res["sample"] else None
        if res["sample"]:
            return "%r" % (v,) if isinstance(v, str) else json.dumps(v)
        return "no sample (lf %s)" % json.dumps(res.get("lf"))
    if "match" in res:
        return str(res["match"])
    if "backend" in res:
        return "backend %s" % res["backend"]
    return "status %s" % res.get("status")


def norm_msg(msg):
    """A refusal message without its location and quoted words, to group cases by."""
    line = next((l for l in msg.splitlines() if l.startswith("ALERT")), msg.splitlines()[0] if msg else "?")
    m = re.sub(r"^ALERT:\s*(config\s*:)?\s*", "", line)
    m = re.sub(r"(parsing \[)?CFG(:\d+)?\]?\s*:?\s*", "", m)
    m = re.sub(r"'[^']*'", "'..'", m)
    m = re.sub(r"<[^>]*>", "<..>", m)
    return m[:160]


def first_error(msg):
    for l in msg.splitlines():
        if l.startswith("ALERT"):
            m = re.search(r"(failed to parse.*|error detected.*|unknown.*|invalid.*)", l)
            return (m.group(1) if m else l)[:150]
    return msg.splitlines()[0][:150] if msg else "?"


# ==========================================================================
# running a proxy over the corpus
# ==========================================================================

def run_proxy(name, binary, cases, files, workdir):
    """{case id: result} for one proxy: per-case -c, then one run of the accepted cases."""
    results = {}
    checks = check_cases(binary, cases, files, workdir, name)
    accepted = [c for c in cases if checks[c.id][0]]
    for c in cases:
        ok, msg = checks[c.id]
        if not ok:
            results[c.id] = {"refused": msg or "(no message)"}
    info = {"accepted": len(accepted), "refused": len(cases) - len(accepted), "log": None}
    if not accepted:
        info["note"] = "%s refused every case; not started" % name
        return results, checks, info
    ports = {fe: free_port() for fe in frontends(accepted)}
    p = ProxyRun(name, binary, make_config(ports, accepted, files), workdir)
    rc, out = p.check()
    if rc != 0:
        msg = "the config of the %d cases %s accepts one by one is refused together: %s" % (
            len(accepted), name, clean_msg(out, p.cfg))
        for c in accepted:
            results[c.id] = {"refused": msg}
        info["note"] = msg
        return results, checks, info
    info["config"] = p.cfg
    info["log"] = p.errpath
    try:
        p.start(list(ports.values()))
        for c in accepted:
            try:
                results[c.id] = interpret(c, do_request(ports[c.fe], request_bytes(c)))
            except OSError as e:
                results[c.id] = {"error": "client: %s" % e}
            if not p.alive():
                info["note"] = "%s DIED at case %s (%s)" % (name, c.id, c.name)
                for c2 in accepted:
                    results.setdefault(c2.id, {"error": "%s died" % name})
                break
    except RuntimeError as e:
        info["note"] = "%s did not start: %s" % (name, e)
        for c in accepted:
            results.setdefault(c.id, {"error": "not started"})
    finally:
        alive = p.alive()
        p.stop()
    info["alive_at_end"] = alive
    try:
        err = open(p.errpath, errors="replace").read()
        if "panicked" in err:
            info["note"] = (info.get("note") or "") + " stderr mentions a panic: " + p.errpath
    except OSError:
        pass
    return results, checks, info


def write_files(workdir):
    paths = {}
    for n, text in FILES.items():
        p = os.path.join(workdir, n)
        with open(p, "w", newline="") as f:
            f.write(text)
        paths[n] = p
    paths["nosuch.map"] = os.path.join(workdir, "nosuch.map")   # never written
    return paths


def haproxy_version(binary):
    try:
        r = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10)
        return r.stdout.splitlines()[0].strip()
    except (OSError, IndexError, subprocess.SubprocessError):
        return "?"


def case_record(c, files, res):
    """A case as stored in the golden file (paths written as {name})."""
    http, switch = case_lines(c, files)
    rev = {p: "{%s}" % n for n, p in files.items()}

    def unfill(t):
        for p, n in sorted(rev.items(), key=lambda kv: -len(kv[0])):
            t = t.replace(p, n)
        return t
    rec = {"id": c.id, "group": c.group, "kind": c.kind, "name": c.name}
    if c.fe != "fe":
        rec["frontend"] = c.fe
    if c.expr:
        rec["expr"] = c.expr
    if c.cond:
        rec["acl"] = c.cond
    rec["config"] = [unfill(l) for l in http + switch]
    rec["request"] = {"path": c.path,
                      "headers": [[n, text_or_hex(v)] for n, v in c.headers]}
    if c.query is not None:
        rec["request"]["query_in"] = text_or_hex(c.query)
        rec["request"]["target"] = request_bytes(c).split(b" ")[1].decode()
    if c.note:
        rec["note"] = c.note
    r = dict(res)
    if "refused" in r:
        r = {"accepted": False, "check": unfill(r["refused"])}
    else:
        r = dict({"accepted": True}, **r)
    rec["haproxy"] = r
    return rec


def main():
    ap = argparse.ArgumentParser(description="sample converters / maps: sluice vs HAProxy 2.6")
    ap.add_argument("--sluice", default=os.path.join(os.path.dirname(BENCH), "target", "release", "sluice"))
    ap.add_argument("--haproxy", default="/usr/sbin/haproxy")
    ap.add_argument("--haproxy-only", action="store_true",
                    help="run HAProxy alone and write its answers to --golden")
    ap.add_argument("--golden", default=GOLDEN)
    ap.add_argument("--via", choices=("lf-string", "redirect"), default="lf-string",
                    help="how an expression's value comes back: the body of `http-request return "
                         "lf-string` (default), or the Location of `http-request redirect` (for a "
                         "proxy with log-format only in header values and redirects)")
    ap.add_argument("--only", default=None, help="only the cases whose name or group contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = ap.parse_args()
    global VIA
    VIA = args.via

    work = tempfile.mkdtemp(prefix="converter_diff.")
    files = write_files(work)
    cases = corpus()
    if args.only:
        cases = [c for c in cases if args.only in c.name or args.only == c.group]
    t0 = time.monotonic()
    print("workdir %s; %d cases; expressions via %s" % (work, len(cases), VIA))

    hres, hchecks, hinfo = run_proxy("haproxy", args.haproxy, cases, files, work)
    if hinfo.get("note") and hinfo["accepted"]:
        print("HAProxy: " + hinfo["note"])
        sys.exit(2)
    if not hinfo["accepted"]:
        print("HAProxy refused every case: " + first_error(next(iter(hres.values()))["refused"]))
        sys.exit(2)

    if args.haproxy_only:
        recs = [case_record(c, files, hres[c.id]) for c in cases]
        for c, rec in zip(cases, recs):
            msg = hchecks[c.id][1]
            if hchecks[c.id][0] and msg:
                rec["haproxy"]["check_warnings"] = msg
        doc = {
            "what": "HAProxy's own answers for sample converters, maps and ACL pattern files, "
                    "written by bench/converter_diff.py --haproxy-only (see bench/README.md)",
            "haproxy": haproxy_version(args.haproxy),
            "via": VIA,
            "how": {
                "expr": "E evaluated in `http-request return ... lf-string \"[%[E]]\" if { path P } "
                        "{ E -m found }`, else `lf-string \"NOSAMPLE:[%[E]]\"`: sample=true with out "
                        "= the string, or sample=false with lf = what log-format printed",
                "acl": "`string T if { path P } { ACL }`, else F: match",
                "backend": "use_backend lines (with `if { path P }`), default_backend be_default; "
                           "backend = the name the chosen backend answered",
                "input": "header x-in (req.fhdr, never split at commas), or ?in= (url_param(in),"
                         "url_dec) for bytes a header cannot carry, Host, or x-be; client address "
                         "127.0.0.1",
                "files": "{name} in config lines is the path of files[name]; nosuch.map does not "
                         "exist",
                "hex": "a value {\"hex\": ...} is bytes that are not valid UTF-8",
                "request": "GET <path>[?in=...] HTTP/1.1 with Host: test.local (unless the case sets "
                           "host), the case's headers, Connection: close; one connection each",
            },
            "files": FILES,
            "cases": recs,
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.golden)), exist_ok=True)
        with open(args.golden, "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
        grp = {}
        for c in cases:
            grp.setdefault(c.group, [0, 0])
            grp[c.group][0 if hchecks[c.id][0] else 1] += 1
        if args.verbose:
            for c in cases:
                print("%-5s %-60s %s" % (c.id, c.name[:60], show(hres[c.id])))
        print("HAProxy accepted %d cases, refused %d (%s)" % (
            hinfo["accepted"], hinfo["refused"],
            ", ".join("%s %d/%d" % (g, a, a + r) for g, (a, r) in grp.items())))
        print("golden file written: %s (%.1f s)" % (args.golden, time.monotonic() - t0))
        return

    sres, schecks, sinfo = run_proxy("sluice", args.sluice, cases, files, work)

    diffs = []
    same = 0
    for c in cases:
        h, s = hres.get(c.id), sres.get(c.id)
        hr, sr = "refused" in h, "refused" in s
        if hr and sr:
            same += 1            # both refuse: fine (messages differ)
            kind = "both refuse"
        elif comparable(h) == comparable(s):
            same += 1
            kind = "same"
        else:
            kind = "DIFF"
            diffs.append((c, h, s))
        if args.verbose:
            print("%-5s %-4s %-58s H: %s | S: %s" % (c.id, "==" if kind != "DIFF" else "!=",
                                                    c.name[:58], show(h)[:60], show(s)[:60]))

    answers = [(c, h, s) for c, h, s in diffs if "refused" not in s]
    refused = [(c, h, s) for c, h, s in diffs if "refused" in s]
    print()
    print("=" * 110)
    print("DIFFERENT ANSWERS (%d)" % len(answers))
    print("=" * 110)
    if answers:
        print("%-5s %-11s %-50s %-24s %s" % ("case", "group", "expression <- input", "haproxy", "sluice"))
        for c, h, s in answers:
            print("%-5s %-11s %-50s %-24s %s" % (c.id, c.group, c.name[:50], show(h)[:24], show(s)[:60]))
    if refused:
        msgs = {}
        for c, h, s in refused:
            msgs.setdefault(norm_msg(s["refused"]), []).append(c.id)
        print()
        print("=" * 110)
        print("REFUSED BY sluice -c, ACCEPTED BY HAProxy (%d cases), by message" % len(refused))
        print("=" * 110)
        for m, ids in sorted(msgs.items(), key=lambda kv: -len(kv[1])):
            print("%4d x %s\n       %s" % (len(ids), m[:200], " ".join(ids)))
    print()
    print("=" * 110)
    print("SUMMARY")
    print("=" * 110)
    print("cases: %d; same: %d; different: %d; HAProxy refuses %d (kept as expected refusals)"
          % (len(cases), same, len(diffs), hinfo["refused"]))
    print("sluice: accepted %d cases one by one, refused %d%s" % (
        sinfo["accepted"], sinfo["refused"], ("; " + sinfo["note"]) if sinfo.get("note") else ""))
    if sinfo.get("accepted") and "alive_at_end" in sinfo:
        print("sluice alive at the end: %s (log %s)" % (sinfo["alive_at_end"], sinfo["log"]))
    print("%.1f s" % (time.monotonic() - t0))
    problem = sinfo.get("accepted") and not sinfo.get("alive_at_end", True)
    sys.exit(1 if diffs or problem else 0)


if __name__ == "__main__":
    main()
