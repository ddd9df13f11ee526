"""A WeSep noise LMDB (``tools/make_lmdb.py``) to a ``noise`` pack, once: ``speechpack build audio-bank --kind noise
--lmdb PATH``.

Every entry is one sample, packed like a file of an audio bank (``packer.adapters.audio_bank``): all channels,
resampled with soxr to the pack's rate, quantised to int16, nothing normalised, its one "speaker" ``noise``.  The
sample keys are the LMDB keys, unchanged, so WeSep's SNR rule for ``speech*`` keys
(``media.noise_lmdb.noise_snr_range``) applies to the pack as it did to the LMDB.  Keys come from a cursor walk
(``__keys__``, a pickle, is never read); line numbers in problems are positions in that walk (1-based), and every
problem names its key.  The input hash covers every key and every entry's bytes.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass

from speechpack.packer.audio import Audio, AudioError, resample, resampled_frames, to_stored
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.build.plan import PackedSample, SamplePlan
from speechpack.schemas.constants import KIND_NOISE, STREAM_AUDIO
from speechpack.media.noise_lmdb import NoiseLmdb, NoiseLmdbError, decode_noise, probe_noise


@dataclass(frozen=True)
class LmdbEntry:
    """One entry of the LMDB at ``path``: its position in the cursor walk (``line``, 1-based) and its key."""

    line: int
    key: str
    path: str


@dataclass(frozen=True)
class LmdbInput:
    """The entries of an LMDB, in cursor order, and the SHA-256 of every key and value."""

    items: list[LmdbEntry]
    sha256: str


#: One reader per LMDB path and process (build workers open their own; ``NoiseLmdb`` reopens after a fork).
_READERS: dict[str, NoiseLmdb] = {}


def _reader(path: str) -> NoiseLmdb:
    if path not in _READERS:
        _READERS[path] = NoiseLmdb(path)
    return _READERS[path]


def read_lmdb_input(path: str) -> LmdbInput:
    """List the noise keys of the LMDB at ``path`` and hash its content (length-prefixed keys and values)."""
    reader = NoiseLmdb(path)
    try:
        keys = reader.keys()
        digest = hashlib.sha256()
        for key in keys:
            for part in (key.encode("utf-8"), reader.raw(key)):
                digest.update(len(part).to_bytes(8, "little"))
                digest.update(part)
    finally:
        reader.close()
    items = [LmdbEntry(line=i, key=key, path=path) for i, key in enumerate(keys, 1)]
    return LmdbInput(items, digest.hexdigest())


def _reason(err: NoiseLmdbError, key: str) -> str:
    """The error without its ``noise 'key': `` prefix: the build's report names the key already."""
    return str(err).removeprefix(f"noise {key!r}: ")


def plan_lmdb_entry(item: LmdbEntry, sample_rate: int) -> SamplePlan:
    """Size one entry from its header; raise ``AudioError`` (the build names the key) when it is not audio."""
    try:
        rate, frames, channels = probe_noise(_reader(item.path).raw(item.key), item.key)
    except NoiseLmdbError as err:
        raise AudioError(None, _reason(err, item.key)) from None
    frames = resampled_frames(frames, rate, sample_rate, None)  # a line problem naming the key (--skip-bad skips it)
    return SamplePlan(line=item.line, key=item.key, num_frames=frames, elements={STREAM_AUDIO: channels * frames})


def load_lmdb_entry(item: LmdbEntry, sample_rate: int) -> PackedSample:
    """Decode (every sample: NaN/Inf refused), resample and quantise one entry."""
    try:
        data, rate = decode_noise(_reader(item.path).raw(item.key), item.key)
    except NoiseLmdbError as err:
        raise AudioError(None, _reason(err, item.key)) from None
    stored = to_stored(resample(Audio(data, rate), sample_rate))
    return PackedSample(key=item.key, speakers=(KIND_NOISE,), line=item.line, orig_sample_rate=rate,
                        num_frames=stored.length, provenance={"lmdb_key": item.key},
                        streams={STREAM_AUDIO: [stored]})


def build_noise_lmdb(path: str, options: BuildOptions) -> BuildSummary:
    """``speechpack build audio-bank --kind noise --lmdb PATH``: every entry of a WeSep noise LMDB to a ``noise``
    pack; ``--skip-bad`` packs the good entries and records the others, by key, in ``skipped.json``."""
    source = read_lmdb_input(path)  # NoiseLmdbError (a SpeechpackError) when it is no LMDB or holds no noise
    return run_build(
        items=source.items,
        problems=[],
        plan=functools.partial(plan_lmdb_entry, sample_rate=options.sample_rate),
        load=functools.partial(load_lmdb_entry, sample_rate=options.sample_rate),
        kind=KIND_NOISE,
        input_path=os.path.abspath(path),
        command="build audio-bank",
        recorded_options={**options.recorded(), "kind": KIND_NOISE, "lmdb": True},
        options=options,
        input_sha256=source.sha256,
    )


__all__ = ["LmdbEntry", "LmdbInput", "build_noise_lmdb", "load_lmdb_entry", "plan_lmdb_entry", "read_lmdb_input"]
