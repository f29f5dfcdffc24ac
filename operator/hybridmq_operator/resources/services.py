"""Headless Services (stable pod DNS for each role) and the client Service in front of the CMs."""

from hybridmq_operator import names
from hybridmq_operator.resources.common import Manifest, metadata
from hybridmq_operator.settings import ClusterSettings


def build_headless_service(settings: ClusterSettings, role: str) -> Manifest:
    port_name, port = ("client", names.CM_CLIENT_PORT) if role == names.ROLE_CM else ("mm", names.MM_PORT)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(settings, names.headless_service_name(settings.name, role), role),
        "spec": {
            "clusterIP": "None",
            # Peers must find each other before they are Ready (replication catch-up).
            "publishNotReadyAddresses": True,
            "selector": names.selector_labels(settings.name, role),
            "ports": [
                {"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"},
                {"name": "http", "port": names.HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }


def build_client_service(settings: ClusterSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(settings, names.client_service_name(settings.name), names.ROLE_CM),
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector_labels(settings.name, names.ROLE_CM),
            "ports": [
                {
                    "name": "client",
                    "port": names.CM_CLIENT_PORT,
                    "targetPort": "client",
                    "protocol": "TCP",
                },
                {"name": "http", "port": names.HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }
