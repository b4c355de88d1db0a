"""The scenario files that ship with fedort, by name: `fedort simulate digits_dirichlet` finds
`fedort/simulations/scenarios/digits_dirichlet.toml` in the installed package, and
`fedort simulate --list` prints each with the first line of its leading comment."""

from __future__ import annotations

import os
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "scenarios"


def bundled() -> dict[str, Path]:
    """Scenario name (file stem) -> its file, sorted by name."""
    return {p.stem: p for p in sorted(FOLDER.glob("*.toml"))}


def describe(path: Path) -> str:
    """The first line of the file's leading `#` comment ('' if it has none)."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line.strip():
            break
    return ""


def listing() -> str:
    """One line per bundled scenario: name and description."""
    items = bundled()
    width = max(map(len, items), default=0)
    return "\n".join(f"{name:<{width}}  {describe(path)}" for name, path in items.items())


def resolve(scenario: str | os.PathLike) -> Path:
    """A scenario argument as a file: an existing path as given, else a bundled scenario's name
    (with or without `.toml`); anything else is returned unchanged for the loader to report."""
    path = Path(scenario)
    if path.exists():
        return path
    name = path.name[:-5] if path.name.endswith(".toml") else path.name
    if path.parent == Path(".") and name in bundled():
        return bundled()[name]
    return path
