"""HTTP endpoints: `/metrics` (and `/healthz`, `/readyz`) on `--listen-address`, and KAI's plugin
server on 127.0.0.1:`--plugin-server-port` with `/get-snapshot`.

`/get-snapshot` serves KAI's snapshot ZIP (one member, snapshot.json) built from the watch
cache at request time, as KAI builds it from its informers; `kai-cp solve` reads it.
`/get-snapshot?cycle=last` (kai-cp's extension) serves the input of the last cycle that made
decisions, plus `decisions.json` (that cycle's output), so any live decision can be replayed."""

from __future__ import annotations

import io
import json
import logging
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlparse

log = logging.getLogger("kai_cp.server")


def snapshot_zip(doc: dict, extra: dict[str, dict] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("snapshot.json", json.dumps(doc, separators=(",", ":")))
        for name, member in (extra or {}).items():
            zf.writestr(name, json.dumps(member, indent=1))
    return buf.getvalue()


def parse_address(addr: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return (host.strip("[]") or default_host), int(port)


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, Callable[[dict], tuple[int, bytes, dict]]] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urlparse(self.path)
        route = self.routes.get(url.path)
        if route is None:
            self._send(404, b"not found\n", {"Content-Type": "text/plain"})
            return
        try:
            code, body, headers = route(parse_qs(url.query))
        except Exception as e:   # a failing endpoint answers 500, never kills the server
            log.exception("%s failed", url.path)
            code, body, headers = 500, f"{type(e).__name__}: {e}\n".encode(), {"Content-Type": "text/plain"}
        self._send(code, body, headers)

    def _send(self, code: int, body: bytes, headers: dict) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args) -> None:
        log.debug(fmt, *args)


def serve(address: tuple[str, int], routes: dict[str, Callable[[dict], tuple[int, bytes, dict]]]) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"routes": routes})
    httpd = ThreadingHTTPServer(address, handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name=f"http-{address[1]}", daemon=True).start()
    return httpd
