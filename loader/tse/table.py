"""A pre-mixed TSE batch as one table of windows: every row's mixture and target segment gathered from the packs'
columns with numpy, then decoded in one tight loop of copies.

Why.  Built item by item, every segment of a batch (a mixture and its targets) was described on its own: segment
lookups, a view, an ``Audio`` tuple and a read-ahead range each, so the Python per batch grew with its rows.  Here
the per-segment work is a fixed handful of numpy operations per batch, the read-ahead ranges of the whole batch are
one array, and the loop that remains does what a bare loop does: a cast copy, an in-place multiply, the padding.
What a batch still costs besides its copies is measured in docs/performance.md ("Against the pack-based peers").

The floats are exactly those of the per-item path (``loader.tse.decode.collate_rows``, still used when packs are
resampled at load time): the same ``float32(scale / 32768 * gain)`` and ``float32(mean * gain)`` per segment, the
same cast copy then in-place multiply, a mixture decoded once and copied to its other targets' rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loader.batching import Windows
from loader.normalize import muvap_gain
from loader.pack import Pack, SegmentTable
from loader.readahead import AdaptiveAdvice, major_faults, will_need_ranges
from loader.tse.buffer_pool import BufferPool
from loader.tse.decode import Row, aligned_length
from loader.tse.items import ItemIndex
from loader.tse.windows import Chunking, Window, sounds
from schemas.constants import AUDIO_FULL_SCALE
from schemas.errors import SpeechpackError


@dataclass(frozen=True)
class Segments:
    """Where each entry's segment lies and how it decodes, as parallel arrays: in pack ``pack``, shard ``shard``,
    elements ``offset : offset + channels * length`` of the stream file (channel-major); ``scale`` and ``shift``
    are the float32 multiplier and subtrahend of the decode (``shift`` 0: no normalisation)."""

    pack: np.ndarray
    shard: np.ndarray
    offset: np.ndarray
    channels: np.ndarray
    length: np.ndarray
    scale: np.ndarray
    shift: np.ndarray

    def take(self, index: np.ndarray) -> "Segments":
        """The entries at ``index`` (a mixture's segment repeated for each of its rows)."""
        return Segments(self.pack[index], self.shard[index], self.offset[index], self.channels[index],
                        self.length[index], self.scale[index], self.shift[index])


@dataclass(frozen=True)
class BatchTable:
    """The rows of a batch: per item (mixture) its mixture segment, per row (mixture-major) the item it belongs to,
    its speaker's index within the sample, and its target segment."""

    sample: np.ndarray
    mix: Segments
    row_item: np.ndarray
    row_speaker: np.ndarray
    #: per row, the speaker's position in its pack's speakers column
    row_speaker_at: np.ndarray
    target: Segments

    def row_starts(self) -> np.ndarray:
        """Per row, whether it is the first row of its mixture (where the mixture is decoded)."""
        first = np.ones(len(self.row_item), dtype=bool)
        first[1:] = self.row_item[1:] != self.row_item[:-1]
        return first


#: Which entries of a batch come from which pack: ``(pack, where)`` pairs, ``where`` a mask or ``slice(None)``.
Groups = list[tuple[int, "np.ndarray | slice"]]


def _groups(pack: np.ndarray) -> Groups:
    """The batch's entries grouped by pack: one group and no mask when the batch has one pack (most batches)."""
    if len(pack) and pack[0] == pack[-1] and not (pack != pack[0]).any():
        return [(int(pack[0]), slice(None))]
    return [(p, pack == p) for p in np.unique(pack).tolist()]


def _take(groups: Groups, columns: list[np.ndarray], index: np.ndarray) -> np.ndarray:
    """``columns[pack][index]`` for every entry, each entry from its own pack's column (``groups``)."""
    if len(groups) == 1:
        return columns[groups[0][0]][index]
    out = np.empty(len(index), dtype=columns[groups[0][0]].dtype)
    for p, where in groups:
        out[where] = columns[p][index[where]]
    return out


def _gather(tables: list[SegmentTable], groups: Groups, pack: np.ndarray, segment: np.ndarray,
            gain: np.ndarray | None, muvap: bool) -> tuple[Segments, np.ndarray]:
    """``Segments`` of (``pack``, ``segment``) pairs, decoded with ``gain`` (None: computed from each segment's own
    statistics under MuVAP, else 1); returns the gains too, for the targets that share their mixture's."""
    def take(name: str) -> np.ndarray:
        return _take(groups, [getattr(t, name) for t in tables], segment)

    factor = take("scale") / AUDIO_FULL_SCALE
    if muvap:
        gain = muvap_gain(take("rms"), take("peak")) if gain is None else gain
        mean = take("mean")
        shift = np.where((mean != 0) & (gain != 0), mean * gain, 0.0).astype(np.float32)
        factor = factor * gain
    else:  # a gain of 1 changes no float: factor * 1.0 == factor
        gain = np.ones(len(pack), dtype=np.float64) if gain is None else gain
        shift = np.zeros(len(pack), dtype=np.float32)
    return Segments(pack, take("shard"), take("offset"), take("channels"), take("length"),
                    factor.astype(np.float32), shift), gain


def gather_table(packs: list[Pack], items: ItemIndex, item_ids: np.ndarray, mix_stream: str, target_stream: str,
                 muvap: bool) -> BatchTable:
    """The batch's table for ``item_ids``: every target of each mixture (or its ``slot`` only), mixture-major, the
    targets sharing their mixture's gain (so the mixture stays their sum under MuVAP)."""
    pack = items.pack[item_ids]
    sample = items.sample[item_ids]
    slot = items.slot[item_ids]
    mix_tables = [p.streams[mix_stream] for p in packs]
    target_tables = [p.streams[target_stream] for p in packs]
    groups = _groups(pack)
    mix, gain = _gather(mix_tables, groups, pack, _take(groups, [t.first for t in mix_tables], sample), None, muvap)
    first = _take(groups, [t.first for t in target_tables], sample)
    rows_per_item = np.where(slot >= 0, 1, _take(groups, [t.count for t in target_tables], sample))
    row_item = np.repeat(np.arange(len(pack)), rows_per_item)
    row_slot = slot[row_item]
    # every target of a mixture: its rows count 0, 1, ...; one target (``expand_targets``): its slot
    speaker = np.arange(len(row_item)) - np.repeat(np.cumsum(rows_per_item) - rows_per_item, rows_per_item)
    if (row_slot >= 0).any():
        speaker = np.where(row_slot >= 0, row_slot, speaker)
    row_groups = [(p, where if isinstance(where, slice) else where[row_item]) for p, where in groups]
    row_sample = sample[row_item]
    speaker_at = _take(row_groups, [p.speaker_first for p in packs], row_sample) + speaker
    target, _ = _gather(target_tables, row_groups, pack[row_item], first[row_item] + speaker, gain[row_item], muvap)
    return BatchTable(sample, mix, row_item, speaker, speaker_at, target)


class StreamArrays:
    """The mapped stream files a batch reads, each looked up once per batch (the packs keep the mappings)."""

    def __init__(self, packs: list[Pack], stream: str):
        self.packs = packs
        self.stream = stream

    def of(self, segments: Segments) -> tuple[list[np.ndarray], np.ndarray]:
        """The stream array of every entry of ``segments``, and the address of its first element."""
        found: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        arrays, addresses = [], []
        for key in zip(segments.pack.tolist(), segments.shard.tolist()):
            hit = found.get(key)
            if hit is None:
                array = self.packs[key[0]].stream_array(key[1], self.stream)
                hit = found[key] = (array, array.__array_interface__["data"][0])
            arrays.append(hit[0])
            addresses.append(hit[1])
        return arrays, np.asarray(addresses, dtype=np.uint64)


def window_view(array: np.ndarray, offset: int, channels: int, length: int, start: int, take: int) -> np.ndarray:
    """Samples ``[start, start + take)`` of every channel of a channel-major segment, as a ``[C, take]`` view."""
    return array[offset:offset + channels * length].reshape(channels, length)[:, start:start + take]


def window_ranges(addresses: np.ndarray, itemsize: int, segments: Segments, start: np.ndarray, take: np.ndarray,
                  keep: np.ndarray | None = None) -> np.ndarray:
    """(address, bytes) of the windows ``[start, start + take)`` of the entries ``keep`` selects (all when None),
    one range per channel, as a ``[n, 2]`` uint64 array for ``loader.readahead.will_need_ranges``; ``addresses``
    are the entries' stream arrays' first elements."""
    offset, length, channels = segments.offset, segments.length, segments.channels
    if keep is not None:
        addresses, offset, length, channels, start, take = (
            a[keep] for a in (addresses, offset, length, channels, start, take))
    element = offset + start
    if (channels != 1).any():  # a range per channel of a channel-major segment
        channel = np.arange(int(channels.sum())) - np.repeat(np.cumsum(channels) - channels, channels)
        element = np.repeat(element, channels) + channel * np.repeat(length, channels)
        addresses, take = np.repeat(addresses, channels), np.repeat(take, channels)
    ranges = np.empty((len(element), 2), dtype=np.uint64)
    ranges[:, 0] = addresses + element.astype(np.uint64) * np.uint64(itemsize)
    ranges[:, 1] = take.astype(np.uint64) * np.uint64(itemsize)
    return ranges[take > 0]


def advise(*ranges: np.ndarray) -> None:
    """Announce every window of the batch (``window_ranges`` of each stream) in one system call: a cold pack is
    then read in one request per window, before any copy waits on it (``loader.readahead``)."""
    will_need_ranges(np.concatenate(ranges))


def decode_windows(out: np.ndarray, arrays: list[np.ndarray | None], segments: Segments, start: np.ndarray,
                   take: np.ndarray) -> None:
    """Decode entry ``r``'s window into ``out[r]`` ``[C, T]`` (zero-padded on the right); an entry whose array is
    None repeats the previous row (a mixture's next target).  ``take`` is already cut to ``T``."""
    width = out.shape[-1]
    single = out.shape[1] == 1
    rows = zip(arrays, segments.offset.tolist(), segments.channels.tolist(), segments.length.tolist(),
               start.tolist(), take.tolist(), list(segments.scale), list(segments.shift))
    for r, (array, offset, channels, length, begin, n, scale, shift) in enumerate(rows):
        if array is None:
            out[r] = out[r - 1]
            continue
        if single and channels == 1:
            dest = out[r, 0, :n]
            dest[...] = array[offset + begin:offset + begin + n]
        else:
            dest = out[r, :, :n]
            dest[...] = window_view(array, offset, channels, length, begin, n)
        # A cast copy, then an in-place multiply: the same floats as one mixed-type multiply (which numpy runs
        # through a cast buffer), about 1.5x faster.
        dest *= scale
        if shift:
            dest -= shift
        if n < width:
            out[r, :, n:] = 0.0


class TableRows:
    """The rows and audio of pre-mixed batches at the loader's rate, through the batch's table: ``rows`` is the
    builder's item-by-item ``_decoded_rows`` (``loader.tse.batch``), same output, with the per-row work vectorised.
    ``align`` is the (``wav_mix``, ``wav_target``) alignment, ``windows`` the train-window units (or None)."""

    def __init__(self, packs: list[Pack], items: ItemIndex, mix_stream: str, target_stream: str, muvap: bool,
                 chunking: Chunking, windows: Windows | None, align: tuple[str, str]):
        self.packs = packs
        self.items = items
        self.streams = (mix_stream, target_stream)
        self.muvap = muvap
        self.chunking = chunking
        self.windows = windows
        self.align = align
        self.mix_arrays = StreamArrays(packs, mix_stream)
        self.target_arrays = StreamArrays(packs, target_stream)
        self.buffers = BufferPool()  # the batch's audio arrays, reused once the training loop drops them
        self.advice = AdaptiveAdvice()  # announce a batch's windows only while the pack reads as cold

    def rows(self, item_ids: np.ndarray, draws: np.ndarray, units: np.ndarray | None
             ) -> tuple[list[Row], np.ndarray, np.ndarray]:
        """Rows (mixture-major), ``wav_mix`` and ``wav_target`` of the items (``units``: their train-window
        chunks), the windows drawn from ``draws`` for all mixtures at once, announced in one call, then copied."""
        table = gather_table(self.packs, self.items, item_ids, *self.streams, self.muvap)
        mix = table.mix
        keys = [str(self.packs[p].keys[s]) for p, s in zip(mix.pack.tolist(), table.sample.tolist())]
        channels = np.unique(mix.channels).tolist()
        if len(channels) > 1:
            named = sorted(set(keys))
            raise SpeechpackError(f"mixtures with different channel counts {channels} in one batch "
                                  f"({', '.join(named[:4])}...): pack them separately")
        mix_arrays, mix_addresses = self.mix_arrays.of(mix)
        if units is None:
            start, take, length = self.chunking.windows(mix.length, draws,
                                                        _audible(mix_arrays, mix, self.chunking.chunk_len))
        else:
            start = self.windows.fed_start[units]
            take = length = self.windows.stop[units] - start
        row_item = table.row_item
        rows = self._rows(table, keys, [Window(*w) for w in zip(start.tolist(), take.tolist(), length.tolist(),
                                                                  mix.length.tolist())])
        lengths, row_start, row_take = length[row_item], start[row_item], take[row_item]
        first = table.row_starts()
        mix_rows = mix.take(row_item)
        mix_sources = [mix_arrays[i] if f else None for i, f in zip(row_item.tolist(), first.tolist())]
        target_sources, target_addresses = self.target_arrays.of(table.target)
        wav_mix = self.buffers.empty((len(rows), channels[0] if channels else 1,
                                      aligned_length(lengths, self.align[0])))
        wav_target = self.buffers.empty((len(rows), int(table.target.channels[0]) if len(rows) else 1,
                                         aligned_length(lengths, self.align[1])))
        mix_take = np.minimum(row_take, wav_mix.shape[-1])
        target_take = np.minimum(row_take, wav_target.shape[-1])
        advised = bool(mix_arrays) and self.advice.wanted()
        if advised:
            advise(window_ranges(mix_addresses[row_item], mix_arrays[0].itemsize, mix_rows, row_start, mix_take,
                                 keep=first),
                   window_ranges(target_addresses, target_sources[0].itemsize, table.target, row_start, target_take))
        faults = major_faults()
        decode_windows(wav_mix, mix_sources, mix_rows, row_start, mix_take)
        decode_windows(wav_target, target_sources, table.target, row_start, target_take)
        self.advice.copied(advised, major_faults() - faults)
        return rows, wav_mix, wav_target

    def _rows(self, table: BatchTable, keys: list[str], windows: list[Window]) -> list[Row]:
        """The batch's ``Row`` s (no audio: it is decoded from the table), as the item-by-item path makes them."""
        num_speaker = np.bincount(table.row_item, minlength=len(keys)).tolist()
        return [Row(item, None, None, self.packs[pack].speakers[at], keys[item], num_speaker[item], windows[item],
                    pack)
                for item, at, pack in zip(table.row_item.tolist(), table.row_speaker_at.tolist(),
                                          table.target.pack.tolist())]


def _audible(arrays: list[np.ndarray], mix: Segments, chunk: int):
    """``audible(i, start)`` for ``Chunking.windows``: whether mixture ``i``'s chunk at ``start`` has a non-zero
    sample (``loader.tse.windows.sounds``)."""
    offsets, channels, lengths = mix.offset.tolist(), mix.channels.tolist(), mix.length.tolist()

    def audible(i: int, start: int) -> bool:
        begin = offsets[i] + start
        if channels[i] == 1:
            return sounds(arrays[i][begin:begin + chunk])
        return sounds(window_view(arrays[i], offsets[i], channels[i], lengths[i], start, chunk))
    return audible


__all__ = ["BatchTable", "Segments", "StreamArrays", "TableRows", "advise", "decode_windows", "gather_table",
           "window_ranges", "window_view"]
