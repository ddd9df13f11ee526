"""Lhotse cuts of the real librivox clips (pocketsphinx-testdata), made with Lhotse's own API, and a pack's stored
audio to compare them with: what the ``build lhotse`` tests share."""

from __future__ import annotations

import os
import re

import numpy as np
from lhotse import Recording, SupervisionSegment

_TRANSCRIPT = re.compile(r"^<s> (?P<text>.*) </s> \((?P<id>[^)]+)\)$")


def transcripts(paths: list[str]) -> dict[str, str]:
    """The pocketsphinx transcription of each librivox clip, by recording id (its file stem)."""
    folder = os.path.dirname(paths[0])
    with open(os.path.join(folder, "transcription"), encoding="utf-8") as fp:
        found = {m["id"]: m["text"] for m in map(_TRANSCRIPT.match, fp.read().splitlines()) if m}
    return {os.path.basename(p)[:-4]: found[os.path.basename(p)[:-4]] for p in paths}


def transcribed_cut(path: str, text: str, speaker: str | None = "narrator", language: str | None = "English",
                    **custom):
    """The whole recording at ``path`` as a cut with one supervision (``custom`` its supervision's custom)."""
    recording = Recording.from_file(path)
    cut = recording.to_cut()
    cut.supervisions = [SupervisionSegment(id=cut.id, recording_id=recording.id, start=0.0,
                                           duration=recording.duration, channel=cut.channel, text=text,
                                           speaker=speaker, language=language, custom=custom or None)]
    return cut


def stored(pack, stream: str, index: int) -> np.ndarray:
    """Sample ``index``'s first segment of ``stream`` as stored (int16 ``[channels, frames]``)."""
    return pack.stored_segment(stream, pack.segments_of(stream, index)[0])[0]


__all__ = ["stored", "transcribed_cut", "transcripts"]
