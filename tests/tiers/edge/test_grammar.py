"""The grammars the edge constrains answers with (no model: llguidance on a one-byte-per-token
vocabulary), the check the gateway runs before routing, and the tool-call text → events parser."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tiers import Finished, Generation, TextDelta, ToolCallDelta, Usage, assemble
from tiers.edge import check_grammar
from tiers.edge._grammar import grammar_of, parser_limits
from tiers.edge._toolcalls import ToolCallText

llguidance = pytest.importorskip("llguidance")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time"}}  # no parameters: arguments are {}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CLOCK_CALL = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


class Bytes:
    """A vocabulary of the 256 bytes and an end token: any text is its own token sequence."""

    def __init__(self) -> None:
        self.eos_token_id = 256
        self.bos_token_id = None
        self.tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
        self.special_token_ids = [256]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Bytes()))


def accepts(gen: Generation, text: str) -> bool:
    grammar = grammar_of(gen)
    assert grammar is not None
    matcher = llguidance.LLMatcher(TOKENIZER, grammar, limits=parser_limits(), log_level=0)
    return bool(matcher.consume_tokens(list(text.encode()))) and bool(matcher.is_accepting())


def tools(choice: Any = None, parallel: bool = True) -> Generation:
    return Generation(messages=[], tools=[WEATHER, CLOCK], tool_choice=choice, parallel_tool_calls=parallel)


def schema(value: Any) -> Generation:
    return Generation(messages=[], response_format={"type": "json_schema", "json_schema": {"schema": value}})


def test_json_and_tool_grammars_compile_and_plain_text_has_none() -> None:
    assert grammar_of(Generation(messages=[])) is None
    assert grammar_of(tools("none")) is None
    gens = [
        Generation(messages=[], response_format={"type": "json_object"}),
        schema({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        tools("required"),
        tools({"type": "function", "function": {"name": "get_time"}}),
        tools("auto"),
    ]
    assert [check_grammar(g) for g in gens] == [""] * len(gens)
    assert accepts(gens[0], '{"a": [1, 2]}') and not accepts(gens[0], "[1, 2]")
    assert accepts(gens[1], '{"n": 3}') and not accepts(gens[1], '{"n": "3"}')


def test_tool_grammars_take_hermes_calls_as_the_tool_choice_allows() -> None:
    named = tools({"type": "function", "function": {"name": "get_weather"}})
    assert accepts(named, CALL)
    assert not accepts(named, CLOCK_CALL) and not accepts(named, CALL + "\n" + CALL)
    assert accepts(tools("required"), CALL + "\n" + CLOCK_CALL)
    assert not accepts(tools("required", parallel=False), CALL + "\n" + CLOCK_CALL)
    assert not accepts(tools("required"), "It is sunny.")
    assert not accepts(tools("required"), CALL.replace('"Paris"', "3"))  # not the schema
    auto = tools("auto")
    assert accepts(auto, "It is sunny.") and accepts(auto, CALL) and accepts(auto, "Let me look.\n" + CALL)
    assert not accepts(auto, '<tool_call>\n{"name": "rm -rf"')  # a call once begun is a call


def test_unusable_tool_choices_and_formats_are_refused_with_the_reason() -> None:
    assert "not among the tools" in check_grammar(tools({"type": "function", "function": {"name": "x"}}))
    quoted = Generation(messages=[], tools=[{"type": "function", "function": {"name": 'a"b'}}])
    assert "function name" in check_grammar(quoted)
    assert "must be an object" in check_grammar(schema([1, 2]))
    assert "Invalid type" in check_grammar(schema({"type": "nonsense"}))
    assert check_grammar(Generation(messages=[], response_format={"type": "yaml"}))


def test_hostile_schemas_fail_fast_or_stay_bounded() -> None:
    def timed(gen: Generation) -> tuple[str, float]:
        start = time.perf_counter()
        return check_grammar(gen), time.perf_counter() - start

    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
    error, took = timed(schema(wide))
    assert "grammar" in error and took < 1.0
    recursive = {
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node",
    }
    error, took = timed(schema(recursive))
    assert error == "" and took < 1.0
    assert accepts(schema(recursive), '{"next": {"next": {}}}')
    # a catastrophic-backtracking pattern: llguidance's lazy automata have no backtracking; each mask
    # is bounded by the lexer fuel
    evil = schema({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}})
    error, took = timed(evil)
    assert error == "" and took < 1.0
    start = time.perf_counter()
    assert accepts(evil, json.dumps({"s": "a" * 200}))
    assert time.perf_counter() - start < 2.0


def stream(text: str) -> tuple[list[Any], ToolCallText]:
    parser = ToolCallText(0)
    events = [e for ch in text for e in parser.feed(ch)]  # the worst case: a character at a time
    return [*events, *parser.finish()], parser


def test_tool_call_text_becomes_tool_call_deltas_streamed_as_decoded() -> None:
    events, parser = stream("Let me look.\n" + CALL + "\n" + CLOCK_CALL)
    answer = assemble([*events, Finished("tool_calls", Usage(1, 1))]).choices[0]
    assert answer.text == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in answer.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {}),
    ]
    firsts = [e for e in events if isinstance(e, ToolCallDelta) and e.id]
    assert all(e.id.startswith("call_") and len(e.id) == 29 and e.id[5:].isalnum() for e in firsts)
    pieces = [e.arguments for e in events if isinstance(e, ToolCallDelta) and e.index == 0 and e.arguments]
    assert len(pieces) > 5  # argument text as it came, not one piece at the end
    assert parser.calls == 2 and not parser.open_call
    events, parser = stream('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa')
    assert parser.open_call and not [e for e in events if isinstance(e, TextDelta)]  # cut: "length"
    events, _ = stream("a <tool without a call")
    assert "".join(e.text for e in events) == "a <tool without a call"
