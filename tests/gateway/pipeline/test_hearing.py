"""Chat audio no tier takes: heard as its transcript, marked in the prompt and in the answer; dropped
(text-only, as any broken medium) when the transcriber fails, under its own breaker; left alone when a
tier takes audio or the tenant's policy would rather fail."""

from __future__ import annotations

import base64
import io
import wave
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import router
from gateway.pipeline.endpoints.hearing import MARK, TRANSCRIBED, VIDEO_MARK, Hearing, samples_of
from gateway.wire.chat import (
    AudioPart,
    ChatCompletionRequest,
    FramesPart,
    ImageURL,
    InputAudio,
    Message,
    TextPart,
)
from tiers import Capabilities, Health, Modality, TierState, TierUnavailable
from tiers.speech import Transcript


def wav(samples: list[int]) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(np.array(samples, dtype="<i2").tobytes())
    return out.getvalue()


@dataclass
class FakeTranscriber:
    name: str = "speech"
    available: bool = True
    fail: bool = False
    heard: list[int] = field(default_factory=list)

    async def transcribe(self, pcm: np.ndarray) -> Transcript:
        self.heard.append(len(pcm))
        if self.fail:
            raise TierUnavailable(self.name, "the model fell over")
        return Transcript("What is the capital of France?", "en", len(pcm) / 16000, ())


@dataclass
class FakeTiers:
    audio: bool = False
    breakers: router.BreakerBoard = field(
        default_factory=lambda: router.BreakerBoard(
            router.BreakerConfig(consecutive_failures=2, cooldown_s=60)
        )
    )

    def views(self) -> list[router.TierView]:
        modalities = frozenset({Modality.TEXT, *([Modality.AUDIO] if self.audio else [])})
        caps = Capabilities(modalities, 2048, "m")
        return [router.TierView("edge", caps, TierState("edge", Health.READY))]


CLIP = base64.b64encode(wav([0, 16384, -16384, 0] * 400)).decode()
REQUEST = ChatCompletionRequest(
    model="tiergate-auto",
    messages=[Message(role="user", content=[TextPart("Answer this."), AudioPart(InputAudio(CLIP, "wav"))])],
)
MEDIA = router.MediaSummary(audio_clips=1, audio_seconds=0.1)


def hearing(transcriber: Any, tiers: Any) -> Hearing:
    return Hearing(transcriber, tiers)


def test_samples_are_floats_in_unit_range() -> None:
    assert samples_of(wav([0, 16384, -32768])).tolist() == [0.0, 0.5, -1.0]


async def test_audio_no_tier_takes_becomes_its_marked_transcript() -> None:
    transcriber = FakeTranscriber()
    heard = await hearing(transcriber, FakeTiers()).listen(REQUEST, MEDIA, None)
    parts = heard.request.messages[0].content
    assert isinstance(parts, list) and [type(p) for p in parts] == [TextPart, TextPart]
    assert parts[1].text == MARK + "What is the capital of France?"  # type: ignore[union-attr]
    assert heard.degraded == (TRANSCRIBED,) and "transcribed" in heard.note
    assert heard.media.audio_clips == 0 and transcriber.heard == [1600]


@pytest.mark.parametrize(("audio", "refuse"), [(True, None), (False, True)])
async def test_left_alone_when_a_tier_hears_or_the_policy_would_rather_fail(
    audio: bool, refuse: bool | None
) -> None:
    transcriber = FakeTranscriber()
    heard = await hearing(transcriber, FakeTiers(audio=audio)).listen(REQUEST, MEDIA, refuse)
    assert heard.request is REQUEST and not heard.changed and transcriber.heard == []


async def test_a_tier_outside_the_keys_tiers_that_hears_audio_does_not_count() -> None:
    """A key kept to the cloud: the edge hears audio, but not for this key, so it is transcribed."""
    transcriber = FakeTranscriber()
    heard = await hearing(transcriber, FakeTiers(audio=True)).listen(REQUEST, MEDIA, None, ("cloud",))
    assert heard.degraded == (TRANSCRIBED,) and transcriber.heard == [1600]


async def test_a_failing_transcriber_drops_the_audio_and_opens_its_breaker() -> None:
    transcriber, tiers = FakeTranscriber(fail=True), FakeTiers()
    ear = hearing(transcriber, tiers)
    for _ in range(2):
        heard = await ear.listen(REQUEST, MEDIA, None)
        assert heard.degraded == ("audio",) and "transcriber failed" in heard.note
        assert heard.request.messages[0].role == "system"  # the usual note that the audio was removed
        assert heard.request.messages[1].content == "Answer this."
    assert Modality.AUDIO in tiers.breakers.open_modalities("speech")
    heard = await ear.listen(REQUEST, MEDIA, None)  # open: not even tried
    assert heard.degraded == ("audio",) and "breaker is open" in heard.note and len(transcriber.heard) == 2


FRAMES = FramesPart([ImageURL("data:image/jpeg;base64,AAAA")], [0.0], 1.0, 1.0, InputAudio(CLIP, "wav"))
VIDEO = ChatCompletionRequest(
    model="tiergate-auto",
    messages=[Message(role="user", content=[TextPart("What is said?"), FRAMES])],  # type: ignore[list-item]
)
VIDEO_MEDIA = router.MediaSummary(videos=1, video_seconds=1.0, video_frames=1)


async def test_a_videos_audio_track_no_tier_takes_becomes_its_marked_transcript_beside_the_frames() -> None:
    transcriber = FakeTranscriber()
    heard = await hearing(transcriber, FakeTiers()).listen(VIDEO, VIDEO_MEDIA, None)
    parts = heard.request.messages[0].content
    assert isinstance(parts, list) and [type(p) for p in parts] == [TextPart, FramesPart, TextPart]
    frames, said = parts[1], parts[2]
    assert isinstance(frames, FramesPart) and frames.audio is None and frames.frames == FRAMES.frames
    assert isinstance(said, TextPart) and said.text == VIDEO_MARK + "What is the capital of France?"
    assert heard.degraded == (TRANSCRIBED,) and transcriber.heard == [1600]
    assert heard.media.videos == 1  # the video itself goes on


async def test_a_videos_track_is_left_with_a_tier_that_hears_and_taken_out_when_the_policy_would_rather_fail() -> (
    None
):
    transcriber = FakeTranscriber()
    kept = await hearing(transcriber, FakeTiers(audio=True)).listen(VIDEO, VIDEO_MEDIA, None)
    assert kept.request == VIDEO and not kept.changed
    refused = await hearing(transcriber, FakeTiers()).listen(VIDEO, VIDEO_MEDIA, True)
    parts = refused.request.messages[0].content
    assert isinstance(parts, list) and isinstance(parts[1], FramesPart) and parts[1].audio is None
    assert not refused.changed and transcriber.heard == []


async def test_a_failing_transcriber_leaves_the_videos_frames_without_their_track() -> None:
    heard = await hearing(FakeTranscriber(fail=True), FakeTiers()).listen(VIDEO, VIDEO_MEDIA, None)
    parts = heard.request.messages[-1].content
    assert isinstance(parts, list) and [type(p) for p in parts] == [TextPart, FramesPart]
    assert isinstance(parts[1], FramesPart) and parts[1].audio is None
    assert heard.degraded == ("audio",) and heard.request.messages[0].role == "system"
