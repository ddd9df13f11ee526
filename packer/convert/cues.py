"""The source pack's ``cues/`` in a converted pack: every file copied as it is, checked against the hashes the
source's ``dataset.json`` lists, except the enrollment audio of waveform banks, which is stored again with the
convert's codec (``schemas/cue_banks.py``, "Compressed enrollment audio").

A waveform bank is re-encoded unless both the source bank and the convert are pcm16 (then it is copied, byte for
byte, as before format 1.4): its items are decoded to their stored int16 (``loader.pack.cues.CueBank``: a
compressed source's blocks checked against their digests) and written through the build's own bank writer
(``packer.cues.writers.WaveformWriter``), so a converted bank has the bytes a build with that codec writes:
``data.npy`` and ``items.npy`` (and ``blocks.npy``, ``digests.npy``) are new, ``meta.json`` is the source's with
the codec keys of the new storage, and every other file (lookup arrays, ``sources.json``) is the source's.  FLAC
is lossless, so pcm16 -> flac -> pcm16 gives back the source's bank byte for byte.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from speechpack.packer.audio.store import StoredAudio
from speechpack.packer.build.encoding import Encoding
from speechpack.packer.cues.payload import LoadContext
from speechpack.packer.cues.resource import CueInputError
from speechpack.packer.cues.writers import WaveformWriter
from speechpack.packer.files import commit_temp_dir, fresh_temp_dir, write_json_atomic
from speechpack.schemas.constants import CODEC_PCM16
from speechpack.schemas.cue_banks import BLOCKS_NAME, CODEC_META_KEYS, DATA_NAME, DIGESTS_NAME, ITEMS_NAME, META_NAME
from speechpack.schemas.cues import CUES_DIR
from speechpack.schemas.errors import PackFormatError, SpeechpackError
from speechpack.schemas.format import FileEntry


def recoded_banks(pack, encoding: Encoding) -> set[str]:
    """The banks of ``pack`` whose enrollment audio a convert to ``encoding`` stores again."""
    return {name for name, bank in pack.cues.items() if bank.spec.representation_spec.codec_arrays
            and (bank.codec != CODEC_PCM16 or encoding.compressed)}


#: The files of a recoded bank written anew; its others are the source's.
WRITTEN = (DATA_NAME, ITEMS_NAME, META_NAME, BLOCKS_NAME, DIGESTS_NAME)


def recode_bank(bank, directory: str, encoding: Encoding, sample_rate: int) -> None:
    """Write ``bank``'s items into ``directory`` (created, empty) stored with ``encoding``, and its ``meta.json``."""
    context = LoadContext(sample_rate=sample_rate, allow_pickle=False, encoding=encoding)
    writer = WaveformWriter(directory, context)
    try:
        for item in range(bank.num_items):
            stored = StoredAudio(np.ascontiguousarray(bank.stored_waveform(item)), float(bank.field("scale", item)))
            try:
                encoded = WaveformWriter.encode(stored, context)
            except CueInputError as err:
                raise SpeechpackError(f"{bank.directory} item {item}: {err}") from None
            writer.add(None, (encoded, int(bank.field("orig_sample_rate", item))))
    except BaseException:
        writer.abort()
        raise
    extra = writer.finish()
    meta = {key: value for key, value in bank.meta.items() if key not in CODEC_META_KEYS}
    meta.update(extra)
    write_json_atomic(os.path.join(directory, META_NAME), meta)


def convert_cues(pack, out: str, encoding: Encoding) -> dict[str, FileEntry]:
    """The source's ``cues/`` written into ``out`` under a temporary name (module docstring), each source file
    checked against the size and sha256 its ``dataset.json`` lists, then renamed into place; returns the files as
    the converted manifest lists them."""
    recoded = recoded_banks(pack, encoding)
    temp, final = fresh_temp_dir(out, CUES_DIR)
    for name, entry in sorted(pack.manifest.cues.items()):
        rel = f"{CUES_DIR}/{name}"
        raw = pack.files.read_bytes(rel)
        if len(raw) != entry.size or hashlib.sha256(raw).hexdigest() != entry.sha256:
            raise PackFormatError(f"{pack.files.where(rel)}: differs from the size and sha256 dataset.json lists "
                                  f"(changed or corrupt since the pack was written)")
        bank, _, file_name = name.partition("/")
        if bank in recoded and file_name in WRITTEN:
            continue
        path = os.path.join(temp, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fp:
            fp.write(raw)
            fp.flush()
            os.fsync(fp.fileno())
    for bank in sorted(recoded):
        directory = os.path.join(temp, bank)
        os.makedirs(directory, exist_ok=True)
        recode_bank(pack.cues[bank], directory, encoding, pack.sample_rate)
    return commit_temp_dir(temp, final)


__all__ = ["WRITTEN", "convert_cues", "recode_bank", "recoded_banks"]
