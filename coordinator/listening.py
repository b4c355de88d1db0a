"""The coordinator's gRPC listener: server options, TLS credentials and why a bind failed.

Kept apart from `Coordinator` so the benchmarks and the web port use the same options and checks.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

import grpc

from fedort.common.errors import ConfigError
from fedort.common.invariants import present
from fedort.coordinator.config import CoordinatorConfig
from fedort.coordinator.rpc.upload_stream import UPLOAD_WINDOW_BYTES


def server_options(config: CoordinatorConfig) -> list[tuple[str, int]]:
    """Message limits sized for the chunk limit (with room for headers), keepalive that allows client pings,
    a bounded per-stream receive window."""
    limit = 2 * max(config.uploads.max_chunk_bytes, config.transport.download_chunk_bytes) + (1 << 20)
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
        # gRPC sets SO_REUSEPORT by default: a second coordinator would bind the same port and split the devices
        ("grpc.so_reuseport", 0),
        # A fixed per-stream receive window instead of BDP probing, which grew each upload's window
        # to ~the whole update while the event loop drained many streams, so peak memory grew
        # with the updates' size. Memory is then O(concurrent uploads x (window + chunk)):
        # benchmarks/bench_upload_memory.py. The window bounds a stream's rate to window / RTT.
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", UPLOAD_WINDOW_BYTES),
    ]


def server_credentials(config: CoordinatorConfig) -> grpc.ServerCredentials | None:
    """TLS credentials from the config's PEM files (client certificates required with tls_client_ca); None: plaintext."""
    if config.transport.tls_cert is None:
        return None
    client_ca = config.transport.tls_client_ca.read_bytes() if config.transport.tls_client_ca else None
    key_file = present(config.transport.tls_key, "tls_key (checked with tls_cert)")
    key, cert = key_file.read_bytes(), config.transport.tls_cert.read_bytes()
    check_key_pair(key, cert, config)
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def check_key_pair(key_pem: bytes, cert_pem: bytes, config: CoordinatorConfig) -> None:
    """ConfigError unless `key_pem` is a PEM private key and `cert_pem` a PEM certificate of its public key.

    gRPC only logs a core error for either and then fails to bind, which reads as an address problem.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as e:
        raise ConfigError(
            f"--tls-cert {config.transport.tls_cert} is not a PEM certificate ({e}); expected the server's "
            "certificate (chain) in PEM, -----BEGIN CERTIFICATE-----"
        ) from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise ConfigError(
            f"--tls-key {config.transport.tls_key} is not an unencrypted PEM private key ({e}); expected the "
            "key of --tls-cert, -----BEGIN PRIVATE KEY----- (or EC/RSA PRIVATE KEY)"
        ) from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise ConfigError(
            f"--tls-key {config.transport.tls_key} is not the private key of --tls-cert {config.transport.tls_cert} "
            f"(certificate subject {cert.subject.rfc4514_string()}); pass the key the certificate "
            "was issued for"
        )


def bind_failure(host: str, port: int) -> str:
    """Why gRPC could not bind HOST:PORT, asked of the OS directly (gRPC only says it failed)."""
    try:
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host.strip("[]"), port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return f": address in use (another process listens on port {port}; stop it or pick another --address)"
        return f": {e.strerror or e}"
    return " (address in use or not local?)"


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
