"""fedort.common.faults: named points are off unless FEDORT_FAULT arms them, fire on the N-th pass, and say where."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, env: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env}, cwd=tmp_path)


PASS_THREE_TIMES = """
    from fedort.common.faults import fault_point
    for i in range(3):
        print("pass", i, flush=True)
        fault_point("export.before_mark")
    print("end", flush=True)
"""


def test_an_unarmed_point_does_nothing(tmp_path):
    result = _run(PASS_THREE_TIMES, {"FEDORT_FAULT": ""}, tmp_path)
    assert result.returncode == 0 and result.stdout.split("\n")[-2] == "end"


def test_an_armed_point_kills_the_process_on_its_nth_pass_and_records_it(tmp_path):
    log = tmp_path / "faults"
    result = _run(PASS_THREE_TIMES, {"FEDORT_FAULT": "export.before_mark@2", "FEDORT_FAULT_LOG": str(log)}, tmp_path)
    assert result.returncode == -signal.SIGKILL
    assert result.stdout.split() == ["pass", "0", "pass", "1"]
    assert log.read_text() == "export.before_mark@2 kill\n"
    assert "fedort: fault point export.before_mark@2 kill" in result.stderr


def test_the_raise_action_raises_fault_injected(tmp_path):
    result = _run(PASS_THREE_TIMES, {"FEDORT_FAULT": "export.before_mark:raise"}, tmp_path)
    assert result.returncode == 1 and "FaultInjected: fault point export.before_mark@1 fired" in result.stderr


@pytest.mark.parametrize("spec,message", [
    ("no.such_point", "unknown fault point 'no.such_point'"),
    ("export.before_mark:explode", "unknown action 'explode'"),
    ("export.before_mark@0", "the count after @ must be a whole number"),
])
def test_a_misspelt_spec_stops_the_process_at_import(tmp_path, spec, message):
    result = _run("import fedort.common.faults", {"FEDORT_FAULT": spec}, tmp_path)
    assert result.returncode == 1 and message in result.stderr
