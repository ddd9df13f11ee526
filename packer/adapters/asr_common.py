"""What both ASR adapters (``asr_jsonl``, ``asr_parquet``) share: the checks of a transcript and its labels, and
the assembly of an ``asr`` sample.

An asr sample holds its audio (one segment, every channel, resampled with soxr to the pack's rate) and its text
as UTF-8 bytes, exactly as given; ``language`` and ``corpus`` are its attributes, from which the writer derives
``hours_by_corpus``.
"""

from __future__ import annotations

import numpy as np

from speechpack.packer.audio import Audio, resample, resampled_frames, to_stored
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.schemas.constants import STREAM_AUDIO, STREAM_TEXT, UNKNOWN_SPEAKER
from speechpack.schemas.names import name_problem


def check_text(value, field: str = "text") -> str:
    """A transcript: a string with at least one non-space character (raises ``ValueError`` naming the field)."""
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{field}: empty text")
    return value


def check_label(value, field: str) -> str:
    """A language, corpus or speaker name: a non-empty string without surrounding space, and a name a pack can
    store (``schemas.names``: no control character)."""
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError(f"{field}: expected a non-empty name without surrounding spaces, got {value!r}")
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(f"{field}: {value!r} {problem}")
    return value


def text_array(text: str) -> np.ndarray:
    """The UTF-8 bytes the ``text`` stream stores."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def asr_plan(line: int, key: str, channels: int, frames: int, rate: int, sample_rate: int, text: str,
             name: str) -> SamplePlan:
    """The plan of an asr sample whose audio (the file ``name``) has ``channels`` x ``frames`` at ``rate`` before
    resampling."""
    num_frames = resampled_frames(frames, rate, sample_rate, name)
    return SamplePlan(line=line, key=key, num_frames=num_frames,
                      elements={STREAM_AUDIO: channels * num_frames, STREAM_TEXT: len(text.encode("utf-8"))})


def asr_sample(*, line: int, key: str, audio: Audio, sample_rate: int, text: str, language: str, corpus: str,
               speaker: str | None, provenance: dict) -> PackedSample:
    """Resample (soxr), quantise and assemble one asr sample."""
    stored = to_stored(resample(audio, sample_rate))
    return PackedSample(key=key, speakers=(speaker or UNKNOWN_SPEAKER,), line=line,
                        orig_sample_rate=audio.sample_rate, num_frames=stored.length, provenance=provenance,
                        streams={STREAM_AUDIO: [stored], STREAM_TEXT: [StoredArray(text_array(text))]},
                        attrs={"language": language, "corpus": corpus})


__all__ = ["asr_plan", "asr_sample", "check_label", "check_text", "text_array"]
