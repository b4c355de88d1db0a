"""Optional extras: check that the packages a command needs are installed, before it starts work.

`fedort simulate` needs `fedort[sim]` (scikit-learn, matplotlib), `--backend ray` needs
`fedort[ray]`, `artifacts build --torch` needs `fedort[torch]`. A missing one is one line naming
the extra to install (a `MissingExtraError`), raised before any round trains or file is written,
instead of a `ModuleNotFoundError` halfway through a run.
"""

from __future__ import annotations

import importlib.util

from fedort.common.errors import MissingExtraError

#: extra -> (import name, distribution name) of what it brings
EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "sim": (("sklearn", "scikit-learn"), ("matplotlib", "matplotlib")),
    "ray": (("ray", "ray"),),
    "torch": (("torch", "torch"),),
}


def missing(extra: str, needs: tuple[str, ...] | None = None) -> list[str]:
    """Distribution names of `extra` (or of its import names `needs`) that are not importable here;
    finds them without importing them."""
    out = []
    for module, dist in EXTRAS[extra]:
        if needs is not None and module not in needs:
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or half-removed install
            found = False
        if not found:
            out.append(dist)
    return out


def require(extra: str, what: str, needs: tuple[str, ...] | None = None) -> None:
    """Raise MissingExtraError (one line: what needs it, what is missing, the pip command) unless
    `extra` (or the part of it `what` needs) is installed."""
    absent = missing(extra, needs)
    if absent:
        verb = "is" if len(absent) == 1 else "are"
        raise MissingExtraError(
            f"{what} needs {' and '.join(absent)}, which {verb} not installed: pip install 'fedort[{extra}]'",
            extra=extra,
        )
