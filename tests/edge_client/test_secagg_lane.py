"""The masking lane (edge_client.secagg_lane): one lock per shared transport; a device alone on its transport has none."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from fedort.edge_client.secagg.lane import lane
from fedort.edge_client.secagg.wire import StepBatcher


def test_devices_sharing_a_transport_share_one_lane_and_a_device_alone_has_none():
    steps = StepBatcher(transport=None)
    worker = SimpleNamespace(secagg_steps=steps)
    with steps.flow():
        assert not isinstance(lane(worker), type(threading.Lock()))       # alone: nothing to wait for
        with steps.flow():
            first, second = lane(worker), lane(worker)
            assert first is second and isinstance(first, type(threading.Lock()))
            other = SimpleNamespace(secagg_steps=StepBatcher(transport=None))
            with other.secagg_steps.flow(), other.secagg_steps.flow():
                assert lane(other) is not first                            # one lane per transport
    assert not isinstance(lane(SimpleNamespace()), type(threading.Lock()))   # a wrapper without a batcher: alone

