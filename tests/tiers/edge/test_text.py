from __future__ import annotations

from tiers.edge._text import StopScanner, flatten_messages


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


def test_earliest_of_several_stops_wins() -> None:
    assert feed_all(StopScanner(["zz", "b"]), ["a b zz"]) == "a "


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
