"""The CM's users and ACLs from the Secret the operator writes from BrokerUsers (``<c>-users``:
``credentials`` = ``user:pbkdf2$...`` lines, ``acl.json``), read through the API server.

A mounted Secret is refreshed by the kubelet only after a minute or more; reading it every
``interval`` (one GET of one object, which the brokers' Role allows by name) puts a user's new ACL
or removal on the CMs within seconds. ``poll`` is what ``CM._follow_auth`` calls (on an executor
thread): new tables when the Secret's resourceVersion moved, else None.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from hybridmq.broker.auth.acl import AclTable
from hybridmq.broker.auth.credentials import CredentialStore

log = logging.getLogger(__name__)


def tables_of(data: dict[str, str]) -> tuple[CredentialStore, AclTable]:
    """The Secret's decoded data as the CM's tables (an empty Secret: nobody is admitted)."""
    store = CredentialStore({})
    for line in data.get("credentials", "").splitlines():
        user, _, stored = line.strip().partition(":")
        if user and stored:
            store.add(user, stored)
    return store, AclTable(json.loads(data.get("acl.json") or "{}"))


class KubeUsersSecret:
    def __init__(self, namespace: str, name: str, api_client: Any = None) -> None:
        self.namespace = namespace
        self.name = name
        self._api_client = api_client
        self._version: str | None = None
        self.reloads = 0

    def _core(self) -> Any:
        from kubernetes import client

        if self._api_client is None:
            from hybridmq.broker.kube_source import load_api_client

            self._api_client = load_api_client()
        return client.CoreV1Api(self._api_client)

    def poll(self) -> tuple[CredentialStore, AclTable] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            secret = self._core().read_namespaced_secret(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading Secret %s/%s: %s", self.namespace, self.name, exc.reason)
                return None
            version, data = "absent", {}
        else:
            version = str(secret.metadata.resource_version)
            data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        if version == self._version:
            return None
        try:
            tables = tables_of(data)
        except ValueError as exc:  # unreadable acl.json: keep the previous tables
            log.warning("Secret %s/%s not taken up: %s", self.namespace, self.name, exc)
            return None
        self._version = version
        self.reloads += 1
        return tables
