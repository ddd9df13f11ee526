"""WeSep tar shards (``shard.list``: one tar path per line) to the same samples a raw list gives.

Offline shards (``tools/make_shards_from_samples.py``) hold, per sample and contiguously: ``{key}.spk{i}`` (the
UTF-8 speaker id of slot i), ``{key}.{ext}`` for each mixture file (the same name repeated when there are
several, in order) and ``{key}_spk{i}.{ext}`` for each file of ``src[spk_i]``.  Online shards hold ``{key}.spk``
and one mono ``{key}.{ext}``.  ``ext`` is one of ``AUDIO_EXTENSIONS``.

A shard is a plain tar or a gzip-compressed one (``.tar.gz``/``.tgz``, told by its first bytes).  A plain tar's
members are indexed and later read where they lie (GNU sparse members as ``tarfile`` extracts them); a compressed
one is read through once in ``tarfile`` stream mode and its members stay in memory until the build ends, so
compressed shards cost their uncompressed size in memory, up to a bound (``packer.adapters.tar_members``: the
bounds on a member's size and on what compressed shards hold; keep larger corpora in plain tars).

Members are grouped like WeSep's reader (name split at the last dot; consecutive members with the same parsed
key make one sample) and turned into ``WesepLine``s whose audio are ``TarMember``s, so the raw-list adapter's
checks, decoding and policy apply unchanged.  Members are read from the tar, never extracted.  Differences from
WeSep: a bad sample is reported (``LineProblem``: ``line`` is the sample's 1-based ordinal over the whole shard
list, ``path`` is ``tar:member``) instead of dropped silently; and a mixture key ending in ``_spk<n>``, which
WeSep's reader misparses as a source member, is read correctly (its ``{key}.{ext}`` member is recognised as the
mixture of the sample whose speaker ids came just before it).
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import zlib
from dataclasses import dataclass, field

from speechpack.packer.adapters.tar_members import (
    MAX_SMALL_MEMBER_BYTES,
    BoundedTarInfo,
    HeldBytes,
    InMemoryTarMember,
    TarMember,
    compressed_tar,
    member_of,
    too_large,
)
from speechpack.packer.adapters.wesep_lines import WesepList, one_kind, wesep_steps
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.schemas.documents import parse_json, read_lines
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.names import check_name, name_problem
from speechpack.schemas.line_problems import LineProblem
from speechpack.schemas.wesep_list import WesepLine

#: Audio extensions WeSep's shard writer and reader accept.
AUDIO_EXTENSIONS = ("wav", "flac", "mp3", "ogg", "opus", "m4a", "wma")
#: The first bytes of a gzip stream (RFC 1952): how a compressed shard is told from a plain tar.
GZIP_MAGIC = b"\x1f\x8b"

_SPK_ID = re.compile(r"spk(\d+)")
_SRC_SUFFIX = re.compile(r"_spk(\d+)$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass
class _Group:
    """Consecutive members with one parsed key: the raw material of one sample."""

    key: str
    tar_path: str
    members: list[str] = field(default_factory=list)
    speaker_ids: dict[int, bytes] = field(default_factory=dict)  # offline: slot -> id; online: 0 -> id
    mix: list[TarMember] = field(default_factory=list)
    src: dict[int, list[TarMember]] = field(default_factory=dict)
    online: bool = False
    faults: list[str] = field(default_factory=list)


def read_shard_list(list_path: str) -> list[str]:
    """The tar paths of ``list_path`` (blank lines ignored; relative paths against the current directory).
    URLs are refused; so is a list naming a missing file: the build fails before reading anything."""
    paths, missing = [], []
    for number, text, undecodable in read_lines(list_path):
        if undecodable is not None:
            raise SpeechpackError(f"{list_path}:{number}: {undecodable}")
        path = text.strip()
        if not path:
            continue
        if _URL.match(path):
            raise SpeechpackError(f"{list_path}:{number}: {path}: URLs are not supported; download the shards "
                                  f"and list their local paths")
        if not os.path.isfile(path):
            missing.append(f"{list_path}:{number}: {path!r}" if name_problem(path) else f"{list_path}:{number}: {path}")
        paths.append(path)
    if missing:
        raise SpeechpackError("tar shard(s) not found:\n  " + "\n  ".join(missing))
    if not paths:
        raise SpeechpackError(f"{list_path}: the shard list names no tar file")
    return paths


def read_wesep_shards(list_path: str) -> WesepList:
    """Group every tar's members into samples and check them as ``read_wesep_list`` checks lines (structure,
    duplicate keys, one kind per pack); audio is only probed and decoded later, by the build."""
    groups: list[_Group] = []
    held = HeldBytes()
    for tar_path in read_shard_list(list_path):
        groups.extend(_groups_of(tar_path, held))
    lines: list[WesepLine] = []
    problems: list[LineProblem] = []
    first_of_key: dict[str, int] = {}
    for ordinal, group in enumerate(groups, start=1):
        try:
            parsed = _to_line(group, ordinal)
        except ValueError as err:
            problems.append(LineProblem(ordinal, group.key, f"{group.tar_path}:{group.members[0]}", str(err)))
            continue
        if parsed.key in first_of_key:
            problems.append(LineProblem(ordinal, parsed.key, f"{group.tar_path}:{group.members[0]}",
                                        f"duplicate key (first in sample {first_of_key[parsed.key]})"))
            continue
        first_of_key[parsed.key] = ordinal
        lines.append(parsed)
    return one_kind(lines, problems, "sample")


def is_gzip(path: str) -> bool:
    """Whether ``path`` starts with the gzip magic bytes (whatever its name: ``.tar.gz``, ``.tgz``, ``.tar``)."""
    with open(path, "rb") as fp:
        return fp.read(len(GZIP_MAGIC)) == GZIP_MAGIC


def _tar_entries(tar_path: str, held: HeldBytes) -> list[TarMember]:
    """Every regular file of a shard, in order.  A plain tar is indexed (audio members are read later, where they
    lie: ``packer.adapters.tar_members``; speaker ids now); a gzip-compressed one is read through once, in stream
    mode, and held in memory (``held``: the build's bound on what compressed shards hold)."""
    try:
        compressed = is_gzip(tar_path)
    except OSError as err:
        raise SpeechpackError(f"{tar_path}: cannot read the tar ({err.strerror or err})") from None
    try:
        if not compressed:
            with tarfile.open(tar_path, mode="r:", tarinfo=BoundedTarInfo) as tar:
                return [_speaker_id_member(tar, m, tar_path) if _is_speaker_id(m.name) else member_of(tar_path, m)
                        for m in tar.getmembers() if m.isfile()]
        with compressed_tar(tar_path) as tar:
            members = [held.take(tar, m, tar_path) for m in tar if m.isfile()]
        return members
    except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
        what = "gzip-compressed" if compressed else "uncompressed"
        raise SpeechpackError(f"{tar_path}: not a readable {what} tar ({str(err) or type(err).__name__})") from None


def _speaker_id_member(tar: tarfile.TarFile, info: tarfile.TarInfo, tar_path: str) -> TarMember:
    """A speaker-id member of a plain tar with its bytes, read while the tar is open; one too large to be a speaker
    id is left unread (its sample reports it)."""
    if too_large(info.size, MAX_SMALL_MEMBER_BYTES) is not None:
        return member_of(tar_path, info)
    with tar.extractfile(info) as fp:
        return InMemoryTarMember(tar_path, info.name, info.offset_data, info.size, data=fp.read())


def _is_speaker_id(name: str) -> bool:
    """``{key}.spk`` (online) or ``{key}.spk<i>`` (offline)."""
    postfix = name.rpartition(".")[2]
    return postfix == "spk" or _SPK_ID.fullmatch(postfix) is not None


def _groups_of(tar_path: str, held: HeldBytes) -> list[_Group]:
    """WeSep's grouping of one tar, offline or online (decided by its spk-id members)."""
    members = _tar_entries(tar_path, held)
    postfixes = {m.name.rpartition(".")[2] for m in members if "." in m.name}
    online = "spk" in postfixes and not any(_SPK_ID.fullmatch(p) for p in postfixes)
    groups: list[_Group] = []
    current: _Group | None = None
    for member in members:
        prefix, dot, postfix = member.name.rpartition(".")
        if not dot:
            continue  # no extension: WeSep ignores it
        audio = postfix.lower() in AUDIO_EXTENSIONS
        slot = None
        if online:
            if postfix != "spk" and not audio:
                continue
            key = prefix
        elif _SPK_ID.fullmatch(postfix):
            key = prefix
        elif audio:
            suffix = _SRC_SUFFIX.search(prefix)
            # ``{key}.{ext}`` of a key that itself ends in ``_spk<n>``: the mixture of the open sample.
            if suffix and not (current is not None and current.key == prefix and not current.src):
                key, slot = prefix[:suffix.start()], int(suffix.group(1))
            else:
                key = prefix
        else:
            continue  # an unknown postfix: WeSep ignores it
        if current is None or current.key != key:
            current = _Group(key=key, tar_path=tar_path, online=online)
            groups.append(current)
        current.members.append(member.name)
        if _is_speaker_id(member.name):
            index = 0 if online else int(_SPK_ID.fullmatch(postfix).group(1))
            if index in current.speaker_ids:
                current.faults.append(f"member {member.name} appears twice")
            reason = too_large(member.size, MAX_SMALL_MEMBER_BYTES)
            if reason is not None:
                current.faults.append(f"member {member.name}: {reason} for a speaker id")
                continue
            current.speaker_ids[index] = member.read_bytes()  # in memory: read with the tar's index
            continue
        if slot is None:
            current.mix.append(member)
        else:
            current.src.setdefault(slot, []).append(member)
    return groups


def _to_line(group: _Group, ordinal: int) -> WesepLine:
    """A group as the ``WesepLine`` its raw-list line would parse to; ``ValueError`` says what is missing."""
    if group.faults:
        raise ValueError("; ".join(group.faults))
    check_name(group.key, "key")
    try:
        ids = {slot: raw.decode("utf-8").strip() for slot, raw in group.speaker_ids.items()}
    except UnicodeDecodeError:
        raise ValueError("a speaker id member is not UTF-8 text") from None
    if any(not spk for spk in ids.values()):
        raise ValueError("a speaker id member is empty")
    for spk in ids.values():
        check_name(spk, "speaker")
    members = {"tar": group.tar_path, "members": list(group.members)}
    if group.online:
        if 0 not in ids:
            raise ValueError(f"no {group.key}.spk member (the speaker id)")
        if len(group.mix) != 1:
            raise ValueError(f"an online sample needs exactly one audio member, got {len(group.mix)}")
        return WesepLine(line=ordinal, key=group.key, speakers=(ids[0],), mix_paths=(),
                         target_paths=(group.mix[0],), provenance=members)
    if not ids:
        hint = ""
        if _SRC_SUFFIX.search(group.key) is None and group.src:
            hint = " (a source member without its sample's spk members)"
        raise ValueError(f"no {group.key}.spk<i> members (speaker ids){hint}")
    slots = sorted(ids)
    if slots != list(range(1, len(slots) + 1)):
        raise ValueError(f"speaker id members must be spk1..spk{len(slots)}, got {['spk%d' % s for s in slots]}")
    speakers = tuple(ids[s] for s in slots)
    if len(set(speakers)) != len(speakers):
        raise ValueError(f"a speaker is listed twice: {list(speakers)!r}")
    for slot in slots:
        if slot not in group.src:
            raise ValueError(f"speaker {ids[slot]!r} has no {group.key}_spk{slot}.<ext> member")
    extra = sorted(set(group.src) - set(slots))
    if extra:
        raise ValueError(f"source member(s) for slot(s) {extra} without a speaker id member")
    if not group.mix:
        if len(slots) != 1 or len(group.src[1]) != 1:
            raise ValueError("no mixture member, and not a single-speaker source (one speaker, one file)")
        return WesepLine(line=ordinal, key=group.key, speakers=speakers, mix_paths=(),
                         target_paths=(group.src[1][0],), provenance=members)
    return WesepLine(line=ordinal, key=group.key, speakers=speakers, mix_paths=tuple(group.mix),
                     target_paths=tuple(group.src[s][0] for s in slots), provenance=members)


def build_wesep_shards(list_path: str, options: BuildOptions) -> BuildSummary:
    """``speechpack build wesep-shards``: WeSep tar shards (``shard.list``, one tar path per line) to the pack
    the same samples give as a raw list (same shard ``.npy`` files and ``columns/``; see ``wesep_shards``)."""
    if not os.path.isfile(list_path):
        raise SpeechpackError(f"{list_path}: shard list not found")
    shards = read_wesep_shards(list_path)
    return run_build(
        items=shards.lines,
        problems=shards.problems,
        **wesep_steps(options.sample_rate),
        kind=shards.kind,
        input_path=list_path,
        command="build wesep-shards",
        recorded_options=options.recorded(),
        options=options,
    )


def write_shards(list_path: str, out_dir: str, samples_per_shard: int = 1000, prefix: str = "shards",
                 online: bool | None = None, compress: bool = False) -> str:
    """WeSep-style tar shards of a raw list (what ``tools/make_shards_from_samples.py`` writes): files stored
    byte for byte, ``{prefix}_{i:09d}.tar`` in ``out_dir``; return the path of the ``shard.list`` written there.

    ``online`` writes single-speaker lines (the contract's, or mainline's ``{key, wav, spk}``) as ``{key}.spk`` +
    ``{key}.{ext}``, as ``make_shard_online.py`` does; by default it is chosen when every line lacks ``mix``.
    ``compress`` writes gzip-compressed ``.tar.gz`` shards instead.  Paths of the raw list are opened as written
    (relative to the current directory).
    """
    with open(list_path, encoding="utf-8") as fp:
        records = [parse_json(text, f"{list_path}:{n}") for n, text in enumerate(fp, start=1) if text.strip()]
    if online is None:
        online = all("mix" not in r for r in records)
    os.makedirs(out_dir, exist_ok=True)
    tar_paths = []
    for start in range(0, len(records), samples_per_shard):
        suffix = ".tar.gz" if compress else ".tar"
        tar_path = os.path.join(out_dir, f"{prefix}_{start // samples_per_shard:09d}{suffix}")
        with tarfile.open(tar_path, mode="w:gz" if compress else "w") as tar:
            for record in records[start:start + samples_per_shard]:
                for name, data in _sample_members(record, online):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        tar_paths.append(tar_path)
    shard_list = os.path.join(out_dir, "shard.list")
    with open(shard_list, "w", encoding="utf-8") as fp:
        fp.writelines(p + "\n" for p in tar_paths)
    return shard_list


def _sample_members(record: dict, online: bool) -> list[tuple[str, bytes]]:
    key, speakers = record["key"], record["spk"]

    def ext(path: str) -> str:
        suffix = path.rpartition(".")[2].lower()
        if suffix not in AUDIO_EXTENSIONS:
            raise SpeechpackError(f"{path}: extension {suffix!r} is not one of {', '.join(AUDIO_EXTENSIONS)}")
        return suffix

    def data(path: str) -> bytes:
        with open(path, "rb") as fp:
            return fp.read()

    if "wav" in record:  # mainline's single-speaker line: {key, wav, spk}
        if not online:
            raise SpeechpackError(f"{key}: a single-speaker line (key, wav, spk) is written as an online shard")
        return [(f"{key}.spk", speakers.encode("utf-8")), (f"{key}.{ext(record['wav'])}", data(record["wav"]))]
    if online:
        path = record["src"][speakers[0]][0]
        return [(f"{key}.spk", speakers[0].encode("utf-8")), (f"{key}.{ext(path)}", data(path))]
    members = [(f"{key}.spk{i}", spk.encode("utf-8")) for i, spk in enumerate(speakers, start=1)]
    members += [(f"{key}.{ext(p)}", data(p)) for p in record.get("mix", {}).get("default", [])]
    for i, spk in enumerate(speakers, start=1):
        members += [(f"{key}_spk{i}.{ext(p)}", data(p)) for p in record["src"][spk]]
    return members
