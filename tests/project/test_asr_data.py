"""The ASR test data helpers (factories.asr): pocketsphinx-testdata's librivox clips and their transcripts, and the
parquet dataset made of them.  Missing data skips locally and fails in CI (``factories.recordings``).
"""

from __future__ import annotations

import io

import numpy as np
import soundfile

from factories import require
from factories.asr import librivox_clips, write_parquet_dataset


def test_transcripts_are_parsed_from_the_installed_file():
    clips = librivox_clips()
    assert len(clips) == 5
    assert clips[1].text == "he was not an ill disposed young man"
    assert all(c.frames > 16000 and "<s>" not in c.text for c in clips)


def test_parquet_dataset_embeds_the_clips(tmp_path):
    pq = require("pyarrow.parquet", "parquet")
    clips = librivox_clips()
    root = write_parquet_dataset(tmp_path / "data", clips)
    table = pq.read_table(root / "corpus=austen" / "language=en" / "part-0.parquet").to_pydict()
    assert table["text"] == [clips[3].text, clips[4].text]
    audio, rate = soundfile.read(io.BytesIO(table["audio_bytes"][1]), dtype="int16")
    np.testing.assert_array_equal(audio, soundfile.read(clips[4].path, dtype="int16")[0])
    assert rate == 16000 and table["audio_size"][1] == len(audio)
