"""Client authentication (salted password hashes) and per-destination ACLs."""

from hybridmq.broker.auth.acl import AclTable
from hybridmq.broker.auth.credentials import CredentialStore

__all__ = ["AclTable", "CredentialStore"]
