"""Stage ``cues``: ``speaker_label`` from the packs' labels, then every used cue of every row (WeSep's cue layer,
``loader.tse.cues.resolve``), collated (``loader.tse.decode.collate_field``); waveform enrollments are augmented
in training (``cue_processing.audio``).  A mainline recipe keeps the audio cue's rows whole for its own collate
(``loader.tse.stages.mainline``).

Draws, at positions declared in ``loader.rng``'s table of TSE stages (kept where they were, so batches stay bit
for bit what they were): ``rows x cues x DRAWS_PER_CUE`` from the batch stream after the ``windows`` stage's
share (``items x draws_per_window``; none for online mixtures), and the enrollments' ``rows x cues x
ENROLL_DRAWS`` from the augmentation stream after the ``noise`` stage's share (``items x NOISE_DRAWS`` when it
runs).
"""

from __future__ import annotations

import numpy as np

from speechpack.loader.rng import BatchGenerator, augment_rng, stream_at
from speechpack.loader.tse.augment import ENROLL_DRAWS, EnrollAugment, NOISE_DRAWS
from speechpack.loader.tse.cues.resolve import ChunkInfo, DRAWS_PER_CUE
from speechpack.loader.tse.decode import FieldSpec, collate_field
from speechpack.loader.tse.stages.protocol import BatchState, Stage


class Cues(Stage):
    """Labels and cues per row (module docstring).  ``window_width``: the ``windows`` stage's draws per item (0:
    it does not run); ``noise``: whether the ``noise`` stage runs; ``mainline``: the recipe's ``MainlineArgs``."""

    name = "cues"
    stream = "batch, augment"
    keys = ("cues", "field_collate", "augment", "mainline")

    def __init__(self, seed: int, packs: list, cues: list, label_spec: FieldSpec, has_labels: bool,
                 enroll_augment: EnrollAugment | None, rate: int, window_width: int, noise: bool, mainline):
        self.seed, self.packs, self.cues, self.label_spec, self.has_labels = seed, packs, cues, label_spec, has_labels
        self.enroll_augment, self.rate, self.window_width, self.noise = enroll_augment, rate, window_width, noise
        self.mainline = mainline
        self.batch_rng = BatchGenerator(seed)

    def step(self, state: BatchState) -> None:
        keys = [row.key for row in state.rows]
        self._labels(state.rows, keys, state.fields, state.arrays)
        if self.cues:
            self._cues(state, keys)

    def _labels(self, rows: list, keys: list[str], fields: dict, arrays) -> None:
        """``speaker_label`` from the packs' labels (``-100``, or the configured fill, where there is none)."""
        spec = self.label_spec
        if not self.has_labels and not spec.emit_present:
            fields["speaker_label"] = np.full(len(rows), spec.fill_value,
                                              dtype=np.int64 if isinstance(spec.fill_value, int) else np.float32)
            return
        values = []
        for row in rows:
            label = self.packs[row.pack].speaker_label(row.speaker) if self.has_labels else None
            values.append(None if label is None else np.asarray(label, dtype=np.int64))
        fields["speaker_label"], present = collate_field(values, spec, keys, arrays)
        if spec.emit_present:
            fields["speaker_label_present"] = present

    def _cues(self, state: BatchState, keys: list[str]) -> None:
        rows, fields, source_keys = state.rows, state.fields, state.source_keys
        rng = stream_at(self.batch_rng(state.epoch, state.global_batch), len(state.item_ids) * self.window_width)
        draws = rng.random((len(rows), len(self.cues), DRAWS_PER_CUE))
        enroll_draws = None
        if self.enroll_augment is not None:
            skip = len({row.item for row in rows}) * NOISE_DRAWS if self.noise else 0
            aug = stream_at(augment_rng(self.seed, state.epoch, state.global_batch), skip)
            enroll_draws = aug.random((len(rows), len(self.cues), ENROLL_DRAWS))
        chunks = [ChunkInfo(ratio["start_ratio"], ratio["end_ratio"], ratio["orig_len"], self.rate)
                  for ratio in state.chunk_ratio]
        for c, cue in enumerate(self.cues):
            values = [cue.read(row.pack, self.packs[row.pack].path, row.key, row.speaker, chunk, draws[r, c],
                               source_keys[r] if source_keys else None)
                      for r, (row, chunk) in enumerate(zip(rows, chunks))]
            if enroll_draws is not None and cue.representation == "waveform":
                values = [None if v is None else self.enroll_augment(v, enroll_draws[r, c])
                          for r, v in enumerate(values)]
            if self.mainline is not None:  # mainline's collate cuts the rows itself (loader.tse.stages.mainline)
                fields[f"{cue.field.name}_rows"] = values
                if not self.mainline.contract_keys:  # mainline's keys only: the contract's field unused
                    continue
            fields[cue.field.name], present = collate_field(values, cue.field, keys, state.arrays)
            if cue.field.emit_present:
                fields[f"{cue.field.name}_present"] = present


__all__ = ["Cues"]
