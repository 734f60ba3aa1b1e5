"""What a request's output must look like, as an llguidance grammar (the library behind vLLM's
"guidance" structured-output backend); pure functions of the :class:`Generation`, no model needed.

* ``response_format`` ``json_object``: any JSON object; ``json_schema``: that schema (strict or not).
* Tools, in the Hermes format of the shared chat template (``tiers/chat_templates/chatml-tools.jinja``):
  a call is the text ``<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>`` with ARGS
  matching the function's ``parameters`` (none: the empty object ``{}``), calls separated by "\\n".

  - ``required``: one call of any tool, or several when the client set ``parallel_tool_calls`` to
    true (unset, OpenAI's default is true; here it is one call: a small model allowed another call
    after each tends to keep calling until max_tokens);
  - named (``{"type": "function", ...}``): one call of exactly that function;
  - ``auto``: the model chooses.  One Lark grammar says so: either text that never contains
    ``<tool_call>`` (lexeme negation ``~``, intersected with "any text"), or text up to the first
    ``<tool_call>`` (a *lazy* lexeme: it ends there) followed by the rest of a call and maybe more calls.
    So text may come before the calls, a call once begun is forced to the end, and text without one is
    free.  (The alternative, generating freely and switching grammars when ``<tool_call>`` shows up, has
    to re-align tokens that straddle the switch; the grammar does it for us.)  With a ``response_format``
    too, the answer that is not a call must be that JSON.
  - ``none``: no tool grammar (``response_format``, if any, still applies).

JSON is compiled without free whitespace (``", "`` and ``": "`` separators, as ``json.dumps`` writes
them): a small model given room for whitespace can fill its budget with newlines.

Hostile grammars fail fast: grammar text over :data:`MAX_GRAMMAR_BYTES` is refused before compiling, and
:func:`parser_limits` bounds compiling (grammar symbols, the lexer's fuel and states) and every token's mask
computation.  :func:`check_grammar` runs the same checks without a tokenizer, for the gateway to refuse a bad
schema before routing.

What a JSON schema leaves unbounded is bounded (:func:`bounded`), so that a constrained answer always
ends.  A schema says ``{"type": "integer"}``; the grammar made from it allows any number of digits, and a
small model at temperature 0 can write ``1111111…`` until ``max_tokens`` (seen on the edge: a
``population`` field to the end of a 200-token budget).  Whitespace is already fixed (the
separators above); the rest is bounded here, before the schema is compiled, the
way compact strict outputs look:

* an integer: at most 15 digits (|x| < 10^15), unless the schema gives its own bounds;
* a number: the same magnitude and at most 6 decimals (``multipleOf`` 10^-6), unless it gives its own;
* a string: at most :data:`MAX_STRING` characters, unless it has a length, a pattern, a format, an
  ``enum`` or a ``const``;
* an array: at most :data:`MAX_ITEMS` items, unless it says how many;
* a free-form value (``json_object``, an object's ``additionalProperties: true``): one of those, nested
  at most two deep; an object that names its properties and says nothing of others has those only.

llguidance (the grammar compiler both edge engines use) honours ``minimum``/``maximum``, ``multipleOf``,
``maxLength`` and ``maxItems`` while decoding; no library rewrites a schema this way, so it is done here.
The bounds are the edge's own: the cloud tier's vLLM gets the client's schema as it is.
"""

from __future__ import annotations

import importlib.util
import json
import re
from functools import cache
from typing import Any

from tiers._types import ALL_ABILITIES, Ability, Generation

__all__ = [
    "MAX_GRAMMAR_BYTES",
    "bounded",
    "check_grammar",
    "edge_abilities",
    "grammar_of",
    "parser_limits",
]

# A 10,000-property schema is ~300 KB; schemas people send are a few KB.
MAX_GRAMMAR_BYTES = 128 << 10
# Grammar symbols: 1,000 string properties take ~8,000 and compile in ~30 ms; 10,000 are refused in ~0.2 s.
MAX_GRAMMAR_SYMBOLS = 20_000
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
CALL_OPEN = "<tool_call>"
CALL_HEAD = '\n{"name": "'  # after CALL_OPEN, then the name
ARGUMENTS_KEY = '", "arguments": '
CALL_CLOSE = "}\n</tool_call>"
CALL_SEPARATOR = "\n"
CONSTRAINED = frozenset({Ability.TOOLS, Ability.JSON_OBJECT, Ability.JSON_SCHEMA})


MAX_MAGNITUDE = 10**15 - 1
DECIMALS = 1e-6
MAX_STRING = 96
MAX_ITEMS = 8
_SCALARS: list[dict[str, Any]] = [
    {"type": "string", "maxLength": MAX_STRING},
    {"type": "integer", "minimum": -MAX_MAGNITUDE, "maximum": MAX_MAGNITUDE},
    {"type": "number", "minimum": -MAX_MAGNITUDE, "maximum": MAX_MAGNITUDE, "multipleOf": DECIMALS},
    {"type": "boolean"},
    {"type": "null"},
]
_SHALLOW: dict[str, Any] = {"anyOf": _SCALARS}
# Any JSON value, bounded: scalars, or arrays and objects of scalars.
ANY_VALUE: dict[str, Any] = {
    "anyOf": [
        *_SCALARS,
        {"type": "array", "items": _SHALLOW, "maxItems": MAX_ITEMS},
        {"type": "object", "additionalProperties": _SHALLOW},
    ]
}
_SUBSCHEMA_KEYS = ("items", "not", "contains", "if", "then", "else")
_LIST_KEYS = ("anyOf", "allOf", "oneOf", "prefixItems")
_MAP_KEYS = ("properties", "$defs", "definitions", "patternProperties")


def bounded(schema: Any) -> Any:
    """``schema`` with the bounds above added where it leaves a value unbounded (a new object; the
    client's is not changed)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_KEYS:
        if isinstance(out.get(key), dict):
            out[key] = bounded(out[key])
    if isinstance(out.get("items"), list):  # the old tuple form
        out["items"] = [bounded(s) for s in out["items"]]
    for key in _LIST_KEYS:
        if isinstance(out.get(key), list):
            out[key] = [bounded(s) for s in out[key]]
    for key in _MAP_KEYS:
        if isinstance(out.get(key), dict):
            out[key] = {name: bounded(s) for name, s in out[key].items()}
    extra = out.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = bounded(extra) if extra else ANY_VALUE
    elif extra is True:
        out["additionalProperties"] = ANY_VALUE
    if "enum" in out or "const" in out or "$ref" in out:
        return out
    kinds = out.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if kinds & {"integer", "number"} and "maximum" not in out and "exclusiveMaximum" not in out:
        out["maximum"] = MAX_MAGNITUDE
    if kinds & {"integer", "number"} and "minimum" not in out and "exclusiveMinimum" not in out:
        out["minimum"] = -MAX_MAGNITUDE
    if "number" in kinds and "integer" not in kinds and "multipleOf" not in out:
        out["multipleOf"] = DECIMALS
    if "string" in kinds and not {"maxLength", "pattern", "format"} & out.keys():
        out["maxLength"] = MAX_STRING
    if "array" in kinds and "maxItems" not in out and "prefixItems" not in out:
        out["maxItems"] = MAX_ITEMS
    if "object" in kinds and "additionalProperties" not in out:
        # named properties: those only, as strict outputs have them; none named: free-form, bounded
        out["additionalProperties"] = False if "properties" in out else ANY_VALUE
    return out


class GrammarError(ValueError):
    """The request's schema or tools make no usable grammar (the message says why)."""


@cache
def edge_abilities() -> frozenset[Ability]:
    """Every ability when llguidance can be imported; without it, none that needs a grammar."""
    if importlib.util.find_spec("llguidance") is None:
        return ALL_ABILITIES - CONSTRAINED
    return ALL_ABILITIES


def parser_limits() -> Any:
    """llguidance's bounds for one request's grammar (compile time, and each token's mask)."""
    from llguidance import LLParserLimits

    return LLParserLimits(
        max_grammar_size=MAX_GRAMMAR_SYMBOLS,
        initial_lexer_fuel=1_000_000,  # ~20 ms of regex analysis when compiling
        step_lexer_fuel=200_000,  # ~15 ms per token mask at worst
        step_max_items=50_000,
        max_lexer_states=50_000,  # ~100 MB at most
        verbose_errors=False,  # the message goes back to the client: no parser dumps
    )


def _schema(schema: Any) -> dict[str, Any]:
    """A JSON schema with tiergate's JSON options and bounds (:func:`bounded`); refuses what is
    not a schema object."""
    if schema is True or schema is None:
        schema = {}
    if not isinstance(schema, dict):
        raise GrammarError("a JSON schema must be an object")
    own = schema.get("x-guidance")
    return {**bounded(schema), "x-guidance": {**(own if isinstance(own, dict) else {}), **JSON_OPTIONS}}


def _lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _functions(gen: Generation) -> list[dict[str, Any]]:
    functions = [t["function"] for t in gen.tools if t.get("type", "function") == "function"]
    forced = gen.forced_tool
    if forced is not None:
        functions = [f for f in functions if f.get("name") == forced]
        if not functions:
            raise GrammarError(f"tool_choice names {forced!r}, which is not among the tools")
    if not functions:
        raise GrammarError("tool_choice needs at least one function tool")
    return functions


def _tools_lark(gen: Generation, answer_schema: dict[str, Any] | None) -> str:
    functions = _functions(gen)
    lines = []
    bodies = []
    for i, function in enumerate(functions):
        name = str(function.get("name") or "")
        if not FUNCTION_NAME.fullmatch(name):  # OpenAI's rule; it also keeps the call's JSON valid
            raise GrammarError(f"a function name must be 1-64 letters, digits, '_' or '-', not {name!r}")
        parameters = function.get("parameters")
        arguments = _schema(parameters if parameters else NO_ARGUMENTS)
        head = _lark_string(CALL_HEAD + name + ARGUMENTS_KEY)
        lines.append(f"body_{i}: {head} args_{i} {_lark_string(CALL_CLOSE)}")
        lines.append(f"args_{i}: %json {json.dumps(arguments, ensure_ascii=False)}")
        bodies.append(f"body_{i}")
    lines.append("body: " + " | ".join(bodies))
    lines.append(f"call: {_lark_string(CALL_OPEN)} body")
    several = gen.parallel_tool_calls is True and gen.tool_mode != "named"
    more = f" ({_lark_string(CALL_SEPARATOR)} call)*" if several else ""
    if gen.tool_mode == "auto":
        if answer_schema is not None:
            top = [f"start: answer | call{more}", f"answer: %json {json.dumps(answer_schema)}"]
        else:
            top = [
                f"start: TEXT | head body{more}",
                # text that never contains <tool_call> ...
                "TEXT: /(?s:.*)/ & ~/(?s:.*)<tool_call>(?s:.*)/",
                # ... or text up to the first <tool_call>, where this lazy lexeme ends
                "head[lazy]: /(?s:.*)<tool_call>/",
            ]
    else:
        top = [f"start: call{more}"]
    return "\n".join([*top, *lines])


def _answer_schema(gen: Generation) -> dict[str, Any] | None:
    form = gen.response_format
    if not form or form.get("type") in (None, "text"):
        return None
    if form["type"] == "json_object":
        return _schema({"type": "object"})
    if form["type"] == "json_schema":
        spec = form.get("json_schema")
        if not isinstance(spec, dict):
            raise GrammarError("response_format json_schema needs a json_schema object")
        return _schema(spec.get("schema"))
    raise GrammarError(f"response_format type {form['type']!r} is not supported")


def grammar_of(gen: Generation) -> str | None:
    """The llguidance grammar (its JSON text) the answer to ``gen`` must follow; None for free text.
    Raises :class:`GrammarError` for schemas or tools that make no grammar."""
    from llguidance import LLMatcher

    answer = _answer_schema(gen)
    if gen.tool_mode != "none":
        grammar = LLMatcher.grammar_from_lark(_tools_lark(gen, answer))
    elif answer is not None:
        try:
            grammar = LLMatcher.grammar_from_json_schema(answer)
        except ValueError as exc:
            raise GrammarError(str(exc)) from exc
    else:
        return None
    if len(grammar) > MAX_GRAMMAR_BYTES:
        raise GrammarError(
            f"the schema and tools make a grammar of {len(grammar)} bytes (at most {MAX_GRAMMAR_BYTES})"
        )
    return grammar


def check_grammar(gen: Generation) -> str:
    """Why the schema or tools of ``gen`` cannot constrain an answer, or "" when they can (or there is
    nothing to constrain).  Tokenizer-free (what the model's vocabulary could add is checked when the
    request runs); for the gateway to refuse a request with a 400 before routing it."""
    if gen.tool_mode == "none" and not _needs_json(gen):
        return ""
    if importlib.util.find_spec("llguidance") is None:
        return "constrained decoding (tools, response_format) needs the llguidance package"
    from llguidance import LLMatcher

    try:
        grammar = grammar_of(gen)
    except GrammarError as exc:
        return str(exc)
    if grammar is None:
        return ""
    return str(LLMatcher.validate_grammar(grammar, None, limits=parser_limits()))


def _needs_json(gen: Generation) -> bool:
    form = gen.response_format
    return bool(form) and form is not None and form.get("type") not in (None, "text")
