"""Online mixing of ``sources`` packs in train (docs/loader.md "Online mixing"): one mixture per planned source.

A group goes through three steps, kept apart so a batch can be allocated before any audio is decoded:

- ``draft``: every draw of one attempt (interferers and their windows, timeline, reverberation and its RIRs),
  made before decoding, in the same order as deciding while decoding;
- ``realise``: the drafted sources decoded (chunked, padded to the group's longest, masked by the timeline,
  reverberated), redrawn while a source is silent, plus the SNR, gain and noise draws;
- ``render``: WeSep's SNR mixer (and the mixture's noise) in the reused work area, then each batch row written
  once.

The pure mixing functions are ``loader.tse.mixing``; RIR and noise banks are packs of kind ``rir``/``noise``
(``Bank``), and decoded RIRs and their spectra are kept in a per-process cache of ``RIR_CACHE_BYTES``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import soxr

from loader.pack import Pack, open_pack, will_need_view
from loader.tse.args import DatasetArgs
from loader.tse.decode import Audio, Decoder, Row, decode_into
from loader.tse.items import ItemIndex
from loader.tse.mixing import (
    GROUP_ATTEMPTS,
    MIN_ENERGY,
    RIR_CACHE_BYTES,
    ByteBudgetCache,
    ItemGenerators,
    MixError,
    Scratch,
    SpeakerIndex,
    add_noise,
    apply_timeline,
    choose_group,
    energies,
    fit_noise,
    make_timeline,
    mix_sources,
    reverberate,
    rir_spectrum,
    snr_scales,
)
from loader.tse.windows import ZERO_CHUNK_REDRAWS, Chunking, Window
from schemas.constants import KIND_NOISE, KIND_RIR, KIND_SOURCES, STREAM_AUDIO, STREAM_SOURCE

#: Rows of the work area before a group's sources (the mixture, and one scaled interferer).
WORK_ROWS = 2


class Member(NamedTuple):
    """One source of a group, not yet decoded: its audio, window, speaker, utterance key and pack."""

    audio: Audio
    window: Window
    speaker: str
    key: str
    pack: int


class Draft(NamedTuple):
    """One attempt at an online group before decoding: ``members`` (the target first), the group's length (its
    longest window), the timeline segments ``[N, 2]`` and the RIR draws (``None``: not reverberated)."""

    members: list[Member]
    length: int
    segments: np.ndarray
    rir_draws: np.ndarray | None


class Group(NamedTuple):
    """A drafted group decoded: ``sources`` ``[N, length]`` float32 (reverberant when reverberated), ``dry`` the
    dry sources when they are kept as targets, their energies, and the SNR, gain and noise draws."""

    draft: Draft
    sources: np.ndarray
    dry: np.ndarray | None
    energy: np.ndarray
    snr: np.ndarray
    gain: float
    noise: tuple[np.ndarray, float] | None

    @property
    def size(self) -> int:
        """Speakers in the group."""
        return len(self.draft.members)


class OnlineBatch(NamedTuple):
    """What ``OnlineMixer.build`` gives the batch assembly: rows, audio, and the per-row metadata."""

    rows: list[Row]
    wav_mix: np.ndarray
    wav_target: np.ndarray
    chunk_ratio: list[dict]
    real: np.ndarray
    source_keys: list[str]
    timeline: list[list[list[float]]]


class Bank:
    """A noise or RIR bank: its packs and its entries as ``[(pack, audio segment)]`` rows (channel 0 is used)."""

    def __init__(self, paths: tuple[str, ...], kind: str):
        self.packs: list[Pack] = []
        entries = []
        for path in paths:
            pack = open_pack(path)
            if pack.kind != kind:
                raise MixError(f"{path}: a {kind} bank is needed here, this pack is {pack.kind}")
            table = pack.streams[STREAM_AUDIO]
            first = np.asarray(table.first, dtype=np.int64)
            entries.append(np.stack([np.full(len(pack), len(self.packs), dtype=np.int64), first], axis=1))
            self.packs.append(pack)
        self.rows = np.concatenate(entries) if entries else np.zeros((0, 2), np.int64)
        if paths and not len(self.rows):
            raise MixError(f"the {kind} banks {list(paths)} are empty")

    def entry(self, draw: float) -> int:
        """The entry a uniform ``draw`` in [0, 1) picks."""
        return min(int(draw * len(self.rows)), len(self.rows) - 1)

    def read(self, entry: int, rate: int) -> np.ndarray:
        """Channel 0 of entry ``entry``, float64 at ``rate``."""
        pack_id, segment = self.rows[entry]
        pack = self.packs[int(pack_id)]
        audio = pack.read_segment(STREAM_AUDIO, int(segment))[0].astype(np.float64)
        if pack.sample_rate != rate:
            audio = soxr.resample(audio, pack.sample_rate, rate)
        return audio


def speaker_index(packs: list[Pack], items: ItemIndex, kind: str) -> SpeakerIndex:
    """The items' speakers (one per source utterance), grouped."""
    if kind != KIND_SOURCES:
        raise MixError(f"dataset_args.online_mix mixes single-speaker sources packs; these packs are {kind}")
    width = max(p.speakers.raw.dtype.itemsize for p in packs)
    speakers = np.empty(len(items), dtype=f"S{max(width, 1)}")
    for pack_id, pack in enumerate(packs):
        mine = items.pack == pack_id
        samples = items.sample[mine]
        if np.any(pack.speaker_count[samples] != 1):
            raise MixError(f"online_mix: pack {pack.path} has samples with other than one speaker")
        speakers[mine] = pack.speakers.raw[pack.speaker_first[samples]]
    return SpeakerIndex.from_speakers(speakers)


class OnlineMixer:
    """Mixes the planned source utterances of a batch (each the target of one group).  Holds numpy columns, the
    banks' indexes and a reused work area; the RIR cache and generators refill in each worker."""

    def __init__(self, packs: list[Pack], items: ItemIndex, args: DatasetArgs, kind: str, rate: int,
                 chunking: Chunking, decoder: Decoder, seed: int):
        self.packs = packs
        self.items = items
        self.args = args
        self.mix_args = args.mix
        self.rate = rate
        self.chunking = chunking
        self.decoder = decoder
        self.speaker_index = speaker_index(packs, items, kind)
        self.rir_bank = Bank(args.mix.rir_banks, KIND_RIR)
        self.noise_bank = Bank(args.mix.noise_banks, KIND_NOISE)
        # the timeline applies to chunks, not whole utterances (WeSep)
        self.timeline = args.mix.timeline if not args.whole_utt else None
        self.scratch = Scratch()  # the work area, reused from group to group
        self.rir_cache = ByteBudgetCache(RIR_CACHE_BYTES)
        self.item_rngs = ItemGenerators(seed)

    def member(self, item: int, rng: np.random.Generator) -> Member:
        """One source of a group.  A sources sample is one mono segment and one speaker, read from the columns."""
        pack_id, sample = int(self.items.pack[item]), int(self.items.sample[item])
        pack = self.packs[pack_id]
        segment = int(pack.streams[STREAM_SOURCE].first[sample])
        audio = self.decoder.audio(pack, STREAM_SOURCE, segment, self.decoder.gain(pack, STREAM_SOURCE, segment))
        key = str(pack.keys[sample])
        if audio.data.shape[0] != 1:
            raise MixError(f"online_mix: source {key} has {audio.data.shape[0]} channels; WeSep mixes mono sources")
        window = self.chunking.window(audio.data, rng.random(ZERO_CHUNK_REDRAWS + 1), redraw_silence=False)
        return Member(audio, window, pack.speakers[int(pack.speaker_first[sample])], key, pack_id)

    def draft(self, item: int, rng: np.random.Generator) -> Draft:
        """One attempt at a group, every draw made before any audio is decoded (the same draws, in the same
        order, as deciding while decoding).  Knowing the group sizes first lets the batch be allocated before
        mixing starts."""
        members = [self.member(int(m), rng) for m in choose_group(rng, item, self.speaker_index, self.mix_args)]
        segments = make_timeline(rng, len(members), self.timeline)
        reverb, rir_draws = rng.random() < self.mix_args.reverb_prob, rng.random(len(members))
        return Draft(members, max(m.window.length for m in members), segments, rir_draws if reverb else None)

    def reverberate(self, sources: np.ndarray, rir_draws: np.ndarray) -> np.ndarray:
        """``sources`` convolved with the drawn RIRs, each RIR decoded and transformed once per process and FFT
        size (``RIR_CACHE_BYTES`` of them kept): the FFTs of the sources are then the only ones left per group."""
        entries = [self.rir_bank.entry(d) for d in rir_draws]
        rirs = [self.rir_cache.get(("rir", e), lambda e=e: self.rir_bank.read(e, self.rate)) for e in entries]
        return reverberate(sources, rirs, lambda i, size: self.rir_cache.get(
            ("spectrum", entries[i], size), lambda: rir_spectrum(rirs[i], size)))

    def realise(self, item: int, rng: np.random.Generator, draft: Draft, in_scratch: bool) -> Group:
        """A drafted group decoded, redrawn while a source has no energy; plus its SNR, gain and noise draws.
        ``in_scratch``: the sources live in the work area, valid until the next group (the caller mixes at once)."""
        mix_args = self.mix_args
        for attempt in range(GROUP_ATTEMPTS):
            if attempt:
                draft = self.draft(item, rng)
            count = len(draft.members)
            sources = (self.scratch.rows(WORK_ROWS + count, draft.length)[WORK_ROWS:] if in_scratch
                       else np.empty((count, draft.length), dtype=np.float32))
            for row, member in zip(sources, draft.members):
                decode_into(row, member.audio, member.window)
            if self.timeline is not None:
                apply_timeline(sources, draft.segments)
            dry = None
            if draft.rir_draws is not None:
                wet = self.reverberate(sources, draft.rir_draws)
                sources, dry = wet, (sources if mix_args.reverb_keep_dry else None)
            energy = energies(sources)
            if energy.min() > MIN_ENERGY:
                snr = rng.uniform(*mix_args.snr_range, size=count)
                gain = float(rng.uniform(*mix_args.gain_range))
                noise_on, noise_draws = rng.random() < mix_args.noise_prob, rng.random(3)
                noise = None
                if noise_on:
                    low, high = mix_args.noise_snr
                    entry = self.noise_bank.entry(noise_draws[0])
                    noise = (fit_noise(self.noise_bank.read(entry, self.rate), draft.length, noise_draws[1]),
                             float(low + noise_draws[2] * (high - low)))
                return Group(draft, sources, dry, energy, snr, gain, noise)
        key = str(self.packs[int(self.items.pack[item])].keys[int(self.items.sample[item])])
        raise MixError(f"online_mix: no group with energy in every source for target {key} after {GROUP_ATTEMPTS} "
                       f"attempts (is the utterance silent?)")

    def build(self, item_ids: np.ndarray, epoch: int, global_batch: int) -> OnlineBatch:
        """One mixture per planned source utterance (its target), rows one per speaker, mixture-major.

        Every group's draws come first (``draft``), so the batch's rows are known before any audio is decoded.
        When every row is ``chunk_len`` long (train chunks, ``pad``), each group is then decoded into the reused
        work area, mixed there and written to its batch rows before the next one: every pass but the final write
        stays in cache.  Otherwise (whole utterances, ``keep``) the rows' length depends on every group, so groups
        are decoded into arrays of their own first and written out afterwards."""
        rngs = self.item_rngs.batch(epoch, global_batch, len(item_ids))
        drafts = [self.draft(int(item), rng) for item, rng in zip(item_ids, rngs)]
        for draft in drafts:  # every window of the batch requested before the first decode (cold reads)
            for member in draft.members:
                window = member.window
                will_need_view(member.audio.data[0, window.start:window.start + window.take])
        if self.chunking.fixed_length:
            sizes = [len(d.members) for d in drafts]
            wav_mix, wav_target = self.outputs(np.full(sum(sizes), self.chunking.chunk_len, dtype=np.int64))
            groups, row = [], 0
            for g, (item, rng, draft) in enumerate(zip(item_ids, rngs, drafts)):
                group = self.realise(int(item), rng, draft, in_scratch=True)
                if group.size != sizes[g]:  # a redraw changed the speaker count: the rows after it move
                    sizes[g] = group.size
                    wav_mix, wav_target = (_with_rows(a, sum(sizes), row) for a in (wav_mix, wav_target))
                self.render(group, wav_mix[row:row + group.size], wav_target[row:row + group.size])
                groups.append(group)
                row += group.size
        else:
            groups = [self.realise(int(item), rng, draft, in_scratch=False)
                      for item, rng, draft in zip(item_ids, rngs, drafts)]
            wav_mix, wav_target = self.outputs(
                np.concatenate([np.full(g.size, g.draft.length, dtype=np.int64) for g in groups]))
            row = 0
            for group in groups:
                self.render(group, wav_mix[row:row + group.size], wav_target[row:row + group.size])
                row += group.size
        rows, source_keys, timeline, chunk_ratio, real = [], [], [], [], []
        for g, group in enumerate(groups):
            members, length = group.draft.members, group.draft.length
            key = "mix_" + "_".join(m.key for m in members)
            longest_take = max(m.window.take for m in members)
            segments = group.draft.segments.tolist()
            for i, member in enumerate(members):
                padded = member.window.padded_to(length)
                rows.append(Row(g, None, None, member.speaker, key, len(members), padded, member.pack))
                source_keys.append(member.key)
                timeline.append([segments[i]])
                chunk_ratio.append(padded.chunk_ratio())
                real.append(longest_take)
        return OnlineBatch(rows, wav_mix, wav_target, chunk_ratio, np.asarray(real, dtype=np.int64), source_keys,
                           timeline)

    def outputs(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The batch's ``wav_mix`` and ``wav_target`` ``[rows, 1, T]`` float32, T by each field's align over the
        rows' ``lengths`` (contents undefined: ``render`` writes every sample)."""
        outputs = []
        for name in ("wav_mix", "wav_target"):
            out_len = int(lengths.max() if self.args.align_of(name) == "max" else lengths.min())
            outputs.append(np.empty((len(lengths), 1, out_len), dtype=np.float32))
        return outputs[0], outputs[1]

    def render(self, group: Group, mix_rows: np.ndarray, target_rows: np.ndarray) -> None:
        """WeSep's SNR mixer (and mixture noise) for one group, in the work area, then its batch rows written
        once each: the mixture into every ``mix_rows`` row, each target scaled into its ``target_rows`` row
        (cropped or zero-padded to the batch's length)."""
        mix, work = self.scratch.rows(WORK_ROWS, group.draft.length)
        mix, factors = mix_sources(group.sources, snr_scales(group.energy, group.snr), group.gain, out=mix, work=work)
        if group.noise is not None:  # the mixture only (WeSep's add_noise)
            add_noise(mix, *group.noise, in_place=True)
        targets = group.dry if group.dry is not None else group.sources  # reverb_keep_dry: dry, scaled alike
        for i, factor in enumerate(factors):
            _put(mix_rows[i, 0], mix)
            _put(target_rows[i, 0], targets[i], np.float32(factor))


def _with_rows(batch: np.ndarray, rows: int, written: int) -> np.ndarray:
    """``batch`` with ``rows`` rows, its first ``written`` kept (a redraw changed a group's speaker count)."""
    resized = np.empty((rows,) + batch.shape[1:], dtype=batch.dtype)
    resized[:written] = batch[:written]
    return resized


def _put(out: np.ndarray, signal: np.ndarray, factor: np.float32 | None = None) -> None:
    """``out[:n] = signal[:n] (* factor)`` and zeros after it, for a row of the batch."""
    take = min(len(out), len(signal))
    if factor is None:
        out[:take] = signal[:take]
    else:
        np.multiply(signal[:take], factor, out=out[:take])
    if take < len(out):
        out[take:] = 0.0


__all__ = ["Bank", "Draft", "Group", "Member", "OnlineBatch", "OnlineMixer", "WORK_ROWS", "speaker_index"]
