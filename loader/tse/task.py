"""The TSE task (``task: tse``, the default): WeSep-style target speaker extraction from ``tse`` or ``sources``
packs.  Items are mixtures (or one per target with ``expand_targets``); ``TASK`` (``loader.tasks.LoaderTask``) parses
``dataset_args`` and prepares the batch builder below (``loader.tasks.BatchBuilder``).

Target speaker extraction batches, with WeSep's semantics, built straight from the mapped int16 shards.

``TseBatchBuilder.build`` turns one planned batch into collated numpy arrays, following WeSep's ``random_chunk``
and ``tse_collate_fn``:

- train (not ``whole_utt``): one window of ``chunk_len`` samples shared by the mixture and all its targets;
  its start is drawn from the batch's counter-based generator, re-drawn up to 3 times while the mixture chunk is
  all zeros; shorter items are right-padded with zeros (``pad``) or kept whole (``keep``) (``loader.tse.windows``);
- val/test, or ``whole_utt``: whole utterances (a mainline WeSep recipe cuts val too, tiles short items and keys
  val windows by mixture: ``loader.tse.mainline``);
- rows (``Row``) are one per target speaker, mixture-major (m1s1, m1s2, m2s1, ...), decoded once into the batch,
  aligned to the longest row with zeros (or cropped to the shortest with ``collate.<field>.align: min``): the
  batch's windows gathered as one table and copied in one loop into recycled arrays (``loader.tse.table``), or,
  for packs resampled at load time, item by item (``loader.tse.decode``);
- ``online_mix`` in train: mixtures made from sources packs (``loader.tse.online``);
- ``speaker_label`` from the packs' labels, then the used speaker cues per row (``loader.tse.cues.resolve``),
  collated by WeSep's table (``loader.tse.decode``); a batch without cues or labels skips both.

The item universe is ``loader.tse.items``; the builder holds numpy columns only (cheap to fork).
"""

from __future__ import annotations

from typing import Iterator
import dataclasses
import functools
import warnings

import numpy as np

from speechpack.loader.pack import Pack
from speechpack.loader.plan.train_windows import Windows, tile_windows
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.rng import BatchGenerator, augment_rng, window_rng
from speechpack.loader.tasks import BatchBuilder, index_samples, LoaderTask, Prepared
from speechpack.loader.tse.args import DatasetArgs, parse_dataset_args
from speechpack.loader.tse.mix_args import AugmentArgs
from speechpack.loader.tse.augment import ENROLL_DRAWS, EnrollAugment, NOISE_DRAWS, NoiseSource, noisy_mixture
from speechpack.loader.tse.cues.resolve import ChunkInfo, DRAWS_PER_CUE, label_field, resolve_cues
from speechpack.loader.tse.decode import Decoder, Row, collate_field, collate_rows
from speechpack.loader.tse.items import ItemIndex, length_filter, tse_items
from speechpack.loader.tse.items import check_batch_channels, unit_channels, unit_rows
from speechpack.loader.tse.online import OnlineMixer
from speechpack.loader.tse.samples import check_one_channel_count
from speechpack.loader.tse.table import DecodedRows, TableRows
from speechpack.loader.tse.windows import Chunking, scored_mask, unit_window
from speechpack.schemas.constants import KIND_SOURCES, KIND_TSE, STREAM_MIX, STREAM_SOURCE, STREAM_TARGET
from speechpack.schemas.errors import SpeechpackError
from speechpack.loader.tse.mainline import MainlineBatchBuilder


class TseBatchBuilder(BatchBuilder):
    """Builds collated TSE batches from planned item ids (``loader.tasks.BatchBuilder``)."""

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
        self.batch_rng = BatchGenerator(seed)  # the batch's draws: loader.rng.batch_rng, one object reused
        rates = {p.sample_rate for p in packs}
        self.rate = args.resample_rate or (rates.pop() if len(rates) == 1 else None)
        if self.rate is None:
            raise SpeechpackError(f"packs have different sample rates {sorted(rates)}: set dataset_args.resample_rate")
        self.needs_resample = any(p.sample_rate != self.rate for p in packs)
        if self.needs_resample:
            warnings.warn(f"resampling at load time to {self.rate} Hz (packs are at "
                          f"{sorted({p.sample_rate for p in packs})} Hz): packing at the training rate is much faster",
                          stacklevel=2)
        # a mainline recipe cuts val (and, as its infer.py, test without whole_utt) too (loader.tse.mainline)
        mainline = args.mainline is not None
        self.chunking = Chunking(chunk=not args.whole_utt and (state == "train" or mainline),
                                 chunk_len=args.chunk_samples(self.rate), random_start=args.chunk_random_start,
                                 short_policy=args.chunk_short_policy, mainline=mainline)
        #: Mainline val and test windows come from the mixture's own stream, the same every epoch.
        self.fixed_windows = mainline and state != "train"
        # train_window (train only): the plan's units are chunks of items, not items.
        self.windows: Windows | None = None
        if args.train_window is not None and state == "train":
            if self.needs_resample:
                raise SpeechpackError("dataset_args.train_window needs packs at the loader's rate (pack at "
                                      f"{self.rate} Hz, or unset resample_rate)")
            self.windows = tile_windows(items.num_frames, args.train_window, args.hist_frames)
        self.mix_stream = STREAM_MIX if self.kind == KIND_TSE else STREAM_SOURCE
        self.target_stream = STREAM_TARGET if self.kind == KIND_TSE else STREAM_SOURCE
        self.decoder = Decoder(packs, self.rate, args.normalize)
        self.cues = resolve_cues(args, packs)  # the used cues, checked against every pack's cues.yaml
        self.label_spec = label_field(args)
        self.has_labels = any(p.cues_config is not None and p.cues_config.speaker_label_resource is not None
                              for p in packs)
        train_augment = args.augment if state == "train" else None  # WeSep augments training batches only
        # offline (pre-mixed) noise; online mixing adds its own noise while mixing
        self.offline_noise = (NoiseSource(train_augment) if train_augment is not None and train_augment.noise_prob > 0
                              and not (args.online_mix and state == "train") else None)
        self.enroll_augment = (EnrollAugment(train_augment, self.rate) if train_augment is not None
                               and (train_augment.reverb_enroll_prob > 0 or train_augment.noise_enroll_prob > 0)
                               else None)
        self.table = TableRows(packs, items, self.mix_stream, self.target_stream, self.decoder.normalizer,
                               self.chunking,
                               self.windows, (args.align_of("wav_mix"), args.align_of("wav_target")))
        self.online = (OnlineMixer(packs, items, args, self.kind, self.rate, self.chunking, self.decoder, seed)
                       if args.online_mix and state == "train" else None)

    def num_units(self) -> int:
        """Size of the plan's universe: items, or train-window chunks."""
        return len(self.items) if self.windows is None else len(self.windows)

    def unit_samples(self) -> tuple[np.ndarray, np.ndarray]:
        return index_samples(self.items.pack, self.items.sample, self.windows)

    def unit_lengths(self, epoch: int = 0) -> np.ndarray:
        """Per plan unit, the row length the batch will have (samples at the loader's rate): the fed chunk
        (train_window), ``chunk_len`` (train, ``pad``), ``min(length, chunk_len)`` (``keep``), else whole."""
        if self.windows is not None:
            return self.windows.fed_length
        rates = np.asarray([p.sample_rate for p in self.packs], dtype=np.float64)[self.items.pack]
        whole = np.round(self.items.num_frames * (self.rate / rates)).astype(np.int64)
        return self.chunking.row_lengths(whole)

    @property
    def sample_rate(self) -> int:
        """The batches' rate: ``resample_rate``, else the packs' (one rate)."""
        return int(self.rate)

    def unit_rows(self) -> np.ndarray | None:
        """One row per target speaker of a pre-mixed mixture (``loader.tse.items.unit_rows``)."""
        return unit_rows(self)

    def planned_batch_check(self):
        """Pre-mixed batches refuse mixtures of different channel counts (``loader.tse.items``)."""
        channels = unit_channels(self)
        if channels is None:
            return None
        return functools.partial(check_batch_channels, self, channels)

    def build(self, item_ids: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int) -> dict:
        """Collated numpy arrays and lists for one batch (see ``docs/loader.md`` for the fields)."""
        (batch,) = self.build_block([(item_ids, valid, epoch, global_batch)])
        return batch

    def build_block(self, batches: list[tuple[np.ndarray, np.ndarray, int, int]]) -> Iterator[dict]:
        """``build`` for several batches (``(item_ids, valid, epoch, global_batch)`` each), yielded one by one:
        pre-mixed batches share one table (``loader.tse.table.TableRows.rows_block``), each batch decoded when it
        is asked for; the batches are the same as built one at a time."""
        if self.online is not None:
            for item_ids, valid, epoch, global_batch in batches:
                yield self._online_batch(item_ids, valid, epoch, global_batch)
            return
        planned = []
        for item_ids, _valid, epoch, global_batch in batches:
            if self.fixed_windows:
                draws = window_draws(self.seed, self.items, item_ids, self.chunking.draws_per_window)
            else:
                draws = self.batch_rng(epoch, global_batch).random((len(item_ids), self.chunking.draws_per_window))
            units = None
            if self.windows is not None:
                units, item_ids = item_ids, self.windows.item[item_ids]
            planned.append((item_ids, draws, units))
        decoded = ((self._decoded_rows(*p) for p in planned) if self.needs_resample
                   else self.table.rows_block(planned))
        for (_ids, valid, epoch, global_batch), (item_ids, draws, units), rows in zip(batches, planned, decoded):
            yield self._premixed_batch(rows, item_ids, draws, units, valid, epoch, global_batch)

    def _online_batch(self, item_ids: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int) -> dict:
        mixed = self.online.build(item_ids, epoch, global_batch)
        if mixed.records is not None:  # augment_on: batch: the records take the audio's place until augment_batch
            audio, target_len = mixed.records, int(mixed.records["aug_out_len"][1])
        else:
            audio, target_len = {"wav_mix": mixed.wav_mix, "wav_target": mixed.wav_target}, mixed.wav_target.shape[-1]
        batch = self._assemble(mixed.rows, audio, target_len, mixed.chunk_ratio, mixed.real, valid,
                               self.batch_rng(epoch, global_batch), mixed.source_keys, epoch, global_batch)
        batch["timeline"] = mixed.timeline
        batch["overlap_ratio_2spk"] = mixed.overlap_ratio_2spk
        return batch

    def _premixed_batch(self, decoded: DecodedRows, item_ids: np.ndarray, draws: np.ndarray,
                        units: np.ndarray | None, valid: np.ndarray, epoch: int, global_batch: int) -> dict:
        """A pre-mixed batch from its decoded rows: offline noise, the collated fields, the scored mask."""
        rows, wav_mix, wav_target, real, chunk_ratio = decoded
        if self.offline_noise is not None:
            self._add_noise(rows, wav_mix, augment_rng(self.seed, epoch, global_batch).random(
                (len(item_ids), NOISE_DRAWS)))
        rng = None
        if self.cues:  # the cues' draws continue the batch's generator after the windows' draws
            rng = self.batch_rng(epoch, global_batch)
            rng.random(draws.shape)
        batch = self._assemble(rows, {"wav_mix": wav_mix, "wav_target": wav_target}, wav_target.shape[-1], chunk_ratio,
                               real, valid, rng, epoch=epoch, global_batch=global_batch)
        if units is not None:  # scored samples: the chunk itself, not its history
            batch["scored"] = scored_mask(self.windows, [int(units[row.item]) for row in rows], wav_target.shape[-1])
        return batch

    def _decoded_rows(self, item_ids: np.ndarray, draws: np.ndarray, units: np.ndarray | None) -> DecodedRows:
        """Rows, ``wav_mix`` and ``wav_target`` item by item, through the ``Decoder``: packs resampled at load
        time (each segment is resampled whole before its window is cut)."""
        rows = []
        for position, item in enumerate(item_ids):
            pack_id = int(self.items.pack[item])
            mix, targets, speakers, key = self.decoder.sample(pack_id, int(self.items.sample[item]),
                                                              int(self.items.slot[item]), self.mix_stream,
                                                              self.target_stream)
            window = (self.chunking.window(mix.data, draws[position], targets=[t.data for t in targets])
                      if units is None else unit_window(self.windows, int(units[position]), mix.data.shape[-1]))
            for target, speaker in zip(targets, speakers):
                rows.append(Row(position, mix, target, speaker, key, len(targets), window, pack_id))
        check_one_channel_count([row.mix.data.shape[0] for row in rows], [row.key for row in rows])
        windows = [row.window for row in rows]
        lengths = np.asarray([w.length for w in windows], dtype=np.int64)
        tile = self.chunking.tile
        wav_mix = collate_rows([row.mix for row in rows], windows, lengths, self.args.align_of("wav_mix"),
                               mixture_of=[row.item for row in rows], tile=tile)
        wav_target = collate_rows([row.target for row in rows], windows, lengths, self.args.align_of("wav_target"),
                                  tile=tile)
        real = lengths if tile else np.asarray([w.take for w in windows], dtype=np.int64)
        return DecodedRows(rows, wav_mix, wav_target, real, [w.chunk_ratio() for w in windows])

    def _add_noise(self, rows: list[Row], wav_mix: np.ndarray, draws: np.ndarray) -> None:
        """WeSep's ``add_noise`` on pre-mixed training: per mixture, with ``noise_prob``, noise over its chunk
        (``window.length``, padding included, as WeSep adds it after chunking) in every row of that mixture; the
        targets are untouched."""
        first: dict[int, int] = {}
        for r, row in enumerate(rows):
            first.setdefault(row.item, r)
        for item, r in first.items():
            length = min(rows[r].window.length, wav_mix.shape[-1])
            noisy = noisy_mixture(wav_mix[r, :, :length], draws[item], self.offline_noise,
                                  self.args.augment.noise_prob, self.rate)
            if noisy is not None:
                for s, row in enumerate(rows):
                    if row.item == item:
                        wav_mix[s, :, :length] = noisy

    def _assemble(self, rows: list[Row], audio: dict, target_len: int, chunk_ratio: list[dict],
                  real: np.ndarray, valid: np.ndarray, rng: np.random.Generator | None,
                  source_keys: list[str] | None = None, epoch: int = 0, global_batch: int = 0) -> dict:
        """The batch dict in WeSep's field order: audio (``wav_mix``, ``wav_target``; or the records that make
        them, ``augment_on: batch``), row metadata, labels, cues, then valid/lengths/ratios."""
        batch = {
            **audio,
            "spk": [row.speaker for row in rows],
            "key": [row.key for row in rows],
            "num_speaker": [row.num_speaker for row in rows],
        }
        if source_keys is not None:
            batch["source_key"] = source_keys
        self._labels(rows, batch)
        if self.cues:
            self._cues(rows, chunk_ratio, rng, batch, source_keys, epoch, global_batch)
        batch["valid"] = np.asarray(valid, dtype=bool)[[row.item for row in rows]]
        batch["lengths"] = np.minimum(real, target_len)
        batch["chunk_ratio"] = chunk_ratio
        return batch

    def augment_batch(self, batch: dict) -> dict:
        """``augment_on: batch``: the batch's ``wav_mix`` and ``wav_target`` made from its records in torch, on
        the batch's device (``loader.tse.batch_augment``); a batch without records is returned as it is."""
        from speechpack.loader.tse.batch_augment import augment_batch

        return augment_batch(batch)

    def _labels(self, rows: list[Row], batch: dict) -> None:
        """``speaker_label`` from the packs' labels (``-100``, or the configured fill, where there is none)."""
        spec = self.label_spec
        if not self.has_labels and not spec.emit_present:
            batch["speaker_label"] = np.full(len(rows), spec.fill_value,
                                             dtype=np.int64 if isinstance(spec.fill_value, int) else np.float32)
            return
        values = []
        for row in rows:
            label = self.packs[row.pack].speaker_label(row.speaker) if self.has_labels else None
            values.append(None if label is None else np.asarray(label, dtype=np.int64))
        batch["speaker_label"], present = collate_field(values, spec, batch["key"])
        if spec.emit_present:
            batch["speaker_label_present"] = present

    def _cues(self, rows: list[Row], chunk_ratio: list[dict], rng: np.random.Generator, batch: dict,
              source_keys: list[str] | None = None, epoch: int = 0, global_batch: int = 0) -> None:
        """Every used cue of every row (WeSep's cue layer), collated; draws continue the batch's generator.
        Waveform enrollments are augmented in training (``cue_processing.audio``), with draws from the batch's
        augmentation stream after the offline noise's."""
        draws = rng.random((len(rows), len(self.cues), DRAWS_PER_CUE))
        enroll_draws = None
        if self.enroll_augment is not None:
            aug = augment_rng(self.seed, epoch, global_batch)
            if self.offline_noise is not None:
                aug.random((len({row.item for row in rows}), NOISE_DRAWS))  # the offline noise's draws
            enroll_draws = aug.random((len(rows), len(self.cues), ENROLL_DRAWS))
        chunks = [ChunkInfo(ratio["start_ratio"], ratio["end_ratio"], ratio["orig_len"], self.rate)
                  for ratio in chunk_ratio]
        for c, cue in enumerate(self.cues):
            values = [cue.read(row.pack, self.packs[row.pack].path, row.key, row.speaker, chunk, draws[r, c],
                               source_keys[r] if source_keys else None)
                      for r, (row, chunk) in enumerate(zip(rows, chunks))]
            if enroll_draws is not None and cue.representation == "waveform":
                values = [None if v is None else self.enroll_augment(v, enroll_draws[r, c])
                          for r, v in enumerate(values)]
            if self.args.mainline is not None:  # mainline's collate cuts the rows itself (loader.tse.mainline)
                batch[f"{cue.field.name}_rows"] = values
                if not self.args.mainline.contract_keys:  # mainline's keys only: the contract's field unused
                    continue
            batch[cue.field.name], present = collate_field(values, cue.field, batch["key"])
            if cue.field.emit_present:
                batch[f"{cue.field.name}_present"] = present


def window_draws(seed: int, items: ItemIndex, item_ids: np.ndarray, width: int) -> np.ndarray:
    """``[items, width]`` window draws, each item's from its own stream (``loader.rng.window_rng``): a mainline
    val window depends on the mixture alone, not on the epoch or the batch it is in."""
    draws = np.empty((len(item_ids), width), dtype=np.float64)
    for row, item in enumerate(np.asarray(item_ids).tolist()):
        draws[row] = window_rng(seed, int(items.pack[item]), int(items.sample[item])).random(width)
    return draws


def prepare(config, state: str, packs: list, seed: int) -> Prepared:
    args = config.dataset_args
    if args.mainline is not None and args.augment is not None and args.augment.augment_on == "batch":
        raise ConfigError("dataset_args.augment_on: batch is not available with a mainline WeSep recipe (its batch "
                          "keys are made in the workers); use augment_on: worker")
    items = tse_items(packs, args.expand_targets)
    keep = length_filter(items, packs, args, state)
    kept = items.subset(keep)
    filtered = int(len(keep) - keep.sum())
    builder = TseBatchBuilder(packs, kept, args, state, seed)
    if args.mainline is not None:
        builder = MainlineBatchBuilder(builder, args.mainline, state, seed)
    return Prepared(builder=builder, item_pack=kept.pack, filtered=filtered,
                    filter_report={"filter_len": filtered} if filtered else {})


class TseTask(LoaderTask):
    """``task: tse`` (``loader.tasks.LoaderTask``)."""

    name = "tse"
    #: The first task: its states were hashed without the task's name, and still resume.
    fingerprint_names_task = False

    def parse_dataset_args(self, obj, where: str) -> DatasetArgs:
        return parse_dataset_args(obj, where)

    def prepare(self, config, state: str, packs: list, seed: int) -> Prepared:
        return prepare(config, state, packs, seed)

    def fingerprint_args(self, args: dict) -> dict:
        augment = args.get("augment")
        if augment:  # where augmentation runs changes no draw: a state resumes on either side
            augment.pop("augment_on", None)
            if augment == _NO_AUGMENT:
                args["augment"] = None
        if args.get("normalize") == "none":
            args["normalize"] = None  # spelt None before normalize had one vocabulary: older states still resume
        return super().fingerprint_args(args)


#: ``AugmentArgs`` that augment nothing, as the fingerprint sees them (``augment_on`` left out).
_NO_AUGMENT = {k: v for k, v in dataclasses.asdict(AugmentArgs()).items() if k != "augment_on"}

TASK = TseTask()


__all__ = ["TASK", "TseBatchBuilder", "TseTask", "parse_dataset_args", "prepare", "window_draws"]
