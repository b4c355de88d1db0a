"""Joining the federation: check the data, Join (keeping a saved identity), fetch artifacts, open the session.

`Joiner` does it for one client and hands back a `Membership` (what the coordinator said, the model, the
co-located vector folder, the update encoder) and the session; the client keeps both. Data problems raise
DataError before anything is sent when they can be seen without the model, or against a known manifest;
otherwise right after Join, and the client then leaves again.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from fedort.common.client_data import ClientData
from fedort.common.errors import DataError, FedortError, ProtocolError, WrongModelError
from fedort.edge_client.client.cache import ArtifactCache, IdentityLock, identity_key
from fedort.edge_client.client.calls import ClientCalls
from fedort.edge_client.client.config import EdgeConfig
from fedort.edge_client.client.run_end import leave_quietly
from fedort.edge_client.transport.grpc_transport import ArtifactRef, JoinInfo, Transport
from fedort.edge_client.uploads.local_vectors import LocalVectors
from fedort.edge_client.uploads.topk_warmup import TopkWarmup
from fedort.edge_client.uploads.update_codec import UpdateEncoder, encoder_for
from fedort.ort.artifacts import ARTIFACT_FILES, Manifest
from fedort.ort.session import SessionConfig, TrainingSession

log = logging.getLogger("fedort.edge")


@dataclass(frozen=True)
class Membership:
    """What a client holds once joined: the Join reply, the model's manifest, how its updates leave."""

    info: JoinInfo
    manifest: Manifest
    local: LocalVectors | None  # the coordinator's vector folder, when it is on this host and announces one
    encoder: UpdateEncoder

    @property
    def client_id(self) -> str:
        return self.info.client_id

    @property
    def model_id(self) -> str:
        return self.info.model_id


class Joiner:
    """Joins (and re-joins) one client over `transport`, each call through `calls`; holds its identity lock."""

    def __init__(self, config: EdgeConfig, transport: Transport, cache: ArtifactCache, calls: ClientCalls) -> None:
        self.config = config
        self.transport = transport
        self.cache = cache
        self.calls = calls
        self._identity_lock: IdentityLock | None = None

    def join(self, data: ClientData, shared: TrainingSession | None, previous: UpdateEncoder | None) -> Membership:
        """Check `data`, Join, and make the update encoder (`previous`: an earlier join's, whose residual it keeps).

        The data is checked before any RPC against what can be known without the coordinator: a `shared`
        session's manifest, or the one this coordinator served to this device last time.
        """
        config = self.config
        saved = {}
        if config.persist_identity:
            if self._identity_lock is None:
                self._identity_lock = self.cache.lock_identity(self._identity_key())
            saved = self.cache.load_identity(self._identity_key())
        self._check_known(data, shared.manifest if shared is not None else None, saved.get("manifest_json", ""))
        client_id = config.client_id or saved.get("client_id", "")
        info = self.calls(
            "Join", lambda: self.transport.join(config.name, client_id, config.token, self._capabilities(data))
        )
        manifest = Manifest.from_json(info.manifest_json)
        if manifest.model_id != info.model_id:
            raise ProtocolError(
                f"coordinator's manifest hashes to model {manifest.model_id[:12]}…, "
                f"but it announces model {info.model_id[:12]}…"
            )
        try:
            data.validate(manifest.inputs, manifest.num_classes)
        except DataError:
            leave_quietly(self.transport, info.client_id, "local data does not fit the model")
            raise
        encoder = encoder_for(
            config.codec,
            info.upload_codecs,
            previous=previous,
            key=f"{self._identity_key()}|{info.model_id}",
            folder=self.cache.root / "residuals" if config.persist_identity else None,
            warmup=TopkWarmup.parse(config.topk_warmup),
        )
        if config.persist_identity:
            self.cache.save_identity(
                self._identity_key(), client_id=info.client_id, model_id=info.model_id, manifest_json=info.manifest_json
            )
        local = LocalVectors(info.local_vector_dir) if info.local_vector_dir else None
        return Membership(info, manifest, local, encoder)

    def open_session(
        self, member: Membership, shared: TrainingSession | None, on_phase: Callable[[str], None]
    ) -> TrainingSession:
        """The `shared` session checked against the joined model, or a new one over the downloaded artifacts."""
        config, info, manifest = self.config, member.info, member.manifest
        if shared is None:
            on_phase("downloading")
            session = self._session_over_artifacts(info, manifest)
        else:
            _check_shared_session(shared, manifest)
            session = shared
        log.info(
            "joined %s as %s (model %s…, %d parameters)",
            config.coordinator,
            info.client_id,
            info.model_id[:12],
            manifest.parameter_count,
        )
        if config.local_dp_clip is not None:  # say so: it changes every update this device sends
            log.info(
                "local DP on: each update's delta is clipped to L2 norm %g and gets Gaussian noise of std %g "
                "(%g x the clip) per value before it leaves this device",
                config.local_dp_clip,
                config.local_dp_noise * config.local_dp_clip,
                config.local_dp_noise,
            )
        return session

    def rejoin(self, member: Membership, data: ClientData) -> Membership:
        """Join again as `member`'s client (its registration was lost, or a submission found its round gone);
        WrongModelError if the coordinator now runs another model."""
        config = self.config
        info = self.calls.retried(
            "Join",
            lambda: self.transport.join(config.name, member.client_id, config.token, self._capabilities(data)),
        )
        if info.model_id != member.model_id:
            raise WrongModelError(
                f"the coordinator now runs model {info.model_id[:12]}…, but this client joined for model "
                f"{member.model_id[:12]}…; restart the client to fetch the new model"
            )
        return replace(member, info=info, local=member.local if info.local_vector_dir else None)

    def release(self) -> None:
        """Release the saved identity for other processes."""
        if self._identity_lock is not None:
            self._identity_lock.release()
            self._identity_lock = None

    # ---- internals --------------------------------------------------------------------------

    def _identity_key(self) -> str:
        data = os.path.abspath(self.config.data) if self.config.data is not None else ""
        return identity_key(self.config.coordinator, self.config.name, data)

    def _check_known(self, data: ClientData, known: Manifest | None, saved_manifest: str) -> None:
        """Check the data against the model known before joining: a shared session's, else the saved one's."""
        if known is not None:
            data.validate(known.inputs, known.num_classes)  # a shared session names its model: check against it first
            return
        if not saved_manifest:
            return
        try:
            known = Manifest.from_json(saved_manifest)
        except FedortError:
            return  # an unreadable cached manifest is not the data's fault
        try:
            data.validate(known.inputs, known.num_classes)
        except DataError as e:
            raise DataError(
                f"{e} (checked before joining against model {known.model_id[:12]}, which "
                f"{self.config.coordinator} served last time; if it now serves another "
                f"model, remove {self.cache.root / 'identity'} and retry)"
            ) from None

    @staticmethod
    def _capabilities(data: ClientData) -> dict[str, str]:
        import onnxruntime

        from fedort.common.secagg.scheme import CAPABILITY, SUPPORTED  # constants only: no crypto loaded

        return {
            "platform": f"{sys.platform}-{platform.machine()}",
            "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__,
            "examples": str(data.num_examples),
            CAPABILITY: ",".join(SUPPORTED),
        }

    def _session_over_artifacts(self, info: JoinInfo, manifest: Manifest) -> TrainingSession:
        announced = {a.name for a in info.artifacts}
        if announced != set(ARTIFACT_FILES):
            raise ProtocolError(
                f"coordinator announces artifacts {sorted(announced)}, expected {sorted(ARTIFACT_FILES)}"
            )
        for ref in info.artifacts:
            entry = manifest.files.get(ref.name)
            if entry is None or entry.sha256 != ref.sha256:
                raise ProtocolError(
                    f"artifact {ref.name} is announced with sha256 {ref.sha256[:12]}…, "
                    f"the manifest says {entry.sha256[:12] if entry else 'nothing'}…"
                )

        def fetch(ref: ArtifactRef):
            log.info("downloading artifact %s (%d bytes)", ref.name, ref.size)
            parts = self.transport.iter_artifact(info.client_id, info.model_id, ref.name)
            header = next(parts)
            if not isinstance(header, ArtifactRef) or header.sha256 != ref.sha256:
                raise ProtocolError(f"artifact {ref.name} stream header sha256 differs from the Join reply")
            return parts

        folder = self.calls(
            "DownloadArtifact",
            lambda: self.cache.model_folder(info.model_id, info.manifest_json, info.artifacts, fetch),
        )
        return TrainingSession.from_artifacts(
            folder,
            config=SessionConfig(intra_op_threads=self.config.intra_op_threads),
            scratch_dir=self.cache.root / "sessions",  # its files ORT wants on disk: in this device's cache
        )


def _check_shared_session(session: TrainingSession, manifest: Manifest) -> None:
    if session.manifest is not None and session.manifest.model_id and session.manifest.model_id != manifest.model_id:
        raise WrongModelError(
            f"the shared session holds model {session.manifest.model_id[:12]}…, the coordinator "
            f"runs {manifest.model_id[:12]}…"
        )
    if session.parameter_count() != manifest.parameter_count:
        raise WrongModelError(
            f"the shared session has {session.parameter_count()} trainable parameters, the "
            f"coordinator's model {manifest.parameter_count}"
        )


__all__ = ["Joiner", "Membership"]
