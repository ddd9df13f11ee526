"""Online mixing of ``sources`` packs in train (docs/loader.md "Online mixing"): one mixture per planned source.

A group goes through three steps, kept apart so a batch can be allocated before any audio is decoded:

- ``draft``: every draw of one attempt (interferers and their windows, timeline, reverberation and its RIRs),
  made before decoding, in the same order as deciding while decoding;
- ``realise``: the drafted sources decoded (chunked, padded to the group's longest, masked by the timeline,
  reverberated), redrawn while a source is silent, plus the SNR, gain and noise draws;
- ``render``: WeSep's SNR mixer (and the mixture's noise) in the reused work area, then each batch row written
  once.

Reverberated groups take a batched path: their first attempt is decoded and reverberated together, every room of
the batch simulated in one call and every source convolved in one FFT call each way
(``loader.tse.augment.Reverberator``).

With ``augment_on: batch`` the same drafts and draws are made, but ``render`` is left to the training process: the
batch carries the dry sources and the draws' records (``loader.tse.batch_records``) instead of ``wav_mix`` and
``wav_target``, which ``loader.tse.batch_augment`` makes in torch where the batch is.

The pure mixing functions are ``loader.tse.mixing``; RIR and noise banks are packs of kind ``rir``/``noise``
(``loader.tse.augment``: also the user's noise LMDB and simulated rooms), and decoded bank RIRs and their spectra
are kept in a per-process cache of ``RIR_CACHE_BYTES``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from speechpack.loader.cache import CacheSettings
from speechpack.loader.pack import Pack, will_need_view
from speechpack.loader.tse.args import DatasetArgs
from speechpack.loader.tse.augment import Bank, NoiseSource, Reverberator, RirSource
from speechpack.loader.tse.batch_records import draw_records
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays
from speechpack.loader.tse.mix_args import AugmentArgs
from speechpack.loader.tse.buffers import RIR_CACHE_BYTES, ByteBudgetCache, Scratch
from speechpack.loader.tse.decode import Decoder, Row, aligned_length, decode_into
from speechpack.loader.samples import Audio
from speechpack.loader.tse.mixing import MixError
from speechpack.loader.tse.items import ItemIndex
from speechpack.loader.tse.mixing import (
    GROUP_ATTEMPTS,
    MIN_ENERGY,
    TIMELINE_DECIMALS,
    SpeakerIndex,
    add_noise,
    apply_timeline,
    choose_group,
    energies,
    make_timeline,
    mix_sources,
    snr_scales,
)
from speechpack.loader.rng import ItemGenerators
from speechpack.loader.tse.windows import Chunking, Window
from speechpack.schemas.constants import KIND_SOURCES, STREAM_SOURCE

#: ``overlap_ratio_2spk`` of a row whose mixture does not have two speakers (a number, not NaN, so batches compare
#: equal and sums stay finite).
NO_OVERLAP_RATIO = -1.0

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
    #: ``None`` with ``augment_on: batch``: ``records`` holds what makes them
    wav_mix: np.ndarray | None
    wav_target: np.ndarray | None
    chunk_ratio: list[dict]
    real: np.ndarray
    source_keys: list[str]
    timeline: list[list[list[float]]]
    #: per row: the overlap of its mixture's two speakers (WeSep's ``overlap_ratio_2spk``); ``NO_OVERLAP_RATIO``
    #: for other speaker counts
    overlap_ratio_2spk: np.ndarray
    #: ``augment_on: batch``: the dry sources and the draws' records (``loader.tse.batch_records``)
    records: dict | None = None


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
                 chunking: Chunking, decoder: Decoder, seed: int, cache: CacheSettings | None = None):
        self.packs = packs
        self.items = items
        self.args = args
        self.mix_args = args.mix
        self.augment = args.augment if args.augment is not None else AugmentArgs()
        self.rate = rate
        self.chunking = chunking
        self.decoder = decoder
        self.speaker_index = speaker_index(packs, items, kind)
        self.rirs = RirSource(self.augment, cache)
        # the LMDB or noise packs are opened only when noise is used (recipes name an LMDB with noise_prob: 0)
        self.noise = NoiseSource(self.augment, cache) if self.augment.noise_prob > 0 else None
        # the timeline applies to chunks, not whole utterances (WeSep)
        self.timeline = args.mix.timeline if not args.whole_utt else None
        self.scratch = Scratch()  # the work area, reused from group to group
        self.reverb_scratch = Scratch()  # the batch's dry reverberated sources, reused from batch to batch
        self.rir_cache = ByteBudgetCache(RIR_CACHE_BYTES)
        self.reverb = Reverberator(self.rirs, rate, self.rir_cache)
        self.item_rngs = ItemGenerators(seed)
        self.on_batch = self.augment.augment_on == "batch"

    def member(self, item: int, rng: np.random.Generator) -> Member:
        """One source of a group.  A sources sample is one mono segment and one speaker, read from the columns."""
        pack_id, sample = int(self.items.pack[item]), int(self.items.sample[item])
        pack = self.packs[pack_id]
        segment = int(pack.streams[STREAM_SOURCE].first[sample])
        audio = self.decoder.audio(pack, STREAM_SOURCE, segment)
        key = str(pack.keys[sample])
        if audio.data.shape[0] != 1:
            raise MixError(f"online_mix: source {key} has {audio.data.shape[0]} channels; WeSep mixes mono sources")
        window = self.chunking.window(audio.data, rng.random(self.chunking.draws_per_window), redraw_silence=False)
        return Member(audio, window, pack.speakers[int(pack.speaker_first[sample])], key, pack_id)

    def draft(self, item: int, rng: np.random.Generator) -> Draft:
        """One attempt at a group, every draw made before any audio is decoded (the same draws, in the same
        order, as deciding while decoding).  Knowing the group sizes first lets the batch be allocated before
        mixing starts."""
        members = [self.member(int(m), rng) for m in choose_group(rng, item, self.speaker_index, self.mix_args)]
        segments = make_timeline(rng, len(members), self.timeline)
        reverb, rir_draws = rng.random() < self.augment.reverb_prob, rng.random(len(members))
        return Draft(members, max(m.window.length for m in members), segments, rir_draws if reverb else None)

    def reverberate(self, drafts: list[Draft]) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Per group, its first attempt's ``(wet, dry)`` sources ``[N, length]`` when it is reverberated, else
        ``None`` (the dry ones live in a reused work area, valid until the next batch): every reverberated group
        decoded (and masked by its timeline) into one zero-padded array, then reverberated in one call (one room
        per group, keyed by its first RIR draw; or bank RIRs, each decoded and transformed once per process and
        FFT size)."""
        chosen = [g for g, draft in enumerate(drafts) if draft.rir_draws is not None]
        prepared: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(drafts)
        if not chosen:
            return prepared
        counts = [len(drafts[g].members) for g in chosen]
        dry = self.reverb_scratch.rows(sum(counts), max(drafts[g].length for g in chosen))
        dry.fill(0.0)  # a group shorter than the batch's longest is zero after its length
        row = 0
        for g, count in zip(chosen, counts):
            draft = drafts[g]
            rows = dry[row:row + count, :draft.length]
            for target, member in zip(rows, draft.members):
                decode_into(target, member.audio, member.window, self.chunking.tile)
            if self.timeline is not None:
                apply_timeline(rows, draft.segments)
            row += count
        wet = self.reverb.wet(dry, [drafts[g].rir_draws for g in chosen])
        row = 0
        for g, count in zip(chosen, counts):
            length = drafts[g].length
            prepared[g] = (wet[row:row + count, :length], dry[row:row + count, :length])
            row += count
        return prepared

    def realise(self, item: int, rng: np.random.Generator, draft: Draft, in_scratch: bool,
                prepared: tuple[np.ndarray, np.ndarray] | None = None, wet: bool = True) -> Group:
        """A drafted group decoded, redrawn while a source has no energy; plus its SNR, gain and noise draws.
        ``in_scratch``: the sources live in the work area, valid until the next group (the caller mixes at once).
        ``prepared``: the first attempt's ``(wet, dry)`` sources, reverberated with the batch (``reverberate``).
        ``wet`` False (``augment_on: batch``): the sources stay dry, and the energy check is on them."""
        mix_args = self.mix_args
        for attempt in range(GROUP_ATTEMPTS):
            if attempt:
                draft = self.draft(item, rng)
            count = len(draft.members)
            if attempt == 0 and prepared is not None:
                sources, dry = prepared
            else:
                sources = (self.scratch.rows(WORK_ROWS + count, draft.length)[WORK_ROWS:] if in_scratch
                           else np.empty((count, draft.length), dtype=np.float32))
                for row, member in zip(sources, draft.members):
                    decode_into(row, member.audio, member.window, self.chunking.tile)
                if self.timeline is not None:
                    apply_timeline(sources, draft.segments)
                dry = None
                if draft.rir_draws is not None and wet:  # a redrawn group: reverberated on its own
                    sources, dry = self.reverb.wet(sources, [draft.rir_draws]), sources
            if not self.augment.reverb_keep_dry:
                dry = None
            energy = energies(sources)
            if energy.min() > MIN_ENERGY:
                snr = rng.uniform(*mix_args.snr_range, size=count)
                gain = float(rng.uniform(*mix_args.gain_range))
                noise_on, noise_draws = rng.random() < self.augment.noise_prob, rng.random(3)
                noise = None
                if noise_on:  # WeSep's SNR rule by the noise's key, unless noise_snr fixes a range
                    noise = self.noise.draw(noise_draws, self.rate, draft.length)
                return Group(draft, sources, dry, energy, snr, gain, noise)
        key = str(self.packs[int(self.items.pack[item])].keys[int(self.items.sample[item])])
        raise MixError(f"online_mix: no group with energy in every source for target {key} after {GROUP_ATTEMPTS} "
                       f"attempts (is the utterance silent?)")

    def build(self, item_ids: np.ndarray, epoch: int, global_batch: int, arrays: BatchArrays = NUMPY) -> OnlineBatch:
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
        if self.on_batch:
            return self.dry_batch(item_ids, rngs, drafts, arrays)
        prepared = self.reverberate(drafts)
        if self.chunking.fixed_length:
            sizes = [len(d.members) for d in drafts]
            wav_mix, wav_target = self.outputs(np.full(sum(sizes), self.chunking.chunk_len, dtype=np.int64))
            groups, row = [], 0
            for g, (item, rng, draft) in enumerate(zip(item_ids, rngs, drafts)):
                group = self.realise(int(item), rng, draft, in_scratch=True, prepared=prepared[g])
                if group.size != sizes[g]:  # a redraw changed the speaker count: the rows after it move
                    sizes[g] = group.size
                    wav_mix, wav_target = (_with_rows(a, sum(sizes), row) for a in (wav_mix, wav_target))
                self.render(group, wav_mix[row:row + group.size], wav_target[row:row + group.size])
                groups.append(group)
                row += group.size
        else:
            groups = [self.realise(int(item), rng, draft, in_scratch=False, prepared=ready)
                      for item, rng, draft, ready in zip(item_ids, rngs, drafts, prepared)]
            wav_mix, wav_target = self.outputs(
                np.concatenate([np.full(g.size, g.draft.length, dtype=np.int64) for g in groups]))
            row = 0
            for group in groups:
                self.render(group, wav_mix[row:row + group.size], wav_target[row:row + group.size])
                row += group.size
        return self.batch_of(groups, wav_mix, wav_target)

    def dry_batch(self, item_ids: np.ndarray, rngs: list[np.random.Generator], drafts: list[Draft],
                  arrays: BatchArrays = NUMPY) -> OnlineBatch:
        """``augment_on: batch``: every group realised dry (the same draws as ``build`` makes), its RIRs simulated
        or read, and the batch's records made for the training process to mix (``loader.tse.batch_records``)."""
        groups = [self.realise(int(item), rng, draft, in_scratch=False, wet=False)
                  for item, rng, draft in zip(item_ids, rngs, drafts)]
        reverberated = [g.draft.rir_draws for g in groups if g.draft.rir_draws is not None]
        kernels = self.reverb.kernels(reverberated) if reverberated else None
        lengths = [g.draft.length for g in groups]
        out = tuple(aligned_length(lengths, self.args.align_of(name)) for name in ("wav_mix", "wav_target"))
        return self.batch_of(groups, None, None, draw_records(groups, kernels, out, self.augment.reverb_keep_dry,
                                                                    arrays))

    def batch_of(self, groups: list[Group], wav_mix: np.ndarray | None, wav_target: np.ndarray | None,
                 records: dict | None = None) -> OnlineBatch:
        """The batch of ``groups``: their audio (or records) and per-row metadata."""
        rows, source_keys, timeline, chunk_ratio, real, overlap = [], [], [], [], [], []
        for g, group in enumerate(groups):
            members, length = group.draft.members, group.draft.length
            key = "mix_" + "_".join(m.key for m in members)
            # real samples per row: the longest source's (a tiled source fills its row)
            longest_take = max((m.window.length if self.chunking.tile else m.window.take) for m in members)
            segments = group.draft.segments.tolist()
            ratio = two_speaker_overlap(group.draft.segments)
            for i, member in enumerate(members):
                padded = member.window.padded_to(length)
                rows.append(Row(g, None, None, member.speaker, key, len(members), padded, member.pack))
                source_keys.append(member.key)
                timeline.append([segments[i]])
                chunk_ratio.append(padded.chunk_ratio())
                real.append(longest_take)
                overlap.append(ratio)
        return OnlineBatch(rows, wav_mix, wav_target, chunk_ratio, np.asarray(real, dtype=np.int64), source_keys,
                           timeline, np.asarray(overlap, dtype=np.float32), records)

    def outputs(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The batch's ``wav_mix`` and ``wav_target`` ``[rows, 1, T]`` float32, T by each field's align over the
        rows' ``lengths`` (contents undefined: ``render`` writes every sample)."""
        outputs = []
        for name in ("wav_mix", "wav_target"):
            out_len = aligned_length(lengths, self.args.align_of(name))
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


def two_speaker_overlap(segments: np.ndarray) -> float:
    """WeSep's ``overlap_ratio_2spk``: the fraction of the group both speakers are active in (the drawn overlap
    ratio, as the timeline rounds it); ``NO_OVERLAP_RATIO`` unless the group has exactly two speakers."""
    if len(segments) != 2:
        return NO_OVERLAP_RATIO
    (s0, e0), (s1, e1) = segments
    return round(max(0.0, min(e0, e1) - max(s0, s1)), TIMELINE_DECIMALS)


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


__all__ = ["Bank", "Draft", "Group", "Member", "NO_OVERLAP_RATIO", "OnlineBatch", "OnlineMixer", "WORK_ROWS",
           "speaker_index", "two_speaker_overlap"]
