"""`CoordinatorConfig`: everything `fedort coordinator serve` can be told, in one typed object of sections.

    config.plan.rounds, config.training.lr, config.uploads.max_concurrent_uploads, config.privacy.secagg

Loaded from a TOML file and/or command-line flags; flags override the file, the file overrides
the defaults. In a file each section is a `[coordinator.<section>]` table (`[coordinator.plan]`
`rounds = 5`); a key may also sit directly in `[coordinator]` (every key is unique across
sections), as files written before the sections did. The sections and their keys are in
`fedort.coordinator.settings`; README's "Coordinator settings" tables are generated from them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedort.common.errors import ConfigError
from fedort.common.settings.options import Option, as_path, markdown_table, option, options
from fedort.common.settings.tomlfile import read_table, unknown_settings
from fedort.coordinator.settings import (
    SECTIONS,
    AccessSettings,
    AggregationSettings,
    ExportSettings,
    FedBuffSettings,
    PlanSettings,
    PrivacySettings,
    TrainingSettings,
    TransportSettings,
    UploadSettings,
)


@dataclass(frozen=True)
class CoordinatorConfig:
    """How one coordinator runs: where its artifacts and state live, and one typed section per concern."""

    artifacts: Path = option(
        help="folder of training artifacts (fedort artifacts build)", metavar="DIR", doc_default="required"
    )
    state_dir: Path = option(
        help="where SQLite, vectors, spooled updates and exported models live (durable state)",
        metavar="DIR",
        doc_default="required",
    )
    plan: PlanSettings = field(default_factory=PlanSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    aggregation: AggregationSettings = field(default_factory=AggregationSettings)
    fedbuff: FedBuffSettings = field(default_factory=FedBuffSettings)
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    uploads: UploadSettings = field(default_factory=UploadSettings)
    export: ExportSettings = field(default_factory=ExportSettings)
    transport: TransportSettings = field(default_factory=TransportSettings)
    access: AccessSettings = field(default_factory=AccessSettings)
    extra: Mapping[str, str] = field(default_factory=dict)  # passed to clients in TrainConfig.extra

    def __post_init__(self) -> None:
        for name in ("artifacts", "state_dir"):
            object.__setattr__(self, name, as_path(getattr(self, name)))
        for name, kind in SECTIONS.items():
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{name} must be a {kind.__name__}, got {getattr(self, name)!r}")
        self.validate()

    # ---- loading ------------------------------------------------------------------------------

    @classmethod
    def options(cls) -> list[Option]:
        """The options table: the top-level keys, then every section's, in `SECTIONS` order."""
        return options(cls) + [o for name, kind in SECTIONS.items() for o in options(kind, name)]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> CoordinatorConfig:
        """Build from a plain mapping of flat keys and/or section tables (`{"plan": {"rounds": 5}}`).

        Unknown keys, and a key inside the wrong section's table, are errors naming the right one."""
        top, sections = split_by_section(values)
        missing = [k for k in ("artifacts", "state_dir") if top.get(k) in (None, "")]
        if missing:
            raise ConfigError(
                f"coordinator needs {' and '.join(missing)} (flag --{missing[0].replace('_', '-')} or config key)"
            )
        try:
            built = {name: SECTIONS[name](**kv) for name, kv in sections.items()}
            return cls(**top, **built)
        except TypeError as e:
            raise ConfigError(f"bad coordinator settings: {e}") from e

    @classmethod
    def load(cls, toml_path: str | Path | None = None, **overrides: Any) -> CoordinatorConfig:
        """Defaults < TOML file < flat overrides (None overrides are ignored, so unset flags fall through)."""
        top: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {}
        if toml_path is not None:
            top, sections = split_by_section(read_toml(Path(toml_path)))
        given_top, given = split_by_section({k: v for k, v in overrides.items() if v is not None})
        top.update(given_top)
        for name, kv in given.items():
            sections.setdefault(name, {}).update(kv)
        return cls.from_mapping({**top, **sections})

    def replace(self, **changes: Any) -> CoordinatorConfig:
        """A copy with some keys changed, given flat (`replace(rounds=5, secagg=True)`), checked again."""
        top, sections = split_by_section(changes)
        built = {name: dataclasses.replace(getattr(self, name), **kv) for name, kv in sections.items()}
        return dataclasses.replace(self, **top, **built)

    # ---- checks -------------------------------------------------------------------------------

    def validate(self) -> None:
        """The checks that span sections (each section checked its own fields when it was made)."""
        from fedort.coordinator.aggregation import parse_strategy
        from fedort.coordinator.aggregation.server_optimizers import canonical_spec
        from fedort.coordinator.privacy.config import privacy_conflicts
        from fedort.coordinator.rpc.peer_certificate import check_web_port

        strategy = self.aggregation.strategy
        if self.fedbuff.is_async and parse_strategy(strategy).name != "fedavg":
            raise ConfigError(
                "mode 'async' folds updates into FedBuff's buffer (a weighted mean): strategy must be "
                f"'fedavg', got {strategy!r}"
            )
        vectors = self.transport.local_vector_dir
        if vectors is not None:
            from fedort.coordinator.state.layout import StateLayout

            if vectors.resolve() in StateLayout(self.state_dir.resolve()).reserved():
                raise ConfigError(
                    "local_vector_dir must not be the state dir or one of its own folders (e.g. "
                    f"STATE/local-vectors), got {str(vectors)!r}"
                )
        check_web_port(self)
        problems = privacy_conflicts(self.privacy, strategy, self.plan.min_clients)
        optimizer = self.aggregation.server_optimizer
        if self.privacy.central_dp and canonical_spec(optimizer) != canonical_spec("fedavg"):
            problems.append(
                f"server_optimizer {optimizer!r} does not compose with central DP (--dp-* "
                "without --secagg) yet: its chain has its own server update (adaptive clipping); use "
                "server_optimizer = 'fedavg', or --secagg, whose unmasked sum feeds any server optimizer"
            )
        if self.privacy.private and self.fedbuff.is_async:
            problems.append("mode 'async' does not support --secagg/--dp-* (their rounds need a fixed cohort)")
        if problems:
            raise ConfigError("; ".join(problems))

    def check_transport_security(self) -> None:
        """ConfigError unless the server is told to use TLS or, explicitly, plaintext."""
        t = self.transport
        if t.tls_cert is None and not t.insecure:
            raise ConfigError(
                "the coordinator needs TLS or an explicit opt-out: pass --tls-cert FILE --tls-key FILE "
                "(and --tls-client-ca FILE for mutual TLS), or --insecure for plaintext "
                "(config keys tls_cert/tls_key or insecure = true in [coordinator.transport])"
            )
        for name in ("tls_cert", "tls_key", "tls_client_ca"):
            path = getattr(t, name)
            if path is not None and not path.is_file():
                raise ConfigError(f"{name} file not found: {path}")

    # ---- views --------------------------------------------------------------------------------

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON-able values, flat (keys are unique across sections; the form state dirs record)."""
        out: dict[str, Any] = {"artifacts": str(self.artifacts), "state_dir": str(self.state_dir)}
        for name in SECTIONS:
            section = getattr(self, name)
            for f in dataclasses.fields(section):
                out[f.name] = _json_value(getattr(section, f.name))
        out["extra"] = dict(self.extra)
        return out

    def exports_model(self, round: int) -> bool:
        """Whether round `round`'s commit writes an inference model (`export_every`; the last round always does)."""
        n = self.export.export_every
        return round >= self.plan.rounds or (n > 0 and round % n == 0)

    def training_json(self) -> dict[str, Any]:
        """The part of the config that shapes the model (recorded with each export)."""
        from fedort.coordinator.aggregation.server_optimizers import canonical_spec
        from fedort.coordinator.fedbuff.staleness import parse_staleness_weight

        p, t, a = self.plan, self.training, self.aggregation
        out: dict[str, Any] = {
            "rounds": p.rounds,
            "min_clients": p.min_clients,
            "fraction": p.fraction,
            "local_epochs": t.local_epochs,
            "batch_size": t.batch_size,
            "lr": t.lr,
            "reset_optimizer": t.reset_optimizer,
            "seed": p.seed,
            "round_timeout_s": p.round_timeout_s,
            "strategy": a.strategy,
            "prox_mu": t.prox_mu,
            "codecs": self.uploads.codecs,
            "server_optimizer": canonical_spec(a.server_optimizer),
        }
        f = self.fedbuff
        if f.is_async:
            out.update(
                mode="async",
                buffer_size=f.buffer_size,
                max_staleness=f.max_staleness,
                staleness_weight=str(parse_staleness_weight(f.staleness_weight)),
            )
        return out

    def __str__(self) -> str:
        return json.dumps(self.to_json_dict(), sort_keys=True)


def _json_value(v: Any) -> Any:
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, Mapping):
        return dict(v)
    return list(v) if isinstance(v, tuple) else v


TOP_KEYS = ("artifacts", "state_dir", "extra")
KEY_SECTION: dict[str, str] = {o.key: o.section for name, kind in SECTIONS.items() for o in options(kind, name)}
PATH_KEYS = tuple(o.key for o in CoordinatorConfig.options() if o.kind is Path)


def split_by_section(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(top-level keys, {section: {key: value}}) of a mapping of flat keys and/or section tables."""
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    unknown: list[str] = []

    def put(section: str, key: str, value: Any) -> None:
        kv = sections.setdefault(section, {})
        if key in kv:
            raise ConfigError(f"coordinator setting {key!r} is given twice (flat and in [coordinator.{section}])")
        kv[key] = value

    for key, value in values.items():
        if key in SECTIONS and isinstance(value, Mapping):
            for inner, v in value.items():
                home = KEY_SECTION.get(inner)
                if home is None:
                    unknown.append(f"{key}.{inner}")
                elif home != key:
                    raise ConfigError(f"coordinator setting {inner!r} belongs in [coordinator.{home}], not [{key}]")
                else:
                    put(key, inner, v)
        elif key in TOP_KEYS:
            top[key] = value
        elif key in KEY_SECTION:
            put(KEY_SECTION[key], key, value)
        else:
            unknown.append(key)
    if unknown:
        raise ConfigError(unknown_settings("coordinator", unknown, [*TOP_KEYS, *KEY_SECTION]))
    return top, sections


def read_toml(path: Path) -> dict[str, Any]:
    """The coordinator settings in a TOML file: its `[coordinator]` table (with its section tables),
    else its top level; relative paths resolve against the file's folder."""
    values = read_table(path, "coordinator", PATH_KEYS)
    for name in SECTIONS:
        table = values.get(name)
        if isinstance(table, Mapping):
            values[name] = {
                k: str(path.parent / v) if k in PATH_KEYS and isinstance(v, str) and not Path(v).is_absolute() else v
                for k, v in table.items()
            }
    return values


def settings_markdown() -> str:
    """README's "Coordinator settings" tables: the top-level keys, then one table per section."""
    from fedort.coordinator.settings import TITLES

    table = CoordinatorConfig.options()
    parts = ["`[coordinator]` (required)", "", markdown_table(o for o in table if not o.section)]
    for name in SECTIONS:
        parts += [
            "",
            f"`[coordinator.{name}]`: {TITLES[name]}",
            "",
            markdown_table(o for o in table if o.section == name),
        ]
    return "\n".join(parts) + "\n"


__all__ = ["CoordinatorConfig", "KEY_SECTION", "read_toml", "settings_markdown", "split_by_section"]
