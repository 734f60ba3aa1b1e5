"""Typed configuration of speech to text (``[speech]``)."""

from __future__ import annotations

from typing import Literal

import msgspec

# Under the build cache (scripts/setup.sh): a link to the current Whisper base build (CTranslate2 format).
DEFAULT_SPEECH_MODEL_DIR = "models/whisper-base-ct2"


class SpeechConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Whisper on CTranslate2 (faster-whisper) in the gateway's process: ``/v1/audio/transcriptions``
    and ``/translations``, and the transcripts chat gets when no tier takes audio."""

    enabled: bool = True
    # The CTranslate2 folder (model.bin, config.json, tokenizer.json, vocabulary.txt); empty:
    # <build_cache_dir>/models/whisper-base-ct2. A folder without model.bin turns speech off (404).
    model_dir: str = ""
    model: str = "whisper-base"  # the name clients send and /v1/models lists
    # More names for it: OpenAI's clients hard-code whisper-1.
    aliases: list[str] = msgspec.field(default_factory=lambda: ["whisper-1"])
    # "auto": CUDA when CTranslate2 sees a GPU, else the CPU.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # CTranslate2's quantisation on the CPU and on CUDA (int8 on 2 threads: 4.7 s of speech in 1.7 s).
    compute_type: str = "int8"
    cuda_compute_type: str = "int8_float16"
    threads: int = 2  # CTranslate2's threads per transcription (CPU)
    # Transcriptions at once: each holds ``threads`` cores for seconds. Beyond them a request waits,
    # at most ``max_waiting`` of them, then 429: a queue that grows without bound only adds delay.
    workers: int = 1
    max_waiting: int = 8
    max_seconds: float = 600.0  # audio longer than this is refused (413) before it is transcribed
    beam_size: int = 5
    # A video's audio track heard too: where no tier takes audio, its transcript goes with the video's
    # frames (marked as such). Every video's track is then decoded as well (~0.1 s a minute of audio).
    video_audio: bool = False
    # Load the model when the gateway starts (about 0.5 s and 150 MB); false: on the first request for it.
    preload: bool = False
