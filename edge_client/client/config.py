"""`EdgeConfig`: everything one edge client is told, from code, a TOML `[edge]` table or flags.

Flags override the file, the file overrides the defaults (the table in the class docstring).
Relative paths in a file are relative to the file.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedort.common.errors import ConfigError, VectorError
from fedort.common.options import renamed_keys
from fedort.common.tomlfile import read_table, unknown_settings
from fedort.edge_client.training.local_round import ModuleFactory, UpdateHook
from fedort.edge_client.transport.grpc_transport import ChannelConfig
from fedort.edge_client.transport.retry import Backoff
from fedort.edge_client.uploads.topk_warmup import DEFAULT as DEFAULT_WARMUP
from fedort.edge_client.uploads.topk_warmup import TopkWarmup
from fedort.protos.update_codecs import parse_codec


@dataclass(frozen=True)
class EdgeConfig:
    """Everything one edge client is told (flags, a TOML `[edge]` table, or code).

    | field | default | meaning |
    | --- | --- | --- |
    | coordinator | (required) | HOST:PORT of the coordinator |
    | data | none | client `.npz` (arrays named after the model inputs, optional `val_*`) |
    | cache_dir | platform cache + /fedort | artifacts, global vectors, saved client id |
    | name | host name | device name sent at Join (with the address and data file, keys the saved id) |
    | client_id | saved one, else assigned | identity to (re)join as |
    | module_factory | TrainingModule | callable(session) -> a TrainingModule (subclass) |
    | insecure | false | plaintext channel; must be explicit (default: TLS) |
    | ca_file | none | PEM CA that signed the coordinator's certificate (none: system roots) |
    | cert_file / key_file | none | PEM client certificate and key, for a coordinator requiring mutual TLS |
    | token | "" | device token (`fedort coordinator enroll`), sent on every call; names the client id (key `credential` before: deprecated) |
    | poll_wait_ms | 20000 | how long a long-poll may be held (server caps at 30 s) |
    | rpc_timeout_s / stream_timeout_s | 30 / 600 | deadlines of unary calls / vector streams |
    | backoff | Backoff() | retry policy (0.2 s doubling to 10 s, give up after 300 s) |
    | heartbeats | true | heartbeat thread while training (interval from JoinReply) |
    | persist_identity | true | save the client id in the cache dir |
    | leave_on_stop | true | send Leave when stopped before DONE |
    | intra_op_threads | 0 | ORT threads per training step (0: ORT's default, one per core) |
    | update_hook | none | research/testing only: callable(task, global, trained) -> vector uploaded instead |
    | max_local_steps | none | at most this many optimizer steps per round (partial work of a slow device) |
    | codec | "raw" | update codec: `fp16`, `bf16`, `int8`, `topk:0.01`, `zstd+int8`, ... (protos/codecs), if allowed |
    | topk_warmup | "3x45" | top-k: FACTOR x F in round 1 decaying to F by round ROUNDS (`off`: F always; edge_client/uploads/topk_warmup.py) |
    | local_dp_clip / local_dp_noise | none / 0 | local DP: clip the delta to L2 norm C, add N(0, (Z·C)²) before upload |
    | local_file_min_bytes | 262144 | co-located with the coordinator: smaller updates stream anyway (see below) |
    | upload | "stream" | how an update travels: `stream` (SubmitUpdate) or `resumable` (protocol 1.7 parts: a cut link resends one part, not the update; edge_client/uploads/resumable.py) |

    `local_file_min_bytes`: on the coordinator's host (its JoinReply names a local vector dir) an
    update is handed over as a file only from this size on. A smaller one streams: the coordinator
    keeps it durable inside its submission row (`inline_update_bytes`, 256 KiB by default), so a group
    of them costs one WAL fsync, where a file costs the device a file fsync and the coordinator a folder fsync.
    """

    coordinator: str
    data: str | os.PathLike | None = None
    cache_dir: str | os.PathLike | None = None
    name: str = field(default_factory=socket.gethostname)
    client_id: str = ""
    module_factory: ModuleFactory | None = None
    insecure: bool = False
    ca_file: str | os.PathLike | None = None
    cert_file: str | os.PathLike | None = None
    key_file: str | os.PathLike | None = None
    token: str = ""
    poll_wait_ms: int = 20_000
    rpc_timeout_s: float = 30.0
    stream_timeout_s: float = 600.0
    backoff: Backoff = field(default_factory=Backoff)
    heartbeats: bool = True
    persist_identity: bool = True
    leave_on_stop: bool = True
    intra_op_threads: int = 0
    update_hook: UpdateHook | None = None
    max_local_steps: int | None = None
    codec: str = "raw"
    topk_warmup: str = DEFAULT_WARMUP
    local_dp_clip: float | None = None
    local_dp_noise: float = 0.0
    local_file_min_bytes: int = 256 * 1024
    upload: str = "stream"

    def __post_init__(self) -> None:
        if self.local_dp_clip is not None or self.local_dp_noise:
            if self.local_dp_clip is None:
                raise ConfigError(f"local_dp_noise {self.local_dp_noise} needs local_dp_clip (the norm it scales)")
            from fedort.edge_client.uploads.local_dp import LocalDP

            LocalDP(float(self.local_dp_clip), float(self.local_dp_noise))  # ConfigError for bad values
        if self.max_local_steps is not None and (not isinstance(self.max_local_steps, int) or self.max_local_steps < 1):
            raise ConfigError(f"max_local_steps must be a positive integer or None, got {self.max_local_steps!r}")
        try:
            parse_codec(self.codec)
        except VectorError as e:
            raise ConfigError(f"bad codec setting: {e}") from None
        TopkWarmup.parse(self.topk_warmup)  # ConfigError for a malformed schedule
        if self.upload not in UPLOADS:
            raise ConfigError(f"upload must be one of {list(UPLOADS)}, got {self.upload!r}")
        # a device token names its client id: join as that id unless told otherwise
        if self.token and not self.client_id:
            token_id = _token_client_id(self.token)
            if token_id:
                object.__setattr__(self, "client_id", token_id)
        self.channel_config()  # a malformed --coordinator (e.g. an http:// prefix) fails here, at start

    def channel_config(self) -> ChannelConfig:
        return ChannelConfig(
            self.coordinator,
            insecure=self.insecure,
            ca_file=self.ca_file,
            cert_file=self.cert_file,
            key_file=self.key_file,
            token=self.token,
            rpc_timeout_s=self.rpc_timeout_s,
            stream_timeout_s=self.stream_timeout_s,
        )

    @classmethod
    def load(cls, toml_path: str | os.PathLike | None = None, **overrides: Any) -> EdgeConfig:
        """Defaults < TOML file (`[edge]` table or top level) < overrides that are not None."""
        values: dict[str, Any] = {}
        if toml_path is not None:
            values.update(_read_toml(Path(toml_path)))
        values = renamed_keys(values, RENAMED_KEYS, "edge")
        values.update({k: v for k, v in overrides.items() if v is not None})
        backoff = values.pop("backoff", None)
        if isinstance(backoff, Mapping):
            try:
                values["backoff"] = Backoff(**backoff)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"bad [edge.backoff] settings: {e}") from e
        elif backoff is not None:
            values["backoff"] = backoff
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(unknown_settings("edge", unknown, known))
        if not values.get("coordinator"):
            raise ConfigError("edge client needs a coordinator address (--coordinator HOST:PORT or `coordinator` key)")
        return cls(**values)


UPLOADS = ("stream", "resumable")
RENAMED_KEYS = {"credential": "token"}  # old key -> new key, accepted with a warning for one release


def _token_client_id(token: str) -> str:
    """The client id in a `fedort_<client_id>_<secret>` device token ('' for another kind of credential)."""
    head, sep, secret = token.strip().rpartition("_")
    if not sep or not head.startswith("fedort_") or len(secret) != 64:
        return ""
    return head[len("fedort_") :]


def _read_toml(path: Path) -> dict[str, Any]:
    return read_table(path, "edge", ("data", "cache_dir", "ca_file", "cert_file", "key_file"))


__all__ = ["EdgeConfig", "ModuleFactory"]
