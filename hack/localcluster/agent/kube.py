"""A small JSON-in, JSON-out layer over the official `kubernetes` client's ApiClient.

The agent works with plain dicts (the API's own JSON) instead of generated models: status patches,
watches and TokenRequests stay exactly what the API server documents.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import config

JSON = dict[str, Any]


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class Kube:
    """Minimal REST verbs on top of one `kubernetes.client.ApiClient`."""

    def __init__(self, kubeconfig: str) -> None:
        self.api: Any = config.new_client_from_config(config_file=kubeconfig)
        self.host: str = self.api.configuration.host

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = 30,
        stream: bool = False,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, _, _ = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        resp = self.api.rest_client.request(method, url, headers=headers, body=body, _request_timeout=timeout)
        raw = resp.response
        if stream:
            if raw.status >= 300:
                text = raw.read().decode("utf-8", "replace")
                raw.release_conn()
                raise ApiError(raw.status, text)
            return raw
        payload = resp.read().decode("utf-8", "replace")
        if raw.status >= 300:
            raise ApiError(raw.status, payload)
        return json.loads(payload) if payload else {}

    def get(self, path: str, query: Mapping[str, Any] | None = None) -> JSON:
        result: JSON = self.request("GET", path, query)
        return result

    def get_or_none(self, path: str) -> JSON | None:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def post(self, path: str, body: Any) -> JSON:
        result: JSON = self.request("POST", path, body=body)
        return result

    def put(self, path: str, body: Any) -> JSON:
        result: JSON = self.request("PUT", path, body=body)
        return result

    def merge_patch(self, path: str, body: Any) -> JSON:
        result: JSON = self.request("PATCH", path, body=body, content_type="application/merge-patch+json")
        return result

    def delete(self, path: str, body: Any = None) -> JSON:
        result: JSON = self.request("DELETE", path, body=body)
        return result

    def watch(self, path: str, query: Mapping[str, Any], timeout_seconds: int = 60) -> Iterator[JSON]:
        """Yield watch events ({"type", "object"}) until the server ends the watch."""
        params = dict(query)
        params.update({"watch": "true", "timeoutSeconds": timeout_seconds, "allowWatchBookmarks": "true"})
        raw = self.request("GET", path, params, timeout=(10, timeout_seconds + 15), stream=True)
        buffer = b""
        try:
            for chunk in raw.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            raw.release_conn()


def pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


__all__ = ["JSON", "ApiError", "Kube", "pod_path"]
