"""A loopback HTTP proxy in front of the test API server that injects faults and records every
request it forwards.

kai-cp talks plain HTTP to the proxy, the proxy talks HTTPS to kube-apiserver. Rules pick
requests (method, path, query) and inject, at a given rate:
* `delay`: hold the request, then forward it;
* `hold`: hold the request until the test sets the rule's `event` (at most `seconds`, default
  60), then forward it — a write kept in flight for exactly as long as a test needs;
* `timeout`: hold it past the client's timeout and never forward it (a request lost on the way);
* `lose_answer`: forward it, then close the connection without answering (the write happened,
  the client cannot know);
* `status`: answer with an error status (500, 503, 429, 409 ...) without forwarding;
* `conflict_bind`: before forwarding a pods/binding, bind the pod elsewhere (or to the same
  node) as another actor would, so the API server answers a real 409;
Watches can be cut at any time (`cut_watches`). `injected` counts faults by kind; `log` has one
entry per forwarded request (time, method, path, status, request body for writes)."""

from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlparse

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
        "proxy-authenticate", "content-length", "host"}


@dataclass
class Rule:
    kind: str                                   # delay | hold | timeout | lose_answer | status | conflict_bind
    match: Callable[[str, str, dict], bool]     # (method, path, query) -> bool
    rate: float = 1.0
    seconds: float = 0.0
    status: int = 500
    budget: int | None = None                   # at most this many injections
    chooser: Callable[[dict], str | None] | None = None   # conflict_bind: node for the rogue binding
    event: threading.Event = field(default_factory=threading.Event)   # hold: released when set


@dataclass
class Entry:
    t: float
    method: str
    path: str
    query: dict
    status: int
    body: dict | None = None
    answer: dict | None = None
    arrived: float = 0.0                        # when the request reached the proxy (t: when it was answered)


class FaultProxy:
    def __init__(self, upstream: str, token: str, seed: int = 0):
        u = urlparse(upstream)
        self.host, self.port_up = u.hostname, u.port
        self.token = token
        self.rules: list[Rule] = []
        self.injected: dict[str, int] = {}
        self.log: list[Entry] = []
        self.rng = random.Random(seed)
        self.enabled = True
        self.holding = 0                        # requests a `hold` rule keeps right now
        self._lock = threading.Lock()
        self._streams: set[socket.socket] = set()
        self._ctx = ssl.create_default_context()
        self._ctx.check_hostname = False
        self._ctx.verify_mode = ssl.CERT_NONE
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                proxy._handle(self)
            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass     # upstream gone mid-request (an API server restart): the client sees a dropped connection

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self.injected[kind] = self.injected.get(kind, 0) + n

    def total(self) -> int:
        return sum(self.injected.values())

    def cut_watches(self) -> int:
        """Close every open watch stream (a network blip between scheduler and API server)."""
        with self._lock:
            socks = list(self._streams)
            self._streams.clear()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if socks:
            self.count("watch_cut", len(socks))
        return len(socks)

    def stop(self) -> None:
        self.httpd.shutdown()

    # -- request handling ---------------------------------------------------------------------
    def _pick(self, method: str, path: str, query: dict) -> Rule | None:
        if not self.enabled:
            return None
        with self._lock:
            for r in self.rules:
                if (r.budget is None or r.budget > 0) and r.match(method, path, query) and self.rng.random() < r.rate:
                    if r.budget is not None:
                        r.budget -= 1
                    return r
        return None

    def _upstream(self, method: str, path: str, body: bytes | None, headers: dict, timeout: float = 600):
        conn = http.client.HTTPSConnection(self.host, self.port_up, context=self._ctx, timeout=timeout)
        conn.request(method, path, body=body, headers=headers)
        return conn, conn.getresponse()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        arrived = time.time()
        u = urlparse(h.path)
        query = {k: v[0] for k, v in parse_qs(u.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
        method = h.command
        rule = self._pick(method, u.path, query)
        if rule is not None:
            self.count(rule.kind)
            if rule.kind == "delay":
                time.sleep(rule.seconds)
            elif rule.kind == "hold":
                with self._lock:
                    self.holding += 1
                try:
                    rule.event.wait(rule.seconds or 60)
                finally:
                    with self._lock:
                        self.holding -= 1
            elif rule.kind == "timeout":
                time.sleep(rule.seconds)
                h.close_connection = True
                return
            elif rule.kind == "status":
                msg = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": rule.status,
                                  "reason": {429: "TooManyRequests", 409: "Conflict", 503: "ServiceUnavailable",
                                             504: "Timeout"}.get(rule.status, "InternalError"),
                                  "message": f"injected fault {rule.status}"}).encode()
                h.send_response(rule.status)
                h.send_header("Content-Type", "application/json")
                if rule.status == 429:
                    h.send_header("Retry-After", "1")
                h.send_header("Content-Length", str(len(msg)))
                h.end_headers()
                h.wfile.write(msg)
                return
            elif rule.kind == "conflict_bind" and body:
                self._rogue_bind(u.path, body, headers, rule)
        watch = query.get("watch") in ("1", "true")
        try:
            conn, resp = self._upstream(method, h.path, body, headers)
        except OSError:
            h.close_connection = True
            return
        try:
            if watch:
                self._stream(h, resp)
                return
            data = resp.read()
            entry = Entry(time.time(), method, u.path, query, resp.status, arrived=arrived)
            if method != "GET" and body:
                try:
                    entry.body = json.loads(body)
                    entry.answer = json.loads(data) if data else None
                except ValueError:
                    pass
            with self._lock:
                self.log.append(entry)
            if rule is not None and rule.kind == "lose_answer":
                h.close_connection = True
                try:
                    h.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            h.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP:
                    h.send_header(k, v)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        finally:
            conn.close()

    def _stream(self, h: BaseHTTPRequestHandler, resp) -> None:
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                h.send_header(k, v)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        with self._lock:
            self._streams.add(h.connection)
        try:
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(4096)
                if not chunk:
                    break
                h.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        finally:
            with self._lock:
                self._streams.discard(h.connection)
            h.close_connection = True

    def _rogue_bind(self, path: str, body: bytes, headers: dict, rule: Rule) -> None:
        """Another actor binds the pod first; the API server will answer the real request 409."""
        try:
            doc = json.loads(body)
        except ValueError:
            return
        target = doc.get("target", {}).get("name")
        node = rule.chooser(doc) if rule.chooser else target
        if not node:
            return
        rogue = dict(doc, target={"apiVersion": "v1", "kind": "Node", "name": node})
        hdrs = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        try:
            conn, resp = self._upstream("POST", path.split("?")[0], json.dumps(rogue).encode(), hdrs, timeout=10)
            resp.read()
            conn.close()
            with self._lock:
                self.log.append(Entry(time.time(), "POST", path, {"rogue": "1"}, resp.status, rogue))
        except OSError:
            pass
