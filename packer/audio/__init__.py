"""Audio in, int16 out: decoding (``decode``: probe, read, one open per file; ``wav_header``: the length a WAV
header declares, to tell a truncated file from a short one) and storage (``store``: resample, quantise, statistics).
The names adapters use are re-exported here (``resample_ratio_problem`` from ``schemas.units``, where the loader
checks noise rates by it too)."""

from speechpack.packer.audio.decode import (
    SOUNDFILE_EXTENSIONS,
    Audio,
    AudioError,
    AudioInfo,
    probe_audio,
    probe_audio_bytes,
    probe_audio_file,
    read_audio,
    read_audio_bytes,
    read_audio_file,
)
from speechpack.packer.audio.store import (
    StoredAudio,
    int16_statistics,
    measured,
    quantise,
    resample,
    resampled_frames,
    resampled_length,
    to_stored,
)
from speechpack.schemas.units import resample_ratio_problem

__all__ = ["SOUNDFILE_EXTENSIONS", "Audio", "AudioError", "AudioInfo", "StoredAudio", "int16_statistics", "measured",
           "probe_audio", "probe_audio_bytes", "probe_audio_file", "quantise", "read_audio", "read_audio_bytes",
           "read_audio_file", "resample",
           "resample_ratio_problem", "resampled_frames", "resampled_length", "to_stored"]
