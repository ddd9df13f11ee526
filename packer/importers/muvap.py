"""``speechpack import muvap PACK --out DIR``: an existing MuVAP ASD pack as a speechpack ``asd`` pack, no media
decoded.

A MuVAP pack (``packer.importers.muvap_layout``) already holds what an ``asd`` pack holds -- grayscale 112x112
faces and 0/1 labels per native frame, int16 16 kHz audio at source gain -- so the import copies every sample's
rows by range, the int16 audio bit for bit (MuVAP's reader decodes ``v / 32768``, as speechpack does), and runs the
ordinary build (``packer.build.run.run_build``): shards, hashes, columns, resume, ``--workers``, and a pack that
``speechpack validate`` checks like any other.

What is recomputed rather than trusted: the audio statistics.  MuVAP measures them on the float waveform before
quantising it (``x * 32767``), speechpack on the stored int16 as its reader decodes it (``docs/format.md``), so a
chunk's gain is reproducible bit for bit.  Before writing, every sample's statistics are recomputed from the
stored int16 and compared with MuVAP's ``audio_mean``/``audio_rms``/``audio_peak`` (and its ``speaking_ratio``
with the stored labels); the two measurements differ by the quantisation alone, at most about one int16 step plus
``1/32768`` of the value, so anything beyond ``STATS_ABS_TOL + STATS_REL_TOL * |value|`` is a mismatch.  Every
mismatch is reported (sample, field, both values); the pack keeps the recomputed values, which are the ones the
loader uses.  ``strict_stats`` makes mismatches fail the import instead.

A sample's ``clip`` is MuVAP's: its ``sample_id`` without the ``:entity`` suffix.  Its provenance records the MuVAP
shard, index entry, dataset name and MuVAP's own statistics.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field

import numpy as np

from speechpack.packer.adapters.option_spec import Path, argument, option
from speechpack.packer.adapters.registry import (
    FINISHING_OPTIONS,
    OUT_HELP,
    SCALE_OPTIONS,
    shard_size_option,
    skip_bad_option,
    workers_option,
)
from speechpack.packer.audio.decode import AudioError
from speechpack.packer.audio.store import StoredAudio, int16_statistics
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.importers.muvap_files import FileIdentity, map_array
from speechpack.packer.importers.muvap_layout import (
    MUVAP_INDEX,
    MUVAP_MANIFEST,
    MuvapPack,
    MuvapRecord,
    clip_of,
    read_muvap_pack,
)
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.schemas.constants import ASD_SAMPLE_RATE, KIND_ASD, STREAM_AUDIO, STREAM_FACES, STREAM_LABELS
from speechpack.schemas.errors import BuildError, SpeechpackError
from speechpack.schemas.line_problems import LineProblem

#: One int16 step at MuVAP's quantisation scale (``x * 32767``): the rounding each stored value carries.
STATS_ABS_TOL = 1.0 / 32767
#: MuVAP quantises with 32767 and decodes with 32768: a value read back is ``32767 / 32768`` of what was measured.
STATS_REL_TOL = 2.0 / 32768
#: ``speaking_ratio`` is a mean of 0/1 labels, written as a float: only float rounding may separate the two.
RATIO_TOL = 1e-9
#: The statistics compared: MuVAP's record key, and the position in ``int16_statistics``' result.
STAT_FIELDS = (("audio_mean", 0), ("audio_rms", 1), ("audio_peak", 2))
COMMAND = "import muvap"


@dataclass(frozen=True)
class StatMismatch:
    """A statistic MuVAP recorded that the stored data does not reproduce."""

    line: int
    key: str
    path: str
    field: str
    muvap: float
    recomputed: float

    def describe(self) -> str:
        return (f"line {self.line}: key {self.key!r}, file {self.path}: {self.field} is {self.muvap!r} in MuVAP's "
                f"index, {self.recomputed!r} recomputed from the stored data")

    def to_dict(self) -> dict:
        return {"line": self.line, "key": self.key, "path": self.path, "field": self.field, "muvap": self.muvap,
                "recomputed": self.recomputed}


@dataclass(frozen=True)
class ImportSummary:
    """What an import did: the build's summary, and every statistic that did not match."""

    build: BuildSummary
    mismatches: list[StatMismatch] = field(default_factory=list)

    def describe(self) -> str:
        text = self.build.describe()
        if self.mismatches:
            lines = "\n".join(f"  {m.describe()}" for m in self.mismatches)
            text += (f"\n{len(self.mismatches)} statistic(s) of MuVAP's index differ from the stored data (the pack "
                     f"keeps the recomputed values, which the loader uses):\n{lines}")
        else:
            text += "\nevery MuVAP statistic matches the stored data"
        return text


@functools.lru_cache(maxsize=6)
def _array(shard_path: str, name: str, identity: FileIdentity) -> np.ndarray:
    """A shard array mapped read-only from a descriptor of the very file that was checked (never unpickled, never
    reached through a link: ``packer.importers.muvap_files``); the samples of a shard are read one after another."""
    root, shard = os.path.split(shard_path)
    return map_array(root, (shard, f"{name}.npy"), identity)


def _rows(record: MuvapRecord, name: str, offset: int, count: int) -> np.ndarray:
    return _array(record.shard_path, name, record.identity(name))[offset:offset + count]


def plan_record(record: MuvapRecord) -> SamplePlan:
    """A record's size (checked already: nothing to read)."""
    return SamplePlan(line=record.line, key=record.key, num_frames=record.audio_samples,
                      elements={STREAM_AUDIO: record.audio_samples, STREAM_FACES: record.source_frames,
                                STREAM_LABELS: record.source_frames})


def load_record(record: MuvapRecord) -> PackedSample:
    """A record's rows copied out of its shard: faces and labels as stored, the int16 audio bit for bit."""
    faces = np.ascontiguousarray(_rows(record, "faces", record.face_offset, record.source_frames))
    labels = np.ascontiguousarray(_rows(record, "labels", record.face_offset, record.source_frames))
    audio = np.ascontiguousarray(_rows(record, "audio", record.audio_offset, record.audio_samples))
    if len(faces) != record.source_frames or len(labels) != record.source_frames or \
            len(audio) != record.audio_samples:  # checked before: an internal fault if it ever happens
        raise AudioError(record.shard_path, f"{MUVAP_INDEX} entry {record.entry}: the arrays end before the record")
    provenance = {"muvap": {"pack": os.path.abspath(os.path.dirname(record.shard_path)),
                            "shard": os.path.basename(record.shard_path), "entry": record.entry,
                            "dataset": record.dataset, "audio_mean": record.audio_mean,
                            "audio_rms": record.audio_rms, "audio_peak": record.audio_peak,
                            "speaking_ratio": record.speaking_ratio}}
    return PackedSample(
        key=record.key, speakers=(record.key,), line=record.line, orig_sample_rate=ASD_SAMPLE_RATE,
        num_frames=record.audio_samples, provenance=provenance,
        streams={STREAM_AUDIO: [StoredAudio(audio[None, :], 1.0)], STREAM_FACES: [StoredArray(faces)],
                 STREAM_LABELS: [StoredArray(labels)]},
        attrs={"source_fps": record.source_fps, "start_sec": record.start_sec, "clip": clip_of(record.key)})


def _close(muvap: float, ours: float) -> bool:
    return abs(muvap - ours) <= STATS_ABS_TOL + STATS_REL_TOL * abs(ours)


def check_record_data(record: MuvapRecord) -> tuple[list[StatMismatch], str | None]:
    """Recompute a record's statistics from its stored int16 and labels: the mismatches with MuVAP's values, and why
    the record cannot be imported (labels other than 0/1), or ``None``."""
    index = os.path.join(record.shard_path, MUVAP_INDEX)
    labels = _rows(record, "labels", record.face_offset, record.source_frames)
    bad = np.flatnonzero(labels > 1)
    if len(bad):
        return [], (f"entry {record.entry}: label {int(bad[0])} is {int(labels[bad[0]])}; labels must be 0 or 1 "
                    f"({len(bad)} are not)")
    ours = int16_statistics(_rows(record, "audio", record.audio_offset, record.audio_samples), 1.0)
    mismatches = [StatMismatch(record.line, record.key, index, name, getattr(record, name), ours[at])
                  for name, at in STAT_FIELDS if not _close(getattr(record, name), ours[at])]
    ratio = float(np.count_nonzero(labels)) / len(labels)
    if abs(ratio - record.speaking_ratio) > RATIO_TOL:
        mismatches.append(StatMismatch(record.line, record.key, index, "speaking_ratio", record.speaking_ratio, ratio))
    return mismatches, None


def _input_digest(pack: MuvapPack) -> str:
    """The import's input fingerprint: sha256 over ``dataset.json`` and the ``index.json`` of every shard with a
    record to import (what says what the pack holds; the arrays are hashed as they are copied into the new pack),
    from the hashes of the bytes the check parsed (``MuvapPack.document_sha256``): nothing is read twice."""
    digest = hashlib.sha256()
    names = [MUVAP_MANIFEST]
    names += sorted({os.path.join(os.path.basename(r.shard_path), MUVAP_INDEX) for r in pack.records})
    for name in names:
        digest.update(name.encode() + b"\0" + pack.document_sha256[name])
    return digest.hexdigest()


def import_muvap(pack_path: str, options: BuildOptions, *, strict_stats: bool = False) -> ImportSummary:
    """Convert the MuVAP pack at ``pack_path`` into an ``asd`` pack at ``options.out`` (see the module docstring).

    Bad records (wrong types, offsets, timing, labels, duplicate ids) are problems like a bad input line: the
    import fails listing all of them, or with ``options.skip_bad`` leaves them out (``skipped.json``)."""
    if options.sample_rate != ASD_SAMPLE_RATE:
        raise SpeechpackError(f"asd packs are stored at {ASD_SAMPLE_RATE} Hz, got sample_rate {options.sample_rate}")
    pack = read_muvap_pack(pack_path)
    problems = list(pack.problems)
    records, mismatches = [], []
    for record in pack.records:
        found, reason = check_record_data(record)
        mismatches += found
        if reason is None:
            records.append(record)
        else:
            problems.append(LineProblem(record.line, record.key, os.path.join(record.shard_path, MUVAP_INDEX),
                                        reason))
    if strict_stats and mismatches:
        raise BuildError(f"{pack_path}: {len(mismatches)} statistic(s) of MuVAP's index differ from the stored data; "
                         f"nothing was imported (drop --strict-stats to import with the recomputed values)",
                         [LineProblem(m.line, m.key, m.path, f"{m.field}: MuVAP {m.muvap!r}, recomputed "
                                                               f"{m.recomputed!r}") for m in mismatches])
    problems.sort(key=lambda p: p.line)
    summary = run_build(items=records, problems=problems, plan=plan_record, load=load_record, kind=KIND_ASD,
                        input_path=os.path.abspath(pack_path), command=COMMAND,
                        recorded_options={**options.recorded(), "strict_stats": strict_stats}, options=options,
                        input_sha256=_input_digest(pack))
    return ImportSummary(build=summary, mismatches=mismatches)


#: ``speechpack import muvap``'s options as plain data (``packer.adapters.option_spec``; ``cli.py`` makes the
#: command): the rows of an asd build's shared options that apply to a copy (``registry.shared_build_options``),
#: then ``SCALE_OPTIONS``, as ``build`` takes them.
IMPORT_OPTIONS = (
    argument("pack", type=Path(file_okay=False, exists=True)),
    option("--out", required=True, type=Path(file_okay=False), help=OUT_HELP),
    shard_size_option("track"),
    workers_option("Copying"),
    skip_bad_option("Import", "track"),
    option("--strict-stats", is_flag=True,
           help="Fail when MuVAP's recorded audio statistics or speaking ratio differ from the stored data "
                "(default: report every mismatch and keep the recomputed values)."),
    *FINISHING_OPTIONS,
    *SCALE_OPTIONS,
)


def import_muvap_options(values: dict) -> ImportSummary:
    """``speechpack import muvap``: ``import_muvap`` from the command's values by name (``IMPORT_OPTIONS``); the
    pack is stored at the asd rate, as every asd build is."""
    values = dict(values)
    pack, strict_stats = values.pop("pack"), values.pop("strict_stats")
    return import_muvap(pack, BuildOptions(sample_rate=ASD_SAMPLE_RATE, **values), strict_stats=strict_stats)


__all__ = ["COMMAND", "IMPORT_OPTIONS", "ImportSummary", "STATS_ABS_TOL", "STATS_REL_TOL", "StatMismatch",
           "check_record_data", "import_muvap", "import_muvap_options", "load_record", "plan_record"]
