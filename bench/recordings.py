"""The real recordings the benchmarks read: pocketsphinx-testdata's five LibriVox clips and their transcripts
(the same clips the tests use; docs/testing.md).  Light to import (numpy, soundfile), so a script run in a peer's
own environment can use it too."""

from __future__ import annotations

import os
import sys

import numpy as np

LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"


def librivox() -> list[tuple[np.ndarray, str]]:
    """(int16 audio, transcript) of the five clips; exits with a message when the package is missing."""
    import soundfile

    path = os.path.join(LIBRIVOX, "transcription")
    if not os.path.isfile(path):
        sys.exit(f"{path} is missing: apt-get install -y --no-install-recommends pocketsphinx-testdata")
    clips = []
    with open(path, encoding="utf-8") as fp:
        for line in fp:
            text, _, ident = line.strip().removeprefix("<s>").rpartition("</s>")
            wav = os.path.join(LIBRIVOX, ident.strip(" ()") + ".wav")
            clips.append((soundfile.read(wav, dtype="int16")[0], text.strip()))
    return clips
