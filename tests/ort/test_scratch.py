"""fedort.ort.scratch: a session's files on disk live in a folder under its owner's root, never in the system temp
dir; a folder a killed process left there is removed when the next session starts under that root."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from pathlib import Path

from fedort.ort.artifacts import CHECKPOINT, EVAL_MODEL, OPTIMIZER_MODEL, TRAINING_MODEL
from fedort.ort.session import TrainingSession

# builds a session that writes both kinds of file (models given as bytes, the no-optimizer-state checkpoint),
# then dies by SIGKILL: no finalizer, no atexit
KILLED = r'''
import os, signal, sys
from pathlib import Path
from fedort.ort.artifacts import CHECKPOINT, EVAL_MODEL, OPTIMIZER_MODEL, TRAINING_MODEL
from fedort.ort.session import TrainingSession

art, root = Path(sys.argv[1]), sys.argv[2]
s = TrainingSession(art / CHECKPOINT, (art / TRAINING_MODEL).read_bytes(), (art / EVAL_MODEL).read_bytes(),
                    (art / OPTIMIZER_MODEL).read_bytes(), **({"scratch_dir": root} if root else {}))
s.reset_optimizer_state()
os.kill(os.getpid(), signal.SIGKILL)
'''


def run_killed(artifacts: Path, tmp_path: Path, root: Path | None = None) -> None:
    """Run KILLED with the system temp dir at tmp_path/tmp and fedort's cache root at tmp_path/cache."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), FEDORT_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", KILLED, str(artifacts), str(root or "")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir())


def test_a_session_killed_by_sigkill_leaves_nothing_in_the_system_temp_dir(mlp_artifacts, tmp_path):
    run_killed(mlp_artifacts, tmp_path)
    assert list((tmp_path / "tmp").iterdir()) == []
    (left,) = folders(tmp_path / "cache" / "sessions")       # by default under fedort's cache root
    assert (left / "no-optimizer-state.ckpt").is_file() and (left / "training_model.onnx").is_file()


def test_the_next_session_under_the_same_root_removes_what_a_killed_one_left(mlp_artifacts, tmp_path):
    root = tmp_path / "sessions"
    run_killed(mlp_artifacts, tmp_path, root)
    (left,) = folders(root)
    session = TrainingSession.from_artifacts(mlp_artifacts, scratch_dir=root)
    assert not left.exists() and list(root.iterdir()) == []
    session.reset_optimizer_state()
    assert [p.name for p in folders(root)] != [left.name] and len(folders(root)) == 1


def test_a_live_sessions_folder_is_kept_by_the_next_session(mlp_artifacts, tmp_path):
    root = tmp_path / "sessions"
    first = TrainingSession.from_artifacts(mlp_artifacts, scratch_dir=root)
    first.reset_optimizer_state()
    (kept,) = folders(root)
    second = TrainingSession.from_artifacts(mlp_artifacts, scratch_dir=root)
    second.reset_optimizer_state()
    assert kept in folders(root) and len(folders(root)) == 2
    first.reset_optimizer_state()                            # its checkpoint is still there to reload
    assert (kept / "no-optimizer-state.ckpt").is_file()


def test_a_collected_session_removes_its_folder(mlp_artifacts, tmp_path):
    root = tmp_path / "sessions"
    session = TrainingSession(mlp_artifacts / CHECKPOINT, (mlp_artifacts / TRAINING_MODEL).read_bytes(),
                              mlp_artifacts / EVAL_MODEL, mlp_artifacts / OPTIMIZER_MODEL, scratch_dir=root)
    assert len(folders(root)) == 1
    del session
    gc.collect()
    assert list(root.iterdir()) == []
