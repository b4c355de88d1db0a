"""Settings declared once: each dataclass field carries its help, and flags and docs are made from it.

A config section is a frozen dataclass whose fields are declared with `option(default, help)`.
From those fields, `options(cls)` lists the table of options (key, section, type, default,
help); `add_flags` turns it into argparse flags by one rule, `--` + the key with `_` as `-`
(booleans get `--key` and `--no-key`); `markdown_table` renders the README's settings tables.
Flags, keys and docs therefore cannot disagree.

Spellings that were renamed keep working for one release: `deprecated_flag` adds the old flag,
hidden from `--help`, that sets the new key and says so on stderr; `renamed_keys` does the same
for keys of a settings file.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedort.common.errors import ConfigError

HELP = "fedort.help"
METAVAR = "fedort.metavar"
DOC_DEFAULT = "fedort.doc_default"
CHOICES = "fedort.choices"
FLAG = "fedort.flag"
GROUP = "fedort.group"


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    metavar: str | None = None,
    doc_default: str | None = None,
    choices: tuple[str, ...] | None = None,
    flag: bool = True,
    group: str | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its help text (and how the docs show its default; `flag=False`: code only)."""
    meta = {HELP: help, METAVAR: metavar, DOC_DEFAULT: doc_default, CHOICES: choices, FLAG: flag, GROUP: group}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Option:
    """One row of the options table."""

    key: str
    section: str
    kind: type  # bool, int, float, str, Path or tuple (a comma-separated list on the command line)
    optional: bool
    default: Any
    help: str
    metavar: str | None
    doc_default: str | None
    choices: tuple[str, ...] | None
    flag: bool
    group: str | None

    @property
    def flag_name(self) -> str:
        return flag_name(self.key)

    @property
    def default_text(self) -> str:
        if self.doc_default is not None:
            return self.doc_default
        value = self.default
        if value is None or value == () or value == {}:
            return "none"
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)


def flag_name(key: str) -> str:
    """The one rule: `round_timeout_s` -> `--round-timeout-s`."""
    return "--" + key.replace("_", "-")


def _kind(hint: Any) -> tuple[type, bool]:
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        kind, _ = _kind(rest[0])
        return kind, True
    if origin is tuple or hint is tuple:
        return tuple, False
    return (hint if isinstance(hint, type) else object), False


def options(cls: type, section: str = "") -> list[Option]:
    """The options table of a dataclass: every field declared with `option`, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if HELP not in f.metadata:
            continue
        kind, optional = _kind(hints[f.name])
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        m = f.metadata
        out.append(
            Option(
                f.name,
                section,
                kind,
                optional,
                default,
                m[HELP],
                m[METAVAR],
                m[DOC_DEFAULT],
                m[CHOICES],
                m[FLAG],
                m[GROUP],
            )
        )
    return out


def _metavar(opt: Option) -> str | None:
    if opt.metavar:
        return opt.metavar
    return {int: "N", float: "X", Path: "PATH", tuple: "A,B,..."}.get(opt.kind, "VALUE")


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    table: Iterable[Option],
    *,
    defaults: Mapping[str, str] | None = None,
) -> None:
    """One flag per option (`flag_name(key)`, dest = key, default None: an unset flag falls through to
    the file and the dataclass default). `defaults`: how the help names a default that differs here."""
    for opt in table:
        if not opt.flag:
            continue
        shown = (defaults or {}).get(opt.key, opt.default_text)
        said = "required" if shown == "required" else f"default {shown}"
        help = f"{opt.help} ({said})".replace("%", "%%") if opt.help else argparse.SUPPRESS
        if opt.kind is bool:
            parser.add_argument(
                opt.flag_name, dest=opt.key, action=argparse.BooleanOptionalAction, default=None, help=help
            )
            continue
        convert: Any = {int: int, float: float, Path: Path}.get(opt.kind, str)
        parser.add_argument(
            opt.flag_name,
            dest=opt.key,
            type=convert,
            metavar=None if opt.choices else _metavar(opt),
            choices=opt.choices,
            default=None,
            help=help,
        )


class _Deprecated(argparse.Action):
    def __init__(self, option_strings, dest, new: str = "", append: bool = False, **kw) -> None:
        self.new = new
        self.append = append
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(
            f"fedort: warning: {option_string} is deprecated and will be removed; use {self.new}",
            file=sys.stderr,
            flush=True,
        )
        if self.nargs == 0:
            values = self.const
        if self.append:
            current = getattr(namespace, self.dest, None)
            items = list(current.split(",") if isinstance(current, str) else current or [])
            values = ",".join([*items, values])
        setattr(namespace, self.dest, values)


def deprecated_flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    old: str,
    key: str,
    *,
    new: str | None = None,
    type: Any = str,
    append: bool = False,
    const: Any = None,
) -> None:
    """`old` keeps setting `key` for one release, hidden from --help, with a warning naming the new flag."""
    kw: dict[str, Any] = {"nargs": 0, "const": const} if const is not None else {"type": type}
    parser.add_argument(
        old, dest=key, action=_Deprecated, new=new or flag_name(key), append=append, help=argparse.SUPPRESS, **kw
    )


def renamed_keys(values: dict[str, Any], renames: Mapping[str, str], where: str) -> dict[str, Any]:
    """`values` with old keys moved to their new names, each saying so on stderr (new names win)."""
    out = dict(values)
    for old, new in renames.items():
        if old in out:
            value = out.pop(old)
            print(
                f"fedort: warning: {where} setting {old!r} is deprecated and will be removed; use {new!r}",
                file=sys.stderr,
                flush=True,
            )
            out.setdefault(new, value)
    return out


def markdown_table(table: Iterable[Option]) -> str:
    """The README's form of an options table: key, flag, default, meaning."""
    rows = ["| key | flag | default | meaning |", "| --- | --- | --- | --- |"]
    for opt in table:
        flag = f"`{opt.flag_name}`" if opt.flag else "(code only)"
        if opt.flag and opt.kind is bool:
            flag = f"`{opt.flag_name}` / `--no-{opt.flag_name[2:]}`"
        meaning = opt.help.replace("|", "\\|")
        rows.append(f"| {opt.key} | {flag} | {opt.default_text.replace('|', '/')} | {meaning} |")
    return "\n".join(rows)


# ---- checks a section's validate() uses ---------------------------------------------------------------


def need(ok: bool, what: str, value: Any) -> None:
    """ConfigError `<what>, got <value>` unless `ok`: what was expected and what arrived."""
    if not ok:
        raise ConfigError(f"{what}, got {value!r}")


def is_int(x: Any, low: int | None = None) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and (low is None or x >= low)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def host_port_ok(address: Any) -> bool:
    """HOST:PORT with a host and a port in 0..65535."""
    if not isinstance(address, str):
        return False
    host, sep, port = address.rpartition(":")
    return bool(sep and host) and port.isdigit() and 0 <= int(port) <= 65535


def as_tuple(value: Any) -> tuple[str, ...]:
    """A list setting given as a comma-separated string, a list or a tuple."""
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return tuple(value)


def as_path(value: Any) -> Path | None:
    return value if value is None or isinstance(value, Path) else Path(value)
