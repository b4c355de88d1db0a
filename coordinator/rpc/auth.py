"""`Authenticator`: who is calling — the device a bearer token names, checked on every call.

Mode `token` (the default): every RPC but health carries `authorization: Bearer <token>` in its
metadata (Join may instead carry it in `JoinRequest.credential`); the token is verified against
the state dir's `DeviceStore` on each call, so revocation is immediate. The authenticated client
id IS the caller's identity: a request naming another client id is PERMISSION_DENIED. Mode
`open`: no authentication (local simulations, tests); the request's client id is trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fedort.common.errors import ConfigError, PermissionDeniedError, UnauthenticatedError
from fedort.common.invariants import present
from fedort.coordinator.rpc.devices import DeviceStore

log = logging.getLogger(__name__)

AUTH_MODES = ("token", "open")
_SCHEME = "bearer "


class Authenticator:
    """Maps call metadata to an authenticated client id (None in open mode)."""

    def __init__(self, mode: str, devices: DeviceStore | None) -> None:
        if mode not in AUTH_MODES:
            raise ConfigError(f"auth must be one of {AUTH_MODES}, got {mode!r}")
        if mode == "token" and devices is None:
            raise ConfigError("token auth needs a device store")
        self.mode = mode
        self.devices = devices

    @property
    def open(self) -> bool:
        return self.mode == "open"

    def identify(self, metadata: Sequence[tuple[str, str | bytes]] | None, credential: str = "") -> str | None:
        """The client id the call's token authenticates (None in open mode); UNAUTHENTICATED otherwise."""
        if self.open:
            return None
        token = ""
        for key, value in metadata or ():
            if key.lower() == "authorization":
                value = value.decode(errors="replace") if isinstance(value, bytes) else value
                if not value.lower().startswith(_SCHEME):
                    raise UnauthenticatedError(
                        "authorization metadata must be 'Bearer <device token>', got scheme "
                        f"{value.split(' ', 1)[0][:20]!r}"
                    )
                token = value[len(_SCHEME) :].strip()
                break
        token = token or credential
        if not token:
            raise UnauthenticatedError(
                "this coordinator requires a device token: send metadata 'authorization: "
                "Bearer <token>' (`fedort edge run --token`); tokens come from "
                "`fedort coordinator enroll NAME`"
            )
        return present(self.devices, "the device store (token auth has one)").verify(token)


def check_identity(identity: str | None, client_id: str) -> None:
    """PERMISSION_DENIED when an authenticated caller names a client id other than its own."""
    if identity is not None and client_id != identity:
        raise PermissionDeniedError(
            f"authenticated as {identity}, but the request names client {client_id or '(none)'}; "
            "a device may only act as itself"
        )


__all__ = ["AUTH_MODES", "Authenticator", "check_identity"]
