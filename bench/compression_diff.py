#!/usr/bin/env python3
"""Differential test of HTTP response compression: sluice vs HAProxy 2.6.

Self-contained (standard library only), loopback only, bounded in time
(about half a minute; every socket operation has a timeout).

    python3 bench/compression_diff.py [--sluice PATH] [--haproxy PATH] [-v]
                                      [--runs 2] [--only SUBSTR] [--jobs N]

  --sluice   sluice binary (default: target/release/sluice next to bench/)
  --haproxy  HAProxy binary (default: /usr/sbin/haproxy)
  -v         print every combination, not only the differing ones
  --runs     repeat the corpus (default 2); a difference counts only when it is
             identical in every run (others are listed as unstable)
  --only     run only the combinations whose name contains SUBSTR
  --jobs     combinations run concurrently (default 8)

What it does:
  * starts two identical raw-socket origin servers (one per proxy, so that the
    two proxies are driven in parallel without mixing their logs); the origin
    answers according to the request path (/r/NAME: status 200/201/203/204/
    206/304/404, Content-Type text/html, text/plain; charset=utf-8,
    application/json, image/png, multipart/mixed or none, framing by
    Content-Length, chunked, close-delimited or an HTTP/1.0 response,
    Content-Encoding, Cache-Control: no-transform, strong/weak/two/malformed
    ETags, a body streamed in timed pieces, empty and 200 KiB bodies) and
    records the Accept-Encoding it received for each request (?id=N);
  * writes one config with a frontend per compression setup (algorithms in the
    frontend only, in the backend only, in both; with and without `type`; with
    `offload`; raw-deflate, identity, the order of the algorithms; inherited
    from a `defaults` section), checks it with -c on both proxies and runs it
    on both (different ports);
  * sends the same corpus of requests to both (HTTP/1.1 and 1.0, GET and HEAD,
    Accept-Encoding gzip / deflate / q-values / * / q=0 / br / none / a few
    edge forms, old "Mozilla/4" user agents), one connection per request;
  * compares, per combination: status; Content-Encoding, Transfer-Encoding,
    Vary, ETag and Cache-Control values; whether Content-Length is present;
    the Accept-Encoding the origin received; the DECODED body (gzip and
    deflate decoded with zlib, deflate accepted zlib-wrapped or raw as a
    client would), and whether it equals what the origin sent; for streamed
    responses, whether the first piece reached the client (decodable) before
    the origin sent the next one. Compressed bytes need not be identical;
  * prints every difference and a summary, checks that sluice is still alive
    (and did not panic), and exits 1 when there is any difference or problem
    (2 when a config check fails).
"""

import argparse
import concurrent.futures
import hashlib
import os
import random
import re
import socket
import sys
import tempfile
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from difftool import HOST, Listener, ProxyRun, free_port  # noqa: E402

CLIENT_WAIT = 6.0        # the client gives up on a response after this
STREAM_PAUSE = 0.6       # pause between the pieces of a streamed response
STREAM_CHECK = 0.3       # after the head, the first piece must be decodable within this


# ==========================================================================
# response bodies and the origin's behaviours
# ==========================================================================

def text_body(name, n_lines=40):
    return b"".join(b"<p>%s line %d: the quick brown fox jumps over the lazy dog</p>\n"
                    % (name.encode(), i) for i in range(n_lines))


LARGE_TEXT = b"".join(b"row %06d: lorem ipsum dolor sit amet, consectetur adipiscing elit %d\n"
                      % (i, i * 7919 % 1000) for i in range(3000))[:200 * 1024]
_rnd = random.Random(1234)
LARGE_BIN = bytes(_rnd.getrandbits(8) for _ in range(200 * 1024))
PNG_BODY = b"\x89PNG\r\n\x1a\n" + bytes(_rnd.getrandbits(8) for _ in range(600)) + b"\x00" * 400


def resp(status=b"200 OK", ctype=b"text/html", body=b"", framing="cl", extra=b"", version=b"HTTP/1.1",
         pieces=None):
    """A response spec: the origin builds the bytes from it."""
    return {"status": status, "ctype": ctype, "body": body, "framing": framing, "extra": extra,
            "version": version, "pieces": pieces}


def gz(b):
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(b) + c.flush()


def build_behaviours():
    B = {}
    t = text_body
    # types
    B["html_cl"] = resp(body=t("html_cl"))
    B["html_chunked"] = resp(body=t("html_chunked"), framing="chunked")
    B["plain_utf8"] = resp(ctype=b"text/plain; charset=utf-8", body=t("plain_utf8"))
    B["plain_chunked"] = resp(ctype=b"text/plain; charset=utf-8", body=t("plain_chunked"), framing="chunked")
    B["json"] = resp(ctype=b"application/json", body=b'{"k":[' + b",".join(b'"v%d"' % i for i in range(300)) + b"]}")
    B["png"] = resp(ctype=b"image/png", body=PNG_BODY)
    B["multipart"] = resp(ctype=b"multipart/mixed; boundary=xx",
                          body=b"--xx\r\nContent-Type: text/plain\r\n\r\n" + t("mp", 10) + b"\r\n--xx--\r\n")
    B["multipart_upper"] = resp(ctype=b"MULTIPART/mixed; boundary=xx",
                                body=b"--xx\r\n\r\n" + t("mpu", 10) + b"\r\n--xx--\r\n")
    B["notype"] = resp(ctype=None, body=t("notype"))
    B["ct_upper"] = resp(ctype=b"TEXT/HTML; charset=UTF-8", body=t("ct_upper"))
    B["ct_prefix"] = resp(ctype=b"text/htmlx", body=t("ct_prefix"))
    # statuses
    B["s201"] = resp(status=b"201 Created", ctype=b"application/json", body=b'{"created":' + b"1," * 200 + b"1}")
    B["s203"] = resp(status=b"203 Non-Authoritative Information", body=t("s203"))
    B["s204"] = resp(status=b"204 No Content", ctype=None, framing="none")
    B["s206"] = resp(status=b"206 Partial Content", body=t("s206")[:500],
                     extra=b"Content-Range: bytes 0-499/5000\r\n")
    B["s304"] = resp(status=b"304 Not Modified", ctype=None, framing="none", extra=b'ETag: "v1"\r\n')
    B["s404"] = resp(status=b"404 Not Found", body=t("s404"))
    B["s404_chunked"] = resp(status=b"404 Not Found", body=t("s404c"), framing="chunked")
    # framing
    B["close"] = resp(body=t("close"), framing="close")
    B["http10_cl"] = resp(body=t("http10_cl"), version=b"HTTP/1.0")
    B["http10_close"] = resp(body=t("http10_close"), framing="close", version=b"HTTP/1.0")
    B["chunked_trailer"] = resp(body=t("chunked_trailer"), framing="chunked", extra=b"Trailer: X-T\r\n")
    B["empty_cl"] = resp(body=b"")
    B["empty_chunked"] = resp(body=b"", framing="chunked")
    B["large_cl"] = resp(body=LARGE_TEXT)
    B["large_chunked"] = resp(body=LARGE_TEXT, framing="chunked")
    B["large_bin"] = resp(ctype=b"application/octet-stream", body=LARGE_BIN)
    B["stream"] = resp(framing="chunked", pieces=[t("stream1", 5), t("stream2", 5), t("stream3", 5)])
    B["stream_cl"] = resp(framing="cl", pieces=[t("streamcl1", 5), t("streamcl2", 5), t("streamcl3", 5)])
    # already encoded / no-transform
    B["ce_gzip"] = resp(body=gz(t("ce_gzip")), extra=b"Content-Encoding: gzip\r\n")
    B["ce_identity"] = resp(body=t("ce_identity"), extra=b"Content-Encoding: identity\r\n")
    B["cc_notransform"] = resp(body=t("cc_nt"), extra=b"Cache-Control: no-transform\r\n")
    B["cc_list_notransform"] = resp(body=t("cc_lnt"), extra=b"Cache-Control: public, No-Transform\r\n")
    B["cc_two_notransform"] = resp(body=t("cc_2nt"),
                                   extra=b"Cache-Control: public\r\nCache-Control: no-transform\r\n")
    B["cc_maxage"] = resp(body=t("cc_ma"), extra=b"Cache-Control: max-age=60\r\n")
    B["cc_quoted"] = resp(body=t("cc_q"), extra=b'Cache-Control: no-cache="no-transform"\r\n')
    # etags
    B["etag_strong"] = resp(body=t("etag_s"), extra=b'ETag: "abc"\r\n')
    B["etag_weak"] = resp(body=t("etag_w"), extra=b'ETag: W/"abc"\r\n')
    B["etag_two"] = resp(body=t("etag_2"), extra=b'ETag: "a"\r\nETag: "b"\r\n')
    B["etag_malformed"] = resp(body=t("etag_m"), extra=b"ETag: abc\r\n")
    B["etag_list"] = resp(body=t("etag_l"), extra=b'ETag: "a", "b"\r\n')
    B["etag_strong_chunked"] = resp(body=t("etag_sc"), framing="chunked", extra=b'ETag: "abc"\r\n')
    # vary
    B["vary_origin"] = resp(body=t("vary_o"), extra=b"Vary: Origin\r\n")
    B["vary_ae"] = resp(body=t("vary_ae"), extra=b"Vary: Accept-Encoding\r\n")
    return B


BEHAVIOURS = build_behaviours()


def expected_body(beh):
    """The body a client must end up with once it has decoded the response."""
    b = BEHAVIOURS[beh]
    body = b"".join(b["pieces"]) if b["pieces"] else b["body"]
    if b"Content-Encoding: gzip" in b["extra"]:
        body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
    return body


# ==========================================================================
# origin server
# ==========================================================================

HEAD_END = re.compile(rb"\r?\n\r?\n")


def parse_head(head):
    lines = [l.rstrip(b"\r") for l in head.split(b"\n")]
    hdrs = []
    for l in lines[1:]:
        if b":" in l:
            n, v = l.split(b":", 1)
            hdrs.append((n.strip().lower().decode("latin1"), v.strip().decode("latin1")))
    return lines[0], hdrs


class Origin(Listener):
    """Threaded raw-socket origin; records the Accept-Encoding of each request id."""

    def __init__(self, label):
        self.label = label
        self.lock = threading.Lock()
        self.seen = {}        # id -> list of Accept-Encoding values (in order)
        super().__init__()

    def on_accept(self, c):
        threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.settimeout(30)    # the proxies close idle server connections well before
        buf = b""
        try:
            while True:
                while not HEAD_END.search(buf):
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                m = HEAD_END.search(buf)
                head, buf = buf[:m.end()], buf[m.end():]
                reqline, hdrs = parse_head(head)
                # GET/HEAD only in this corpus; drop a body if one is announced
                cl = [v for n, v in hdrs if n == "content-length"]
                if cl and cl[0].isdigit():
                    n = int(cl[0])
                    while len(buf) < n:
                        d = c.recv(65536)
                        if not d:
                            return
                        buf += d
                    buf = buf[n:]
                parts = reqline.split(b" ")
                method = parts[0]
                target = parts[1] if len(parts) > 1 else b""
                mid = re.search(rb"[?&]id=(\d+)", target)
                if mid:
                    with self.lock:
                        self.seen[int(mid.group(1))] = [v for n, v in hdrs if n == "accept-encoding"]
                mb = re.search(rb"/r/([A-Za-z0-9_]+)", target)
                beh = mb.group(1).decode() if mb else "html_cl"
                if not self.respond(c, BEHAVIOURS.get(beh, BEHAVIOURS["html_cl"]), method == b"HEAD"):
                    return
        except OSError:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def respond(self, c, b, head_only):
        """Sends the response; False when the connection must be closed after it."""
        body = b"".join(b["pieces"]) if b["pieces"] else b["body"]
        h = b["version"] + b" " + b["status"] + b"\r\n"
        if b["ctype"] is not None:
            h += b"Content-Type: " + b["ctype"] + b"\r\n"
        h += b["extra"]
        fr = b["framing"]
        if fr == "cl":
            h += b"Content-Length: %d\r\n" % len(body)
        elif fr == "chunked":
            h += b"Transfer-Encoding: chunked\r\n"
        h += b"X-Origin: " + self.label.encode() + b"\r\n\r\n"
        if head_only or fr == "none":
            c.sendall(h)
            return fr != "close" and b["version"] == b"HTTP/1.1"
        pieces = b["pieces"]
        if pieces:
            # streamed: each piece is sent on its own, with a pause between them
            for i, p in enumerate(pieces):
                data = (b"%x\r\n%s\r\n" % (len(p), p)) if fr == "chunked" else p
                if i == len(pieces) - 1 and fr == "chunked":
                    data += b"0\r\n\r\n"
                c.sendall((h if i == 0 else b"") + data)
                if i < len(pieces) - 1:
                    time.sleep(STREAM_PAUSE)
        elif fr == "chunked":
            out = h
            step = 8192 if len(body) > 20000 else max(1, len(body) // 2 + 1)
            for i in range(0, len(body), step):
                p = body[i:i + step]
                out += b"%x\r\n%s\r\n" % (len(p), p)
            out += b"0\r\n"
            if b"Trailer:" in b["extra"]:
                out += b"X-T: yes\r\n"
            out += b"\r\n"
            c.sendall(out)
        else:
            c.sendall(h + body)
        # HTTP/1.0 responses and close-delimited bodies end the connection
        return fr != "close" and b["version"] == b"HTTP/1.1"


# ==========================================================================
# proxies
# ==========================================================================

# name -> (frontend compression lines, backend name); backend name -> its lines
FRONTENDS = [
    ("fe_only", ["compression algo gzip deflate"], "be_plain"),
    ("be_only", [], "be_gzdef"),
    ("both", ["compression algo deflate", "compression type application/json"], "be_gz"),
    ("type", ["compression algo gzip deflate", "compression type text/html application/json"], "be_plain"),
    ("type_fe_algo_be", ["compression type text/plain"], "be_gz"),
    ("type_both", ["compression algo gzip", "compression type text/html"], "be_gz_json"),
    ("offload", ["compression algo gzip", "compression offload"], "be_plain"),
    ("offload_be", [], "be_gz_off"),
    ("offload_id", ["compression algo gzip identity", "compression offload"], "be_plain"),
    ("raw", ["compression algo raw-deflate"], "be_plain"),
    ("order", ["compression algo deflate", "compression algo gzip"], "be_plain"),
    ("identity", ["compression algo identity"], "be_plain"),
    ("gz_identity", ["compression algo gzip identity"], "be_plain"),
    ("none", [], "be_plain"),
    # after a second `defaults` with compression lines (see DEFAULTS2): inherited by the
    # frontend and by its backend; `offload` in defaults is ignored by HAProxy (a warning)
    ("dflt", [], "be_dflt"),
    ("dflt_add", ["compression algo deflate"], "be_dflt"),
]
AFTER_DEFAULTS2 = {"dflt", "dflt_add", "be_dflt"}
DEFAULTS2 = ["compression algo gzip", "compression type text/html application/json", "compression offload"]
BACKENDS = {
    "be_plain": [],
    "be_gzdef": ["compression algo gzip deflate"],
    "be_gz": ["compression algo gzip"],
    "be_gz_json": ["compression algo gzip", "compression type application/json"],
    "be_gz_off": ["compression algo gzip deflate", "compression offload"],
    "be_dflt": [],
}


def make_config(ports, origin_port):
    dflt = ["defaults", "    mode http", "    timeout connect 2s", "    timeout client 10s",
            "    timeout server 10s", "    timeout http-request 5s"]
    out = ["global", "    maxconn 2000", ""] + dflt + [""]
    for second in (False, True):
        if second:
            out += dflt + ["    " + l for l in DEFAULTS2] + [""]
        for name, lines, be in FRONTENDS:
            if (name in AFTER_DEFAULTS2) != second:
                continue
            out.append("frontend f_%s" % name)
            out.append("    bind %s:%d" % (HOST, ports[name]))
            out += ["    " + l for l in lines]
            out.append("    default_backend %s" % be)
            out.append("")
        for be, lines in BACKENDS.items():
            if (be in AFTER_DEFAULTS2) != second:
                continue
            out.append("backend %s" % be)
            out += ["    " + l for l in lines]
            out.append("    server s1 %s:%d" % (HOST, origin_port))
            out.append("")
    return "\n".join(out)


class Proxy(ProxyRun):
    """One proxy under test, with its own origin and the frontends of FRONTENDS."""

    def __init__(self, name, binary, workdir):
        self.origin = Origin(name)
        self.ports = {fe: free_port() for fe, _, _ in FRONTENDS}
        super().__init__(name, binary, make_config(self.ports, self.origin.port), workdir)

    def start(self):
        super().start(self.ports.values())

    def stop(self):
        super().stop()
        self.origin.close()


# ==========================================================================
# client
# ==========================================================================

class Incomplete(Exception):
    pass


def parse_chunked(buf, p, partial=False):
    """Returns (payload, end_offset, trailers); raises Incomplete (or, with partial,
    returns what complete chunks gave with end_offset None)."""
    body = b""
    while True:
        e = buf.find(b"\n", p)
        if e < 0:
            if partial:
                return body, None, []
            raise Incomplete()
        try:
            size = int(buf[p:e].split(b";")[0].strip(), 16)
        except ValueError:
            raise ValueError("bad chunk size %r" % buf[p:e][:40])
        if size == 0:
            q = e + 1
            trailers = []
            while True:
                f = buf.find(b"\n", q)
                if f < 0:
                    if partial:
                        return body, None, []
                    raise Incomplete()
                line = buf[q:f].rstrip(b"\r")
                q = f + 1
                if not line:
                    return body, q, trailers
                trailers.append(line.decode("latin1").lower().replace(" ", ""))
        if len(buf) < e + 1 + size + 2:
            if partial:
                return body, None, []
            raise Incomplete()
        body += buf[e + 1:e + 1 + size]
        p = e + 1 + size
        if buf[p:p + 2] == b"\r\n":
            p += 2
        elif buf[p:p + 1] == b"\n":
            p += 1
        else:
            raise ValueError("chunk not followed by CRLF")


def parse_response(buf, method, eof):
    """A dict for the first final response in buf; raises Incomplete."""
    pos = 0
    while True:
        m = HEAD_END.search(buf, pos)
        if not m:
            raise Incomplete()
        sl, hdrs = parse_head(buf[pos:m.end()])
        mm = re.match(rb"HTTP/(\d\.\d) (\d{3})", sl)
        if not mm:
            raise ValueError("bad status line %r" % sl[:60])
        code = int(mm.group(2))
        if 100 <= code < 200:
            pos = m.end()
            continue
        break
    r = {"code": code, "version": mm.group(1).decode(), "hdrs": hdrs, "bstart": m.end(), "trailers": []}
    names = [n for n, _ in hdrs]
    te = ",".join(v for n, v in hdrs if n == "transfer-encoding").lower()
    if method == "HEAD" or code in (204, 304):
        r["body"] = b""
        r["framing"] = "none"
    elif "chunked" in te:
        r["body"], _, r["trailers"] = parse_chunked(buf, m.end())
        r["framing"] = "chunked"
    elif "content-length" in names:
        n = int([v for n, v in hdrs if n == "content-length"][0])
        if len(buf) - m.end() < n:
            raise Incomplete()
        r["body"] = buf[m.end():m.end() + n]
        r["framing"] = "cl"
    else:
        if not eof:
            raise Incomplete()
        r["body"] = buf[m.end():]
        r["framing"] = "close"
    return r


def decoders_for(ce_tokens):
    return [t for t in reversed(ce_tokens) if t not in ("", "identity")]


def decode(data, ce_tokens, partial=False):
    """Decodes data according to the Content-Encoding tokens; returns bytes or raises."""
    for tok in decoders_for(ce_tokens):
        if tok in ("gzip", "x-gzip"):
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(data)
            if not partial and not d.eof:
                raise ValueError("gzip stream truncated")
            data = out
        elif tok == "deflate":
            # a client accepts zlib-wrapped or raw deflate
            try:
                d = zlib.decompressobj(zlib.MAX_WBITS)
                out = d.decompress(data)
            except zlib.error:
                d = zlib.decompressobj(-zlib.MAX_WBITS)
                out = d.decompress(data)
            if not partial and not d.eof:
                raise ValueError("deflate stream truncated")
            data = out
        else:
            raise ValueError("unknown content-encoding %r" % tok)
    return data


def ce_tokens_of(hdrs):
    toks = []
    for n, v in hdrs:
        if n == "content-encoding":
            toks += [t.strip().lower() for t in v.split(",")]
    return toks


def do_request(port, raw, method):
    """Sends raw, reads one response. Returns a dict (with 'error' on failure)."""
    t0 = time.monotonic()
    recvs = []       # (time, bytes)
    buf = b""
    eof = False
    try:
        s = socket.create_connection((HOST, port), timeout=2)
    except OSError as e:
        return {"error": "connect: %s" % e}
    try:
        s.sendall(raw)
        while True:
            try:
                r = parse_response(buf, method, eof)
                break
            except Incomplete:
                if eof:
                    return {"error": "connection closed before a complete response (%d bytes)" % len(buf),
                            "raw": buf}
            left = CLIENT_WAIT - (time.monotonic() - t0)
            if left <= 0:
                return {"error": "no complete response after %.1fs (%d bytes)" % (CLIENT_WAIT, len(buf)),
                        "raw": buf}
            s.settimeout(left)
            try:
                d = s.recv(262144)
            except socket.timeout:
                continue
            except OSError as e:
                d = b""
                if not buf:
                    return {"error": "recv: %s" % e}
            if not d:
                eof = True
            else:
                recvs.append((time.monotonic(), d))
                buf += d
    except ValueError as e:
        return {"error": "unparsable response: %s" % e, "raw": buf}
    finally:
        s.close()
    r["recvs"] = recvs
    r["raw"] = buf
    return r


def stream_first_piece_early(r, first_piece):
    """How much of the first piece was decodable from what arrived within STREAM_CHECK of
    the head (the origin sends the next piece STREAM_PAUSE after the first): "all",
    "partial" or "none"."""
    recvs = r["recvs"]
    if not recvs:
        return "none"
    acc = b""
    t_head = None
    for t, d in recvs:
        acc += d
        if len(acc) >= r["bstart"]:
            t_head = t
            break
    limit = t_head + STREAM_CHECK
    prefix = b"".join(d for t, d in recvs if t <= limit)
    data = prefix[r["bstart"]:]
    try:
        if r["framing"] == "chunked":
            data, _, _ = parse_chunked(prefix, r["bstart"], partial=True)
        plain = decode(data, ce_tokens_of(r["hdrs"]), partial=True)
    except (ValueError, zlib.error):
        return "none"
    if plain.startswith(first_piece):
        return "all"
    return "partial" if plain and first_piece.startswith(plain) else "none"


# ==========================================================================
# corpus
# ==========================================================================

AE_MAIN = [
    ("gzip", ["gzip"]),
    ("deflate", ["deflate"]),
    ("q_deflate_higher", ["gzip;q=0.5, deflate;q=0.8"]),
    ("star", ["*"]),
    ("gzip_q0", ["gzip;q=0"]),
    ("br", ["br"]),
    ("none", []),
]
AE_EDGE = [
    ("tie_deflate_first", ["deflate, gzip"]),
    ("uppercase", ["GZIP"]),
    ("q_upper_Q0", ["gzip;Q=0"]),
    ("identity_tok", ["identity"]),
    ("br_gzip_low", ["br, gzip;q=0.1"]),
    ("two_headers", ["br", "gzip"]),
    ("space_semicolon", ["gzip ; q=1.0"]),
    ("star_q0_gzip", ["*;q=0, gzip"]),
    ("deflate_q0_star", ["deflate;q=0, *"]),
]
UA_LIST = [
    ("ua_msie55", "Mozilla/4.0 (compatible; MSIE 5.5; Windows 98)"),
    ("ua_msie6", "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)"),
    ("ua_msie6sp2", "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)"),
    ("ua_msie7", "Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)"),
    ("ua_netscape4", "Mozilla/4.76 [en] (X11; U; Linux 2.4.2 i686)"),
    ("ua_modern", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"),
]

# a few responses that exercise each frontend's setup
CORE = ["html_cl", "plain_chunked", "json", "png", "notype", "etag_strong", "s404", "multipart"]


class Case:
    def __init__(self, fe, beh, ae, method="GET", ver="HTTP/1.1", ua=None, label=""):
        self.fe, self.beh, self.ae, self.method, self.ver, self.ua = fe, beh, ae, method, ver, ua
        self.name = "%s/%s/%s/%s/%s%s" % (fe, beh, method, ver[5:], label, ("/" + ua[0]) if ua else "")

    def request(self, rid=0):
        h = "%s /r/%s?id=%d HTTP/%s\r\nHost: compdiff.test\r\n" % (self.method, self.beh, rid, self.ver[5:])
        for v in self.ae:
            h += "Accept-Encoding: %s\r\n" % v
        # Accept-Encoding is never the last header: HAProxy 2.6 parses a q-value past the
        # end of the header value (http_parse_qvalue() looks for a '.' after "q=0"), so with
        # Accept-Encoding last, "gzip;q=0" is sometimes read as q=0.something from stale
        # buffer bytes and compressed anyway (seen about once in 100 such requests). A
        # header after it makes HAProxy's reading deterministic.
        h += "User-Agent: %s\r\n" % (self.ua[1] if self.ua else "compression_diff/1")
        return (h + "\r\n").encode("latin1")

    def describe(self):
        return self.request().decode("latin1").replace("?id=0 ", "?id=N ").replace("\r\n", "\\r\\n ")


def corpus():
    C = []
    # every response x the main Accept-Encoding forms, algorithms in the frontend
    for beh in BEHAVIOURS:
        for label, ae in AE_MAIN:
            C.append(Case("fe_only", beh, ae, label=label))
        C.append(Case("fe_only", beh, ["gzip"], method="HEAD", label="gzip"))
        C.append(Case("fe_only", beh, ["gzip"], ver="HTTP/1.0", label="gzip"))
        C.append(Case("fe_only", beh, ["gzip"], method="HEAD", ver="HTTP/1.0", label="gzip"))
    for label, ae in AE_EDGE:
        for beh in ("html_cl", "plain_chunked"):
            C.append(Case("fe_only", beh, ae, label=label))
    for ua in UA_LIST:
        C.append(Case("fe_only", "html_cl", ["gzip"], ua=ua, label="gzip"))
    # the other setups: core responses x main + edge Accept-Encoding
    for fe, _, _ in FRONTENDS:
        if fe == "fe_only":
            continue
        for beh in CORE:
            for label, ae in AE_MAIN + AE_EDGE:
                C.append(Case(fe, beh, ae, label=label))
        for beh in ("stream", "large_chunked", "etag_weak", "close", "http10_cl", "cc_notransform",
                    "empty_cl", "s304"):
            C.append(Case(fe, beh, ["gzip, deflate"], label="gzip_deflate"))
        C.append(Case(fe, "html_cl", ["gzip, deflate"], method="HEAD", label="gzip_deflate"))
        C.append(Case(fe, "html_cl", ["gzip, deflate"], ver="HTTP/1.0", label="gzip_deflate"))
        for ua in UA_LIST[:1]:
            C.append(Case(fe, "html_cl", ["gzip, deflate"], ua=ua, label="gzip_deflate"))
    assert len({c.name for c in C}) == len(C), "combination names must be unique"
    return C


# ==========================================================================
# summary / comparison
# ==========================================================================

CMP_HEADERS = ["content-encoding", "transfer-encoding", "vary", "etag", "cache-control"]


def summarise(case, rid, r, origin):
    out = {}
    ae = origin.seen.get(rid)
    out["origin Accept-Encoding"] = "(no request)" if ae is None else (" | ".join(ae) if ae else "(none)")
    if "error" in r:
        out["error"] = r["error"]
        return out
    out["status"] = r["code"]
    for h in CMP_HEADERS:
        vals = [v for n, v in r["hdrs"] if n == h]
        out[h] = " | ".join(vals) if vals else None
    out["content-length"] = "present" if any(n == "content-length" for n, _ in r["hdrs"]) else "absent"
    try:
        bodyless = case.method == "HEAD" or r["code"] in (204, 304)
        body = r["body"] if bodyless else decode(r["body"], ce_tokens_of(r["hdrs"]))
        exp = b"" if bodyless else expected_body(case.beh)
        out["body"] = "%d bytes sha1 %s%s" % (len(body), hashlib.sha1(body).hexdigest()[:12],
                                              "" if body == exp else " (NOT the origin's body)")
    except (ValueError, zlib.error) as e:
        out["body"] = "undecodable: %s (%d bytes)" % (e, len(r["body"]))
    if r["trailers"]:
        out["trailers"] = ",".join(r["trailers"])
    if BEHAVIOURS[case.beh]["pieces"] and case.method == "GET" and r["code"] == 200:
        out["stream: 1st piece at once"] = stream_first_piece_early(r, BEHAVIOURS[case.beh]["pieces"][0])
    return out


def main():
    ap = argparse.ArgumentParser(description="compression differential test: sluice vs HAProxy 2.6")
    ap.add_argument("--sluice", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target", "release", "sluice"))
    ap.add_argument("--haproxy", default="/usr/sbin/haproxy")
    ap.add_argument("--runs", type=int, default=2,
                    help="repeat the corpus; a difference counts only if identical in every run")
    ap.add_argument("--only", default=None, help="run only combinations whose name contains this")
    ap.add_argument("--jobs", type=int, default=8, help="combinations run concurrently")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every combination")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="compression_diff.")
    hap = Proxy("haproxy", args.haproxy, work)
    slu = Proxy("sluice", args.sluice, work)
    for p in (hap, slu):
        rc, out = p.check()
        if rc != 0:
            print("config check failed for %s (rc=%d):\n%s" % (p.name, rc, out))
            sys.exit(2)
    cases = corpus()
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    runs = max(1, args.runs)
    print("config: %s (workdir %s); %d combinations x %d runs" % (hap.cfg, work, len(cases), runs))

    results = {}      # name -> [(sum_haproxy, sum_sluice) per run]
    t_start = time.monotonic()
    alive = False
    try:
        hap.start()
        slu.start()

        def run(job):
            case, rid = job
            raw = case.request(rid)
            out = {}

            def go(p):
                try:
                    out[p.name] = do_request(p.ports[case.fe], raw, case.method)
                except Exception as e:  # a harness bug must not hide as a difference
                    out[p.name] = {"error": "harness: %r" % e}
            th = [threading.Thread(target=go, args=(p,)) for p in (hap, slu)]
            for t in th:
                t.start()
            for t in th:
                t.join()
            return (case, summarise(case, rid, out["haproxy"], hap.origin),
                    summarise(case, rid, out["sluice"], slu.origin))

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            for n in range(runs):
                jobs = [(c, n * 100000 + i + 1) for i, c in enumerate(cases)]
                for case, sh, ss in ex.map(run, jobs):
                    results.setdefault(case.name, []).append((sh, ss))
                    if args.verbose:
                        d = [k for k in sorted(set(sh) | set(ss)) if sh.get(k) != ss.get(k)]
                        print("[run %d] %-66s %s" % (n + 1, case.name, ("DIFF " + ",".join(d)) if d else
                                                     "same: %s ce=%s origin-ae=%s" % (
                                                         sh.get("status", sh.get("error")),
                                                         sh.get("content-encoding"),
                                                         sh.get("origin Accept-Encoding"))))
                if not slu.alive():
                    break
        time.sleep(0.3)
        alive = slu.alive()
    finally:
        hap.stop()
        slu.stop()
    elapsed = time.monotonic() - t_start

    def keys_of(sh, ss):
        return [k for k in sorted(set(sh) | set(ss)) if sh.get(k) != ss.get(k)]

    stable, unstable = [], []
    for case in cases:
        rs = results.get(case.name, [])
        sigs = [tuple((k, sh.get(k), ss.get(k)) for k in keys_of(sh, ss)) for sh, ss in rs]
        if not any(sigs):
            continue
        if len(rs) == runs and all(s == sigs[0] for s in sigs):
            stable.append((case, rs[0][0], rs[0][1], keys_of(*rs[0])))
        else:
            unstable.append((case, rs))

    problems = []
    err = open(slu.errpath, errors="replace").read()
    if "panicked" in err or "RUST_BACKTRACE" in err:
        problems.append("sluice stderr mentions a panic: see %s" % slu.errpath)
    if not alive:
        problems.append("sluice is not alive after the corpus")
    for case in cases:
        for sh, ss in results.get(case.name, []):
            b = str(ss.get("body"))
            if "NOT the origin" in b or "undecodable" in b or "error" in ss:
                problems.append("sluice: %s: %s" % (case.name, ss.get("error") or b))
    problems = list(dict.fromkeys(problems))

    if stable:
        print("\n" + "=" * 100)
        print("DIFFERENCES (identical in all %d runs)" % runs)
        print("=" * 100)
    for case, sh, ss, keys in stable:
        print("\n## %s" % case.name)
        print("   request: %s" % case.describe())
        for k in keys:
            print("   %-26s haproxy: %s" % (k, sh.get(k, "-")))
            print("   %-26s sluice : %s" % ("", ss.get(k, "-")))
    if unstable:
        print("\n" + "=" * 100)
        print("UNSTABLE (differ in some runs only, or differently): not counted")
        print("=" * 100)
        for case, rs in unstable:
            print("\n## %s" % case.name)
            for i, (sh, ss) in enumerate(rs):
                ks = keys_of(sh, ss)
                if not ks:
                    print("   run %d: same" % (i + 1))
                for k in ks:
                    print("   run %d %-20s haproxy: %s" % (i + 1, k, sh.get(k, "-")))
                    print("   run %d %-20s sluice : %s" % (i + 1, "", ss.get(k, "-")))

    print("\n" + "=" * 100)
    print("SUMMARY")
    print("=" * 100)
    print("combinations compared: %d (%d frontend setups), %d runs, %.1fs"
          % (len(cases), len(FRONTENDS), runs, elapsed))
    print("identical in every run: %d" % (len(cases) - len(stable) - len(unstable)))
    print("differing (stable): %d" % len(stable))
    print("unstable (not counted): %d" % len(unstable))
    if stable:
        fields = {}
        for _, _, _, keys in stable:
            for k in keys:
                fields[k] = fields.get(k, 0) + 1
        print("differing fields: " + ", ".join("%s x%d" % kv for kv in sorted(fields.items())))
        groups = {}
        for case, _, _, _ in stable:
            groups.setdefault(case.fe, []).append(case)
        print("differing per frontend setup: " + ", ".join("%s %d" % (k, len(v)) for k, v in groups.items()))
    print("sluice alive at the end: %s" % alive)
    for p in problems:
        print("PROBLEM: " + p)
    sys.exit(1 if stable or problems else 0)


if __name__ == "__main__":
    main()
