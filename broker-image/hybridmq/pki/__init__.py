"""A small certificate authority (the ``cryptography`` package): the cluster CA the operator runs and
the throwaway one of ``hybridmq local --tls``. Imports nothing of ours."""

from hybridmq.pki.ca import (
    Issued,
    issue,
    needs_renewal,
    new_ca,
    revocation_list,
    serial_of,
    write_tls_dir,
)

__all__ = ["Issued", "issue", "needs_renewal", "new_ca", "revocation_list", "serial_of", "write_tls_dir"]
