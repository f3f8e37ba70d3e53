"""The codec derived from the types: one `encode` / `decode` pair over `dataclasses.fields`
and `typing.get_type_hints`, so a field added to a result type is written and read back with
no edit here or in parity.reports.codec (a file saved before it existed reads its default).

The types say the form: a frozen dataclass is an object keyed by its field names, a tuple a
list, `X | None` null or X, an enum its value, a `Mapping[str, X]` an object, `Any` plain
JSON. Floats follow parity.files.json_output: `exact` (a saved run: "nan", "inf" and "-inf"
come back bit for bit) or strict (the report: null). Reading is strict JSON checked field by
field (parity.files.strict_json), every FieldError naming its dotted path. Where a type's
JSON truly differs from its fields (a renamed key, a property written for readers, a field
kept elsewhere, values from a closed list, what fields must agree on), its `Form` says so
(parity.reports.forms registers them); nothing else is per type.

Why not cattrs or msgspec: the saved-run format predates this module and must not change,
its checks (dotted-path errors, bounded lists, exact floats, defaults for fields a file
lacks) are the format's, and a library would need as many hooks as this module has lines.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from functools import cache
from typing import Any, Union

import numpy as np

import parity.files.strict_json as sj
from parity.errors import UsageError
from parity.files.json_output import exact as exact_float
from parity.files.json_output import finite_or_none, from_exact, plain

__all__ = ["MAX_NOTES", "MAX_TOKENS", "Form", "decode", "encode", "form_of", "register"]

MAX_NOTES = 10_000
"""The most entries a list of texts (or of a run's notes, frozen nodes, static axes) may
have: a run says a few dozen; a forged one's 300,000 is refused in one line."""
MAX_TOKENS = 1_000_000  # a list of numbers (a generation's tokens, one per token it made)

Encoder = Callable[[Any, bool], Any]  # (value, exact) -> JSON
Decoder = Callable[[Any, str], Any]  # (JSON, dotted path) -> value


@dataclass(frozen=True)
class Form:
    """How one dataclass's JSON differs from its fields (nothing, for most types).

    `keys`: field -> the JSON key it is written under. `skip`: fields not written (recomputed
    on load, or written by the caller: arrays go to a saved run's members). `omit`: fields not
    written while they hold their default. `extra`: keys written from properties, for readers
    of the report (reading ignores them). `encoders` / `decoders`: one field's own form.
    `absent`: what a field without a default reads as when a file saved before it lacks it.
    `required`: fields a file must have although the type has defaults. `choices`: text
    fields that take one of these values. `limits`: most entries of a list field (lists of
    texts: MAX_NOTES, of numbers: MAX_TOKENS, of objects: no limit but the file's size).
    `check`: what the fields must agree on, raising FieldError (at: the object's path).
    """

    keys: Mapping[str, str] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()
    omit: frozenset[str] = frozenset()
    extra: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    encoders: Mapping[str, Encoder] = field(default_factory=dict)
    decoders: Mapping[str, Decoder] = field(default_factory=dict)
    absent: Mapping[str, Any] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    check: Callable[[Any, str], None] | None = None


_FORMS: dict[type, Form] = {}
_PLAIN = Form()


def register(cls: type, form: Form) -> None:
    """Give `cls` its form (parity.reports.forms does, for the types whose JSON differs)."""
    _FORMS[cls] = form


def form_of(cls: type) -> Form:
    """The form of `cls` (a subclass has its base's)."""
    return next((_FORMS[c] for c in cls.__mro__ if c in _FORMS), _PLAIN)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.init)


# ---------------------------------------------------------------------------------------
# writing


def encode(value: Any, *, exact: bool = True) -> Any:
    """`value` as JSON: floats `exact` (a saved run) or strict (null where non-finite)."""
    if value is None or isinstance(value, (bool, str)):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encode_object(value, exact)
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float):
        return exact_float(value) if exact else finite_or_none(value)
    if isinstance(value, Mapping):
        return {str(k): encode(v, exact=exact) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [encode(v, exact=exact) for v in value]
    return plain(value)  # an array where free-form JSON holds one: its short description


def _encode_object(value: Any, exact: bool) -> dict[str, Any]:
    form = form_of(type(value))
    data: dict[str, Any] = {key: get(value) for key, get in form.extra.items()}
    for f in _fields(type(value)):
        if f.name in form.skip:
            continue
        item = getattr(value, f.name)
        if f.name in form.omit and item == _default(f):
            continue
        encoder = form.encoders.get(f.name)
        key = form.keys.get(f.name, f.name)
        data[key] = encoder(item, exact) if encoder else encode(item, exact=exact)
    return {key: encode(v, exact=exact) for key, v in data.items()}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


# ---------------------------------------------------------------------------------------
# reading


def decode(tp: Any, raw: Any, at: str, **given: Any) -> Any:
    """The value of type `tp` that `raw` holds, every field checked (FieldError naming the
    first bad one by its dotted path `at`). `given`: fields of a dataclass `tp` the caller
    read itself (arrays from a saved run's members)."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_object(tp, raw, at, given)
    return _decode_value(tp, raw, at, None)


def _decode_object(cls: type, raw: Any, at: str, given: Mapping[str, Any]) -> Any:
    entry = sj.obj(raw, at)
    form, hints = form_of(cls), _hints(cls)
    values = dict(given)
    for f in _fields(cls):
        if f.name in given or f.name in form.skip:
            continue
        key = form.keys.get(f.name, f.name)
        where = f"{at}.{key}"
        default = form.absent.get(f.name, _default(f))
        if key not in entry:  # a file saved before the field existed: its default
            if default is MISSING or f.name in form.required:
                raise sj.FieldError(f"{at}: missing field {key!r}")
            values[f.name] = default
            continue
        decoder = form.decoders.get(f.name)
        if decoder is not None:
            values[f.name] = decoder(entry[key], where)
        elif entry[key] is None and default is not MISSING and not _optional(hints[f.name]):
            values[f.name] = default  # null: written where the value was undefined
        else:
            value = _decode_value(hints[f.name], entry[key], where, form.limits.get(f.name))
            choices = form.choices.get(f.name)
            if choices is not None and value not in choices:
                raise sj.FieldError(f"{where}: {value!r} is not one of {', '.join(choices)}")
            values[f.name] = value
    try:
        result = cls(**values)
    except sj.FieldError:
        raise
    except (ValueError, TypeError, UsageError) as exc:  # its own check (a negative tolerance)
        raise sj.FieldError(f"{at}: {str(exc).splitlines()[0]}") from None
    if form.check is not None:
        form.check(result, at)
    return result


def _optional(tp: Any) -> bool:
    return _is_union(tp) and type(None) in typing.get_args(tp)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _decode_value(tp: Any, raw: Any, at: str, limit: int | None) -> Any:
    if tp is Any:
        sj.check_depth(raw)
        return raw
    if _is_union(tp):
        options = [t for t in typing.get_args(tp) if t is not type(None)]
        if raw is None and len(options) < len(typing.get_args(tp)):
            return None
        if len(options) != 1:
            raise TypeError(f"{at}: a union of {options} needs a decoder in its Form")
        return _decode_value(options[0], raw, at, limit)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        return _decode_tuple(args, raw, at, limit)
    if origin in (Mapping, dict, typing.Mapping, dict) or tp in (dict, Mapping):
        inner = args[1] if len(args) == 2 else Any
        items = sj.obj(raw, at)
        return {k: _decode_value(inner, v, f"{at}.{k}", None) for k, v in items.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_object(tp, raw, at, {})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        text = sj.string(raw, at)
        names = [m.value for m in tp]
        if text not in names:
            kind = tp.__name__.lower()
            raise sj.FieldError(f"{at}: unknown {kind} {text!r} (one of {', '.join(names)})")
        return tp(text)
    if tp is bool:
        return sj.boolean(raw, at)
    if tp is int:
        return sj.integer(raw, at)
    if tp is float:
        number = from_exact(raw, at)
        if number is None:
            raise sj.FieldError(f"{at}: expected a number, got null")
        return number
    if tp is str:
        return sj.string(raw, at)
    raise TypeError(f"{at}: no JSON form for {tp!r}: give its field a decoder in its Form")


def _decode_tuple(args: tuple[Any, ...], raw: Any, at: str, limit: int | None) -> tuple[Any, ...]:
    if len(args) == 2 and args[1] is Ellipsis:
        inner = args[0]
        if limit is None:
            limit = {str: MAX_NOTES, int: MAX_TOKENS, float: MAX_TOKENS}.get(inner)
        items = sj.array(raw, at, limit=limit)
        return tuple(_decode_value(inner, v, f"{at}[{i}]", None) for i, v in enumerate(items))
    items = sj.array(raw, at)
    if len(items) != len(args):
        raise sj.FieldError(f"{at}: expected {len(args)} entries, got {len(items)}")
    return tuple(
        _decode_value(t, v, f"{at}[{i}]", None)
        for i, (t, v) in enumerate(zip(args, items, strict=True))
    )
