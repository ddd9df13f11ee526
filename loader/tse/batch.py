"""Target speaker extraction batches, with WeSep's semantics, built straight from the mapped int16 shards.

The item universe is columnar (pack, sample, slot): one item per mixture, or one per (mixture, target) with
``expand_targets``.  ``TseBatchBuilder.build`` turns one planned batch into collated numpy arrays, following
WeSep's ``random_chunk`` and ``tse_collate_fn``:

- train (not ``whole_utt``): one window of ``chunk_len`` samples shared by the mixture and all its targets;
  its start is drawn from the batch's counter-based generator, re-drawn up to 3 times while the mixture chunk is
  all zeros; shorter items are right-padded with zeros (``pad``) or kept whole (``keep``);
- val/test, or ``whole_utt``: whole utterances;
- rows are one per target speaker, mixture-major (m1s1, m1s2, m2s1, ...), aligned to the longest row with zeros
  (or cropped to the shortest with ``collate.<field>.align: min``);
- ``speaker_label`` from the packs' labels, then the used speaker cues per row (``loader.tse.cues.fields``), collated by
  WeSep's table (``loader.tse.collate``); a batch without cues or labels skips both.

Audio is decoded once, from the mapping straight into the batch array (normalisation folded into the same pass).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import soxr

from loader.batching import Windows, tile_windows
from loader.tse.collate import collate_field
from loader.tse.args import DatasetArgs
from loader.tse.cues.fields import DRAWS_PER_CUE, ChunkInfo, label_field, resolve_cues
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
from loader.normalize import MUVAP, muvap_gain
from loader.pack import Pack, open_pack, will_need_view
from loader.plan import batch_rng
from schemas.constants import (KIND_NOISE, KIND_RIR, KIND_SOURCES, KIND_TSE, STREAM_AUDIO, STREAM_MIX, STREAM_SOURCE,
                               STREAM_TARGET)
from schemas.errors import SpeechpackError

#: WeSep re-draws a training window at most this many times while the mixture chunk is silent.
ZERO_CHUNK_REDRAWS = 3
#: Online mixing: rows of the work area before a group's sources (the mixture, and one scaled interferer).
WORK_ROWS = 2


@dataclass(frozen=True)
class ItemIndex:
    """The item universe as parallel arrays.  ``slot`` is -1 for "every target of the mixture"."""

    pack: np.ndarray
    sample: np.ndarray
    slot: np.ndarray
    num_frames: np.ndarray  # at the pack's rate

    def __len__(self) -> int:
        return len(self.pack)

    def subset(self, keep: np.ndarray) -> "ItemIndex":
        return ItemIndex(self.pack[keep], self.sample[keep], self.slot[keep], self.num_frames[keep])


def tse_items(packs: list[Pack], expand_targets: bool) -> ItemIndex:
    """One item per sample of every pack (pack order, then storage order); per target with ``expand_targets``."""
    packs_col, samples_col, slots_col, frames_col = [], [], [], []
    for pack_id, pack in enumerate(packs):
        n = len(pack)
        samples = np.arange(n, dtype=np.int64)
        if expand_targets:
            counts = pack.speaker_count
            samples = np.repeat(samples, counts)
            slots = (np.arange(len(samples)) - np.repeat(pack.speaker_first, counts)).astype(np.int32)
        else:
            slots = np.full(n, -1, dtype=np.int32)
        packs_col.append(np.full(len(samples), pack_id, dtype=np.int32))
        samples_col.append(samples)
        slots_col.append(slots)
        frames_col.append(pack.num_frames[samples])
    return ItemIndex(np.concatenate(packs_col), np.concatenate(samples_col), np.concatenate(slots_col),
                     np.concatenate(frames_col))


def length_filter(items: ItemIndex, packs: list[Pack], args: DatasetArgs, state: str) -> np.ndarray:
    """WeSep's ``filter_len`` (train, ``whole_utt`` only): keep items within [min, max] seconds, inclusive."""
    keep = np.ones(len(items), dtype=bool)
    if state == "train" and args.whole_utt and args.filter_len:
        rates = np.asarray([p.sample_rate for p in packs], dtype=np.float64)[items.pack]
        seconds = items.num_frames / rates
        keep = (seconds >= args.min_num_seconds) & (seconds <= args.max_num_seconds)
    return keep


class _Window(NamedTuple):
    """Where one item's rows come from: samples ``[start, start + take)`` of the source, written at the row's
    start, in a row of ``length`` samples (``length > take`` means right zero padding).  A named tuple: several
    are made per mixture, and a frozen dataclass costs several times more to build."""

    start: int
    take: int
    length: int
    orig_len: int

    def chunk_ratio(self) -> dict:
        """WeSep's chunk metadata: ``{start_ratio, end_ratio, orig_len, chunk_len}`` (``end_ratio > 1`` when
        padded)."""
        end = self.start + (self.length if self.length > self.take else self.take)
        return {"start_ratio": self.start / self.orig_len, "end_ratio": end / self.orig_len,
                "orig_len": self.orig_len, "chunk_len": self.length}


class TseBatchBuilder:
    """Builds collated TSE batches from planned item ids.  Holds numpy columns only (cheap to fork)."""

    def __init__(self, packs: list[Pack], items: ItemIndex, args: DatasetArgs, state: str, seed: int):
        kinds = {p.kind for p in packs}
        if not kinds <= {KIND_TSE, KIND_SOURCES} or len(kinds) != 1:
            raise SpeechpackError(f"the TSE loader reads packs of one kind, tse or sources; got {sorted(kinds)}")
        self.kind = kinds.pop()
        self.packs = packs
        self.items = items
        self.args = args
        self.state = state
        self.seed = seed
        rates = {p.sample_rate for p in packs}
        self.rate = args.resample_rate or (rates.pop() if len(rates) == 1 else None)
        if self.rate is None:
            raise SpeechpackError(f"packs have different sample rates {sorted(rates)}: set dataset_args.resample_rate")
        self.needs_resample = any(p.sample_rate != self.rate for p in packs)
        if self.needs_resample:
            warnings.warn(f"resampling at load time to {self.rate} Hz (packs are at "
                          f"{sorted({p.sample_rate for p in packs})} Hz): packing at the training rate is much faster",
                          stacklevel=2)
        self.chunk = not args.whole_utt and state == "train"
        self.chunk_len = args.chunk_samples(self.rate)
        # train_window (train only): the plan's units are chunks of items, not items.
        self.windows: Windows | None = None
        if args.train_window is not None and state == "train":
            if self.needs_resample:
                raise SpeechpackError("dataset_args.train_window needs packs at the loader's rate (pack at "
                                      f"{self.rate} Hz, or unset resample_rate)")
            self.windows = tile_windows(items.num_frames, args.train_window, args.hist_frames)
        self.mix_stream = STREAM_MIX if self.kind == KIND_TSE else STREAM_SOURCE
        self.target_stream = STREAM_TARGET if self.kind == KIND_TSE else STREAM_SOURCE
        self.cues = resolve_cues(args, packs)  # the used cues, checked against every pack's cues.yaml
        self.label_spec = label_field(args)
        self.has_labels = any(p.cues_config is not None and p.cues_config.speaker_label_resource is not None
                              for p in packs)
        self.online = args.online_mix and state == "train"
        self.speaker_index = self._speaker_index() if self.online else None
        self.rir_bank = self._bank(args.mix.rir_banks, KIND_RIR) if self.online else ([], np.zeros((0, 2), np.int64))
        self.noise_bank = (self._bank(args.mix.noise_banks, KIND_NOISE) if self.online
                           else ([], np.zeros((0, 2), np.int64)))
        # the timeline applies to chunks, not whole utterances (WeSep)
        self._timeline = args.mix.timeline if self.online and not args.whole_utt else None
        self._scratch = Scratch()  # the online mixer's work area, reused from group to group
        self._rir_cache = ByteBudgetCache(RIR_CACHE_BYTES)
        self._item_rngs = ItemGenerators(seed) if self.online else None

    def _bank(self, paths: tuple[str, ...], kind: str) -> tuple[list[Pack], np.ndarray]:
        """A bank's packs and its entries as ``[(pack, audio segment)]`` rows (channel 0 of each is used)."""
        packs, entries = [], []
        for path in paths:
            pack = open_pack(path)
            if pack.kind != kind:
                raise MixError(f"{path}: a {kind} bank is needed here, this pack is {pack.kind}")
            table = pack.streams[STREAM_AUDIO]
            first = np.asarray(table.first, dtype=np.int64)
            entries.append(np.stack([np.full(len(pack), len(packs), dtype=np.int64), first], axis=1))
            packs.append(pack)
        rows = np.concatenate(entries) if entries else np.zeros((0, 2), np.int64)
        if paths and not len(rows):
            raise MixError(f"the {kind} banks {list(paths)} are empty")
        return packs, rows

    def _bank_audio(self, bank: tuple[list[Pack], np.ndarray], draw: float) -> np.ndarray:
        """Channel 0 of a bank entry drawn uniformly, float64 at the loader's rate."""
        return self._bank_entry(bank, _bank_row(bank, draw))

    def _reverberate(self, sources: np.ndarray, rir_draws: np.ndarray) -> np.ndarray:
        """``sources`` convolved with the drawn RIRs, each RIR decoded and transformed once per process and FFT
        size (``RIR_CACHE_BYTES`` of them kept): the FFTs of the sources are then the only ones left per group."""
        entries = [_bank_row(self.rir_bank, d) for d in rir_draws]
        rirs = [self._rir_cache.get(("rir", e), lambda e=e: self._bank_entry(self.rir_bank, e)) for e in entries]
        return reverberate(sources, rirs, lambda i, size: self._rir_cache.get(
            ("spectrum", entries[i], size), lambda: rir_spectrum(rirs[i], size)))

    def _bank_entry(self, bank: tuple[list[Pack], np.ndarray], entry: int) -> np.ndarray:
        """Channel 0 of bank entry ``entry``, float64 at the loader's rate."""
        packs, rows = bank
        pack_id, segment = rows[entry]
        pack = packs[int(pack_id)]
        audio = pack.read_segment(STREAM_AUDIO, int(segment))[0].astype(np.float64)
        if pack.sample_rate != self.rate:
            audio = soxr.resample(audio, pack.sample_rate, self.rate)
        return audio

    def _speaker_index(self) -> SpeakerIndex:
        """Online mixing: the items' speakers (one per source utterance), grouped."""
        if self.kind != KIND_SOURCES:
            raise MixError(f"dataset_args.online_mix mixes single-speaker sources packs; these packs are {self.kind}")
        width = max(p.speakers.raw.dtype.itemsize for p in self.packs)
        speakers = np.empty(len(self.items), dtype=f"S{max(width, 1)}")
        for pack_id, pack in enumerate(self.packs):
            mine = self.items.pack == pack_id
            samples = self.items.sample[mine]
            if np.any(pack.speaker_count[samples] != 1):
                raise MixError(f"online_mix: pack {pack.path} has samples with other than one speaker")
            speakers[mine] = pack.speakers.raw[pack.speaker_first[samples]]
        return SpeakerIndex.from_speakers(speakers)

    # -- reading -------------------------------------------------------------------------------------------

    def _sources(self, pack_id: int, sample: int, slot: int) -> tuple[tuple, list[tuple], list[str], str]:
        """(mix, [targets], speakers, key) where each audio is ``(int16 view or float array, factor, mean, gain)``."""
        pack = self.packs[pack_id]
        mix_seg = pack.segments_of(self.mix_stream, sample)[0]
        target_segs = list(pack.segments_of(self.target_stream, sample))
        speakers = list(pack.speakers_of(sample))
        if slot >= 0:
            target_segs, speakers = [target_segs[slot]], [speakers[slot]]
        mix_table = pack.streams[self.mix_stream]
        gain = 1.0
        if self.args.normalize == MUVAP:
            # Mixture and targets share the mixture's gain, so the mixture stays the sum of its targets.
            gain = float(muvap_gain(mix_table.rms[mix_seg], mix_table.peak[mix_seg]))
        mix = self._audio(pack, self.mix_stream, mix_seg, gain)
        targets = [self._audio(pack, self.target_stream, j, gain) for j in target_segs]
        return mix, targets, speakers, str(pack.keys[sample])

    def _audio(self, pack: Pack, stream: str, segment: int, gain: float) -> tuple:
        stored, factor = pack.stored_segment(stream, segment)
        mean = float(pack.streams[stream].mean[segment]) if self.args.normalize == MUVAP else 0.0
        if pack.sample_rate != self.rate:
            decoded = soxr.resample(np.ascontiguousarray((stored * np.float32(factor)).T), pack.sample_rate, self.rate)
            return np.ascontiguousarray(decoded.T, dtype=np.float32), 1.0, mean, gain
        return stored, factor, mean, gain

    # -- windows -------------------------------------------------------------------------------------------

    def num_units(self) -> int:
        """Size of the plan's universe: items, or train-window chunks."""
        return len(self.items) if self.windows is None else len(self.windows)

    def unit_lengths(self) -> np.ndarray:
        """Per plan unit, the row length the batch will have (samples at the loader's rate): the fed chunk
        (train_window), ``chunk_len`` (train, ``pad``), ``min(length, chunk_len)`` (``keep``), else whole."""
        if self.windows is not None:
            return self.windows.fed_length
        rates = np.asarray([p.sample_rate for p in self.packs], dtype=np.float64)[self.items.pack]
        whole = np.round(self.items.num_frames * (self.rate / rates)).astype(np.int64)
        if not self.chunk:
            return whole
        if self.args.chunk_short_policy == "pad":
            return np.full(len(whole), self.chunk_len, dtype=np.int64)
        return np.minimum(whole, self.chunk_len)

    def _unit_window(self, unit: int, total: int) -> _Window:
        w = self.windows
        fed, stop = int(w.fed_start[unit]), int(w.stop[unit])
        return _Window(fed, stop - fed, stop - fed, total)

    def _window(self, mix: np.ndarray, draws: np.ndarray, redraw_silence: bool = True) -> _Window:
        """WeSep's ``random_chunk`` window.  ``redraw_silence``: re-draw (up to 3 times) while the chunk is all
        zeros — WeSep does this only when a sample has a mixture, so online-mixing sources skip it (a silent group
        is redrawn after mixing instead)."""
        total = mix.shape[1]
        length = self.chunk_len
        if not self.chunk:
            return _Window(0, total, total, total)
        if total >= length:
            start = 0
            if self.args.chunk_random_start:
                for attempt in range(ZERO_CHUNK_REDRAWS + 1):
                    start = int(draws[attempt] * (total - length + 1))
                    if not redraw_silence or np.count_nonzero(mix[:, start:start + length]):
                        break
            return _Window(start, length, length, total)
        if self.args.chunk_short_policy == "pad":
            return _Window(0, total, length, total)
        return _Window(0, total, total, total)

    # -- the batch -----------------------------------------------------------------------------------------

    def build(self, item_ids: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int) -> dict:
        """Collated numpy arrays and lists for one batch (see ``docs/loader.md`` for the fields)."""
        if self.online:
            return self._build_online(item_ids, valid, epoch, global_batch)
        rng = batch_rng(self.seed, epoch, global_batch)
        draws = rng.random((len(item_ids), ZERO_CHUNK_REDRAWS + 1))
        units = None
        if self.windows is not None:
            units, item_ids = item_ids, self.windows.item[item_ids]
        rows = []  # (item position, mix, target, speaker, key, num_speaker, window, pack)
        for position, item in enumerate(item_ids):
            pack_id = int(self.items.pack[item])
            mix, targets, speakers, key = self._sources(pack_id, int(self.items.sample[item]),
                                                        int(self.items.slot[item]))
            window = (self._window(mix[0], draws[position]) if units is None
                      else self._unit_window(int(units[position]), mix[0].shape[-1]))
            for target, speaker in zip(targets, speakers):
                rows.append((position, mix, target, speaker, key, len(targets), window, pack_id))
        channels = {row[1][0].shape[0] for row in rows}
        if len(channels) > 1:
            keys = sorted({row[4] for row in rows})
            raise SpeechpackError(f"mixtures with different channel counts {sorted(channels)} in one batch "
                                  f"({', '.join(keys[:4])}...): pack them separately")
        lengths = np.asarray([row[6].length for row in rows], dtype=np.int64)
        wav_mix = self._collate([row[1] for row in rows], [row[6] for row in rows], lengths,
                                self.args.align_of("wav_mix"), mixture_of=[row[0] for row in rows])
        wav_target = self._collate([row[2] for row in rows], [row[6] for row in rows], lengths,
                                   self.args.align_of("wav_target"))
        real = np.asarray([row[6].take for row in rows], dtype=np.int64)
        chunk_ratio = [row[6].chunk_ratio() for row in rows]
        batch = self._assemble(rows, wav_mix, wav_target, chunk_ratio, real, valid, rng)
        if units is not None:  # scored samples: the chunk itself, not its history
            scored = np.zeros((len(rows), wav_target.shape[-1]), dtype=bool)
            for r, row in enumerate(rows):
                unit = int(units[row[0]])
                lo = int(self.windows.start[unit] - self.windows.fed_start[unit])
                scored[r, lo:lo + int(self.windows.stop[unit] - self.windows.start[unit])] = True
            batch["scored"] = scored
        return batch

    def _labels(self, rows: list[tuple], batch: dict) -> None:
        """``speaker_label`` from the packs' labels (``-100``, or the configured fill, where there is none)."""
        spec = self.label_spec
        if not self.has_labels and not spec.emit_present:
            batch["speaker_label"] = np.full(len(rows), spec.fill_value,
                                             dtype=np.int64 if isinstance(spec.fill_value, int) else np.float32)
            return
        values = []
        for row in rows:
            label = self.packs[row[7]].speaker_label(row[3]) if self.has_labels else None
            values.append(None if label is None else np.asarray(label, dtype=np.int64))
        batch["speaker_label"], present = collate_field(values, spec, batch["key"])
        if spec.emit_present:
            batch["speaker_label_present"] = present

    def _cues(self, rows: list[tuple], chunk_ratio: list[dict], rng: np.random.Generator, batch: dict,
              source_keys: list[str] | None = None) -> None:
        """Every used cue of every row (WeSep's cue layer), collated; draws continue the batch's generator."""
        draws = rng.random((len(rows), len(self.cues), DRAWS_PER_CUE))
        chunks = [ChunkInfo(ratio["start_ratio"], ratio["end_ratio"], ratio["orig_len"], self.rate)
                  for ratio in chunk_ratio]
        for c, cue in enumerate(self.cues):
            values = [cue.read(row[7], self.packs[row[7]].path, row[4], row[3], chunk, draws[r, c],
                               source_keys[r] if source_keys else None)
                      for r, (row, chunk) in enumerate(zip(rows, chunks))]
            batch[cue.field.name], present = collate_field(values, cue.field, batch["key"])
            if cue.field.emit_present:
                batch[f"{cue.field.name}_present"] = present

    @staticmethod
    def _collate(sources: list[tuple], windows: list[_Window], lengths: np.ndarray, align: str,
                 mixture_of: list[int] | None = None) -> np.ndarray:
        """Decode every row once into a ``[rows, C, T]`` float32 array (T by ``align``), zero-padded on the right."""
        out_len = int(lengths.max() if align == "max" else lengths.min()) if len(lengths) else 0
        channels = sources[0][0].shape[0] if sources else 1
        out = np.empty((len(sources), channels, out_len), dtype=np.float32)
        for r, ((audio, *_scaling), window) in enumerate(zip(sources, windows)):  # cold cache: these ranges, at once
            if mixture_of is None or r == 0 or mixture_of[r] != mixture_of[r - 1]:  # a repeated mixture is copied
                will_need_view(audio[:, window.start:window.start + min(window.take, out_len)])
        previous = None
        for r, ((audio, factor, mean, gain), window) in enumerate(zip(sources, windows)):
            if mixture_of is not None and previous is not None and mixture_of[r] == mixture_of[r - 1]:
                out[r] = out[r - 1]  # the same mixture repeated for its next target
                continue
            take = min(window.take, out_len)
            dest = out[r, :, :take]
            np.multiply(audio[:, window.start:window.start + take], np.float32(factor * gain), out=dest,
                        casting="unsafe")
            if mean and gain:
                dest -= np.float32(mean * gain)
            out[r, :, take:] = 0.0  # zero only the padding: the rest is written once
            previous = r
        return out

    # -- online mixing -------------------------------------------------------------------------------------

    def _member(self, item: int, rng: np.random.Generator) -> tuple[tuple, _Window, str, str, int]:
        """One source of a group, not yet decoded: ((stored view, factor, mean, gain), window, speaker, key, pack).
        A sources sample is one mono segment and one speaker, read straight from the columns."""
        pack_id, sample = int(self.items.pack[item]), int(self.items.sample[item])
        pack = self.packs[pack_id]
        table = pack.streams[STREAM_SOURCE]
        segment = int(table.first[sample])
        gain = 1.0
        if self.args.normalize == MUVAP:
            gain = float(muvap_gain(table.rms[segment], table.peak[segment]))
        audio = self._audio(pack, STREAM_SOURCE, segment, gain)
        key = str(pack.keys[sample])
        if audio[0].shape[0] != 1:
            raise MixError(f"online_mix: source {key} has {audio[0].shape[0]} channels; WeSep mixes mono sources")
        window = self._window(audio[0], rng.random(ZERO_CHUNK_REDRAWS + 1), redraw_silence=False)
        return audio, window, pack.speakers[int(pack.speaker_first[sample])], key, pack_id

    def _draft(self, item: int, rng: np.random.Generator) -> _Draft:
        """One attempt at a group, every draw made before any audio is decoded (the same draws, in the same
        order, as deciding while decoding): members and windows, timeline, whether and with which RIRs to
        reverberate.  Knowing the group sizes first lets the batch be allocated before mixing starts."""
        mix_args = self.args.mix
        members = [self._member(int(m), rng) for m in choose_group(rng, item, self.speaker_index, mix_args)]
        segments = make_timeline(rng, len(members), self._timeline)
        reverb, rir_draws = rng.random() < mix_args.reverb_prob, rng.random(len(members))
        return _Draft(members, max(m[1].length for m in members), segments, rir_draws if reverb else None)

    def _realise(self, item: int, rng: np.random.Generator, draft: _Draft, in_scratch: bool) -> _Group:
        """A drafted group decoded (chunked, padded to the group's longest, masked by the timeline, reverberated),
        redrawn while a source has no energy; plus its SNR, gain and noise draws.  ``in_scratch``: the sources
        live in the builder's work area, valid until the next group (the caller mixes at once)."""
        mix_args = self.args.mix
        for attempt in range(GROUP_ATTEMPTS):
            if attempt:
                draft = self._draft(item, rng)
            count = len(draft.members)
            sources = (self._scratch.rows(WORK_ROWS + count, draft.length)[WORK_ROWS:] if in_scratch
                       else np.empty((count, draft.length), dtype=np.float32))
            _decode_members(draft.members, sources)
            if self._timeline is not None:
                apply_timeline(sources, draft.segments)
            dry = None
            if draft.rir_draws is not None:
                wet = self._reverberate(sources, draft.rir_draws)
                sources, dry = wet, (sources if mix_args.reverb_keep_dry else None)
            energy = energies(sources)
            if energy.min() > MIN_ENERGY:
                snr = rng.uniform(*mix_args.snr_range, size=count)
                gain = float(rng.uniform(*mix_args.gain_range))
                noise_on, noise_draws = rng.random() < mix_args.noise_prob, rng.random(3)
                noise = None
                if noise_on:
                    low, high = mix_args.noise_snr
                    noise = (fit_noise(self._bank_audio(self.noise_bank, noise_draws[0]), draft.length,
                                       noise_draws[1]), float(low + noise_draws[2] * (high - low)))
                return _Group(draft, sources, dry, energy, snr, gain, noise)
        key = str(self.packs[int(self.items.pack[item])].keys[int(self.items.sample[item])])
        raise MixError(f"online_mix: no group with energy in every source for target {key} after {GROUP_ATTEMPTS} "
                       f"attempts (is the utterance silent?)")

    def _build_online(self, item_ids: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int) -> dict:
        """One mixture per planned source utterance (its target), rows one per speaker, mixture-major.

        Every group's draws come first (``_draft``), so the batch's rows are known before any audio is decoded.
        When every row is ``chunk_len`` long (train chunks, ``pad``), each group is then decoded into the reused
        work area, mixed there and written to its batch rows before the next one: every pass but the final write
        stays in cache.  Otherwise (whole utterances, ``keep``) the rows' length depends on every group, so groups
        are decoded into arrays of their own first and written out afterwards."""
        rngs = self._item_rngs.batch(epoch, global_batch, len(item_ids))
        drafts = [self._draft(int(item), rng) for item, rng in zip(item_ids, rngs)]
        for draft in drafts:  # every window of the batch requested before the first decode (cold reads)
            for (audio, *_scaling), window, *_rest in draft.members:
                will_need_view(audio[0, window.start:window.start + window.take])
        if self.chunk and self.args.chunk_short_policy == "pad":
            sizes = [len(d.members) for d in drafts]
            wav_mix, wav_target = self._online_outputs(np.full(sum(sizes), self.chunk_len, dtype=np.int64))
            groups, row = [], 0
            for g, (item, rng, draft) in enumerate(zip(item_ids, rngs, drafts)):
                group = self._realise(int(item), rng, draft, in_scratch=True)
                if group.size != sizes[g]:  # a redraw changed the speaker count: the rows after it move
                    sizes[g] = group.size
                    wav_mix, wav_target = (_with_rows(a, sum(sizes), row) for a in (wav_mix, wav_target))
                self._render(group, wav_mix[row:row + group.size], wav_target[row:row + group.size])
                groups.append(group)
                row += group.size
        else:
            groups = [self._realise(int(item), rng, draft, in_scratch=False)
                      for item, rng, draft in zip(item_ids, rngs, drafts)]
            wav_mix, wav_target = self._online_outputs(
                np.concatenate([np.full(g.size, g.draft.length, dtype=np.int64) for g in groups]))
            row = 0
            for group in groups:
                self._render(group, wav_mix[row:row + group.size], wav_target[row:row + group.size])
                row += group.size
        rows, source_keys, timeline, chunk_ratio, real = [], [], [], [], []
        for g, group in enumerate(groups):
            members, length = group.draft.members, group.draft.length
            key = "mix_" + "_".join(m[3] for m in members)
            longest_take = max(m[1].take for m in members)
            segments = group.draft.segments.tolist()
            for i, (_audio, window, speaker, source_key, pack_id) in enumerate(members):
                padded = _Window(window.start, window.take, length, window.orig_len)
                rows.append((g, None, None, speaker, key, len(members), padded, pack_id))
                source_keys.append(source_key)
                timeline.append([segments[i]])
                chunk_ratio.append(padded.chunk_ratio())
                real.append(longest_take)
        batch = self._assemble(rows, wav_mix, wav_target, chunk_ratio, np.asarray(real, dtype=np.int64), valid,
                               batch_rng(self.seed, epoch, global_batch), source_keys)
        batch["timeline"] = timeline
        return batch

    def _assemble(self, rows: list[tuple], wav_mix: np.ndarray, wav_target: np.ndarray, chunk_ratio: list[dict],
                  real: np.ndarray, valid: np.ndarray, rng: np.random.Generator,
                  source_keys: list[str] | None = None) -> dict:
        """The batch dict in WeSep's field order: audio, row metadata, labels, cues, then valid/lengths/ratios."""
        batch = {
            "wav_mix": wav_mix,
            "wav_target": wav_target,
            "spk": [row[3] for row in rows],
            "key": [row[4] for row in rows],
            "num_speaker": [row[5] for row in rows],
        }
        if source_keys is not None:
            batch["source_key"] = source_keys
        self._labels(rows, batch)
        if self.cues:
            self._cues(rows, chunk_ratio, rng, batch, source_keys)
        batch["valid"] = np.asarray([bool(valid[row[0]]) for row in rows], dtype=bool)
        batch["lengths"] = np.minimum(real, wav_target.shape[-1])
        batch["chunk_ratio"] = chunk_ratio
        return batch

    def _online_outputs(self, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The batch's ``wav_mix`` and ``wav_target`` ``[rows, 1, T]`` float32, T by each field's align over the
        rows' ``lengths`` (contents undefined: ``_render`` writes every sample)."""
        outputs = []
        for name in ("wav_mix", "wav_target"):
            out_len = int(lengths.max() if self.args.align_of(name) == "max" else lengths.min())
            outputs.append(np.empty((len(lengths), 1, out_len), dtype=np.float32))
        return outputs[0], outputs[1]

    def _render(self, group: _Group, mix_rows: np.ndarray, target_rows: np.ndarray) -> None:
        """WeSep's SNR mixer (and mixture noise) for one group, in the work area, then its batch rows written
        once each: the mixture into every ``mix_rows`` row, each target scaled into its ``target_rows`` row
        (cropped or zero-padded to the batch's length)."""
        mix, work = self._scratch.rows(WORK_ROWS, group.draft.length)
        mix, factors = mix_sources(group.sources, snr_scales(group.energy, group.snr), group.gain, out=mix, work=work)
        if group.noise is not None:  # the mixture only (WeSep's add_noise)
            add_noise(mix, *group.noise, in_place=True)
        targets = group.dry if group.dry is not None else group.sources  # reverb_keep_dry: dry, scaled alike
        for i, factor in enumerate(factors):
            _put(mix_rows[i, 0], mix)
            _put(target_rows[i, 0], targets[i], np.float32(factor))


class _Draft(NamedTuple):
    """One attempt at an online group before decoding: ``members`` ((audio, window, speaker, key, pack) per
    speaker, the target first), the group's length (its longest window), the timeline segments ``[N, 2]`` and the
    RIR draws (``None``: not reverberated)."""

    members: list[tuple]
    length: int
    segments: np.ndarray
    rir_draws: np.ndarray | None


class _Group(NamedTuple):
    """A drafted group decoded: ``sources`` ``[N, length]`` float32 (reverberant when reverberated), ``dry`` the
    dry sources when they are kept as targets, their energies, and the SNR, gain and noise draws."""

    draft: _Draft
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


def _bank_row(bank: tuple[list[Pack], np.ndarray], draw: float) -> int:
    """The bank entry a uniform ``draw`` in [0, 1) picks."""
    rows = bank[1]
    return min(int(draw * len(rows)), len(rows) - 1)


def _decode_members(members: list[tuple], rows: np.ndarray) -> None:
    """Each member's window decoded from the mapping into its row (int16 to float32, scaled, normalised),
    zero-padded to the row's length.  A cast copy then an in-place multiply: the same floats as one mixed-type
    multiply, which numpy runs through a cast buffer, and faster."""
    for row, ((audio, factor, mean, gain), window, *_rest) in zip(rows, members):
        take = window.take
        signal = row[:take]
        signal[...] = audio[0, window.start:window.start + take]
        signal *= np.float32(factor * gain)
        if mean and gain:
            signal -= np.float32(mean * gain)
        if take < len(row):
            row[take:] = 0.0


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
