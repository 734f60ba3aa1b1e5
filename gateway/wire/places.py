"""Where a JSON value may sit in a request, read from its msgspec type: the containers that may stand
there and how many members each may have.  :mod:`gateway.wire.bounds` scans a body against it.

A :class:`Place` is built once per request type from :func:`msgspec.inspect.type_info`, so the
bounds a scan applies are the ones the wire types declare (``Annotated[list[...],
msgspec.Meta(max_length=N)]``), written in one place.  A union's places are merged (the larger bound
wins: a body is never refused by the scan that the type accepts); ``Any`` and ``msgspec.Raw`` are
free-form JSON, bounded by the scan's free-form budget.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import msgspec.inspect as mi

MOST = 4096  # members of a struct's object (its keys repeated), of a list or map declaring no bound
UNBOUNDED = 1 << 40  # members of a free-form container: the scan's free-form budget bounds them


@dataclass(eq=False, slots=True)
class Place:
    """What may stand at one place of a request.  ``array``/``obj``: the most members of an array or
    object here (0: none may stand here: msgspec refuses one at once, so the scan stops there)."""

    array: int = 0
    item: Place | None = None  # the place of an array's items
    obj: int = 0
    fields: dict[bytes, Place | None] | None = None  # a struct's keys (None: a map, each at `value`)
    value: Place | None = None  # the place of a map's values
    closed: bool = False  # a struct that refuses unknown fields (msgspec stops at the first one)
    free: bool = False  # free-form JSON (``Any``): counted against the free-form budget


def _any() -> Place:
    place = Place(array=UNBOUNDED, obj=UNBOUNDED, free=True)
    place.item = place.value = place
    return place


ANY = _any()


@functools.cache
def place_of(kind: Any, raw: frozenset[str] = frozenset()) -> Place:
    """The place of a whole request body decoded as ``kind`` (a msgspec type, a union of them).

    ``raw``: fields of ``kind`` (a struct) that are decoded as ``msgspec.Raw`` first and typed after,
    one by one: msgspec does not stop inside them, so neither may the scan (:func:`_lenient`)."""
    root = _place(mi.type_info(kind), {})
    if root is None:
        return Place()
    for name in raw:
        assert root.fields is not None, "raw fields are a struct's"
        root.fields[name.encode()] = _lenient(root.fields[name.encode()], {})
    return root


def _place(t: mi.Type, structs: dict[type, Place]) -> Place | None:
    if isinstance(t, (mi.AnyType, mi.RawType)):
        return ANY
    if isinstance(t, mi.UnionType):
        places = [p for p in (_place(member, structs) for member in t.types) if p is not None]
        return functools.reduce(_merge, places) if places else None
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        item = _place(t.item_type, structs)
        return Place(array=t.max_length or MOST, item=item, free=item is ANY)
    if isinstance(t, mi.TupleType):
        items = [p for p in (_place(i, structs) for i in t.item_types) if p is not None]
        item = functools.reduce(_merge, items) if items else None
        return Place(array=len(t.item_types), item=item)
    if isinstance(t, mi.DictType):
        value = _place(t.value_type, structs)
        return Place(obj=t.max_length or MOST, value=value, free=value is ANY)
    if isinstance(t, mi.StructType):
        return _struct(t, structs)
    if isinstance(t, (mi.TypedDictType, mi.DataclassType)):
        return Place(obj=MOST, fields={f.encode_name.encode(): _place(f.type, structs) for f in t.fields})
    return None  # a scalar: no container may stand here


def _struct(t: mi.StructType, structs: dict[type, Place]) -> Place:
    if t.cls in structs:  # a recursive type: its place is being built
        return structs[t.cls]
    if t.array_like:
        place = structs[t.cls] = Place(array=len(t.fields), item=ANY)
        return place
    place = structs[t.cls] = Place(obj=MOST, closed=t.forbid_unknown_fields, fields={})
    fields: dict[bytes, Place | None] = {}
    if t.tag_field is not None:
        fields[t.tag_field.encode()] = None
    for f in t.fields:
        fields[f.encode_name.encode()] = _place(f.type, structs)
    place.fields = fields
    return place


def _lenient(place: Place | None, done: dict[int, Place]) -> Place:
    """``place`` as msgspec reads it when decoding ``msgspec.Raw``: it builds nothing inside and stops
    nowhere, so what the type would refuse at once (an unknown field, a container where a scalar
    goes) is scanned on, as free-form JSON; the bounds the type declares stay."""
    if place is None or place is ANY:
        return ANY
    if id(place) in done:
        return done[id(place)]
    copy = done[id(place)] = Place(free=place.free)
    copy.array, copy.item = (place.array, _lenient(place.item, done)) if place.array else (UNBOUNDED, ANY)
    copy.obj = place.obj or UNBOUNDED
    if place.fields is not None:
        copy.fields = {key: _lenient(child, done) for key, child in place.fields.items()}
    else:
        copy.value = _lenient(place.value, done) if place.obj else ANY
    return copy


def _merge(a: Place, b: Place) -> Place:
    """One place for a union's members: what either allows is allowed, with the larger bound."""
    if a is ANY or b is ANY:
        return ANY
    merged = Place(
        array=max(a.array, b.array),
        obj=max(a.obj, b.obj),
        closed=a.closed and b.closed,
        free=a.free or b.free,
    )
    merged.item = _either(a.item, b.item)
    if a.obj and b.obj and (a.fields is None) != (b.fields is None):
        merged.value = ANY  # a map beside a struct: every key allowed, its value free-form
    elif a.fields is not None or b.fields is not None:
        merged.fields = dict(a.fields or {})
        for key, place in (b.fields or {}).items():
            merged.fields[key] = _either(merged.fields[key], place) if key in merged.fields else place
    else:
        merged.value = _either(a.value, b.value)
    return merged


def _either(a: Place | None, b: Place | None) -> Place | None:
    if a is None or b is None:
        return a if b is None else b
    return _merge(a, b)
