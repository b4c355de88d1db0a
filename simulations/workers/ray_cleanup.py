"""Leave nothing of a local Ray instance behind: its processes and its session folder.

`ray.shutdown()` stops the raylet and the GCS of an instance this process started, but their
workers (`ray::IDLE`), the per-node agents and zombie entries linger for up to a minute, and every
instance writes session folders into the shared temp folder. The simulation gives its instance a
temp folder of its own (`temp_dir`), and after the shutdown ends the Ray processes it started and
deletes that folder. Processes are found through /proc (Linux); elsewhere only the folder goes.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

PREFIX = "fedort-ray-"


def temp_dir() -> str:
    """A fresh folder for one Ray instance's sessions (short: Ray puts unix sockets in it)."""
    return tempfile.mkdtemp(prefix=PREFIX)


def _parents() -> dict[int, int]:
    out = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            out[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])  # field 4, after "(comm) S"
    return out


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ray_processes(root: int | None = None) -> list[int]:
    """Descendants of `root` (this process) whose command line is Ray's (raylet, gcs_server, ray::...)."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root or os.getpid(), ()))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, ())
        cmd = _cmdline(pid)
        if cmd.startswith("ray::") or _comm(pid) in ("raylet", "gcs_server") or "/ray/" in cmd:
            found.append(pid)
    return found


def _comm(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def end_processes(pids: list[int], timeout_s: float = 5.0) -> None:
    """SIGTERM `pids`, SIGKILL those left after `timeout_s`, and reap those that are our children."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (pids := [p for p in pids if _alive(p)]):
            time.sleep(0.05)
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # our child: reaped once it exits (no zombie left)
        if done == pid:
            return False
    except ChildProcessError:  # not our child: ask the kernel
        pass
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie of another parent has exited; only its parent can reap it


def remove_temp_dir(path: str | None) -> None:
    if path and Path(path).name.startswith(PREFIX):
        shutil.rmtree(path, ignore_errors=True)
