"""A bounded scan of a request body before it is decoded: every list and map the wire types bound,
free-form JSON (tool ``parameters``, ``json_schema.schema``, anything typed ``Any``) and the body as
a whole are measured while the bytes are read, and the scan stops at the first bound broken.  So the
cost of refusing a body follows the bound, not the body's size.

Why a scan of our own: msgspec checks ``max_length`` only after it has built the whole list (measured
with msgspec 0.23: 645,274 text parts against a bound of 10 took as long as without the bound and
built every part), and it builds free-form JSON whole before any schema bound can look at it (5.59 M
empty lists: 394 MiB).  No library in the project's dependencies reads JSON as a stream that can stop
(ijson or json-stream would be new dependencies, and walk every value through Python as this scan
does); the scan skips strings, numbers and the commas between them in ``re``'s C loop, so Python runs
once per string or bracket, not per byte.

It is not a parser: msgspec still decodes the body and says what is malformed.  The scan agrees with
JSON on every valid prefix, so wherever msgspec would stop by itself (an unknown field of a strict
struct, a container where the type takes none) the scan stops too, having kept its bounds up to there.
A bound the type declares is refused with msgspec's own words, so the 400 is the one a full decode
would give; the budgets of the body as a whole are this module's (:class:`Budget`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire.places import ANY, Place

# A token (its group, as ``lastindex`` reads it):
#   1 a key, its colon;  2 the same and a leaf value (a string, number, literal or empty container),
#     with the comma after it;
#   3 a run of numbers and literals with the commas between and after them (4 KiB at most);
#   4 a run of leaves and their commas (256 leaves at most);
#   5 an opening bracket;  6 a closing bracket and a comma after it (none: a closing bracket alone);
#   7 a lone comma.
# Whitespace before a token is skipped with it.  Runs are short so that a scan stopping at a bound
# has not read the rest of a long list first.
_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_LEAF = rb"(?:" + _STRING + rb"(?!\s*:)|[^\s\"\[\]{},:]+|\[\s*\]|\{\s*\})"
_TOKEN = re.compile(
    rb"\s*(?:"
    rb'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:(\s*' + _LEAF + rb"\s*,?)?"
    rb"|([^\s\"\[\]{},:][^\"\[\]{}:]{0,4095})"
    rb"|(" + _LEAF + rb"(?:\s*,\s*" + _LEAF + rb"){0,255}\s*,?)"
    rb"|([\[{])"
    rb"|[\]}]\s*(,)?"
    rb"|(,)"
    rb")",
    re.DOTALL,
)
_COMMAS = re.compile(_STRING + rb"|(,)", re.DOTALL)  # in a run with strings: its commas are group 1
_COMMA = ord(",")
_OPEN_ARRAY = ord("[")


@dataclass(frozen=True, slots=True)
class Budget:
    """What a whole body may hold beyond the bounds its type declares.

    ``values``: JSON values in all (2,048 embedding inputs of 256 token ids are 524,288; decoded,
    600,000 small integers are ~21 MiB).  ``containers``: non-empty arrays and objects, each a few
    tokens for the scan (4,096 messages with a tool call each are ~16,000).  ``free``: values in one
    free-form subtree, the JSON schema bound (:data:`gateway.wire.schemas.MAX_NODES`).  ``depth``:
    containers inside one another (a schema may nest 48 deep; msgspec stops near 1,000 by itself)."""

    values: int = 600_000
    containers: int = 20_000
    free: int = 20_000
    depth: int = 256


BUDGET = Budget()
# An open container, as a list for speed: members so far, the most it may have, whether it is an
# object, its place, the last key read (an object's).
_MEMBERS, _MOST, _OBJ, _PLACE, _KEY = range(5)


def scan(body: bytes, root: Place, budget: Budget = BUDGET) -> None:
    """Raise at the first bound ``body`` breaks (``root``: the place of the whole body); return when
    it keeps them all or reaches a place where msgspec refuses it by itself.

    A bound its type declares: :class:`msgspec.ValidationError`, worded as msgspec words it, so the
    400 is the one a whole decode gives; a budget: :class:`InvalidRequest`."""
    frames: list[list[Any]] = []
    top: list[Any] = []
    values, opened = 1, 0
    free_at, free = -1, 0  # the index in `frames` of the open free-form subtree's root (-1: none)
    for m in _TOKEN.finditer(body):
        group = m.lastindex
        if group is None or group == 6:  # a closing bracket
            if not frames:
                return  # malformed: msgspec says so
            if len(frames) - 1 == free_at:
                free_at = -1
            frames.pop()
            if not frames:
                return  # the top-level value is whole: what follows, msgspec refuses
            top = frames[-1]
            if group is None:
                continue
            added = 1
        elif group == 5:
            place = _place_in(top, root) if frames else root
            obj = body[m.start(5)] != _OPEN_ARRAY
            if place is None or not (place.obj if obj else place.array):
                return  # msgspec refuses a container here before it builds anything inside
            added = 1 if frames and top[_MEMBERS] == 0 else 0
            if added:
                values, free = _count(frames, top, added, values, free, free_at, budget)
            top = [0, place.obj if obj else place.array, obj, place, b""]
            frames.append(top)
            opened += 1
            if opened > budget.containers:
                raise _over(budget.containers, "arrays and objects")
            if len(frames) > budget.depth:
                raise InvalidRequest("the request body's JSON is nested too deeply")
            if place.free and free_at < 0:
                free_at, free = len(frames) - 1, 1
            continue
        elif not frames:
            return  # a scalar or a key outside any container: msgspec refuses it
        elif group <= 2:
            if not top[_OBJ]:
                return  # malformed: msgspec says so
            top[_KEY] = m.group(1)
            if top[_PLACE].fields is not None and _field(top) is _UNKNOWN:
                return  # an unknown field of a strict struct: msgspec stops here
            added = (top[_MEMBERS] == 0) + (group == 2 and body[m.end() - 1] == _COMMA)
        elif group == 3:
            added = body.count(b",", m.start(), m.end()) + (top[_MEMBERS] == 0)
        elif group == 4:
            start, end = m.span()
            if body.find(b'"', start, end) < 0:
                commas = body.count(b",", start, end)
            else:
                commas = _COMMAS.findall(body, start, end).count(b",")
            added = commas + (top[_MEMBERS] == 0)
        else:
            added = 1
        if added:
            values, free = _count(frames, top, added, values, free, free_at, budget)


def _count(
    frames: list[list[Any]], top: list[Any], added: int, values: int, free: int, free_at: int, budget: Budget
) -> tuple[int, int]:
    """``added`` members more in ``top``: the values and free-form values counted so far, raised
    when a bound is passed."""
    top[_MEMBERS] += added
    if top[_MEMBERS] > top[_MOST]:
        where = _path(frames, len(frames) - 1)
        at = f" - at `$.{where}`".replace("$.[", "$[") if where else ""
        kind = "object" if top[_OBJ] else "array"
        raise msgspec.ValidationError(f"Expected `{kind}` of length <= {top[_MOST]}{at}")
    values += added
    if values > budget.values:
        raise _over(budget.values, "JSON values")
    if free_at >= 0:
        free += added
        if free > budget.free:
            where = _path(frames, free_at)
            raise InvalidRequest(f"{where} is too large (over {budget.free} JSON values)", param=where)
    return values, free


_UNKNOWN = Place()


def _place_in(top: list[Any], root: Place) -> Place | None:
    """The place of a container opened inside ``top``."""
    place: Place = top[_PLACE]
    if not top[_OBJ]:
        return place.item
    if place.fields is None:
        return place.value
    found = _field(top)
    return None if found is _UNKNOWN else found


def _field(frame: list[Any]) -> Place | None:
    """The place of the value of ``frame``'s last key; :data:`_UNKNOWN` where msgspec refuses it."""
    place: Place = frame[_PLACE]
    fields = place.fields or {}
    key: bytes = frame[_KEY]
    if b"\\" in key:  # an escaped key: compare what it says
        try:
            key = msgspec.json.decode(b'"' + key + b'"', type=str).encode()
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError):
            return _UNKNOWN
    if key in fields:
        return fields[key]
    return _UNKNOWN if place.closed else ANY  # msgspec skips it, building nothing: scanned as free


def _path(frames: list[list[Any]], upto: int) -> str:
    """msgspec's path to the container ``frames[upto]``, as in ``messages[0].content``."""
    out = ""
    for frame in frames[:upto]:
        if not frame[_OBJ]:
            out += f"[{frame[_MEMBERS] - 1}]"
        elif frame[_PLACE].fields is None:
            out += "[...]"
        else:
            out += "." + frame[_KEY].decode(errors="replace")[:64]
    return out.removeprefix(".")


def _over(most: int, what: str) -> InvalidRequest:
    return InvalidRequest(
        f"the request body holds over {most:,} {what}; at most {most:,} are taken in one request"
    )
