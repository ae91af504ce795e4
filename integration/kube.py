"""A thin JSON transport over the official `kubernetes` client.

The official client finds the cluster (in-cluster service account, `--kubeconfig`,
`KUBECONFIG`), authenticates and owns the connection pool; its typed models are not used,
because deserialising every pod of a large cluster into them costs seconds per list. Objects
travel as plain JSON dicts and become kai-cp's pydantic models once, in the cache.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

try:  # orjson parses watch streams ~3x faster; plain json works the same
    import orjson

    def loads(data: bytes | str) -> Any:
        return orjson.loads(data)

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

    def dumps_sorted(obj: Any) -> bytes:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
except ImportError:  # pragma: no cover
    def loads(data: bytes | str) -> Any:
        return json.loads(data)

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def dumps_sorted(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()

log = logging.getLogger("kai_cp.kube")

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer or a transport failure (status 0)."""

    def __init__(self, status: int, reason: str, body: Any = None, method: str = "", path: str = ""):
        self.status = status
        self.reason = reason
        self.body = body if isinstance(body, dict) else {}
        self.method = method
        self.path = path
        super().__init__(f"{method} {path}: {status} {self.message or reason}")

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if self.body else ""

    @property
    def api_reason(self) -> str:
        """Kubernetes' machine reason: AlreadyExists, Conflict, NotFound, Expired, TooManyRequests..."""
        return str(self.body.get("reason", "")) if self.body else ""


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s_client.ApiClient:
    """In-cluster service account first (unless a kubeconfig is named), then kubeconfig/KUBECONFIG."""
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config()
            return k8s_client.ApiClient()
        except k8s_config.ConfigException:
            pass
    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    return k8s_client.ApiClient(cfg)


@dataclass
class Kube:
    """JSON requests against the API server. `timeout` bounds each non-watch request."""

    api: k8s_client.ApiClient
    timeout: float = 10.0
    user_agent: str = "kai-cp"

    def __post_init__(self) -> None:
        self.api.user_agent = self.user_agent
        if not self.api.configuration.verify_ssl:
            # Said once here instead of a warning per request.
            log.warning("TLS verification of the API server is off (insecure-skip-tls-verify in the kubeconfig)")
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self.api.configuration.connection_pool_maxsize = max(
            getattr(self.api.configuration, "connection_pool_maxsize", 4) or 4, 32)
        self.api.rest_client = k8s_client.rest.RESTClientObject(self.api.configuration)

    # -- plumbing -------------------------------------------------------------------------
    def _prepare(self, method: str, path: str, query: dict | None, headers: dict | None):
        q = [(k, v) for k, v in (query or {}).items() if v is not None]
        _, url, hdrs, _, _ = self.api.param_serialize(method, path, query_params=q, header_params=dict(headers or {}),
                                                      auth_settings=["BearerToken"])
        return url, hdrs

    def request(self, method: str, path: str, body: Any = None, query: dict | None = None,
                content_type: str = JSON, timeout: float | None = None) -> Any:
        """One request; returns the decoded JSON answer, raises ApiError."""
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        url, hdrs = self._prepare(method, path, query, headers)
        t = self.timeout if timeout is None else timeout
        try:
            resp = self.api.rest_client.pool_manager.request(
                method, url, body=dumps(body) if body is not None else None, headers=hdrs,
                timeout=urllib3.Timeout(connect=min(t, 5.0), read=t), retries=False, preload_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, f"transport: {type(e).__name__}: {e}", None, method, path) from None
        data = resp.data
        try:
            doc = loads(data) if data else None
        except ValueError:
            doc = None
        if resp.status >= 300:
            raise ApiError(resp.status, resp.reason or "", doc, method, path)
        return doc

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: dict, **query: Any) -> Any:
        return self.request("POST", path, body, query=query)

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH, **query: Any) -> Any:
        return self.request("PATCH", path, body, query=query, content_type=content_type)

    def delete(self, path: str, body: dict | None = None, **query: Any) -> Any:
        return self.request("DELETE", path, body, query=query)

    def stream_lines(self, path: str, query: dict, read_timeout: float) -> Iterator[dict]:
        """A watch: one decoded JSON event per line. Ends when the server closes the stream."""
        url, hdrs = self._prepare("GET", path, query, {"Accept": JSON})
        try:
            resp = self.api.rest_client.pool_manager.request(
                "GET", url, headers=hdrs, preload_content=False, retries=False,
                timeout=urllib3.Timeout(connect=5.0, read=read_timeout))
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, f"transport: {type(e).__name__}: {e}", None, "WATCH", path) from None
        try:
            if resp.status >= 300:
                data = resp.read()
                try:
                    doc = loads(data) if data else None
                except ValueError:
                    doc = None
                raise ApiError(resp.status, resp.reason or "", doc, "WATCH", path)
            buf = b""
            try:
                for chunk in resp.stream(1 << 16, decode_content=True):
                    buf += chunk
                    while True:
                        nl = buf.find(b"\n")
                        if nl < 0:
                            break
                        line, buf = buf[:nl], buf[nl + 1:]
                        if line.strip():
                            yield loads(line)
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise ApiError(0, f"transport: {type(e).__name__}: {e}", None, "WATCH", path) from None
        finally:
            resp.release_conn()
            resp.close()


def object_path(group_version: str, plural: str, namespace: str | None = None, name: str | None = None,
                sub: str | None = None) -> str:
    """/api/v1/... for the core group, /apis/<group>/<version>/... otherwise."""
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    if sub:
        base += f"/{sub}"
    return base


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


__all__ = ["ApiError", "Kube", "load_api_client", "object_path", "now_rfc3339", "loads", "dumps",
           "JSON", "MERGE_PATCH", "STRATEGIC_PATCH", "urlencode"]
