"""README's coordinator settings tables are the options table, rendered (offline: no network, no server)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_readme_tables_match_the_options_table():
    spec = importlib.util.spec_from_file_location("readme_settings", ROOT / "tools" / "readme_settings.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    readme = (ROOT / "README.md").read_text()
    assert tool.rendered(readme) == readme, "README.md is out of date: run .venv/bin/python tools/readme_settings.py"


def test_every_coordinator_simulation_and_edge_key_has_a_row_with_its_flag():
    from fedort.common.settings.options import options
    from fedort.coordinator.config import CoordinatorConfig
    from fedort.edge_client.client.config import EdgeConfig
    from fedort.simulations.config import SimulationConfig

    readme = (ROOT / "README.md").read_text()
    for o in [*CoordinatorConfig.options(), *options(SimulationConfig), *options(EdgeConfig)]:
        if not o.flag:
            assert f"| {o.key} | (code only)" in readme, o.key
            continue
        assert f"| {o.key} | `{o.flag_name}`" in readme, o.key
