"""`EdgeConfig`: everything one edge client is told, from code, a TOML `[edge]` table or flags.

Flags override the file, the file overrides the defaults (the table in the class docstring).
Relative paths in a file are relative to the file.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedort.common.errors import ConfigError, VectorError
from fedort.common.settings.options import option, renamed_keys
from fedort.common.settings.tomlfile import read_table, unknown_settings
from fedort.edge_client.training.local_round import ModuleFactory, UpdateHook
from fedort.edge_client.transport.grpc_transport import ChannelConfig
from fedort.edge_client.transport.retry import Backoff
from fedort.edge_client.uploads.topk_warmup import DEFAULT as DEFAULT_WARMUP
from fedort.edge_client.uploads.topk_warmup import TopkWarmup
from fedort.protos.update_codecs import parse_codec


@dataclass(frozen=True)
class EdgeConfig:
    """Everything one edge client is told (flags, a TOML `[edge]` table, or code); the fields below are
    the options table README's "Edge client settings" and `fedort edge run`'s flags are made from.

    `local_file_min_bytes`: on the coordinator's host (its JoinReply names a local vector dir) an
    update is handed over as a file only from this size on. A smaller one streams: the coordinator
    keeps it durable inside its submission row (`inline_update_bytes`), so a group of them costs one
    WAL fsync, where a file costs the device a file fsync and the coordinator a folder fsync.
    """

    coordinator: str = option(help="HOST:PORT of the coordinator", metavar="HOST:PORT", doc_default="required")
    data: str | os.PathLike | None = option(
        None,
        "client .npz: arrays named after the model inputs (e.g. x, labels), optionally val_x, val_labels",
        metavar="CLIENT.npz",
    )
    cache_dir: str | os.PathLike | None = option(
        None,
        "artifacts, global vectors and the saved client id",
        metavar="DIR",
        doc_default="$FEDORT_CACHE_DIR or the platform cache/fedort",
    )
    name: str = option(
        help="device name sent at Join (with the address and data file, keys the saved id)",
        default_factory=socket.gethostname,
        doc_default="the host name",
    )
    client_id: str = option(
        "", "join as this client id", metavar="ID", doc_default="the saved one, else one the coordinator assigns"
    )
    module_factory: ModuleFactory | None = option(
        None, "callable(session) -> a TrainingModule (subclass)", flag=False, doc_default="TrainingModule"
    )
    insecure: bool = option(False, "plaintext channel, no TLS (only for a coordinator started with --insecure)")
    ca_file: str | os.PathLike | None = option(
        None, "PEM CA that signed the coordinator's certificate", metavar="CA.pem", doc_default="the system roots"
    )
    cert_file: str | os.PathLike | None = option(
        None, "PEM client certificate for mutual TLS (with key_file)", metavar="CLIENT.pem"
    )
    key_file: str | os.PathLike | None = option(
        None, "PEM client key for mutual TLS (with cert_file)", metavar="CLIENT.key"
    )
    token: str = option(
        "",
        "device token from `fedort coordinator enroll`, sent on every call; names the client id",
        metavar="TOKEN",
        doc_default="$FEDORT_TOKEN",
    )
    poll_wait_ms: int = option(20_000, "how long a long-poll may be held (the coordinator caps it)", metavar="MS")
    rpc_timeout_s: float = option(30.0, "deadline of unary calls", metavar="S")
    stream_timeout_s: float = option(600.0, "deadline of vector streams", metavar="S")
    backoff: Backoff = option(
        help="retry policy; [edge.backoff] table, flag --give-up-after-s",
        default_factory=Backoff,
        flag=False,
        doc_default="0.2 s doubling to 10 s, give up after 300 s",
    )
    heartbeats: bool = option(True, "heartbeat thread while training (interval from the JoinReply)")
    persist_identity: bool = option(True, "save the client id in the cache dir")
    leave_on_stop: bool = option(True, "send Leave when stopped before the run is done")
    intra_op_threads: int = option(0, "ORT threads per training step (0: ORT's default, one per core)")
    update_hook: UpdateHook | None = option(
        None, "research and tests: callable(task, global, trained) -> the vector uploaded instead", flag=False
    )
    max_local_steps: int | None = option(
        None, "at most this many optimizer steps per round (the partial work of a slow device)"
    )
    codec: str = option(
        "raw",
        "update codec: raw, fp16, bf16, int8[:B], topk:F, or zstd+ any of them; used when the coordinator allows "
        "it, else raw",
        metavar="SPEC",
    )
    topk_warmup: str = option(
        DEFAULT_WARMUP,
        "top-k warm-up: FACTOR x F in round 1 decaying to F by round R, or off (used where the coordinator allows "
        "those fractions)",
        metavar="FxR",
    )
    local_dp_clip: float | None = option(
        None, "local DP: clip this device's update delta to L2 norm C before upload", metavar="C"
    )
    local_dp_noise: float = option(
        0.0, "local DP: add Gaussian noise of std Z*C per value before upload (needs local_dp_clip)", metavar="Z"
    )
    local_file_min_bytes: int = option(
        256 * 1024,
        "co-located with the coordinator: a smaller update streams anyway (the coordinator keeps it in its "
        "SQLite row: one WAL fsync for many, where a file costs two fsyncs)",
    )
    upload: str = option(
        "stream",
        "how updates travel: stream, or resumable parts (a cut link resends one part; protocol 1.7, else it streams)",
        choices=("stream", "resumable"),
    )

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
