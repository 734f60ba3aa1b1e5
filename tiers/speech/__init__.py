"""Speech to text: Whisper (CTranslate2's format) run by faster-whisper in the gateway's process, one
transcription per worker thread at a time, on CUDA when CTranslate2 sees a GPU, else on the CPU."""

from tiers.speech._config import DEFAULT_SPEECH_MODEL_DIR, SpeechConfig
from tiers.speech._whisper import SAMPLE_RATE, Asked, Heard, Segment, Transcriber, Transcript, Word

__all__ = [
    "DEFAULT_SPEECH_MODEL_DIR",
    "SAMPLE_RATE",
    "Asked",
    "Heard",
    "Segment",
    "SpeechConfig",
    "Transcriber",
    "Transcript",
    "Word",
]
