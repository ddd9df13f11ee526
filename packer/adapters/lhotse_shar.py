"""A Lhotse Shar directory (``CutSet.to_shar``) to cuts whose audio stays in its tar until the build decodes it.

A Shar directory holds, per shard ``NNNNNN``, ``cuts.NNNNNN.jsonl(.gz)`` (one cut a line, its recording a
``shar`` placeholder) and ``recording.NNNNNN.tar``: for each cut, in order, a data member ``<cut id>.<format>``
(``wav``, ``flac``, ``mp3``, ``opus``, or ``original`` for the source file's own format) followed by a metadata
member ``<cut id>.json`` (the recording manifest Lhotse's reader attaches), or ``.nodata``/``.nometa`` for a cut
without audio.  Other fields' tars (``features``, custom arrays) are not read: a pack stores audio.

Apart from the manifest reader (``packer.adapters.lhotse_manifests``, whose line reading it uses for the cuts files)
because a Shar directory is another layout: tars of members paired with cuts by name, indexed and read later.

**Memory.**  Lhotse's ``CutSet.from_shar`` reads every data member into its cut.  Here each tar is indexed
instead: its headers are read (``tarfile`` seeks over the data) and so are the small ``.json`` members; each cut
keeps a ``TarMember`` (``packer.adapters.tar_members``: the tar's path, the member's name, offset, size and sparse
map: a few dozen bytes that pickle into a worker as cheaply as a file path).  The bytes are read when the build
decodes the cut (as ``tarfile`` extracts them: a GNU sparse member's holes are zeros), handed to Lhotse as an
in-memory source (``with_shar_audio``: what ``from_shar`` would have attached, so the pack is byte for byte the
same) and dropped with the decoded sample, so the audio held at any moment is what is being decoded, whatever
the size of the directory.  The one exception is a gzip-compressed tar (``recording.NNNNNN.tar.gz``, which
Lhotse's writer never produces): it has no offset to seek to, so it is read through once and its members are kept
in memory until the build ends (decompress such tars to stream them).  Members larger than the bounds of
``packer.adapters.tar_members`` are refused by name.

**Problems.**  A cut is paired with its members by name, as Lhotse checks them.  A cut whose members are
missing, whose audio member runs past the end of the tar (a truncated copy), or whose ``.json`` Lhotse cannot read
is a problem of its line in its shard's cuts file, naming the tar member; the shard's other cuts are packed (with
``--skip-bad``).  A tar cut short in its headers ends there, and every cut after that point is such a problem.
"""

from __future__ import annotations

import glob
import os
import tarfile
import zlib
from dataclasses import dataclass, field

from speechpack.packer.adapters.lhotse_manifests import CutLine, ReadCuts, collect_lines, reason_of, require_lhotse
from speechpack.packer.adapters.tar_members import BoundedTarInfo, HeldBytes, TarMember, member_of, read_small
from speechpack.packer.adapters.wesep_shards import is_gzip
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.line_problems import LineProblem

#: Keys ``CutSet.from_shar`` adds to a cut's ``custom`` (where Lhotse read it from, not a property of the cut):
#: dropped, also from cuts files written from such cuts.
SHAR_BOOKKEEPING = frozenset({"shard_origin", "shar_epoch", "dataloading_info"})
#: The field whose tars hold the audio (``to_shar(fields={"recording": ...})``).
RECORDING_FIELD = "recording"
#: Suffix of the metadata member that follows each data member (its recording manifest).
META_SUFFIX = ".json"
#: Suffixes of a cut without this field: an empty data member and an empty metadata member.
NO_DATA_SUFFIXES = (".nodata", ".nometa")


@dataclass
class _Entry:
    """The members of one cut id in a recording tar: its audio (``None`` for ``.nodata``) and its manifest."""

    audio: TarMember | None = None
    meta: bytes | None = None
    meta_name: str | None = None
    meta_problem: str | None = None  # why ``meta`` was not read
    no_data: bool = False


@dataclass
class TarIndex:
    """What indexing a recording tar found: members by cut id, and why it stopped early (``None`` if it did not)."""

    path: str
    entries: dict[str, _Entry] = field(default_factory=dict)
    ended: str | None = None
    size: int = 0


def _stem(name: str) -> str:
    """A member's cut id: its name without the last suffix (Lhotse's ``parent / stem``)."""
    return name.rpartition(".")[0] or name


def index_recording_tar(tar_path: str, held: HeldBytes | None = None) -> TarIndex:
    """Index ``tar_path``: audio members as ``TarMember`` (uncompressed tar) or ``InMemoryTarMember``
    (gzip-compressed), metadata members read.  A tar that breaks off (or cannot be opened) keeps what came before,
    and ``ended`` says why: the cuts it lacks are problems of their lines, not of the whole build.  ``held``: the
    build's bound on what compressed tars hold in memory (``packer.adapters.tar_members``)."""
    index = TarIndex(tar_path)
    held = HeldBytes() if held is None else held
    try:
        compressed = is_gzip(tar_path)
        index.size = os.path.getsize(tar_path)
        with tarfile.open(tar_path, mode="r|gz" if compressed else "r:", tarinfo=BoundedTarInfo) as tar:
            for info in tar:
                if info.isfile():
                    _add_member(index, tar, info, held if compressed else None)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
        index.ended = reason_of(err)
    return index


def _add_member(index: TarIndex, tar: tarfile.TarFile, info: tarfile.TarInfo, held: HeldBytes | None) -> None:
    """Record one member: ``held`` is None for a plain tar (audio left where it lies), else the bound on what a
    compressed tar's members hold in memory."""
    entry = index.entries.setdefault(_stem(info.name), _Entry())
    if info.name.endswith(NO_DATA_SUFFIXES):
        entry.no_data = True
    elif info.name.endswith(META_SUFFIX):
        entry.meta_name = info.name
        try:
            entry.meta = read_small(tar, info, f"{index.path}:{info.name}")
        except ValueError as err:
            if held is not None:  # skipping it would mean decompressing all of it
                raise SpeechpackError(f"{err} (a compressed tar is read through in order: nothing after this "
                                      f"member is read)") from None
            entry.meta_problem = str(err)
    elif held is not None:
        entry.audio = held.take(tar, info, index.path)
    else:
        entry.audio = member_of(index.path, info)


def _recording_of(entry: _Entry, index: TarIndex):
    """The recording manifest of a cut's ``.json`` member; ``ValueError`` naming the member."""
    from lhotse import Recording
    from lhotse.serialization import decode_json_line, deserialize_item

    where = f"{index.path}:{entry.meta_name}"
    try:
        recording = deserialize_item(decode_json_line(entry.meta.decode("utf-8")))
    except Exception as err:  # Lhotse raises KeyError/TypeError/ValueError/JSONDecodeError for a bad manifest
        raise ValueError(f"{where}: not a Lhotse recording manifest ({reason_of(err)})") from None
    if not isinstance(recording, Recording) or len(recording.sources) != 1:
        raise ValueError(f"{where}: expected a Lhotse recording with one audio source, as to_shar writes")
    return recording


def _paired(entry: CutLine, index: TarIndex) -> CutLine:
    """The cut with the recording of its ``.json`` member and its audio member (as ``from_shar`` pairs them, the
    bytes left in the tar); ``ValueError`` naming the member for a cut that cannot be paired."""
    from lhotse.utils import fastcopy

    cut = entry.cut
    found = index.entries.get(cut.id)
    cut_short = f" (reading the tar stopped before it: {index.ended})" if index.ended else ""
    custom = {k: v for k, v in (cut.custom or {}).items() if k not in SHAR_BOOKKEEPING}
    if found is not None and found.no_data:
        # no audio stored for this cut: Lhotse keeps the cut's own recording (a placeholder, refused later)
        return CutLine(entry.line, entry.path, fastcopy(cut, custom=custom or None))
    if found is None or found.audio is None:
        raise ValueError(f"{index.path}: no audio member {cut.id}.<format> for this cut{cut_short}")
    member = found.audio
    problem = member.problem(index.size)
    if problem is not None:
        raise ValueError(f"{member}: {problem}")
    if found.meta_problem is not None:
        raise ValueError(found.meta_problem)
    if found.meta is None:
        raise ValueError(f"{member}: no {cut.id}{META_SUFFIX} member after it{cut_short}")
    if not hasattr(cut, "recording"):
        raise ValueError(f"a {type(cut).__name__} has no recording of its own to read from {member}")
    cut = fastcopy(cut, recording=_recording_of(found, index), custom=custom or None)
    return CutLine(entry.line, entry.path, cut, member)


def with_shar_audio(cut, data: bytes):
    """A copy of ``cut`` whose recording reads ``data`` (its tar member's bytes) as an in-memory source, what
    Lhotse's Shar reader attaches: ``cut.load_audio`` decodes it with Lhotse's own backends, whatever the
    format."""
    from lhotse.utils import fastcopy

    recording = cut.recording
    source = fastcopy(recording.sources[0], type="memory", source=data)
    return fastcopy(cut, recording=fastcopy(recording, sources=[source]))


def read_shar(shar_dir: str) -> ReadCuts:
    """Every cut of a Shar directory with the tar member of its audio (see the module doc); bad lines and cuts
    that cannot be paired with their members are problems of their line."""
    require_lhotse()
    from lhotse.cut import Cut

    if not os.path.isdir(shar_dir):
        raise SpeechpackError(f"{shar_dir}: Shar directory not found")
    cut_files = sorted(glob.glob(os.path.join(shar_dir, "cuts.*.jsonl*")))
    if not cut_files:
        raise SpeechpackError(f"{shar_dir}: not a Lhotse Shar directory (no cuts.NNNNNN.jsonl.gz)")
    cuts, problems = [], []
    held = HeldBytes()
    for cut_file in cut_files:
        stem = os.path.basename(cut_file).split(".")[1]
        recording_tars = sorted(glob.glob(os.path.join(shar_dir, f"{RECORDING_FIELD}.{stem}.tar*")))
        if len(recording_tars) != 1:
            raise SpeechpackError(f"{shar_dir}: shard {stem} has no {RECORDING_FIELD}.{stem}.tar (export the Shar "
                                  f"with fields={{'recording': ...}}: speechpack reads the audio Lhotse stored)")
        parsed, shard_problems = collect_lines(cut_file, Cut, "cut")
        problems += shard_problems
        index = index_recording_tar(recording_tars[0], held)
        for entry in parsed:
            try:
                cuts.append(_paired(entry, index))
            except ValueError as err:
                problems.append(LineProblem(entry.line, entry.cut.id, cut_file, str(err)))
    return ReadCuts(cuts, problems)


__all__ = ["RECORDING_FIELD", "TarIndex", "index_recording_tar", "read_shar", "with_shar_audio"]
