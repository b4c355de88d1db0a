"""Issue 13 (2): concurrent uploads stream to the spool in bounded memory, never a P-sized buffer each.

16 clients upload a 4 MB update (P = 1 M) at once in 64 KiB chunks while tracemalloc (which sees
numpy's buffers) watches the coordinator's process: the peak growth during the uploads must stay
far below one vector per upload (the receiver used to preallocate P float32 values per upload).
The round is kept open (one selected client never reports) so aggregation and export, which do
hold P-sized arrays once per round, stay out of the measured window.
"""

from __future__ import annotations

import asyncio
import tracemalloc

import numpy as np
import pytest

from fedort.coordinator import Coordinator
from fedort.ort.artifacts import build_artifacts
from fedort.ort.models import mlp
from fedort.protos.stubs import fedort_v1_pb2 as pb

from coordinator_fixtures import StubClient, make_config, update_header

UPLOADS = 16
CHUNK = 64 << 10


@pytest.fixture(scope="module")
def big_artifacts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlp-1m")
    build_artifacts(mlp(hidden=13333), folder)      # 999,985 parameters: 4 MB per update
    return folder


@pytest.mark.slow
async def test_concurrent_uploads_do_not_hold_a_vector_each(big_artifacts, tmp_path):
    config = make_config(big_artifacts, tmp_path / "state", rounds=1, min_clients=UPLOADS + 1,
                         round_timeout_s=120, max_concurrent_uploads=UPLOADS)
    coord = Coordinator(config)
    await coord.start()
    client = StubClient(coord.port)
    try:
        cids = [f"client-{i:02d}" for i in range(UPLOADS + 1)]
        model = (await client.join(cids[0])).model_id
        for cid in cids[1:]:
            await client.join(cid)
        for cid in cids:
            assert (await client.poll(cid, model)).kind == pb.Task.FIT
        _, g = await client.download_vector(cids[0], model, 1)
        update = (g + np.float32(0.5)).astype(np.float32)
        raw = update.tobytes()
        chunks = [raw[i:i + CHUNK] for i in range(0, len(raw), CHUNK)]     # shared by every upload
        body = [pb.UpdatePart(chunk=c) for c in chunks]
        streams = {cid: [pb.UpdatePart(header=update_header(cid, model, 1, update, 10, chunk_size=CHUNK))] + body
                   for cid in cids[:UPLOADS]}

        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            replies = await asyncio.wait_for(asyncio.gather(*(client.submit_parts(streams[cid])
                                                              for cid in cids[:UPLOADS])), 120)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert all(r.accepted for r in replies)
        growth = peak - before
        assert growth < 2 * update.nbytes, (f"peak grew by {growth / 1e6:.1f} MB during {UPLOADS} concurrent uploads "
                                            f"of {update.nbytes / 1e6:.1f} MB")
    finally:
        await client.close()
        await asyncio.wait_for(coord.stop(grace=0), 20)
