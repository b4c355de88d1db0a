"""A mutual-TLS client certificate bound to the device token: each proves the other's device.

With `tls_client_ca` and token auth (and `tls_bind_client_id`, the default), a call is served only
when the certificate it came with names the client id its token authenticates: the certificate
names client id X when its subject common name is X or one of its subjectAltName entries (DNS,
URI, e-mail or IP, as text) is X, compared exactly. A stolen token is then of no use without its
device's key, and a certificate of one device does not carry another's token. Otherwise the call
is UNAUTHENTICATED (the two credentials do not authenticate one device, so there is no caller to
deny permission to), and the message says which names the certificate carries and which id the
token names. The names come from gRPC's auth context (`x509_common_name`,
`x509_subject_alternative_name`), already parsed at the handshake.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedort.common.errors import ConfigError, UnauthenticatedError
from fedort.coordinator.rpc.join_limits import clip

if TYPE_CHECKING:
    from fedort.coordinator.config import CoordinatorConfig

_CN = "x509_common_name"
_SAN = "x509_subject_alternative_name"
_PEM = "x509_pem_cert"
_SHOWN = 4  # names quoted in a refusal


def _texts(values: Iterable[bytes | str]) -> tuple[str, ...]:
    return tuple(v.decode(errors="replace") if isinstance(v, bytes) else v for v in values)


@dataclass(frozen=True)
class PeerCertificate:
    """The names a call's client certificate carries."""

    common_name: str
    alt_names: tuple[str, ...]

    @classmethod
    def of(cls, auth_context: Mapping[str, Iterable[bytes | str]]) -> PeerCertificate | None:
        """The certificate of a call's `context.auth_context()`; None when the call came without one."""
        common = _texts(auth_context.get(_CN, ()))
        alt = _texts(auth_context.get(_SAN, ()))
        if not any(common) and not alt and not auth_context.get(_PEM):
            return None
        return cls(common[0] if common else "", alt)

    def names(self, client_id: str) -> bool:
        return client_id in (self.common_name, *self.alt_names)

    def describe(self) -> str:
        parts = [f"subject CN {clip(self.common_name, 64)!r}"] if self.common_name else []
        if self.alt_names:
            shown = ", ".join(repr(clip(n, 64)) for n in self.alt_names[:_SHOWN])
            more = f" and {len(self.alt_names) - _SHOWN} more" if len(self.alt_names) > _SHOWN else ""
            parts.append(f"subjectAltName {shown}{more}")
        return " and ".join(parts) or "no subject CN and no subjectAltName"


def binds_tokens(config: CoordinatorConfig) -> bool:
    """Whether calls must come with a certificate naming their token's client id (mutual TLS, token auth)."""
    return (
        config.transport.tls_client_ca is not None
        and config.access.auth == "token"
        and config.transport.tls_bind_client_id
    )


def check_web_port(config: CoordinatorConfig) -> None:
    """ConfigError for a web port beside bound mutual TLS: its HTTP server does not tell which certificate a call
    came with, so the binding could not be checked there."""
    if binds_tokens(config) and config.transport.web_address:
        raise ConfigError(
            "the web port cannot tell which client certificate a call came with, so it cannot check that the "
            "certificate names the token's client id (tls_bind_client_id, on with --tls-client-ca and token auth); "
            "pass --no-tls-bind-client-id to serve --web-address over mutual TLS without that check"
        )


def check_bound(certificate: PeerCertificate | None, client_id: str) -> None:
    """UNAUTHENTICATED unless `certificate` names `client_id` (the id the call's token authenticates)."""
    if certificate is None:
        raise UnauthenticatedError(
            f"the call came without a client certificate, but the token is client {client_id}'s; with mutual "
            f"TLS a token is accepted only with its device's certificate (subject CN or a subjectAltName {client_id})"
        )
    if not certificate.names(client_id):
        raise UnauthenticatedError(
            f"the client certificate names {certificate.describe()}, but the token is client {client_id}'s; "
            f"with mutual TLS a token is accepted only with its device's certificate: present the certificate "
            f"issued for {client_id} (subject CN or a subjectAltName {client_id})"
        )


__all__ = ["PeerCertificate", "binds_tokens", "check_bound", "check_web_port"]
