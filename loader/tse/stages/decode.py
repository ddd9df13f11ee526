"""Stage ``decode``: a pre-mixed block of batches decoded into their rows, ``wav_mix`` and ``wav_target``.

At the loader's rate the block's batches are gathered as one table and copied in one loop into recycled arrays
(``loader.tse.table.TableRows.rows_block``: the vectorised gather, kept whole so the speed stays), each batch
decoded when it is asked for; packs resampled at load time are read item by item (``item_rows``).  Both go
through the one decode path (``loader.samples``), so they give the same floats.  Draws nothing: the windows
come from the ``windows`` stage's draws.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from speechpack.loader.plan.train_windows import TrainWindows
from speechpack.loader.tse.decode import Decoder, Row, collate_rows
from speechpack.loader.tse.items import ItemIndex
from speechpack.loader.samples import check_one_channel_count
from speechpack.loader.tse.stages.protocol import BatchState, Stage
from speechpack.loader.tse.table import DecodedRows, TableRows
from speechpack.loader.tse.windows import Chunking, unit_window
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays


class DecodeRows(Stage):
    """The rows and audio of pre-mixed batches (module docstring); ``table`` None: item by item."""

    name = "decode"
    keys = ("resample_rate", "normalize", "align", "whole_utt", "chunk_len", "chunk_short_policy", "train_window")

    def __init__(self, table: TableRows | None, decoder: Decoder, items: ItemIndex, chunking: Chunking,
                 windows: TrainWindows | None, streams: tuple[str, str], align: tuple[str, str]):
        self.table, self.decoder, self.items, self.chunking = table, decoder, items, chunking
        self.windows, self.streams, self.align = windows, streams, align

    def apply(self, states: Iterable[BatchState]) -> Iterator[BatchState]:
        states = list(states)  # the block's tables are gathered together
        if self.table is not None and states:  # its pool carves the block's audio where the loader says
            self.table.buffers.arrays = states[0].arrays
        planned = [(state.item_ids, state.draws, state.chunks) for state in states]
        decoded = ((self.item_rows(*p, state.arrays) for p, state in zip(planned, states)) if self.table is None
                   else self.table.rows_block(planned))
        for state, (rows, wav_mix, wav_target, real, chunk_ratio) in zip(states, decoded):
            state.rows, state.audio = rows, {"wav_mix": wav_mix, "wav_target": wav_target}
            state.target_len, state.real, state.chunk_ratio = wav_target.shape[-1], real, chunk_ratio
            yield state

    def item_rows(self, item_ids: np.ndarray, draws: np.ndarray, chunks: np.ndarray | None,
                  arrays: BatchArrays = NUMPY) -> DecodedRows:
        """Rows, ``wav_mix`` and ``wav_target`` item by item, through the ``Decoder``: packs resampled at load
        time (each segment is resampled whole before its window is cut)."""
        rows = []
        items = self.items
        for position, item in enumerate(item_ids):
            pack_id = int(items.pack[item])
            mix, targets, speakers, key = self.decoder.sample(pack_id, int(items.sample[item]),
                                                              int(items.slot[item]), *self.streams)
            window = (self.chunking.window(mix.data, draws[position], targets=[t.data for t in targets])
                      if chunks is None else unit_window(self.windows, int(chunks[position]), mix.data.shape[-1]))
            for target, speaker in zip(targets, speakers):
                rows.append(Row(position, mix, target, speaker, key, len(targets), window, pack_id))
        check_one_channel_count([row.mix.data.shape[0] for row in rows], [row.key for row in rows])
        windows = [row.window for row in rows]
        lengths = np.asarray([w.length for w in windows], dtype=np.int64)
        tile = self.chunking.tile
        wav_mix = collate_rows([row.mix for row in rows], windows, lengths, self.align[0],
                               mixture_of=[row.item for row in rows], tile=tile, arrays=arrays)
        wav_target = collate_rows([row.target for row in rows], windows, lengths, self.align[1], tile=tile,
                                  arrays=arrays)
        real = lengths if tile else np.asarray([w.take for w in windows], dtype=np.int64)
        return DecodedRows(rows, wav_mix, wav_target, real, [w.chunk_ratio() for w in windows])


__all__ = ["DecodeRows"]
