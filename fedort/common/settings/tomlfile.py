"""Settings files: read one table of a TOML file, with relative paths made relative to the file.

The edge client, the coordinator and the simulation all take a `--config FILE.toml`; this is
the one reader they share (stdlib `tomllib` from Python 3.11, its `tomli` backport on 3.10).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fedort.common.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def read_table(path: str | Path, table: str | None, path_keys: Iterable[str] = ()) -> dict[str, Any]:
    """The `[table]` of the file (its top level when absent or `table` is None).

    Values of `path_keys` that are relative paths become paths relative to the file, as a reader
    of the file expects.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from e
    values = data.get(table, data) if table else data
    if not isinstance(values, dict):
        raise ConfigError(f"[{table}] in {path} must be a table, got {type(values).__name__}")
    out = dict(values)
    for key in path_keys:
        if isinstance(out.get(key), str) and not Path(out[key]).is_absolute():
            out[key] = str(path.parent / out[key])
    return out


def unknown_settings(what: str, unknown: Iterable[str], known: Iterable[str]) -> str:
    """The error message for settings nobody reads: each with its likely intended key ("did you
    mean"), and the full list of known keys only when no key looks close."""
    import difflib

    known = sorted(known)
    parts, lost = [], False
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        parts.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
        lost = lost or not close
    message = f"unknown {what} setting(s) {', '.join(parts)}"
    return message + (f"; expected among {known}" if lost else "")
