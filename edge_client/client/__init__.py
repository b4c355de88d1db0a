"""The device's federated loop: join, poll, train, upload, heartbeat, its cache and how a run ends.

`from fedort.edge_client.client import EdgeClient, EdgeConfig` names the loop and its settings; they
are imported on first use, so importing one module of this folder (the cache, say) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedort.common.lazy import lazy_exports

_EXPORTS = {"EdgeClient": "fedort.edge_client.client.edge_client", "EdgeConfig": "fedort.edge_client.client.config"}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from fedort.edge_client.client.config import EdgeConfig
    from fedort.edge_client.client.edge_client import EdgeClient
