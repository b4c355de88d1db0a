"""Where the coordinator is and how the device's channel to it is made: address checks, TLS credentials,
keepalive and message-size options (`edge_client.transport` makes the calls)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import grpc

from fedort.common.errors import ConfigError


@dataclass(frozen=True)
class ChannelConfig:
    """Where the coordinator is and how calls to it are bounded.

    keepalive: a ping every `keepalive_time_ms` even with no call in flight, and the connection
    is dropped (then re-dialled on the next call) if a ping is not answered within
    `keepalive_timeout_ms`. Coordinators must allow pings this often (grpc servers default to
    one per 5 minutes without data; fedort's coordinator is configured to accept ours).
    """

    address: str
    insecure: bool = False  # plaintext; must be asked for explicitly
    ca_file: str | os.PathLike | None = None  # PEM CA that signed the coordinator's certificate (None: system roots)
    cert_file: str | os.PathLike | None = None  # PEM client certificate chain (mutual TLS)
    key_file: str | os.PathLike | None = None  # PEM client private key (mutual TLS)
    token: str = ""  # device token sent on every call
    rpc_timeout_s: float = 30.0  # unary calls (Join, Heartbeat, SubmitEvaluation, ...)
    stream_timeout_s: float = 600.0  # artifact/vector downloads and update uploads
    keepalive_time_ms: int = 60_000
    keepalive_timeout_ms: int = 20_000
    max_message_bytes: int = 8 << 20  # > the largest chunk the codec allows (4 MiB - 64 KiB)

    def __post_init__(self) -> None:
        if "://" in self.address or self.address.lower().startswith(("http:", "https:", "grpc:", "dns:")):
            raise ConfigError(
                f"coordinator address must be HOST:PORT without a scheme, got {self.address!r} "
                "(drop the 'http://' or 'grpc://' prefix; TLS is chosen by --insecure/--ca-file)"
            )
        host, sep, port = self.address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"coordinator address must be HOST:PORT with a port in 1..65535, got {self.address!r}")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("a client certificate needs both cert_file and key_file (--cert-file and --key-file)")
        if self.insecure and (self.ca_file or self.cert_file):
            raise ConfigError("insecure (plaintext) excludes ca_file/cert_file/key_file; choose TLS or --insecure")
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"{name} not found: {path}")
        if any(c in self.token for c in "\r\n"):
            raise ConfigError("token must be one line")

    def check_resolves(self) -> None:
        """ConfigError at once when the coordinator's host name does not resolve (a typo never heals by retrying)."""
        host, _, port = self.address.rpartition(":")
        try:
            socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise ConfigError(
                f"cannot resolve the coordinator host {host!r} of --coordinator {self.address!r}: {e.strerror or e}"
            ) from None

    def credentials(self) -> grpc.ChannelCredentials:
        """TLS credentials from the PEM files (read now, so a bad path fails at connect, not mid-run)."""

        def read(path) -> bytes | None:
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file) if self.ca_file else None,
            private_key=read(self.key_file) if self.key_file else None,
            certificate_chain=read(self.cert_file) if self.cert_file else None,
        )

    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        return (("authorization", f"Bearer {self.token}"),) if self.token else None

    def open_channel(self, *, own_connection: bool = False) -> grpc.Channel:
        """A channel; `own_connection` keeps it off the process-wide subchannel pool (a new TCP connection)."""
        options = self.options() + ([("grpc.use_local_subchannel_pool", 1)] if own_connection else [])
        if self.insecure:
            return grpc.insecure_channel(self.address, options=options)
        return grpc.secure_channel(self.address, self.credentials(), options=options)

    def options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
        ]


__all__ = ["ChannelConfig"]
