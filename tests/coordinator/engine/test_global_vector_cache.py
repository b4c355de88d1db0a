"""The commit of round r frees the page cache of g_{r-1}'s file just before it writes g_{r+1}'s.

Why: on a VM that hands freed memory back to its host (free page reporting), a new file written
into fresh pages pays a host fault per page; written right after as much page cache was freed, it
reuses those pages. g_{r-1} is the newest global vector that
nothing reads any more (the next round's download deltas read g_r), and no vector file changes.
Real coordinator and files; mincore tells what the page cache holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import pytest

from coordinator_fixtures import mlp_artifacts, start_coordinator, stub_client  # noqa: F401 (fixtures)
from page_cache_support import LINUX_ONLY, resident_pages, skip_on_tmpfs


@pytest.mark.slow
@LINUX_ONLY
async def test_each_commit_frees_the_cache_of_the_vector_two_rounds_back_and_changes_no_vector_file(
        start_coordinator, stub_client, tmp_path):
    skip_on_tmpfs(tmp_path)
    coord = await start_coordinator(min_clients=1, rounds=3, inline_update_bytes=0)   # every vector through its file
    client = stub_client(coord.port)
    model = (await client.join("client-a")).model_id
    for delta in (0.5, 0.25, 0.125):
        assert (await client.fit_round("client-a", model, delta, 10))[2].accepted
    assert (await asyncio.wait_for(coord.wait_done(), 30)).state.name == "DONE"
    store = coord.engine.store
    recorded = [store.get_meta("initial_vector_sha256")] + [r.vector_sha256 for r in store.rounds()]
    files = [store.vector_path(r) for r in (1, 2, 3, 4)]
    assert [resident_pages(f) > 0 for f in files] == [False, False, True, True]
    assert [hashlib.sha256(f.read_bytes()).hexdigest() for f in files] == recorded   # (read back from disk)
