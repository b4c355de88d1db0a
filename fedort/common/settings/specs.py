"""Spec strings such as `krum:2`, `hinge:10,4` or `slow:0.2:5`: the one reader of their name, parts and numbers.

Every `--strategy`, `--staleness-weight`, `--device-speed` style option is a name and a fixed number of
parameters; a bad one is a ConfigError that names the option, repeats the spec and says what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fedort.common.errors import ConfigError


def split_spec(spec: object, kind: str, usage: str, arity: Mapping[str, int], sep: str = ":") -> tuple[str, list[str]]:
    """(name, parameters) of `spec`; `usage` is the option's grammar, e.g. "constant | poly:A | hinge:A,B".

    The parameters follow the first ':' and are separated by `sep` (':' or ','); names are case-insensitive.
    """
    if not isinstance(spec, str):
        raise ConfigError(f"{kind} must be a string ({usage}), got {spec!r}")
    name, _, rest = spec.strip().lower().partition(":")
    name = name.strip()
    args = [part.strip() for part in rest.split(sep)] if rest.strip() else []
    if name not in arity:
        raise ConfigError(f"unknown {kind} {spec!r}; expected one of {usage}")
    if len(args) != arity[name]:
        example = next(s.strip() for s in usage.split("|") if s.strip().split(":")[0] == name)
        raise ConfigError(f"{kind} {spec!r} takes {arity[name]} parameter(s): expected {example!r}")
    return name, args


def spec_number(text: str, what: str, spec: str, kind: str) -> float:
    """A finite float parameter of a spec."""
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{kind} {spec!r}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{kind} {spec!r}: {what} must be finite, got {text!r}")
    return value


def spec_count(text: str, what: str, spec: str, kind: str, minimum: int) -> int:
    """An integer parameter of a spec, at least `minimum`."""
    if not text.strip().isdigit() or int(text) < minimum:
        raise ConfigError(f"{kind} {spec!r}: {what} must be an integer >= {minimum}, got {text!r}")
    return int(text)


__all__ = ["spec_count", "spec_number", "split_spec"]
