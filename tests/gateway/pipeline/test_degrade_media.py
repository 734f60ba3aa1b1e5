"""Degrading a preprocessed request: a lost modality's parts go, and its share of the media summary."""

from __future__ import annotations

from gateway.pipeline import degrade
from gateway.pipeline.plan import features_of
from gateway.wire.chat import ChatCompletionRequest, FramesPart, ImagePart, ImageURL, Message, TextPart
from router import MediaSummary
from tiers import Modality


def test_a_lost_video_takes_its_frames_and_seconds_with_it() -> None:
    frame = ImageURL("data:image/jpeg;base64,AA==")
    request = ChatCompletionRequest(
        model="tiergate-auto",
        messages=[
            Message(
                role="user",
                content=[
                    TextPart("look"),
                    FramesPart([frame, frame], [0.0, 1.0], 2.0, 25.0),
                    ImagePart(frame),
                ],
            )
        ],
    )
    media = MediaSummary(images=1, image_pixels=100, videos=1, video_seconds=2.0, video_frames=2)
    assert features_of(request, media).modalities == {Modality.TEXT, Modality.VIDEO, Modality.IMAGE}
    lost = frozenset({Modality.VIDEO})
    kept = degrade.without(request, lost)
    parts = kept.messages[1].content
    assert isinstance(parts, list) and [type(p) for p in parts] == [TextPart, ImagePart]
    summary = degrade.summary_without(media, lost)
    assert summary == MediaSummary(images=1, image_pixels=100)
    assert features_of(kept, summary).modalities == {Modality.TEXT, Modality.IMAGE}
