"""Local DP on the device: the uploaded vector is global + clipped delta + N(0, (noise*C)^2)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_support import db, digits, server  # noqa: F401 (fixtures)
from fedort.edge_client.uploads.local_dp import LocalDP
from fedort.common.errors import ConfigError
from fedort.edge_client.uploads.local_dp import LocalDP
from fedort.common.errors import ConfigError


def test_uploaded_noise_has_std_noise_times_clip():
    dp = LocalDP(clip=0.5, noise=2.0, rng=np.random.default_rng(0))
    g = np.ones(200_000, dtype=np.float32)
    out = dp(None, g, g)   # zero delta: what is left is the noise
    assert out.dtype == np.float32
    assert abs(float((out - g).std()) - 1.0) < 0.01


def test_delta_is_clipped_before_noise():
    dp = LocalDP(clip=1.0, noise=0.0)
    out = dp(None, np.zeros(2, np.float32), np.array([30.0, 40.0], np.float32))
    assert np.allclose(out, [0.6, 0.8])


def test_a_negative_noise_is_refused():
    with pytest.raises(ConfigError, match="local_dp_noise"):
        LocalDP(clip=1.0, noise=-1.0)


def test_edge_config_refuses_local_dp_noise_without_a_clip():
    from fedort.edge_client.client.config import EdgeConfig

    with pytest.raises(ConfigError, match="needs local_dp_clip"):
        EdgeConfig("127.0.0.1:1", local_dp_noise=1.0)
    with pytest.raises(ConfigError, match="local_dp_clip must be > 0"):
        EdgeConfig("127.0.0.1:1", local_dp_clip=-1.0)


def test_a_device_with_local_dp_says_so_when_it_joins(server, tmp_path, digits, caplog):  # noqa: F811
    import logging

    from edge_support import config, part
    from fedort.edge_client.client import EdgeClient

    address = server.start_with()
    client = EdgeClient(config(address, tmp_path, "dev", local_dp_clip=0.5, local_dp_noise=2.0), data=part(digits, 0, 4))
    with caplog.at_level(logging.INFO, logger="fedort.edge"):
        client.join()
    client.close()
    assert any("local DP on: each update's delta is clipped to L2 norm 0.5 and gets Gaussian noise of std 1" in r.message
               for r in caplog.records), [r.message for r in caplog.records]
