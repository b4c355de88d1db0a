"""A progress bar over rounds that shows the global model's test accuracy as rounds commit.

It reads the coordinator's per-round `model.json` records as they appear, so it needs no hook
into the coordinator and works the same whatever backend runs the clients. Disabled (`--no-progress`),
it reads nothing and tqdm is never imported.
"""

from __future__ import annotations

import json

from fedort.coordinator.state.layout import StateLayout


class RoundProgress:
    def __init__(self, layout: StateLayout, rounds: int, enabled: bool = True) -> None:
        self._layout = layout
        self._seen = 0
        self.accuracy: float | None = None
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=rounds, desc="rounds", unit="round", dynamic_ncols=True)

    def update(self) -> None:
        """Advance over every round exported since the last call."""
        while self._bar is not None:
            record = self._layout.model_record(self._seen + 1)
            if not record.exists():
                return
            try:
                data = json.loads(record.read_text())
            except (OSError, ValueError):
                return  # written atomically, so this is only a race with a rename; next time
            self._seen += 1
            ev = data.get("server_eval") or {}
            self.accuracy = ev.get("accuracy", self.accuracy)
            post = {}
            if self.accuracy is not None:
                post["acc"] = f"{100 * self.accuracy:.1f}%"
            if ev.get("loss") is not None:
                post["loss"] = f"{ev['loss']:.3f}"
            self._bar.set_postfix(post, refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
