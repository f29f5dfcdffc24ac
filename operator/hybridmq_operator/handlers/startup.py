"""Operator-wide settings, applied once at startup."""

from __future__ import annotations

import os
from typing import Any

import kopf

from hybridmq_operator import names, peering


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Kopf's own bookkeeping goes to annotations under a prefix of its own (see the name), never
    # into our status schemas.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.KOPF_STORAGE_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=names.KOPF_STORAGE_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = names.OPERATOR_FINALIZER
    settings.posting.reporting_component = names.MANAGER
    settings.posting.reporting_instance = os.environ.get("HOSTNAME", "local")
    settings.peering.lifetime = int(memo.get("peering_lifetime") or peering.DEFAULT_LIFETIME_S)
    settings.peering.stealth = True
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 16
    # No dynamic discovery of CRDs/namespaces: fewer permissions, and the CRDs are installed first.
    settings.scanning.disabled = os.environ.get("HYBRIDMQ_OPERATOR_SCANNING", "") != "1"
