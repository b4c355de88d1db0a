"""Bounds on what a Join may carry and how often it may come: a Join is the one call that writes
client-chosen strings into `state.db` and the log, so it is sized and rate-limited before the
engine sees it.

| what | limit | beyond it |
| --- | --- | --- |
| device name | 128 bytes (UTF-8) | INVALID_ARGUMENT |
| capabilities | 64 entries, keys <= 64 bytes, values <= 256 bytes, 4 KiB in all | INVALID_ARGUMENT |
| joins per client | `joins_per_minute` (default 10, burst 10) | RESOURCE_EXHAUSTED "retry in S s" |
| joins per peer address | `joins_per_minute_per_address` (default 600) | RESOURCE_EXHAUSTED "retry in S s" |

`clip` shortens any client-chosen string before it reaches a log line or an error message.
"""

from __future__ import annotations

from collections.abc import Mapping

from fedort.common.errors import ProtocolError
from fedort.coordinator.uploads.client_limits import RateLimiter

MAX_DEVICE_NAME_BYTES = 128
MAX_CAPABILITIES = 64
MAX_CAPABILITY_KEY_BYTES = 64
MAX_CAPABILITY_VALUE_BYTES = 256
MAX_CAPABILITIES_BYTES = 4096
CLIP_CHARS = 80


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """`text` cut to `limit` characters, saying how much was cut (for logs and error messages)."""
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit} chars)"


def check_join_fields(device_name: str, capabilities: Mapping[str, str]) -> None:
    """ProtocolError (INVALID_ARGUMENT) naming the limit when a Join carries too much."""
    size = len(device_name.encode())
    if size > MAX_DEVICE_NAME_BYTES:
        raise ProtocolError(f"device_name must be at most {MAX_DEVICE_NAME_BYTES} bytes, got {size}")
    if len(capabilities) > MAX_CAPABILITIES:
        raise ProtocolError(f"at most {MAX_CAPABILITIES} capabilities per Join, got {len(capabilities)}")
    total = 0
    for key, value in capabilities.items():
        k, v = len(key.encode()), len(value.encode())
        if k > MAX_CAPABILITY_KEY_BYTES:
            raise ProtocolError(
                f"capability names must be at most {MAX_CAPABILITY_KEY_BYTES} bytes, got {k} ({clip(key, 24)!r})"
            )
        if v > MAX_CAPABILITY_VALUE_BYTES:
            raise ProtocolError(
                f"capability values must be at most {MAX_CAPABILITY_VALUE_BYTES} bytes, got {v} for {clip(key, 24)!r}"
            )
        total += k + v
    if total > MAX_CAPABILITIES_BYTES:
        raise ProtocolError(f"capabilities must total at most {MAX_CAPABILITIES_BYTES} bytes, got {total}")


def peer_host(peer: str) -> str:
    """The address part of a gRPC peer string ('ipv4:10.0.0.7:5123' -> 'ipv4:10.0.0.7'), port dropped."""
    head, sep, port = peer.rpartition(":")
    return head if sep and port.isdigit() and head not in ("ipv4", "ipv6") else peer


class JoinGate:
    """Checks one Join: sizes first (cheap, no state), then the per-address and per-client rates."""

    def __init__(self, per_client_per_minute: float, per_address_per_minute: float) -> None:
        self.per_client = RateLimiter(per_client_per_minute)
        self.per_address = RateLimiter(per_address_per_minute)

    def admit(self, device_name: str, capabilities: Mapping[str, str], client_id: str, peer: str) -> None:
        check_join_fields(device_name, capabilities)
        address = peer_host(peer or "")
        self.per_address.take(f"address {clip(address, 64)}", "join")
        if client_id:
            self.per_client.take(clip(client_id, 64), "join")


__all__ = [
    "JoinGate",
    "check_join_fields",
    "clip",
    "peer_host",
    "MAX_DEVICE_NAME_BYTES",
    "MAX_CAPABILITIES",
    "MAX_CAPABILITY_KEY_BYTES",
    "MAX_CAPABILITY_VALUE_BYTES",
    "MAX_CAPABILITIES_BYTES",
]
