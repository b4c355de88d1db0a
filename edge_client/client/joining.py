"""Joining the federation: check the data, Join (keeping a saved identity), fetch artifacts, open the session.

Part of `EdgeClient` (a mixin: the attributes used here are the client's, see `edge_client.client`).
Data problems raise DataError before anything is sent when they can be seen without the model,
or against a known manifest; otherwise right after Join, and the client then leaves again.
Last, a top-k update a previous process journaled but never heard back about is sent again, so
that its answer settles the error-feedback residual (edge_client/uploads/feedback_journal.py).
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fedort.common.errors import DataError, FedortError, ProtocolError, WrongModelError
from fedort.common.invariants import present
from fedort.edge_client.client.cache import identity_key
from fedort.edge_client.client.pending import Pending
from fedort.edge_client.transport.grpc_transport import JoinInfo
from fedort.edge_client.transport.retry import call_with_retry
from fedort.edge_client.uploads.local_vectors import LocalVectors
from fedort.edge_client.uploads.topk_warmup import TopkWarmup
from fedort.edge_client.uploads.update_codec import encoder_for
from fedort.ort.artifacts import ARTIFACT_FILES, Manifest
from fedort.ort.session import SessionConfig, TrainingSession

if TYPE_CHECKING:
    from fedort.common.client_data import ClientData
    from fedort.edge_client.client.cache import ArtifactCache, IdentityLock
    from fedort.edge_client.client.config import EdgeConfig
    from fedort.edge_client.client.reports import RoundReport
    from fedort.edge_client.transport.grpc_transport import Transport
    from fedort.edge_client.uploads.update_codec import UpdateEncoder

log = logging.getLogger("fedort.edge")


class Joining:
    """The join half of `EdgeClient`."""

    _local: LocalVectors | None = None  # the coordinator's local vector directory, when it announces one

    # the client's attributes this mixin uses (set by EdgeClient.__init__)
    config: EdgeConfig
    client_id: str
    model_id: str
    manifest: Manifest | None
    phase: str
    _session: TrainingSession | None
    _join: JoinInfo | None
    _pending: Pending | None
    _encoder: UpdateEncoder | None
    _identity_lock: IdentityLock | None
    _stop: threading.Event

    if TYPE_CHECKING:

        @property
        def transport(self) -> Transport: ...
        @property
        def cache(self) -> ArtifactCache: ...
        @property
        def data(self) -> ClientData: ...
        def _call(self, what: str, fn: Callable[[], Any]) -> Any: ...
        def _submit_pending(self) -> RoundReport: ...
        def _leave_quietly(self, client_id: str, reason: str) -> None: ...

    def _identity_key(self) -> str:
        data = os.path.abspath(self.config.data) if self.config.data is not None else ""
        return identity_key(self.config.coordinator, self.config.name, data)

    def _capabilities(self) -> dict[str, str]:
        import onnxruntime

        from fedort.common.secagg.scheme import CAPABILITY, SUPPORTED  # constants only: no crypto loaded

        return {
            "platform": f"{sys.platform}-{platform.machine()}",
            "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__,
            "examples": str(self.data.num_examples),
            CAPABILITY: ",".join(SUPPORTED),
        }

    def join(self) -> JoinInfo:
        """Check the data, join (keeping a saved identity), fetch missing artifacts, open the session.

        Data problems raise DataError before anything is sent when they can be seen without the
        model, or against a known manifest (a shared session's, or the one this coordinator served
        to this device last time). Otherwise the manifest only arrives with the JoinReply: the
        checks then run right after Join, and a client whose data does not fit leaves again.
        A top-k update left unanswered by a previous process is sent again before this returns.
        """
        self.phase = "joining"
        try:
            return self._join_once()
        finally:
            self.phase = "idle"

    def _join_once(self) -> JoinInfo:
        data = self.data  # model-free checks, before any RPC
        saved = {}
        if self.config.persist_identity:
            if self._identity_lock is None:
                self._identity_lock = self.cache.lock_identity(self._identity_key())
            saved = self.cache.load_identity(self._identity_key())
        known = self._session.manifest if self._session is not None else None
        if known is not None:
            data.validate(known.inputs, known.num_classes)  # a shared session names its model: check against it first
        elif saved.get("manifest_json"):
            try:
                known = Manifest.from_json(saved["manifest_json"])
            except FedortError:
                known = None  # an unreadable cached manifest is not the data's fault
            if known is not None:
                try:
                    data.validate(known.inputs, known.num_classes)
                except DataError as e:
                    raise DataError(
                        f"{e} (checked before joining against model {known.model_id[:12]}, which "
                        f"{self.config.coordinator} served last time; if it now serves another "
                        f"model, remove {self.cache.root / 'identity'} and retry)"
                    ) from None
        client_id = self.config.client_id or saved.get("client_id", "")
        info = self._call(
            "Join",
            lambda: self.transport.join(self.config.name, client_id, self.config.token, self._capabilities()),
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
            self._leave_quietly(info.client_id, "local data does not fit the model")
            raise
        self._join, self.client_id, self.model_id, self.manifest = info, info.client_id, info.model_id, manifest
        self._local = LocalVectors(info.local_vector_dir) if info.local_vector_dir else None
        self._encoder = encoder_for(
            self.config.codec,
            info.upload_codecs,
            previous=self._encoder,
            key=f"{self._identity_key()}|{info.model_id}",
            folder=self.cache.root / "residuals" if self.config.persist_identity else None,
            warmup=TopkWarmup.parse(self.config.topk_warmup),
        )
        if self.config.persist_identity:
            self.cache.save_identity(
                self._identity_key(), client_id=info.client_id, model_id=info.model_id, manifest_json=info.manifest_json
            )
        if self._session is None:
            self._session = self._open_session(info, manifest)
        else:
            self._check_shared_session(manifest)
        log.info(
            "joined %s as %s (model %s…, %d parameters)",
            self.config.coordinator,
            self.client_id,
            self.model_id[:12],
            manifest.parameter_count,
        )
        if self.config.local_dp_clip is not None:  # say so: it changes every update this device sends
            log.info(
                "local DP on: each update's delta is clipped to L2 norm %g and gets Gaussian noise of std %g "
                "(%g x the clip) per value before it leaves this device",
                self.config.local_dp_clip,
                self.config.local_dp_noise * self.config.local_dp_clip,
                self.config.local_dp_noise,
            )
        self._settle_journal()
        return info

    def _settle_journal(self) -> None:
        """Send again the top-k update a previous process journaled but never heard back about: the
        coordinator's answer (accepted or duplicate: counted; FAILED_PRECONDITION: it did not count, see
        update_codec.py) settles the residual the next update adds. A refusal (INVALID_ARGUMENT, e.g.
        the run no longer allows the codec) means it did not count either."""
        encoder = present(self._encoder, "the update encoder (join sets it)")
        unsettled = encoder.unsettled(present(self.manifest, "the manifest (join sets it)").parameter_count)
        if unsettled is None:
            return
        entry, update = unsettled
        log.info(
            "round %d: sending again the top-k update whose answer was lost (the device stopped before it "
            "was recorded)",
            entry.round,
        )
        self._pending = Pending(entry.round, update, entry.num_examples, entry.metrics, 0.0, False)
        try:
            self._submit_pending()
        except FedortError as e:
            if getattr(e, "code", None) != "INVALID_ARGUMENT":
                raise
            log.warning(
                "round %d: the coordinator refused the journaled update (%s); keeping it as residual", entry.round, e
            )
            self._pending = None
            encoder.settle(update, counted=False)

    def _rejoin(self) -> None:
        info = call_with_retry(
            lambda: self.transport.join(self.config.name, self.client_id, self.config.token, self._capabilities()),
            self.config.backoff,
            what="Join",
            stop=self._stop,
        )
        if info.model_id != self.model_id:
            raise WrongModelError(
                f"the coordinator now runs model {info.model_id[:12]}…, but this client joined for model "
                f"{self.model_id[:12]}…; restart the client to fetch the new model"
            )
        self._join = info
        if not info.local_vector_dir:
            self._local = None

    def _open_session(self, info: JoinInfo, manifest: Manifest) -> TrainingSession:
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
        self.phase = "downloading"

        def fetch(ref):
            log.info("downloading artifact %s (%d bytes)", ref.name, ref.size)
            parts = self.transport.iter_artifact(self.client_id, self.model_id, ref.name)
            header = next(parts)
            if header.sha256 != ref.sha256:
                raise ProtocolError(f"artifact {ref.name} stream header sha256 differs from the Join reply")
            return parts

        folder = self._call(
            "DownloadArtifact",
            lambda: self.cache.model_folder(info.model_id, info.manifest_json, info.artifacts, fetch),
        )
        return TrainingSession.from_artifacts(
            folder, config=SessionConfig(intra_op_threads=self.config.intra_op_threads)
        )

    def _check_shared_session(self, manifest: Manifest) -> None:
        s = present(self._session, "the shared session")
        if s.manifest is not None and s.manifest.model_id and s.manifest.model_id != manifest.model_id:
            raise WrongModelError(
                f"the shared session holds model {s.manifest.model_id[:12]}…, the coordinator "
                f"runs {manifest.model_id[:12]}…"
            )
        if s.parameter_count() != manifest.parameter_count:
            raise WrongModelError(
                f"the shared session has {s.parameter_count()} trainable parameters, the "
                f"coordinator's model {manifest.parameter_count}"
            )
