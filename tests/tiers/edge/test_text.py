from __future__ import annotations

from tiers.edge._text import StopScanner, flatten_messages, render_prompt


def feed_all(scanner: StopScanner, pieces: list[str]) -> str:
    out = []
    for piece in pieces:
        text, stopped = scanner.feed(piece)
        out.append(text)
        if stopped:
            return "".join(out)
    return "".join(out) + scanner.flush()


def test_stop_sequence_split_across_pieces_is_never_emitted() -> None:
    assert feed_all(StopScanner(["END"]), ["hello E", "N", "D world"]) == "hello "


def test_partial_match_that_does_not_complete_is_released() -> None:
    scanner = StopScanner(["END"])
    assert scanner.feed("the EN") == ("the ", False)
    assert scanner.feed("gine") == ("ENgine", False)
    assert scanner.flush() == ""


def test_earliest_of_several_stops_wins_and_is_named() -> None:
    scanner = StopScanner(["zz", "b"])
    assert feed_all(scanner, ["a b zz"]) == "a "
    assert scanner.matched == "b"  # Anthropic's stop_sequence


def test_no_stops_passes_through() -> None:
    assert feed_all(StopScanner([]), ["a", "b"]) == "ab"


def test_flatten_joins_text_parts_and_maps_developer_role() -> None:
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    assert flatten_messages(messages) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a\nb"},
    ]


def test_one_template_renders_plain_chats_as_smollm2_does_and_tool_turns_in_hermes_form() -> None:
    assert render_prompt([{"role": "user", "content": "Hi"}]) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Pá"}'},
    }
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    assert flatten_messages(messages)[1]["tool_calls"] == [call]
    assert flatten_messages(messages)[2]["tool_call_id"] == "call_1"
    text = render_prompt(messages, [tool])
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pá"}}\n</tool_call><|im_end|>' in text
    assert text.endswith("<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
