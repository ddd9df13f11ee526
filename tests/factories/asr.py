"""Real ASR test data (pocketsphinx-testdata's librivox clips and their transcripts) as the ASR tests need it: a
parquet dataset with corpus/language partitions and a JSON-lines manifest.

The clips are read from their installed path (never copied into the repository); parquet files embed them as
encoded bytes in ``tmp_path``.  Missing data skips locally and fails in CI (factories.recordings).
"""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import soundfile

from factories.recordings import missing_recording, require

LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"
TRANSCRIPTION = os.path.join(LIBRIVOX, "transcription")
PACKAGE = "pocketsphinx-testdata"
_LINE = re.compile(r"^<s>\s*(?P<text>.*?)\s*</s>\s*\((?P<id>[^)]+)\)\s*$")


@dataclass(frozen=True)
class Clip:
    key: str
    path: str
    text: str
    frames: int


def librivox_clips() -> list[Clip]:
    """The five transcribed clips (16 kHz mono), in the transcription file's order."""
    if not os.path.isfile(TRANSCRIPTION):
        missing_recording(TRANSCRIPTION, PACKAGE)
    clips = []
    with open(TRANSCRIPTION, encoding="utf-8") as fp:
        for line in fp:
            match = _LINE.match(line.strip())
            if not match:
                continue
            path = os.path.join(LIBRIVOX, match["id"] + ".wav")
            if not os.path.isfile(path):
                missing_recording(path, PACKAGE)
            clips.append(Clip(match["id"], path, match["text"], soundfile.info(path).frames))
    return clips


def encoded(path: str, fmt: str) -> bytes:
    """A clip re-encoded in memory (``FLAC``, ``WAV``, ``OGG``): what a parquet ``audio_bytes`` cell holds."""
    audio, rate = soundfile.read(path, dtype="int16")
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, rate, format=fmt, subtype="VORBIS" if fmt == "OGG" else "PCM_16")
    return buffer.getvalue()


#: The test dataset: (corpus, language) partition -> [(clip index, format, split)].  Clip 1 appears twice, under
#: two languages (a relabelled copy is fine for a loader test): two corpora, two languages.
PARQUET_LAYOUT = {
    ("librivox", "en"): [(0, "FLAC", "train"), (1, "FLAC", "train"), (2, "WAV", "dev")],
    ("librivox", "fr"): [(1, "FLAC", "train")],
    ("austen", "en"): [(3, "WAV", "train"), (4, "FLAC", "train")],
}


def write_parquet_dataset(root: Path, clips: list[Clip], layout=PARQUET_LAYOUT, row_group_size: int = 2,
                          drop: tuple[str, ...] = (), rows: dict | None = None) -> Path:
    """``root/corpus=C/language=L/part-0.parquet`` per partition, LangASRSchema columns minus the partition ones
    (and minus ``drop``); ``rows`` overrides cells: ``{(corpus, language, row): {column: value}}``."""
    pa = require("pyarrow", "parquet")
    pq = require("pyarrow.parquet", "parquet")
    for (corpus, language), entries in layout.items():
        folder = root / f"corpus={corpus}" / f"language={language}"
        folder.mkdir(parents=True, exist_ok=True)
        table = {"audio_bytes": [], "audio_size": [], "text": [], "split": []}
        for row, (index, fmt, split) in enumerate(entries):
            cells = {"audio_bytes": encoded(clips[index].path, fmt), "audio_size": clips[index].frames,
                     "text": clips[index].text, "split": split}
            cells.update((rows or {}).get((corpus, language, row), {}))
            for column in table:
                table[column].append(cells[column])
        for column in drop:
            table.pop(column)
        pq.write_table(pa.table(table), folder / "part-0.parquet", row_group_size=row_group_size)
    return root


def write_jsonl_manifest(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def librivox_span_pack(root: Path, count: int, seed: int, seconds: tuple[float, float],
                       words: int | Callable[[float], int], key: str = "span{:02d}", corpus: str = "librivox",
                       language: str = "en") -> str:
    """An ``asr`` pack of ``count`` spans cut from the librivox clips (offset/duration lines of
    ``speechpack build asr-jsonl``), lengths drawn uniformly from ``seconds``, each transcribed by the first
    ``words`` words of its clip (or ``words(length)``, of the span's drawn length in seconds), labelled ``corpus``
    and ``language``; returns the pack's path."""
    import numpy as np

    from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl
    from speechpack.packer.build.run import BuildOptions

    clips = librivox_clips()
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        clip = clips[i % len(clips)]
        length = float(rng.uniform(*seconds))
        offset = float(rng.uniform(0, clip.frames / 16000 - length))
        count_words = words(length) if callable(words) else words
        lines.append({"key": key.format(i), "audio_filepath": clip.path, "offset": round(offset, 3),
                      "duration": round(length, 3), "text": " ".join(clip.text.split()[:count_words]),
                      "language": language, "corpus": corpus})
    manifest = write_jsonl_manifest(root / "spans.jsonl", lines)
    return build_asr_jsonl(str(manifest), BuildOptions(out=str(root / "pack"), progress=False)).out
