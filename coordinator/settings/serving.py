"""The serving-side sections of a coordinator config: listening (transport), callers (access), updates (uploads)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedort.common import digests
from fedort.common.settings.options import as_path, as_tuple, host_port_ok, is_int, is_number, need, option
from fedort.protos.vector_stream import CHUNK_BYTES, MAX_CHUNK_BYTES

_TLS_FILES = ("tls_cert", "tls_key", "tls_client_ca")


@dataclass(frozen=True)
class TransportSettings:
    """Where the coordinator listens and how: the gRPC port, TLS, the web port, metrics, co-located files."""

    address: str = option("127.0.0.1:7420", "HOST:PORT to listen on (port 0 picks a free port)", metavar="HOST:PORT")
    port_file: Path | None = option(None, "file that receives the bound port once serving", metavar="FILE")
    tls_cert: Path | None = option(None, "PEM server certificate (chain): serve TLS", metavar="CERT.pem")
    tls_key: Path | None = option(None, "PEM private key of tls_cert", metavar="KEY.pem")
    tls_client_ca: Path | None = option(
        None, "PEM CA that must have signed every client's certificate (mutual TLS)", metavar="CA.pem"
    )
    tls_bind_client_id: bool = option(
        True,
        "with tls_client_ca and token auth: a call's certificate must name its token's client id (subject CN or "
        "a subjectAltName entry), else UNAUTHENTICATED (`coordinator.rpc.peer_certificate`)",
    )
    insecure: bool = option(False, "serve plaintext; required (explicitly) when no TLS certificate is given")
    download_chunk_bytes: int = option(CHUNK_BYTES, "chunk size of vector and artifact downloads")
    metrics_address: str | None = option(None, "HOST:PORT serving Prometheus metrics at /metrics", metavar="HOST:PORT")
    web_address: str | None = option(
        None,
        "HOST:PORT also serving the service to browsers over Connect / gRPC-Web (fedort[web]; TLS as the gRPC port)",
        metavar="HOST:PORT",
    )
    web_cors_origins: tuple[str, ...] = option(
        (), "origins besides the page's own that browsers may call the web port from ('*': any)", metavar="ORIGIN,..."
    )
    web_page: Path | None = option(
        None,
        "folder of static files served at / of the web port",
        metavar="DIR",
        doc_default="edge_client/web/dist if built",
    )
    local_vector_dir: Path | None = option(
        None,
        "devices on this host hand over updates and read global vectors as files in DIR (on the state dir's "
        "filesystem) instead of gRPC streams; only for devices trusted like the state dir "
        "(fedort simulate sets STATE/local-vectors)",
        metavar="DIR",
    )

    def __post_init__(self) -> None:
        for name in (*_TLS_FILES, "port_file", "web_page", "local_vector_dir"):
            object.__setattr__(self, name, as_path(getattr(self, name)))
        object.__setattr__(self, "web_cors_origins", as_tuple(self.web_cors_origins))
        need(isinstance(self.address, str) and ":" in self.address, "address must be HOST:PORT", self.address)
        need(host_port_ok(self.address), "address must be HOST:PORT with a port in 0..65535", self.address)
        for name in ("metrics_address", "web_address"):
            value = getattr(self, name)
            need(value is None or host_port_ok(value), f"{name} must be HOST:PORT with a port in 0..65535", value)
        need(
            is_int(self.download_chunk_bytes, 1) and self.download_chunk_bytes <= MAX_CHUNK_BYTES,
            f"download_chunk_bytes must be an integer in 1..{MAX_CHUNK_BYTES} (clients' default 4 MB message limit)",
            self.download_chunk_bytes,
        )
        need(
            (self.tls_cert is None) == (self.tls_key is None),
            "tls_cert and tls_key go together",
            (self.tls_cert, self.tls_key),
        )
        need(
            self.tls_client_ca is None or self.tls_cert is not None,
            "tls_client_ca (mutual TLS) needs tls_cert and tls_key",
            self.tls_client_ca,
        )
        need(
            not (self.insecure and self.tls_cert is not None), "insecure and tls_cert exclude each other", self.insecure
        )

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        return host, int(port)


@dataclass(frozen=True)
class AccessSettings:
    """Who may call the coordinator, and how much each caller may ask of it."""

    auth: str = option(
        "token",
        "token: every RPC but health needs an enrolled device's token (`fedort coordinator enroll`); "
        "open: none (local simulations)",
        choices=("token", "open"),
    )
    unauthenticated_calls: int = option(
        2, "Join calls without a token in metadata served at once; more are refused before their request is read"
    )
    max_streams_per_client: int = option(4, "downloads/uploads one client may have in progress at once (0 disables)")
    submissions_per_minute: float = option(
        60.0, "per-client rate of updates and evaluations, token bucket (0 disables)", metavar="N"
    )
    joins_per_minute: float = option(10.0, "per-client rate of Join calls, token bucket (0 disables)", metavar="N")
    joins_per_minute_per_address: float = option(
        600.0, "per-peer-address rate of Join calls, token bucket (0 disables)", metavar="N"
    )

    def __post_init__(self) -> None:
        need(self.auth in ("token", "open"), "auth must be 'token' or 'open'", self.auth)
        need(
            is_int(self.unauthenticated_calls, 1),
            "unauthenticated_calls must be an integer >= 1",
            self.unauthenticated_calls,
        )
        need(
            is_int(self.max_streams_per_client, 0),
            "max_streams_per_client must be an integer >= 0 (0 disables)",
            self.max_streams_per_client,
        )
        for name in ("submissions_per_minute", "joins_per_minute", "joins_per_minute_per_address"):
            value = getattr(self, name)
            need(is_number(value) and value >= 0, f"{name} must be >= 0 (0 disables)", value)


@dataclass(frozen=True)
class UploadSettings:
    """Receiving updates: what is accepted, how many at once, how slow, and how they are made durable."""

    codecs: tuple[str, ...] = option(
        (),
        "update codecs devices may use (raw, fp16, bf16, int8, topk, zstd+int8, topk:0.01, ...; a family name "
        "admits every parameter; raw is always allowed); announced at Join",
        metavar="SPEC,...",
        doc_default="every registered codec",
    )
    update_digests: tuple[str, ...] = option(
        ("blake3",),
        "digests of update payloads accepted besides sha256 (announced at Join, only those installed); "
        "with blake3 every FIT task also carries the global vector's BLAKE3; empty: sha256 only",
        metavar="NAME,...",
    )
    max_examples: int = option(
        10**9,
        "upper bound of an update's num_examples (its FedAvg weight); a device is also held to the number it "
        "announced at Join",
        doc_default="1000000000",
    )
    max_chunk_bytes: int = option(MAX_CHUNK_BYTES, "largest accepted upload chunk (told to clients at Join)")
    max_vector_length: int = option(1 << 28, "largest accepted vector, in elements")
    max_concurrent_uploads: int = option(
        16, "uploads received at once (each holds a few chunks in memory, never the vector)"
    )
    uploads_per_client: int = option(1, "of which one client may hold at most this many (more: UNAVAILABLE)")
    upload_slot_wait_s: float = option(
        30.0, "an upload waits this long for a slot, then is refused UNAVAILABLE (the device retries)", metavar="S"
    )
    upload_min_rate_bytes_s: float = option(
        65536.0,
        "a whole upload must arrive within upload_grace_s + payload bytes / this rate (and before its round's "
        "deadline), and keep this rate over every upload_rate_window_s, or it loses its slot",
        metavar="BYTES_S",
    )
    upload_rate_window_s: float = option(10.0, "the window an upload's rate is measured over", metavar="S")
    upload_grace_s: float = option(10.0, "the fixed part of an upload's deadline", metavar="S")
    stream_idle_timeout_s: float = option(
        30.0, "an upload that sends nothing this long is dropped (frees its slot)", metavar="S"
    )
    upload_resume_idle_s: float = option(
        60.0, "a resumable upload untouched this long is dropped (NOT_FOUND afterwards)", metavar="S"
    )
    inline_update_bytes: int = option(
        256 << 10,
        "an update (or committed global vector) of at most N payload bytes is made durable inside its SQLite "
        "row, not an fsynced spool file; 0: always the spool file",
    )
    commit_delay_ms: float = option(
        0.0,
        "arrivals wait up to this long to share a group commit (ends early once the round's last update is in)",
        metavar="MS",
    )
    keep_spool: bool = option(False, "keep spooled updates after a round commits")

    def __post_init__(self) -> None:
        from fedort.coordinator.aggregation import codecs

        object.__setattr__(self, "codecs", as_tuple(self.codecs))
        object.__setattr__(self, "update_digests", as_tuple(self.update_digests))
        for name in ("max_examples", "max_chunk_bytes", "max_vector_length"):
            need(is_int(getattr(self, name), 1), f"{name} must be an integer >= 1", getattr(self, name))
        need(self.max_chunk_bytes <= (64 << 20), "max_chunk_bytes must be <= 64 MiB", self.max_chunk_bytes)
        for name in ("max_concurrent_uploads", "uploads_per_client"):
            need(is_int(getattr(self, name), 1), f"{name} must be an integer >= 1", getattr(self, name))
        for name in (
            "upload_slot_wait_s",
            "upload_min_rate_bytes_s",
            "upload_grace_s",
            "upload_resume_idle_s",
            "upload_rate_window_s",
            "stream_idle_timeout_s",
        ):
            need(is_number(getattr(self, name)) and getattr(self, name) > 0, f"{name} must be > 0", getattr(self, name))
        need(
            is_int(self.inline_update_bytes, 0) and self.inline_update_bytes <= 16 << 20,
            "inline_update_bytes must be an integer in 0..16777216",
            self.inline_update_bytes,
        )
        need(
            is_number(self.commit_delay_ms) and 0 <= self.commit_delay_ms <= 60_000,
            "commit_delay_ms must be in 0..60000",
            self.commit_delay_ms,
        )
        need(isinstance(self.keep_spool, bool), "keep_spool must be true or false", self.keep_spool)
        for spec in self.codecs:
            need(
                isinstance(spec, str) and spec.partition(":")[0] in codecs(),
                f"codecs: each entry must be a registered codec family ({', '.join(codecs())}) with an optional "
                f":PARAMETER",
                spec,
            )
        for name in self.update_digests:
            need(name in digests.KNOWN, f"update_digests: each entry must be one of {list(digests.KNOWN)}", name)
