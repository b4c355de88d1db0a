"""The Python edge client's resumable upload: over a link cut mid-part it resumes (one part sent twice) and the
update counts once; a whole run with `upload = "resumable"` trains and commits."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from coordinator_fixtures import digest, mlp_artifacts, opened_round, start_coordinator, stub_client  # noqa: F401
from cut_proxy import CutProxy
from edge_support import FAST, config, db, digits, part, run_in_threads, server  # noqa: F401
from fedort.edge_client import EdgeClient
from fedort.edge_client.resumable_upload import ResumableSender
from fedort.edge_client.retry import call_with_retry
from fedort.edge_client.transport import Transport
from fedort.protos.codec import VectorMeta
from fedort.protos.errors import ConfigError
from fedort.protos.messages import UpdateHeader

PART = 8192


async def test_an_upload_cut_mid_part_resumes_and_counts_once(start_coordinator, stub_client):
    coord, _, model, round, g, _ = await opened_round(start_coordinator, stub_client, max_chunk_bytes=PART,
                                                       inline_update_bytes=0)
    proxy = await CutProxy.start(coord.port)
    update = (g + np.float32(3)).astype("<f4")
    header = UpdateHeader("client-a", VectorMeta(model, round, len(update), digest(update), chunk_size=PART), 4,
                          trained_from_sha256=digest(g))
    transport = Transport.connect(f"127.0.0.1:{proxy.port}", insecure=True)
    sender = ResumableSender(transport, header, update, PART)
    try:
        proxy.cut_after(2 * PART + PART // 2)          # the third part is cut off half-way
        reply = await asyncio.to_thread(call_with_retry, sender.send, FAST, what="upload")
    finally:
        transport.close()
        await proxy.close()
    assert proxy.cuts == 1 and reply.accepted and not reply.duplicate
    assert 0 < sender.bytes_sent - update.nbytes <= PART
    assert [row.client_id for row in coord.engine.store.submissions(round)] == ["client-a"]


def test_a_run_with_resumable_uploads_trains_and_commits(server, tmp_path, digits):
    address = server.start_with(rounds=1)
    clients = [EdgeClient(config(address, tmp_path, f"dev{i}", upload="resumable"), data=part(digits, i, 2))
               for i in range(2)]
    for s in run_in_threads(clients):
        assert not isinstance(s, BaseException), s
        assert s.outcome == "done" and s.rounds_trained == [1]
    assert len(db(tmp_path, "SELECT client_id FROM submissions WHERE round = 1")) == 2


def test_the_upload_setting_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="upload must be one of"):
        config("127.0.0.1:1", tmp_path, "dev", upload="carrier-pigeon")
