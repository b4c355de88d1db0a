"""`CoordinatorConfig`: everything `fedort coordinator serve` can be told, in one typed object.

Loaded from a TOML file (a `[coordinator]` table or top-level keys) and/or command-line flags;
flags override the file, the file overrides the defaults below. `validate()` says what was
expected and what arrived.

| key | default | meaning |
| --- | --- | --- |
| artifacts | (required) | folder of training artifacts (`fedort artifacts build`) |
| state_dir | (required) | where SQLite, vectors, spooled updates and exported models live |
| address | 127.0.0.1:7420 | HOST:PORT to listen on (port 0 picks a free port) |
| rounds | 3 | number of federated rounds |
| min_clients | 2 | updates a round needs to close at its deadline |
| min_available_clients | min_clients | available clients before a round starts |
| fraction | 1.0 | share of available clients selected per round |
| round_timeout_s | 60 | round deadline, per attempt |
| max_round_attempts | 3 | attempts before a round (and the run) fails |
| local_epochs / batch_size / lr | 1 / 32 / 0.05 | the clients' local training recipe (batch_size 0: whole local data) |
| reset_optimizer | true | clients start each round with fresh optimizer state |
| prox_mu | 0.0 | FedProx: clients train f + μ/2·‖w − w_global‖² (needs SGD artifacts; 0 = FedAvg) |
| seed | 0 | seeds client selection and the clients' shuffling |
| eval_data | none | held-out `.npz` evaluated on the server after each round |
| fraction_evaluate | 0.0 | share of clients asked to evaluate the final model |
| client_timeout_s | 60 | a client unseen this long is not selected (0 disables) |
| done_grace_s | 10 | after the run ends (DONE or FAILED), `serve` keeps answering for up to this long, so every device learns the outcome (PollTask DONE, then Status) and exits at once with the right code; it stops sooner once every available device has asked. 0: stop at once |
| heartbeat_interval_ms | 10000 | told to clients at join |
| max_examples | 10**9 | upper bound of an update's num_examples (its FedAvg weight); a device that announced its data set size at Join (the `examples` capability; the edge client does) is held to that. Set it to bound a device that lies at Join too |
| max_chunk_bytes | 4 MiB - 64 KiB | largest accepted upload chunk (told to clients at join) |
| download_chunk_bytes | 1 MiB | chunk size of vector and artifact downloads |
| max_vector_length | 2**28 | largest accepted vector (elements) |
| keep_spool | false | keep spooled updates after a round commits |
| export_every | 1 | write the inference model every N rounds (and after the last); 0 = after the last round only. Other rounds record only model.json (server eval). A simulation option: deployments serve `latest`, which then lags |
| export_external_bytes | 1 MiB | a model whose trainable parameters take at least this many bytes is exported as `model.onnx` + `model.onnx.data` (ONNX external data; the data file is a hard link to the round's committed global vector, so no per-round copy); smaller ones as one self-contained `model.onnx`; 0 = always external. Either loads with `onnxruntime.InferenceSession(model.onnx)` / `onnx.load`; copy the round's folder, not model.onnx alone (`coordinator.export_external`) |
| strategy | fedavg | aggregation: fedavg, clip:NORM, median, trimmed-mean:BETA, krum:F, multi-krum:F:M (coordinator.aggregation) |
| server_optimizer | fedavg | server update after aggregation: fedavg, fedavgm, fedadagrad, fedadam, fedyogi with `:KEY=VALUE,...` options (coordinator.server_optimizers) |
| mode | sync | `sync`: rounds; `async`: FedBuff versions (coordinator.async_engine), `rounds` = versions to commit |
| buffer_size | 10 | async: updates folded into each new global version (K) |
| max_staleness | 10 | async: updates trained on a version more than this many behind are refused (S) |
| staleness_weight | poly:0.5 | async: weight of an update s versions stale: constant, poly:A, hinge:A,B (coordinator.staleness) |
| port_file | none | file that receives the bound port once serving |
| tls_cert / tls_key | none | PEM server certificate (chain) and private key: serve TLS |
| tls_client_ca | none | PEM CA that must have signed every client's certificate (mutual TLS) |
| tls_bind_client_id | true | with tls_client_ca and token auth: a call's certificate must name its token's client id (subject CN or a subjectAltName entry), else UNAUTHENTICATED (`coordinator.rpc.peer_certificate`) |
| insecure | false | serve plaintext; required (explicitly) when no TLS certificate is given |
| auth | token | `token`: every RPC but health needs an enrolled device's token; `open`: none (simulations) |
| max_streams_per_client | 4 | downloads/uploads one client may have in progress at once (0 disables) |
| unauthenticated_calls | 2 | Join calls without a token in metadata served at once (token auth); more are refused RESOURCE_EXHAUSTED before their request is read (`coordinator.call_gate`) |
| stream_idle_timeout_s | 30 | an upload that sends nothing this long is dropped (frees its slot) |
| codecs | all registered | update codecs devices may use (`raw`, `fp16`, `bf16`, `int8`, `topk`, `zstd+int8`, `topk:0.01`, ...; a family name admits every parameter; raw is always allowed); announced at Join |
| max_concurrent_uploads | 16 | uploads received at once (each holds a few chunks in memory, never the vector) |
| uploads_per_client | 1 | of which one client may hold at most this many (more are refused UNAVAILABLE) |
| upload_slot_wait_s | 30 | an upload waits this long for a slot, then is refused UNAVAILABLE (the device retries) |
| upload_min_rate_bytes_s | 65536 | a whole upload must arrive within upload_grace_s + payload bytes / this rate (and never after its round's deadline), and keep this rate over every upload_rate_window_s after the grace, or it loses its slot (`coordinator.upload_progress`) |
| upload_rate_window_s | 10 | the window over which an upload's rate is measured |
| upload_grace_s | 10 | the fixed part of that deadline |
| inline_update_bytes | 262144 | an update of at most this many payload bytes is made durable inside its SQLite row (no spool-file and folder fsync; one WAL fsync per group commit); so is a committed global vector this small (its file is fsynced by the background export); 0 (and with keep_spool, whose files must stay durable after the commit): always through the fsynced spool file |
| commit_delay_ms | 0 | arrivals wait up to this long to share a group commit (ends early once the round's last update is in); 0: a commit starts with the first arrival, later ones join the next |
| submissions_per_minute | 60 | per-client rate of updates and evaluations, token bucket (0 disables) |
| metrics_address | none | HOST:PORT serving Prometheus metrics at /metrics (coordinator.monitoring) |
| joins_per_minute | 10 | per-client rate of Join calls, token bucket (0 disables) |
| joins_per_minute_per_address | 600 | per-peer-address rate of Join calls, token bucket (0 disables) |
| local_vector_dir | none | co-located devices only: a directory on the state dir's filesystem where devices on this host hand over updates as files (by name) and read global vectors, instead of gRPC streams (`coordinator.local_vectors`). Off: a deployed coordinator never opens a client-named file. `fedort simulate` sets it to STATE/local-vectors |
| update_digests | blake3 | digests of update payloads accepted besides sha256 (protocol 1.3, `protos.digests`; announced at Join; only those installed here are announced; with blake3 every FIT task also carries the global vector's BLAKE3, which a device may ask its streamed download to be checked with, protocol 1.6); `[]`: sha256 only |
| upload_resume_idle_s | 60 | a resumable upload (protocol 1.7) untouched this long is dropped (NOT_FOUND afterwards) |
| web_address | none | HOST:PORT serving the same service to browsers over Connect / gRPC-Web (`fedort[web]`, coordinator.web_transport) |
| web_cors_origins | [] | origins besides the page's own that browsers may call the web port from (`*`: any) |
| web_page | packaged page | folder of static files served at `/` of the web port (default `edge_client/web/dist` if present) |
| secagg, secagg_* , dp_* | off | privacy: see `coordinator.privacy_config`, applied by `coordinator.privacy_round` |
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedort.common import digests
from fedort.common.errors import ConfigError
from fedort.common.tomlfile import read_table, unknown_settings
from fedort.coordinator.aggregation import codecs, parse_strategy
from fedort.coordinator.aggregation.server_optimizers import canonical_spec, parse_server_optimizer
from fedort.coordinator.export.external_data import EXTERNAL_MIN_BYTES
from fedort.coordinator.fedbuff.config import AsyncSettings
from fedort.coordinator.fedbuff.staleness import parse_staleness_weight
from fedort.coordinator.privacy.config import PrivacySettings, privacy_problems
from fedort.protos.vector_stream import CHUNK_BYTES, MAX_CHUNK_BYTES

_PATH_FIELDS = (
    "artifacts",
    "state_dir",
    "eval_data",
    "port_file",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "local_vector_dir",
    "web_page",
)


@dataclass(frozen=True)
class CoordinatorConfig(AsyncSettings, PrivacySettings):
    """How one coordinator runs: where its state lives, the round plan and the clients' recipe; the async
    (`mode`, `buffer_size`, `max_staleness`, `staleness_weight`) and privacy (`secagg*`, `dp_*`) fields are
    inherited, keyword-only, from the settings `fedort simulate` shares."""

    artifacts: Path
    state_dir: Path
    address: str = "127.0.0.1:7420"
    rounds: int = 3
    min_clients: int = 2
    min_available_clients: int | None = None
    fraction: float = 1.0
    round_timeout_s: float = 60.0
    max_round_attempts: int = 3
    local_epochs: int = 1
    batch_size: int = 32
    lr: float = 0.05
    reset_optimizer: bool = True
    prox_mu: float = 0.0
    seed: int = 0
    eval_data: Path | None = None
    fraction_evaluate: float = 0.0
    client_timeout_s: float = 60.0
    done_grace_s: float = 10.0
    heartbeat_interval_ms: int = 10_000
    max_examples: int = 10**9
    max_chunk_bytes: int = MAX_CHUNK_BYTES
    download_chunk_bytes: int = CHUNK_BYTES
    max_vector_length: int = 1 << 28
    keep_spool: bool = False
    export_every: int = 1
    export_external_bytes: int = EXTERNAL_MIN_BYTES
    strategy: str = "fedavg"
    server_optimizer: str = "fedavg"
    port_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    tls_bind_client_id: bool = True
    insecure: bool = False
    auth: str = "token"
    max_streams_per_client: int = 4
    unauthenticated_calls: int = 2
    stream_idle_timeout_s: float = 30.0
    submissions_per_minute: float = 60.0
    joins_per_minute: float = 10.0
    metrics_address: str | None = None
    joins_per_minute_per_address: float = 600.0
    codecs: tuple[str, ...] = ()
    max_concurrent_uploads: int = 16
    uploads_per_client: int = 1
    upload_slot_wait_s: float = 30.0
    upload_min_rate_bytes_s: float = 65536.0
    upload_grace_s: float = 10.0
    upload_rate_window_s: float = 10.0
    local_vector_dir: Path | None = None
    commit_delay_ms: float = 0.0
    inline_update_bytes: int = 256 << 10
    update_digests: tuple[str, ...] = ("blake3",)
    upload_resume_idle_s: float = 60.0
    web_address: str | None = None
    web_cors_origins: tuple[str, ...] = ()
    web_page: Path | None = None
    extra: Mapping[str, str] = field(default_factory=dict)  # passed to clients in TrainConfig.extra

    def __post_init__(self) -> None:
        for name in _PATH_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        if isinstance(self.codecs, str):
            object.__setattr__(self, "codecs", tuple(c.strip() for c in self.codecs.split(",") if c.strip()))
        elif not isinstance(self.codecs, tuple):
            object.__setattr__(self, "codecs", tuple(self.codecs))
        if isinstance(self.update_digests, str):
            object.__setattr__(
                self, "update_digests", tuple(c.strip() for c in self.update_digests.split(",") if c.strip())
            )
        elif not isinstance(self.update_digests, tuple):
            object.__setattr__(self, "update_digests", tuple(self.update_digests))
        if isinstance(self.web_cors_origins, str):
            object.__setattr__(self, "web_cors_origins", (self.web_cors_origins,))
        elif not isinstance(self.web_cors_origins, tuple):
            object.__setattr__(self, "web_cors_origins", tuple(self.web_cors_origins))
        if self.min_available_clients is None:
            object.__setattr__(self, "min_available_clients", self.min_clients)
        self.validate()

    # ---- loading ------------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> CoordinatorConfig:
        """Build from a plain mapping (TOML table, flags); unknown keys are an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(unknown_settings("coordinator", unknown, known))
        missing = [k for k in ("artifacts", "state_dir") if values.get(k) in (None, "")]
        if missing:
            raise ConfigError(
                f"coordinator needs {' and '.join(missing)} (flag --{missing[0].replace('_', '-')} or config key)"
            )
        try:
            return cls(**dict(values))
        except TypeError as e:
            raise ConfigError(f"bad coordinator settings: {e}") from e

    @classmethod
    def load(cls, toml_path: str | Path | None = None, **overrides: Any) -> CoordinatorConfig:
        """Defaults < TOML file < overrides (None overrides are ignored, so unset flags fall through)."""
        values: dict[str, Any] = {}
        if toml_path is not None:
            values.update(read_toml(Path(toml_path)))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_mapping(values)

    # ---- checks -------------------------------------------------------------------------------

    def validate(self) -> None:
        def need(ok: bool, what: str, value: Any) -> None:
            if not ok:
                raise ConfigError(f"{what}, got {value!r}")

        need(isinstance(self.address, str) and ":" in self.address, "address must be HOST:PORT", self.address)
        host, _, port = self.address.rpartition(":")
        need(
            port.isdigit() and 0 <= int(port) <= 65535 and bool(host),
            "address must be HOST:PORT with a port in 0..65535",
            self.address,
        )
        for name in (
            "rounds",
            "min_clients",
            "max_round_attempts",
            "local_epochs",
            "max_examples",
            "heartbeat_interval_ms",
            "max_chunk_bytes",
            "max_vector_length",
            "download_chunk_bytes",
        ):
            value = getattr(self, name)
            need(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                f"{name} must be an integer >= 1",
                value,
            )
        need(
            isinstance(self.export_every, int) and not isinstance(self.export_every, bool) and self.export_every >= 0,
            "export_every must be an integer >= 0 (0: export after the last round only)",
            self.export_every,
        )
        need(
            isinstance(self.export_external_bytes, int)
            and not isinstance(self.export_external_bytes, bool)
            and self.export_external_bytes >= 0,
            "export_external_bytes must be an integer >= 0 (0: always external data)",
            self.export_external_bytes,
        )
        need(
            isinstance(self.batch_size, int) and not isinstance(self.batch_size, bool) and self.batch_size >= 0,
            "batch_size must be an integer >= 0 (0: each client's whole data set, i.e. FedSGD)",
            self.batch_size,
        )
        need(
            isinstance(self.min_available_clients, int) and self.min_available_clients >= self.min_clients,
            f"min_available_clients must be an integer >= min_clients ({self.min_clients})",
            self.min_available_clients,
        )
        need(_number(self.fraction) and 0 < self.fraction <= 1, "fraction must be in (0, 1]", self.fraction)
        need(
            _number(self.fraction_evaluate) and 0 <= self.fraction_evaluate <= 1,
            "fraction_evaluate must be in [0, 1]",
            self.fraction_evaluate,
        )
        need(
            _number(self.round_timeout_s) and self.round_timeout_s > 0,
            "round_timeout_s must be > 0",
            self.round_timeout_s,
        )
        need(
            _number(self.done_grace_s) and self.done_grace_s >= 0,
            "done_grace_s must be >= 0 (0 stops at the end)",
            self.done_grace_s,
        )
        need(
            _number(self.client_timeout_s) and self.client_timeout_s >= 0,
            "client_timeout_s must be >= 0 (0 disables)",
            self.client_timeout_s,
        )
        need(_number(self.lr) and self.lr >= 0, "lr must be a finite number >= 0", self.lr)
        need(_number(self.prox_mu) and self.prox_mu >= 0, "prox_mu must be a finite number >= 0", self.prox_mu)
        need(isinstance(self.seed, int) and self.seed >= 0, "seed must be an integer >= 0", self.seed)
        need(self.max_chunk_bytes <= (64 << 20), "max_chunk_bytes must be <= 64 MiB", self.max_chunk_bytes)
        need(
            self.download_chunk_bytes <= MAX_CHUNK_BYTES,
            f"download_chunk_bytes must be <= {MAX_CHUNK_BYTES} (clients' default 4 MB message limit)",
            self.download_chunk_bytes,
        )
        need(
            self.eval_data is None or self.eval_data.suffix == ".npz", "eval_data must be an .npz file", self.eval_data
        )
        parse_strategy(self.strategy)  # raises ConfigError naming the accepted specs
        parse_server_optimizer(self.server_optimizer)  # likewise, and checks each option's range
        need(self.mode in ("sync", "async"), "mode must be 'sync' or 'async'", self.mode)
        need(
            isinstance(self.buffer_size, int) and not isinstance(self.buffer_size, bool) and self.buffer_size >= 1,
            "buffer_size must be an integer >= 1",
            self.buffer_size,
        )
        need(
            isinstance(self.max_staleness, int)
            and not isinstance(self.max_staleness, bool)
            and self.max_staleness >= 0,
            "max_staleness must be an integer >= 0",
            self.max_staleness,
        )
        parse_staleness_weight(self.staleness_weight)
        need(
            self.mode == "sync" or parse_strategy(self.strategy).name == "fedavg",
            "mode 'async' folds updates into FedBuff's buffer (a weighted mean): strategy must be 'fedavg'",
            self.strategy,
        )
        need(self.auth in ("token", "open"), "auth must be 'token' or 'open'", self.auth)
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
        need(
            _number(self.stream_idle_timeout_s) and self.stream_idle_timeout_s > 0,
            "stream_idle_timeout_s must be > 0",
            self.stream_idle_timeout_s,
        )
        need(
            isinstance(self.unauthenticated_calls, int) and self.unauthenticated_calls >= 1,
            "unauthenticated_calls must be an integer >= 1",
            self.unauthenticated_calls,
        )
        need(
            isinstance(self.max_streams_per_client, int) and self.max_streams_per_client >= 0,
            "max_streams_per_client must be an integer >= 0 (0 disables)",
            self.max_streams_per_client,
        )
        need(
            _number(self.submissions_per_minute) and self.submissions_per_minute >= 0,
            "submissions_per_minute must be >= 0 (0 disables)",
            self.submissions_per_minute,
        )
        if self.metrics_address is not None:
            m_host, m_sep, m_port = str(self.metrics_address).rpartition(":")
            need(
                bool(m_sep and m_host) and m_port.isdigit() and int(m_port) <= 65535,
                "metrics_address must be HOST:PORT with a port in 0..65535",
                self.metrics_address,
            )
        for name in ("joins_per_minute", "joins_per_minute_per_address"):
            need(
                _number(getattr(self, name)) and getattr(self, name) >= 0,
                f"{name} must be >= 0 (0 disables)",
                getattr(self, name),
            )
        for name in ("max_concurrent_uploads", "uploads_per_client"):
            value = getattr(self, name)
            need(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                f"{name} must be an integer >= 1",
                value,
            )
        for name in (
            "upload_slot_wait_s",
            "upload_min_rate_bytes_s",
            "upload_grace_s",
            "upload_resume_idle_s",
            "upload_rate_window_s",
        ):
            need(_number(getattr(self, name)) and getattr(self, name) > 0, f"{name} must be > 0", getattr(self, name))
        if self.web_address is not None:
            host, _, port = self.web_address.rpartition(":")
            need(
                port.isdigit() and 0 <= int(port) <= 65535 and bool(host),
                "web_address must be HOST:PORT with a port in 0..65535",
                self.web_address,
            )
        if self.local_vector_dir is not None:
            from fedort.coordinator.state.layout import StateLayout

            need(
                self.local_vector_dir.resolve() not in StateLayout(self.state_dir.resolve()).reserved(),
                "local_vector_dir must not be the state dir or one of its own folders (e.g. STATE/local-vectors)",
                str(self.local_vector_dir),
            )
        need(
            isinstance(self.inline_update_bytes, int)
            and not isinstance(self.inline_update_bytes, bool)
            and 0 <= self.inline_update_bytes <= 16 << 20,
            "inline_update_bytes must be an integer in 0..16777216",
            self.inline_update_bytes,
        )
        need(
            _number(self.commit_delay_ms) and 0 <= self.commit_delay_ms <= 60_000,
            "commit_delay_ms must be in 0..60000",
            self.commit_delay_ms,
        )
        for spec in self.codecs:
            family = spec.partition(":")[0]
            need(
                isinstance(spec, str) and family in codecs(),
                f"codecs: each entry must be a registered codec family ({', '.join(codecs())}) with an optional "
                f":PARAMETER",
                spec,
            )
        for name in self.update_digests:
            need(name in digests.KNOWN, f"update_digests: each entry must be one of {list(digests.KNOWN)}", name)
        problems = privacy_problems({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, self.strategy)
        private = self.secagg or self.dp_noise_multiplier > 0 or self.dp_clip is not None
        central_dp = not self.secagg and (self.dp_noise_multiplier > 0 or self.dp_clip is not None)
        if central_dp and canonical_spec(self.server_optimizer) != canonical_spec("fedavg"):
            problems.append(
                f"server_optimizer {self.server_optimizer!r} does not compose with central DP (--dp-* "
                "without --secagg) yet: its chain has its own server update (adaptive clipping); use "
                "server_optimizer = 'fedavg', or --secagg, whose unmasked sum feeds any server optimizer"
            )
        if private and self.mode == "async":
            problems.append("mode 'async' does not support --secagg/--dp-* (their rounds need a fixed cohort)")
        if problems:
            raise ConfigError("; ".join(problems))

    def check_transport_security(self) -> None:
        """ConfigError unless the server is told to use TLS or, explicitly, plaintext."""
        if self.tls_cert is None and not self.insecure:
            raise ConfigError(
                "the coordinator needs TLS or an explicit opt-out: pass --tls-cert FILE --tls-key FILE "
                "(and --tls-client-ca FILE for mutual TLS), or --insecure for plaintext "
                "(config keys tls_cert/tls_key or insecure = true)"
            )
        for name in ("tls_cert", "tls_key", "tls_client_ca"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ConfigError(f"{name} file not found: {path}")

    # ---- views --------------------------------------------------------------------------------

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        return host, int(port)

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (paths as strings), as recorded in the state dir and model.json."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = (
                str(v)
                if isinstance(v, Path)
                else (dict(v) if isinstance(v, Mapping) else list(v) if isinstance(v, tuple) else v)
            )
        return out

    def exports_model(self, round: int) -> bool:
        """Whether round `round`'s commit writes an inference model (`export_every`; the last round always does)."""
        n = self.export_every
        return round >= self.rounds or (n > 0 and round % n == 0)

    def training_json(self) -> dict[str, Any]:
        """The part of the config that shapes the model (recorded with each export)."""
        keys = (
            "rounds",
            "min_clients",
            "fraction",
            "local_epochs",
            "batch_size",
            "lr",
            "reset_optimizer",
            "seed",
            "round_timeout_s",
            "strategy",
            "prox_mu",
            "codecs",
        )
        out = {**{k: getattr(self, k) for k in keys}, "server_optimizer": canonical_spec(self.server_optimizer)}
        if self.mode == "async":
            out.update(
                mode="async",
                buffer_size=self.buffer_size,
                max_staleness=self.max_staleness,
                staleness_weight=str(parse_staleness_weight(self.staleness_weight)),
            )
        return out

    def __str__(self) -> str:
        return json.dumps(self.to_json_dict(), sort_keys=True)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def read_toml(path: Path) -> dict[str, Any]:
    """The coordinator settings in a TOML file: its `[coordinator]` table, else its top level."""
    return read_table(path, "coordinator", _PATH_FIELDS)
