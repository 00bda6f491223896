"""The shape a JSON answer must have before code reads it: a small schema, checked in one walk.

A server or a receipt can hold anything: `{"meta_info": 5}`, a list where an object was, a string where a
count was. Reading such an answer with `.get` and `int()` ends in a traceback far from the cause; checking
it against a schema first gives one line naming the field. Schemas are plain Python values:

    ANY                     anything
    int, float, str, bool   that type (int excludes bool; float accepts int; None is type(None))
    (A, B)                  any of the alternatives
    [A]                     a list whose items are A
    {"key": A}              an object; a key present must be A, other keys are free; Required(A): present
    MapOf(A)                an object whose every value is A (labels: name -> string)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANY = object()
NONE = type(None)


@dataclass(frozen=True)
class Required:
    """A key that must be present."""

    schema: Any


@dataclass(frozen=True)
class MapOf:
    """An object of any keys whose values are all `schema`."""

    schema: Any


# A scalar schema and the exact types that surely fit it (a subclass such as an IntEnum takes the walk).
_SCALAR_TYPES: dict[type, frozenset[type]] = {
    int: frozenset({int}),
    float: frozenset({int, float}),
    str: frozenset({str}),
    bool: frozenset({bool}),
    NONE: frozenset({NONE}),
}


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", NONE: "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _expected(schema: Any) -> str:
    if isinstance(schema, tuple):
        return " or ".join(_expected(s) for s in schema)
    if isinstance(schema, list):
        return "a list"
    if isinstance(schema, (dict, MapOf)):
        return "an object"
    if schema is float:
        return "a number"
    return {int: "an integer", str: "a string", bool: "a boolean", NONE: "null"}.get(schema, str(schema))


def problem(value: Any, schema: Any, where: str = "") -> str | None:
    """None when `value` fits `schema`, else the first misfit: `FIELD is X, expected Y`."""
    if isinstance(schema, type):  # the common case first: a scalar of an exact accepted type
        exact = _SCALAR_TYPES.get(schema)
        if exact is not None and type(value) in exact:
            return None
    label = where or "the answer"
    if schema is ANY:
        return None
    if isinstance(schema, Required):
        schema = schema.schema
    if isinstance(schema, tuple):
        kind = type(value)
        for option in schema:  # a scalar alternative that surely fits: no call (count or null fields)
            if isinstance(option, type) and kind in _SCALAR_TYPES.get(option, ()):
                return None
        for option in schema:
            if problem(value, option, where) is None:
                return None
        return f"{label} is {_type_name(value)}, expected {_expected(schema)}"
    if isinstance(schema, list):
        if not isinstance(value, list):
            return f"{label} is {_type_name(value)}, expected a list"
        exact = _SCALAR_TYPES.get(schema[0]) if isinstance(schema[0], type) else None
        if exact is not None and exact.issuperset(map(type, value)):
            return None  # every item has an exact accepted type: one pass in C (token id lists)
        for i, item in enumerate(value):
            found = problem(item, schema[0], f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(schema, MapOf):
        if not isinstance(value, dict):
            return f"{label} is {_type_name(value)}, expected an object"
        for key, item in value.items():
            found = problem(item, schema.schema, f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return f"{label} is {_type_name(value)}, expected an object"
        for key, sub in schema.items():
            if key not in value:
                if isinstance(sub, Required):
                    return f"{f'{where}.{key}' if where else key} is missing"
                continue
            found = problem(value[key], sub, f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    if schema is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif schema is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, schema)
    return None if ok else f"{label} is {_type_name(value)}, expected {_expected(schema)}"
