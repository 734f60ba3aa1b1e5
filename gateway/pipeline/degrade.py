"""Degrading a request to text: drop the media parts no tier can take now, and say so."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.wire.chat import (
    AudioPart,
    ChatCompletionRequest,
    FramesPart,
    ImagePart,
    Message,
    TextPart,
    VideoPart,
)
from router import MediaSummary
from tiers import Modality

_PART_TYPES: dict[Modality, tuple[type, ...]] = {
    Modality.IMAGE: (ImagePart,),
    Modality.AUDIO: (AudioPart,),
    Modality.VIDEO: (VideoPart, FramesPart),
}
_NOUNS = {Modality.IMAGE: "image", Modality.AUDIO: "audio", Modality.VIDEO: "video"}


def system_note(lost: frozenset[Modality]) -> str:
    what = " and ".join(_NOUNS[m] for m in sorted(lost))
    return (
        f"Note: the {what} attached to this conversation could not be processed and was removed. "
        f"Answer from the text alone, and say that the {what} could not be seen if it matters."
    )


def without(request: ChatCompletionRequest, lost: frozenset[Modality]) -> ChatCompletionRequest:
    """``request`` with every part of the ``lost`` modalities removed and a system note first."""
    dropped = tuple(t for m in lost for t in _PART_TYPES[m])
    note = system_note(lost)
    messages: list[Message] = []
    first = request.messages[0]
    if first.role == "system" and isinstance(first.content, str):
        # One system message: some chat templates refuse a second one.
        messages.append(msgspec.structs.replace(first, content=f"{note}\n\n{first.content}"))
        rest = request.messages[1:]
    else:
        messages.append(Message(role="system", content=note))
        rest = request.messages
    for message in rest:
        content = message.content
        if isinstance(content, list):
            # (a prepared request's parts include the gateway's own FramesPart beside the wire's)
            kept: list[Any] = [p for p in content if not isinstance(p, dropped)]
            if Modality.AUDIO in lost:  # a video's audio track goes with the audio
                kept = [silent(p) if isinstance(p, FramesPart) else p for p in kept]
            if all(isinstance(p, TextPart) for p in kept):
                content = "\n".join(p.text for p in kept if isinstance(p, TextPart))
            else:
                content = kept
        messages.append(msgspec.structs.replace(message, content=content))
    return msgspec.structs.replace(request, messages=messages)


def silent(frames: FramesPart) -> FramesPart:
    """A video's frames without its audio track."""
    return frames if frames.audio is None else msgspec.structs.replace(frames, audio=None)


def summary_without(media: MediaSummary, lost: frozenset[Modality]) -> MediaSummary:
    """The media summary of a request once the ``lost`` modalities are removed."""
    return MediaSummary(
        images=0 if Modality.IMAGE in lost else media.images,
        image_pixels=0 if Modality.IMAGE in lost else media.image_pixels,
        videos=0 if Modality.VIDEO in lost else media.videos,
        video_seconds=0.0 if Modality.VIDEO in lost else media.video_seconds,
        video_frames=0 if Modality.VIDEO in lost else media.video_frames,
        audio_clips=0 if Modality.AUDIO in lost else media.audio_clips,
        audio_seconds=0.0 if Modality.AUDIO in lost else media.audio_seconds,
    )
