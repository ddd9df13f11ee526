"""Regenerate the golden packs under ``tests/data/golden/``: one tiny pack per pack kind and format minor version
that the current writer produces, built from a small generated input.

Run it ONLY when a new format minor version (or a new kind) is added, to add that version's golden packs:
``python tests/data/make_golden.py`` from the repository root, then commit the new pack directories.  Never run
it to "fix" a failing ``tests/test_golden_packs.py``: those packs stand for packs already written by released
code, which the reader must keep opening and the builder must keep reproducing byte for byte.  A failure there
means a change broke old packs or changed the bytes a build writes.

The input is generated, not recorded, so it is tiny and needs no data: 16-bit WAV at the pack rate (no
resampling), whose int16 samples are a pure function of the file's index (``samples``).

The packs of one kind at one minor are written once and kept: a second run adds only missing ones.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

import numpy as np
import soundfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from packer.adapters.asr_jsonl import build_asr_jsonl  # noqa: E402
from packer.adapters.audio_bank import build_audio_bank  # noqa: E402
from packer.adapters.wesep import build_wesep  # noqa: E402
from packer.build.run import BuildOptions  # noqa: E402
from schemas.constants import DEFAULT_SAMPLE_RATE  # noqa: E402

GOLDEN = os.path.join(REPO, "tests", "data", "golden")
SPEAKERS = ("spk-a", "spk-b", "spk-c")
#: One golden pack per kind; each records the lowest minor version that describes it (``schemas.format``).
#: Not covered: ``asd`` (1.3 is covered by ``asr``) and cues (1.1), whose inputs need video and cue resources.
KINDS = ("tse", "sources", "noise", "rir", "asr")
#: Samples per generated file: 20 ms, so each pack is a few KB (mostly its manifest and column headers).
FRAMES = 320


def samples(index: int, frames: int = FRAMES) -> np.ndarray:
    """The int16 content of generated file ``index``: a triangle wave whose period and level depend on the index.

    Integer arithmetic only, so the input (and so the pack) is the same bytes on every platform.
    """
    period = 80 + 20 * index
    level = 4000 + 1000 * index
    phase = (np.arange(frames, dtype=np.int64) * 4 * level // period) % (4 * level)
    return (np.abs(phase - 2 * level) - level).astype(np.int16)


def write_inputs(root: str) -> None:
    """Write every golden input under ``root``: the WAV files, the two WeSep lists and the ASR manifest."""
    os.makedirs(os.path.join(root, "wav"))
    names = []
    for index in range(len(SPEAKERS)):
        name = os.path.join("wav", f"u{index}.wav")
        soundfile.write(os.path.join(root, name), samples(index), DEFAULT_SAMPLE_RATE, subtype="PCM_16")
        names.append(name)
    mix = os.path.join("wav", "mix.wav")
    soundfile.write(os.path.join(root, mix), (samples(0) // 2 + samples(1) // 2), DEFAULT_SAMPLE_RATE,
                    subtype="PCM_16")
    _lines(os.path.join(root, "tse.list"),
           [{"key": "mix1", "spk": list(SPEAKERS[:2]), "mix": {"default": [mix]},
             "src": {SPEAKERS[0]: [names[0]], SPEAKERS[1]: [names[1]]}}])
    _lines(os.path.join(root, "sources.list"),
           [{"key": f"utt{i}", "spk": [spk], "src": {spk: [names[i]]}} for i, spk in enumerate(SPEAKERS)])
    _lines(os.path.join(root, "asr.jsonl"),
           [{"key": f"utt{i}", "audio_filepath": names[i], "speaker": spk, "text": f"golden {spk} ünïcode {i}",
             "language": "en", "corpus": "golden"} for i, spk in enumerate(SPEAKERS)])


def _lines(path: str, lines: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fp:
        for line in lines:
            fp.write(json.dumps(line, ensure_ascii=False) + "\n")


def build(kind: str, root: str, out: str) -> None:
    """Build the golden pack of ``kind`` from the inputs in ``root`` into ``out`` (one worker, no progress).

    The build runs in ``root`` with relative input paths, so that what a pack records of its input's location is
    the same wherever the input was written.
    """
    out = os.path.abspath(out)
    options = BuildOptions(out=out, workers=1, progress=False)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        if kind in ("tse", "sources"):
            build_wesep(f"{kind}.list", options, root=".")
        elif kind in ("noise", "rir"):
            build_audio_bank("wav", kind, options)
        elif kind == "asr":
            build_asr_jsonl("asr.jsonl", options)  # audio paths relative to the manifest
        else:
            raise ValueError(f"no golden input for kind {kind!r}")
    finally:
        os.chdir(cwd)


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_inputs(root)
        for kind in KINDS:
            tmp = os.path.join(root, "packs", kind)
            build(kind, root, tmp)
            with open(os.path.join(tmp, "dataset.json"), encoding="utf-8") as fp:
                minor = json.load(fp)["format_minor"]
            final = os.path.join(GOLDEN, f"{kind}-1.{minor}")
            if os.path.exists(final):
                print(f"{final}: exists, kept (golden packs are never rebuilt)")
                continue
            shutil.copytree(tmp, final)
            print(f"wrote {final}")


if __name__ == "__main__":
    main()
