"""A pre-mixed TSE batch as one table of windows: every row's mixture and target segment gathered from the packs'
columns with numpy, then decoded in one tight loop of copies.

Why.  Built item by item, every segment of a batch (a mixture and its targets) was described on its own: segment
lookups, a view, an ``Audio`` tuple and a read-ahead range each, so the Python per batch grew with its rows.  Here
the per-segment work is a fixed handful of numpy operations per batch, the read-ahead ranges of the whole batch are
one array, and the loop that remains does what a bare loop does: a cast copy, an in-place multiply, the padding
(``loader.tse.windows``).
Each mixture is decoded once, into its first row, and copied to the rows of its other targets.  What a batch still
costs besides its copies is measured in docs/performance.md ("Against the pack-based peers").

The floats are exactly those of the per-item path (``loader.tse.decode.collate_rows``, still used when packs are
resampled at load time): both scale and copy through the one decode path (``loader.samples``: ``scaling``
vectorised here, per segment there; ``copy_window``), a mixture decoded once and copied to its other targets'
rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple

import numpy as np

from speechpack.loader.plan.train_windows import TrainWindows
from speechpack.loader.normalize import Normalizer
from speechpack.loader.pack import Pack
from speechpack.loader.pack.readahead import AdaptiveAdvice, major_faults
from speechpack.loader.tse.buffers import BufferPool
from speechpack.loader.tse.decode import Row, aligned_length
from speechpack.loader.tse.items import ItemIndex
from speechpack.loader.samples import check_one_channel_count, scaling
from speechpack.loader.pack.blocks import BlockSamples
from speechpack.loader.tse.windows import (Segments, StreamArrays, advise, array_addresses, compressed_entries,
                                           decode_windows, window_ranges, window_view)
from speechpack.loader.tse.windows import SOUND_PROBE_STRIDE, Chunking, Window, sounds


@dataclass(frozen=True)
class BatchTable:
    """The rows of a batch: per item (mixture) its sample and mixture segment, per row (mixture-major) the item it
    belongs to, its speaker's index within the sample and in its pack's speakers column, and its target segment;
    ``item_row`` is each item's first row (where its mixture is decoded)."""

    sample: np.ndarray
    mix: Segments
    row_item: np.ndarray
    row_speaker: np.ndarray
    row_speaker_at: np.ndarray
    target: Segments
    item_row: np.ndarray
    rows_per_item: np.ndarray
    #: the items' and the rows' pack groups (``Groups``)
    groups: list
    row_groups: list

    def row_bounds(self) -> list[int]:
        """Where each item's rows begin, and after the last one the number of rows (``item_row`` closed)."""
        return [*self.item_row.tolist(), len(self.row_item)]

    def part(self, lo: int, hi: int, row_lo: int, row_hi: int) -> "BatchTable":
        """The table of items ``lo`` to ``hi - 1``, whose rows are ``row_lo`` to ``row_hi - 1`` (``row_bounds``):
        one batch of a table gathered for several."""
        return BatchTable(self.sample[lo:hi], self.mix.part(lo, hi), self.row_item[row_lo:row_hi] - lo,
                          self.row_speaker[row_lo:row_hi], self.row_speaker_at[row_lo:row_hi],
                          self.target.part(row_lo, row_hi), self.item_row[lo:hi] - row_lo,
                          self.rows_per_item[lo:hi], _part_groups(self.groups, lo, hi),
                          _part_groups(self.row_groups, row_lo, row_hi))


class DecodedRows(NamedTuple):
    """What a pre-mixed batch's rows come to: the ``Row`` s (mixture-major), ``wav_mix`` and ``wav_target``, each
    row's real (unpadded) length and WeSep's ``chunk_ratio`` per row."""

    rows: list[Row]
    wav_mix: np.ndarray
    wav_target: np.ndarray
    real: np.ndarray
    chunk_ratio: list[dict]


#: The per-segment fields a batch reads from a stream's columns (``loader.pack.SegmentTable``).
_FIELDS = ("shard", "offset", "channels", "length", "scale", "first", "count", "mean", "rms", "peak")


class StreamColumns:
    """Per field, one stream's column in every pack, looked up once instead of per batch; ``take(field, groups,
    index)`` reads entry ``index[i]`` of its own pack's column (``groups``; one fancy index when the batch has one
    pack, as most batches do)."""

    def __init__(self, packs: list[Pack], stream: str):
        tables = [p.streams[stream] for p in packs]
        self.columns = {name: [getattr(t, name) for t in tables] for name in _FIELDS}

    def take(self, name: str, groups: "Groups", index: np.ndarray) -> np.ndarray:
        return _take(groups, self.columns[name], index)


#: Which entries of a batch come from which pack: ``(pack, where)`` pairs, ``where`` a mask or ``slice(None)``.
Groups = list[tuple[int, "np.ndarray | slice"]]


def _groups(pack: np.ndarray) -> Groups:
    """The batch's entries grouped by pack: one group and no mask when the batch has one pack (most batches)."""
    if len(pack) and pack[0] == pack[-1] and not (pack != pack[0]).any():
        return [(int(pack[0]), slice(None))]
    return [(p, pack == p) for p in np.unique(pack).tolist()]


def _part_groups(groups: Groups, lo: int, hi: int) -> Groups:
    """``groups`` of entries ``lo`` to ``hi - 1``."""
    return [(p, where if isinstance(where, slice) else where[lo:hi]) for p, where in groups]


def _row_groups(groups: Groups, row_item: np.ndarray) -> Groups:
    """``groups`` of a batch's items, as groups of its rows."""
    return [(p, where if isinstance(where, slice) else where[row_item]) for p, where in groups]


def _take(groups: Groups, columns: list[np.ndarray], index: np.ndarray) -> np.ndarray:
    """``columns[pack][index]`` for every entry, each entry from its own pack's column (``groups``), in a dtype
    that holds every pack's values (packs' key and speaker columns are byte strings of their own widths)."""
    if len(groups) == 1:
        return columns[groups[0][0]][index]
    out = np.empty(len(index), dtype=np.result_type(*(columns[p].dtype for p, _ in groups)))
    for p, where in groups:
        out[where] = columns[p][index[where]]
    return out


def _segments(columns: StreamColumns, groups: Groups, pack: np.ndarray, segment: np.ndarray,
              gain: np.ndarray | None, normalizer: Normalizer) -> tuple[Segments, np.ndarray | None]:
    """``Segments`` of (``pack``, ``segment``) pairs, scaled by the one decode path (``loader.samples.scaling``;
    ``gain``: the mixture's, for its targets, else each segment's own); returns the gains too (None: gain 1)."""
    scale, shift, gain = scaling(normalizer, lambda name: columns.take(name, groups, segment), gain)
    return Segments(pack, columns.take("shard", groups, segment), columns.take("offset", groups, segment),
                    columns.take("channels", groups, segment), columns.take("length", groups, segment),
                    scale, shift, segment), gain


def gather_table(mix_columns: StreamColumns, target_columns: StreamColumns, speaker_first: list[np.ndarray],
                 items: ItemIndex, item_ids: np.ndarray, normalizer: Normalizer) -> BatchTable:
    """The batch's table for ``item_ids``: every target of each mixture (or its ``slot`` only), mixture-major, the
    targets sharing their mixture's gain (so the mixture stays their sum when normalised)."""
    pack = items.pack[item_ids]
    sample = items.sample[item_ids]
    slot = items.slot[item_ids]
    groups = _groups(pack)
    mix, gain = _segments(mix_columns, groups, pack, mix_columns.take("first", groups, sample), None,
                          normalizer)
    counts = target_columns.take("count", groups, sample)
    single = slot >= 0
    any_single = bool(single.any())
    rows_per_item = np.where(single, 1, counts) if any_single else counts
    item_row = np.cumsum(rows_per_item) - rows_per_item
    row_item = np.repeat(np.arange(len(pack)), rows_per_item)
    # every target of a mixture: its rows count 0, 1, ...; one target (``expand_targets``): its slot
    speaker = np.arange(len(row_item)) - item_row[row_item]
    if any_single:
        row_slot = slot[row_item]
        speaker = np.where(row_slot >= 0, row_slot, speaker)
    row_groups = _row_groups(groups, row_item)
    speaker_at = _take(groups, speaker_first, sample)[row_item] + speaker
    target_segment = target_columns.take("first", groups, sample)[row_item] + speaker
    target, _ = _segments(target_columns, row_groups, pack[row_item], target_segment,
                          None if gain is None else gain[row_item], normalizer)
    return BatchTable(sample, mix, row_item, speaker, speaker_at, target, item_row, rows_per_item, groups, row_groups)


class TableRows:
    """The rows and audio of pre-mixed batches at the loader's rate, through the batch's table: ``rows`` is the
    ``decode`` stage's item-by-item ``item_rows`` (``loader.tse.stages.decode``), same output, with the per-row
    work vectorised.  ``align`` is the (``wav_mix``, ``wav_target``) alignment, ``windows`` the train-window
    units (or None)."""

    def __init__(self, packs: list[Pack], items: ItemIndex, mix_stream: str, target_stream: str,
                 normalizer: Normalizer,
                 chunking: Chunking, windows: TrainWindows | None, align: tuple[str, str]):
        self.packs = packs
        self.items = items
        self.normalizer = normalizer
        self.chunking = chunking
        self.windows = windows
        self.align = align
        self.mix_columns = StreamColumns(packs, mix_stream)
        self.target_columns = StreamColumns(packs, target_stream)
        self.speaker_first = [p.speaker_first for p in packs]
        self.raw_strings = {column: [getattr(p, column).raw for p in packs] for column in ("keys", "speakers")}
        self.mix_arrays = StreamArrays(packs, mix_stream)
        self.target_arrays = StreamArrays(packs, target_stream)
        self.buffers = BufferPool()  # the batch's audio arrays, reused once the training loop drops them
        self.advice = AdaptiveAdvice()  # announce a batch's windows only while the pack reads as cold

    def rows(self, item_ids: np.ndarray, draws: np.ndarray, units: np.ndarray | None) -> DecodedRows:
        """Rows (mixture-major), ``wav_mix`` and ``wav_target`` of the items (``units``: their train-window
        chunks), the windows drawn from ``draws`` for all mixtures at once, announced in one call, then copied."""
        (decoded,) = self.rows_block([(item_ids, draws, units)])
        return decoded

    def rows_block(self, batches: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]) -> Iterator[DecodedRows]:
        """``rows`` of several batches (``(item_ids, draws, units)`` each), the batches' tables gathered, their
        keys and speakers decoded and their windows drawn in one go, then each batch's audio decoded when it is
        asked for.  Why: a batch's table is a fixed few dozen numpy calls and a few Python lists whatever its
        size, a sizeable share of a short batch (docs/performance.md, "Against the pack-based peers"); for a
        block of batches it is the same calls once.  The windows are each batch's own draws: the batches are the
        same as one at a time."""
        bounds = np.cumsum([0] + [len(item_ids) for item_ids, _, _ in batches]).tolist()
        item_ids = np.concatenate([b[0] for b in batches]) if len(batches) > 1 else batches[0][0]
        table = gather_table(self.mix_columns, self.target_columns, self.speaker_first, self.items, item_ids,
                             self.normalizer)
        mix = table.mix
        keys = self._strings(table.groups, table.sample, "keys")
        speakers = self._strings(table.row_groups, table.row_speaker_at, "speakers")
        mix_arrays = self.mix_arrays.of(mix)
        start, take, length = self._windows(table, mix_arrays, batches)
        windows = [Window(*w) for w in zip(start.tolist(), take.tolist(), length.tolist(), mix.length.tolist())]
        row_pack = table.target.pack.tolist()
        row_bounds = table.row_bounds()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            row_lo, row_hi = row_bounds[lo], row_bounds[hi]
            part = table.part(lo, hi, row_lo, row_hi) if len(batches) > 1 else table
            yield self._decode(part, keys[lo:hi], speakers[row_lo:row_hi], row_pack[row_lo:row_hi],
                               windows[lo:hi], mix_arrays[lo:hi], start[lo:hi], take[lo:hi], length[lo:hi])

    def _windows(self, table: BatchTable, mix_arrays: list[np.ndarray], batches: list) -> tuple[np.ndarray, ...]:
        """``(start, take, length)`` of every mixture of the block: drawn from each batch's draws (WeSep's
        ``random_chunk``), or the train-window units' fed spans."""
        if batches[0][2] is None:
            draws = np.concatenate([b[1] for b in batches]) if len(batches) > 1 else batches[0][1]
            chunk = self.chunking.chunk_len
            signals = (_signals(table, mix_arrays, self.target_arrays.of(table.target))
                       if self.chunking.mainline and self.chunking.chunk else None)
            return self.chunking.windows(table.mix.length, draws, _audible(mix_arrays, table.mix, chunk),
                                         _surely_audible(mix_arrays, table.mix, chunk), signals)
        units = np.concatenate([b[2] for b in batches]) if len(batches) > 1 else batches[0][2]
        start = self.windows.fed_start[units]
        take = self.windows.stop[units] - start
        return start, take, take

    def _decode(self, table: BatchTable, keys: list[str], speakers: list[str], row_pack: list[int],
                windows: list[Window], mix_arrays: list[np.ndarray], start: np.ndarray, take: np.ndarray,
                length: np.ndarray) -> DecodedRows:
        """One batch of a block: its ``Row`` s, then its audio read ahead (while the pack reads as cold) and
        decoded into recycled arrays."""
        mix = table.mix
        channels = mix.channels.tolist()  # Python sets and max/min: a handful of rows costs less than numpy's calls
        check_one_channel_count(channels, keys)
        row_item = table.row_item
        item_of_row = row_item.tolist()
        num_speaker = table.rows_per_item.tolist()
        rows = [Row(item, None, None, speaker, keys[item], num_speaker[item], windows[item], pack)
                for item, speaker, pack in zip(item_of_row, speakers, row_pack)]
        row_start, row_take = start[row_item], take[row_item]
        item_length = length.tolist()
        lengths = [item_length[item] for item in item_of_row]
        target_sources = self.target_arrays.of(table.target)
        wav_mix = self.buffers.empty((len(rows), channels[0] if channels else 1,
                                      aligned_length(lengths, self.align[0])))
        wav_target = self.buffers.empty((len(rows), int(table.target.channels[0]) if len(rows) else 1,
                                         aligned_length(lengths, self.align[1])))
        mix_take = np.minimum(take, wav_mix.shape[-1])
        target_take = np.minimum(row_take, wav_target.shape[-1])
        advised = bool(mix_arrays) and self.advice.wanted()
        if advised:
            _advise(mix_arrays, mix, start, mix_take, target_sources, table.target, row_start, target_take)
        faults = major_faults()
        tile = self.chunking.tile
        decode_windows(wav_mix, mix_arrays, mix, start, mix_take, table.item_row.tolist(),
                       [count - 1 for count in num_speaker], tile=tile)
        decode_windows(wav_target, target_sources, table.target, row_start, target_take, tile=tile)
        self.advice.copied(advised, major_faults() - faults)
        ratios = [window.chunk_ratio() for window in windows]
        # a tiled row has no padding: its real length is the row's
        real = np.asarray(lengths, dtype=np.int64) if tile else row_take.astype(np.int64, copy=False)
        return DecodedRows(rows, wav_mix, wav_target, real, [ratios[i].copy() for i in item_of_row])

    def _strings(self, groups: Groups, index: np.ndarray, column: str) -> list[str]:
        """Entries ``index`` of each pack's ``keys`` or ``speakers`` column (``groups``: which entry is in which
        pack), decoded."""
        values = _take(groups, self.raw_strings[column], index).tolist()
        return [value.decode("utf-8") for value in values]


def _advise(mix_arrays: list, mix: Segments, start: np.ndarray, mix_take: np.ndarray, target_sources: list,
            target: Segments, row_start: np.ndarray, target_take: np.ndarray) -> None:
    """Announce the batch's windows: every window's mapped range in one system call, or, where the batch holds
    compressed segments, the bytes of the blocks under those windows (``Pack.will_need``; the others' advice is
    then left out: batches mixing a pcm16 and a compressed pack are rare, and advice only changes speed)."""
    compressed = compressed_entries(mix_arrays), compressed_entries(target_sources)
    if not (compressed[0] or compressed[1]):
        advise(window_ranges(array_addresses(mix_arrays), mix_arrays[0].itemsize, mix, start, mix_take),
               window_ranges(array_addresses(target_sources), target_sources[0].itemsize, target, row_start,
                             target_take))
        return
    for arrays, entries, begin, take in ((mix_arrays, compressed[0], start, mix_take),
                                         (target_sources, compressed[1], row_start, target_take)):
        for e in entries:
            samples = arrays[e]
            samples.pack.will_need(samples.stream, samples.segment, int(begin[e]), int(begin[e] + take[e]))


def _audible(arrays: list[np.ndarray], mix: Segments, chunk: int):
    """``audible(i, start)`` for ``Chunking.windows``: whether mixture ``i``'s chunk at ``start`` has a non-zero
    sample (``loader.tse.windows.sounds``: a look at every 512th sample, then the whole chunk only if that saw
    zeros; inlined for mono mixtures, the common case, as it runs for every mixture of every batch)."""
    offsets, channels, lengths = mix.offset.tolist(), mix.channels.tolist(), mix.length.tolist()

    def audible(i: int, start: int) -> bool:
        if isinstance(arrays[i], BlockSamples):  # the blocks under the chunk decoded (kept for the copy)
            return sounds(arrays[i][:, start:start + chunk])
        begin = offsets[i] + start
        if channels[i] == 1:
            array = arrays[i]
            return bool(np.count_nonzero(array[begin:begin + chunk:SOUND_PROBE_STRIDE])
                        or np.count_nonzero(array[begin:begin + chunk]))
        return sounds(window_view(arrays[i], offsets[i], channels[i], lengths[i], start, chunk))
    return audible


def _signals(table: BatchTable, mix_arrays: list[np.ndarray], target_arrays: list[np.ndarray]):
    """``signals(i)`` for ``Chunking.windows`` (mainline): mixture ``i`` and each of its target rows, whole, as
    ``[C, T]`` views of the stored int16 samples (a sample is zero there exactly where it decodes to zero)."""
    mix, target = table.mix, table.target
    bounds = table.row_bounds()

    def whole(arrays: list, segments: Segments, e: int) -> np.ndarray:
        if isinstance(arrays[e], BlockSamples):  # decoded whole: mainline looks at every sample
            return np.asarray(arrays[e])
        return window_view(arrays[e], int(segments.offset[e]), int(segments.channels[e]), int(segments.length[e]),
                           0, int(segments.length[e]))

    def signals(i: int) -> list[np.ndarray]:
        return [whole(mix_arrays, mix, i), *(whole(target_arrays, target, r) for r in range(bounds[i], bounds[i + 1]))]
    return signals


def _surely_audible(arrays: list[np.ndarray], mix: Segments, chunk: int):
    """``surely_audible(index, start)`` for ``Chunking.windows``: ``_audible``'s first look (every
    ``SOUND_PROBE_STRIDE``-th sample of the chunk) at the chunks of many mono mixtures in one gather per stream
    array; True where a look saw a non-zero sample, False where ``_audible`` must decide (it looks again, then
    scans the chunk; multi-channel mixtures are always left to it)."""
    probe = np.arange(0, chunk, SOUND_PROBE_STRIDE)
    compressed = compressed_entries(arrays)  # left to ``_audible`` (it decodes the chunk's blocks)
    mapped = None
    if compressed:
        mapped = np.ones(len(arrays), dtype=bool)
        mapped[compressed] = False

    def surely_audible(index: np.ndarray, start: np.ndarray) -> np.ndarray:
        sure = np.zeros(len(index), dtype=bool)
        mono = mix.channels[index] == 1
        if mapped is not None:
            mono &= mapped[index]
        begin = mix.offset[index] + start
        by_array: dict[int, list[int]] = {}
        for k, i in enumerate(index.tolist()):
            if mono[k] or mapped is None:
                by_array.setdefault(id(arrays[i]), []).append(k)
        for ks in by_array.values():
            ks = np.asarray(ks)
            looked = arrays[int(index[ks[0]])][begin[ks][:, None] + probe]
            sure[ks] = looked.any(axis=1)
        return sure & mono
    return surely_audible


__all__ = ["BatchTable", "DecodedRows", "StreamColumns", "TableRows", "gather_table"]
