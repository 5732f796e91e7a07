"""Typed setting values: a value parsed from YAML or ``--set`` checked against a dataclass field's
type (``coerce``), converted where lossless, and back to plain YAML values (``to_plain``)."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import yaml

from pgrad_app.errors import UserError, suggest


def field_types(cls: type) -> dict[str, Any]:
    """``{field name: resolved type}`` of a dataclass (string annotations resolved)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable annotation: fall back to the raw ones
        hints = {}
    # A field that takes a schedule (agents/schedules.py) is a number or a string such as
    # lin_3e-4, whatever a preset's redeclared annotation says.
    return {f.name: (float | str) if f.metadata.get("schedule") else hints.get(f.name, f.type)
            for f in dataclasses.fields(cls)}


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Checks ``value`` (already parsed from YAML) against type ``tp``; converts where lossless.

    Raises:
      UserError: naming ``where`` (e.g. ``"--set gamma"``), the expected type and the value.
    """
    if tp is Any or tp is None:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where)
            except UserError as err:
                errors.append(err)
        raise UserError(f"{where}: expected {_type_name(tp)}; got {value!r}.")
    if origin is typing.Literal:
        if value in args:
            return value
        hint = suggest(str(value), map(str, args))
        raise UserError(f"{where}: must be one of {list(args)}; got {value!r}.{hint}")
    if origin in (tuple, list) or tp in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{where}: expected a list like [64, 64]; got {value!r}.")
        if origin is tuple and args and args[-1] is Ellipsis:
            items = [coerce(v, args[0], where) for v in value]
        elif origin is tuple and args:
            if len(args) != len(value):
                raise UserError(f"{where}: expected {len(args)} values; got {value!r}.")
            items = [coerce(v, a, where) for v, a in zip(value, args)]
        else:
            items = [coerce(v, args[0], where) if args else v for v in value]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{where}: expected true or false; got {value!r}.")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:  # "1e5" or "100_000" -> int (PyYAML reads "1e5" as a string)
                as_float = float(value)
                if as_float.is_integer():
                    return int(as_float)
            except ValueError:
                pass
        raise UserError(f"{where}: expected an integer; got {value!r}.")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:  # PyYAML reads "1e-3" (no dot) as a string
                return float(value)
            except ValueError:
                pass
        raise UserError(f"{where}: expected a number; got {value!r}.")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise UserError(f"{where}: expected a string; got {value!r}.")
    return value


def parse_set(pair: str, flag: str = "--set") -> tuple[str, Any]:
    """``"key=value"`` -> ``(key, value parsed as YAML)``; the value is typed later."""
    if "=" not in pair:
        raise UserError(f"{flag} {pair!r}: expected key=value, e.g. {flag} gamma=0.98.")
    key, text = pair.split("=", 1)
    key = key.strip()
    if not key:
        raise UserError(f"{flag} {pair!r}: the key is empty.")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text  # a plain string such as "a:b" that YAML cannot read
    return key, value


def to_plain(value: Any) -> Any:
    """Dataclass values -> YAML-safe plain values (tuples become lists)."""
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value
