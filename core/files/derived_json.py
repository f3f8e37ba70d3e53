"""The codec derived from the types: one `encode` / `decode` pair over `dataclasses.fields`
and `typing.get_type_hints`, so a field added to a result type is written and read back with
no edit here or in parity.reports.codec (a file saved before it existed reads its default).

The types say the form: a frozen dataclass is an object keyed by its field names, a tuple a
list, `X | None` null or X, an enum its value, a `Literal` one of its values, a
`Mapping[str, X]` an object, `Any` plain JSON. Floats follow parity.files.json_output: `exact`
(a saved run: "nan", "inf" and "-inf" come back bit for bit) or strict (the report: null).
Reading is strict JSON checked field by field (parity.files.strict_json), every FieldError
naming its dotted path. Where a type's JSON truly differs from its fields (a renamed key, a
property written for readers, a field kept elsewhere, values from a closed list, what fields
must agree on), its `Form` says so (parity.reports.forms registers the result types'; a
type below parity.reports, a layer's value, registers its own); nothing else is per type.

Why not cattrs or msgspec: the saved-run format predates this module and must not change,
its checks (dotted-path errors, bounded lists, exact floats, defaults for fields a file
lacks) are the format's, and a library would need as many hooks as this module has lines.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
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
    `unwrap`: the one field the type is written as (a result the report has always held as a
    list, the frozen search's `frozen`, is that list, not an object around it).
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
    unwrap: str | None = None


_FORMS: dict[type, Form] = {}
_PLAIN = Form()


def register(cls: type, form: Form) -> None:
    """Give `cls` its form (parity.reports.forms does, for the types whose JSON differs)."""
    if form.unwrap is not None and [f.name for f in _fields(cls)] != [form.unwrap]:
        raise TypeError(f"{cls.__name__} is written as its field {form.unwrap!r}: its only one")
    _FORMS[cls] = form
    for made in (form_of, _plan, _write_plan, _reader):  # made from the forms: made again
        made.cache_clear()


@cache
def form_of(cls: type) -> Form:
    """The form of `cls` (a subclass has its base's)."""
    return next((_FORMS[c] for c in cls.__mro__ if c in _FORMS), _PLAIN)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.init)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


# ---------------------------------------------------------------------------------------
# writing


def encode(value: Any, *, exact: bool = True) -> Any:
    """`value` as JSON: floats `exact` (a saved run) or strict (null where non-finite)."""
    kind = type(value)
    if kind is float:
        return exact_float(value) if exact else finite_or_none(value)
    if value is None or kind is int or kind is str or kind is bool:
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encode_object(value, exact)
    if isinstance(value, (tuple, list)):
        return [encode(v, exact=exact) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v, exact=exact) for k, v in value.items()}
    if isinstance(value, np.generic):  # a numpy scalar: its Python value
        return encode(value.item(), exact=exact)
    for base in (int, float, str):  # a subclass of one
        if isinstance(value, base):
            return encode(base(value), exact=exact)
    return plain(value)  # an array where free-form JSON holds one: its short description


@cache
def _write_plan(cls: type) -> tuple[tuple[str, str, Encoder | None, bool, Any], ...]:
    """(field, key, its own encoder, omitted at its default, the default) per written field."""
    form = form_of(cls)
    return tuple(
        (f.name, form.keys.get(f.name, f.name), form.encoders.get(f.name), f.name in form.omit,
         _default(f))
        for f in _fields(cls)
        if f.name not in form.skip
    )  # fmt: skip


def _encode_object(value: Any, exact: bool) -> Any:
    cls: type = type(value)
    unwrap = form_of(cls).unwrap
    if unwrap is not None:
        return encode(getattr(value, unwrap), exact=exact)
    data = {key: encode(get(value), exact=exact) for key, get in form_of(cls).extra.items()}
    for name, key, encoder, omit, default in _write_plan(cls):
        item = getattr(value, name)
        if omit and item == default:
            continue
        data[key] = encoder(item, exact) if encoder else encode(item, exact=exact)
    return data


# ---------------------------------------------------------------------------------------
# reading: each type's reader is made once from its hints (then a field costs a lookup)

Reader = Callable[[Any, str], Any]


def decode(tp: Any, raw: Any, at: str, **given: Any) -> Any:
    """The value of type `tp` that `raw` holds, every field checked (FieldError naming the
    first bad one by its dotted path `at`). `given`: fields of a dataclass `tp` the caller
    read itself (arrays from a saved run's members)."""
    if given:
        return _read_object(tp, raw, at, given)
    return _reader(tp)(raw, at)


@dataclass(frozen=True)
class _Field:
    """One field as a reader reads it: its JSON key, its default (MISSING: the file must have
    it) and how its value is read."""

    name: str
    key: str
    default: Any
    required: bool
    read: Reader
    null_is_default: bool  # null where the type is not Optional: the default (undefined)
    choices: tuple[str, ...] | None


@cache
def _plan(cls: type) -> tuple[_Field, ...]:
    form, hints = form_of(cls), _hints(cls)
    plan = []
    for f in _fields(cls):
        if f.name in form.skip:
            continue
        default = form.absent.get(f.name, _default(f))
        decoder = form.decoders.get(f.name)
        plan.append(
            _Field(
                name=f.name,
                key=form.keys.get(f.name, f.name),
                default=default,
                required=default is MISSING or f.name in form.required,
                read=decoder or _reader(hints[f.name], form.limits.get(f.name)),
                null_is_default=decoder is None
                and default is not MISSING
                and not _optional(hints[f.name]),
                choices=form.choices.get(f.name),
            )
        )
    return tuple(plan)


def _read_object(cls: type, raw: Any, at: str, given: Mapping[str, Any]) -> Any:
    entry = sj.obj(raw, at)
    values = dict(given)
    for f in _plan(cls):
        if f.name in values:
            continue
        if f.key not in entry:  # a file saved before the field existed: its default
            if f.required:
                raise sj.FieldError(f"{at}: missing field {f.key!r}")
            values[f.name] = f.default
            continue
        item = entry[f.key]
        if item is None and f.null_is_default:
            values[f.name] = f.default  # null: written where the value was undefined
            continue
        value = f.read(item, f"{at}.{f.key}")
        if f.choices is not None and value not in f.choices:
            where = f"{at}.{f.key}"
            raise sj.FieldError(f"{where}: {value!r} is not one of {', '.join(f.choices)}")
        values[f.name] = value
    try:
        result = cls(**values)
    except sj.FieldError:
        raise
    except (ValueError, TypeError, UsageError) as exc:  # its own check (a negative tolerance)
        raise sj.FieldError(f"{at}: {str(exc).splitlines()[0]}") from None
    check = form_of(cls).check
    if check is not None:
        check(result, at)
    return result


def _optional(tp: Any) -> bool:
    return _is_union(tp) and type(None) in typing.get_args(tp)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _number(raw: Any, at: str) -> float:
    number = from_exact(raw, at)
    if number is None:
        raise sj.FieldError(f"{at}: expected a number, got null")
    return number


def _any(raw: Any, at: str) -> Any:
    sj.check_depth(raw)
    return raw


_LEAVES: dict[Any, tuple[Reader, Callable[[Any], bool]]] = {
    # reader, and the test a value passes without it (its path is made only for an error)
    bool: (sj.boolean, lambda v: v is True or v is False),
    int: (sj.integer, lambda v: type(v) is int and 0 <= v <= sj.MAX_INT),
    float: (_number, lambda v: type(v) is float and math.isfinite(v)),
    str: (sj.string, lambda v: type(v) is str),
}


@cache
def _reader(tp: Any, limit: int | None = None) -> Reader:
    """How a value of type `tp` is read (`limit`: most entries of a list)."""
    if tp is Any:
        return _any
    if _is_union(tp):
        options = [t for t in typing.get_args(tp) if t is not type(None)]
        if len(options) != 1:
            raise TypeError(f"a union of {options} needs a decoder in its Form")
        inner = _reader(options[0], limit)
        if len(options) == len(typing.get_args(tp)):
            return inner
        return lambda raw, at: None if raw is None else inner(raw, at)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:  # one of a few texts or numbers
        return lambda raw, at: _one_of(args, raw, at)
    if origin is tuple:
        return _tuple_reader(args, limit)
    if origin in (list, Sequence):  # a list field (a frozen type's is a tuple, but it reads)
        items = _tuple_reader((args[0] if args else Any, ...), limit)
        return lambda raw, at: list(items(raw, at)) if origin is list else items(raw, at)
    if typing.is_typeddict(tp):  # free-form settings typed by their keys: plain JSON
        return _any
    if origin in (Mapping, dict) or tp in (dict, Mapping):
        value = _reader(args[1] if len(args) == 2 else Any)
        return lambda raw, at: {k: value(v, f"{at}.{k}") for k, v in sj.obj(raw, at).items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _object_reader(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_reader(tp)
    if tp in _LEAVES:
        return _LEAVES[tp][0]
    raise TypeError(f"no JSON form for {tp!r}: give its field a decoder in its Form")


def _object_reader(cls: type) -> Reader:
    form = form_of(cls)
    if form.unwrap is None:
        return lambda raw, at: _read_object(cls, raw, at, {})
    name = form.unwrap
    inner = _reader(_hints(cls)[name], form.limits.get(name))
    return lambda raw, at: cls(**{name: inner(raw, at)})


def _one_of(values: tuple[Any, ...], raw: Any, at: str) -> Any:
    if not any(raw == v and type(raw) is type(v) for v in values):
        shown = ", ".join(map(repr, values))
        raise sj.FieldError(f"{at}: {raw!r} is not one of {shown}")
    return raw


def _enum_reader(tp: type[enum.Enum]) -> Reader:
    members = {m.value: m for m in tp}

    def read(raw: Any, at: str) -> enum.Enum:
        member = members.get(sj.string(raw, at))
        if member is None:
            names = ", ".join(map(str, members))
            raise sj.FieldError(f"{at}: unknown {tp.__name__.lower()} {raw!r} (one of {names})")
        return member

    return read


def _tuple_reader(args: tuple[Any, ...], limit: int | None) -> Reader:
    if len(args) != 2 or args[1] is not Ellipsis:  # a fixed length: (K, N)
        items = tuple(_reader(t) for t in args)

        def fixed(raw: Any, at: str) -> tuple[Any, ...]:
            values = sj.array(raw, at)
            if len(values) != len(items):
                raise sj.FieldError(f"{at}: expected {len(items)} entries, got {len(values)}")
            pairs = enumerate(zip(items, values, strict=True))
            return tuple(read(v, f"{at}[{i}]") for i, (read, v) in pairs)

        return fixed
    inner = args[0]
    if limit is None:
        limit = {str: MAX_NOTES, int: MAX_TOKENS, float: MAX_TOKENS}.get(inner)
    read = _reader(inner)
    ok = _LEAVES[inner][1] if inner in _LEAVES else None

    def listed(raw: Any, at: str) -> tuple[Any, ...]:
        values = sj.array(raw, at, limit=limit)
        if ok is not None and all(map(ok, values)):  # a leaf list: a path only for an error
            return tuple(float(v) for v in values) if inner is float else tuple(values)
        return tuple(read(v, f"{at}[{i}]") for i, v in enumerate(values))

    return listed
