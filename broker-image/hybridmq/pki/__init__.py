"""A small certificate authority (the ``cryptography`` package): the cluster CA the operator runs and
the throwaway one of ``hybridmq local --tls``. Imports nothing of ours."""

from hybridmq.pki.ca import (
    CertInfo,
    Issued,
    describe,
    issue,
    key_id,
    new_ca,
    revocation_list,
    serial_of,
    write_tls_dir,
)

__all__ = [
    "CertInfo",
    "Issued",
    "describe",
    "issue",
    "key_id",
    "new_ca",
    "revocation_list",
    "serial_of",
    "write_tls_dir",
]
