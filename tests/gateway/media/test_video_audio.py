"""Video sampled by seeking (not decoding every frame); audio decoded, downmixed and resampled."""

from __future__ import annotations

import io
import wave

import pytest

from gateway.media import audio, video
from gateway.media._failure import CORRUPT, TOO_LARGE, UNSUPPORTED, MediaFailure
from tests import media_files

VIDEO = video.VideoParams(sample_fps=1.0, max_frames=8, max_seconds=600, frame_max_pixels=65_536)
AUDIO = audio.AudioParams(sample_rate=16_000, max_seconds=600)


def _wav(data: bytes) -> tuple[int, int, int]:
    with wave.open(io.BytesIO(data)) as w:
        return w.getnchannels(), w.getframerate(), w.getnframes()


def test_video_metadata_and_one_frame_per_second() -> None:
    clip = media_files.video(4.0, fps=25, size=(320, 240), gop=25)
    result = video.normalise(clip, VIDEO)
    assert result.seconds == pytest.approx(4.0, abs=0.1) and result.fps == pytest.approx(25)
    assert (result.source_width, result.source_height) == (320, 240)
    assert result.frame_times == pytest.approx([0, 1, 2, 3], abs=0.05)
    assert len(result.frames) == 4 and result.width * result.height <= 65_536
    assert result.decoded_frames < 100  # fewer than the clip's 100 frames


def test_a_long_video_is_sampled_at_most_max_frames_spread_over_it_by_seeking() -> None:
    clip = media_files.video(30.0, fps=25, size=(160, 120), gop=25)
    result = video.normalise(clip, VIDEO)
    assert len(result.frames) == 8
    assert result.frame_times[0] == pytest.approx(0) and result.frame_times[-1] > 25
    # 750 frames in the clip; seeking to the keyframe before each sample decodes a small share.
    assert result.decoded_frames < 750 / 3


def test_the_audio_track_is_extracted_when_asked() -> None:
    clip = media_files.video(3.0, audio=True)
    params = video.VideoParams(1.0, 8, 600, 65_536, with_audio=True)
    result = video.normalise(clip, params)
    assert result.audio_wav is not None and result.audio_seconds == pytest.approx(3.0, abs=0.2)
    assert _wav(result.audio_wav)[:2] == (1, 16_000)
    assert video.normalise(clip, VIDEO).audio_wav is None


def test_a_video_over_the_length_limit_is_refused() -> None:
    params = video.VideoParams(1.0, 8, max_seconds=2.0, frame_max_pixels=65_536)
    with pytest.raises(MediaFailure) as info:
        video.normalise(media_files.video(4.0), params)
    assert info.value.kind == TOO_LARGE


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"", CORRUPT),
        (b"\x00\x01garbage that no demuxer knows" * 10, CORRUPT),
        (media_files.audio(1.0, fmt="mp3"), UNSUPPORTED),  # no video track
    ],
    ids=["zero-length", "garbage", "audio-only"],
)
def test_bad_videos_are_refused(data: bytes, kind: str) -> None:
    with pytest.raises(MediaFailure) as info:
        video.normalise(data, VIDEO)
    assert info.value.kind == kind


def test_a_truncated_video_is_refused_not_hung() -> None:
    clip = media_files.video(4.0)
    with pytest.raises(MediaFailure) as info:
        video.normalise(clip[: len(clip) // 3], VIDEO)
    assert info.value.kind == CORRUPT and "truncated" in info.value.reason


@pytest.mark.parametrize("fmt", ["mp3", "ogg", "flac", "wav"])
def test_audio_is_decoded_downmixed_and_resampled(fmt: str) -> None:
    result = audio.normalise(media_files.audio(2.0, fmt=fmt, stereo=True), AUDIO)
    channels, rate, frames = _wav(result.wav)
    assert (channels, rate) == (1, 16_000) and result.source_channels == 2
    assert result.seconds == pytest.approx(2.0, abs=0.1) and frames == pytest.approx(32_000, abs=1600)


def test_audio_over_the_length_limit_is_refused() -> None:
    with pytest.raises(MediaFailure) as info:
        audio.normalise(media_files.audio(3.0, fmt="flac"), audio.AudioParams(16_000, max_seconds=1.0))
    assert info.value.kind == TOO_LARGE


def test_audio_declared_as_another_format_is_refused() -> None:
    with pytest.raises(MediaFailure) as info:
        audio.normalise(
            media_files.audio(1.0, fmt="flac"), audio.AudioParams(16_000, 600, declared_format="mp3")
        )
    assert info.value.kind == UNSUPPORTED and "flac" in info.value.reason


def test_corrupt_audio_is_refused() -> None:
    clip = media_files.audio(2.0, fmt="wav")
    with pytest.raises(MediaFailure):
        audio.normalise(b"RIFF" + b"\x00" * 40, AUDIO)
    assert audio.normalise(clip, AUDIO).seconds > 1.9


def test_a_wav_header_claiming_more_than_the_limit_is_refused_as_what_it_claims() -> None:
    import struct

    from gateway.media.audio import AudioParams, normalise, wav_claim

    def header(rate: int, frames: int) -> bytes:
        fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        return (
            b"RIFF"
            + struct.pack("<I", 36 + 2 * frames)
            + b"WAVEfmt "
            + fmt
            + b"data"
            + struct.pack("<I", 2 * frames)
        )

    lying = header(16000, 16000 * 3600) + b"\x00\x01" * 8000  # claims an hour, holds half a second
    assert wav_claim(lying) == 3600.0 and wav_claim(b"ID3 not a wav") is None
    assert wav_claim(header(16000, 0) + b"\x00" * 100) is None  # a streamed WAV: its size left open
    with pytest.raises(MediaFailure) as caught:
        normalise(lying, AudioParams(16000, 600.0))
    assert caught.value.kind == TOO_LARGE and "3600.0 s" in caught.value.reason
