"""The TSE task (``task: tse``, the default): WeSep-style target speaker extraction from ``tse`` or ``sources``
packs.  Items are mixtures (or one per target with ``expand_targets``); ``TASK`` (``loader.tasks.LoaderTask``) parses
``dataset_args`` and prepares the batch builder below (``loader.tasks.BatchBuilder``).

Target speaker extraction batches, with WeSep's semantics, built straight from the mapped int16 shards.

``TseBatchBuilder.build`` turns one planned batch into collated numpy arrays, following WeSep's ``random_chunk``
and ``tse_collate_fn``, by running its pipeline of stages in order (``loader.tse.stages``: ``windows`` ->
``decode`` -> ``noise`` -> ``cues`` -> ``collate`` [-> ``mainline``], ``online_mix`` in place of the first three
when mixing online), each stage one module with its own stream of draws (``loader.rng``):

- train (not ``whole_utt``): one window of ``chunk_len`` samples shared by the mixture and all its targets;
  its start is drawn from the batch's counter-based generator, re-drawn up to 3 times while the mixture chunk is
  all zeros; shorter items are right-padded with zeros (``pad``) or kept whole (``keep``) (``loader.tse.windows``);
- val/test, or ``whole_utt``: whole utterances (a mainline WeSep recipe cuts val too, tiles short items and keys
  val windows by mixture: ``loader.tse.mainline``);
- rows (``Row``) are one per target speaker, mixture-major (m1s1, m1s2, m2s1, ...), decoded once into the batch,
  aligned to the longest row with zeros (or cropped to the shortest with ``collate.<field>.align: min``): the
  batch's windows gathered as one table and copied in one loop into recycled arrays (``loader.tse.table``), or,
  for packs resampled at load time, item by item (``loader.tse.decode``), both through the one decode path
  (``loader.samples``);
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

from speechpack.loader.cache import CacheSettings
from speechpack.loader.pack import Pack
from speechpack.loader.plan.train_windows import TrainWindows, tile_windows
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.tasks import BatchBuilder, DryRunView, index_samples, LoaderTask, PlanArgs, PlanUnits, Prepared
from speechpack.loader.tse.args import DATASET_ARGS, DatasetArgs, parse_dataset_args
from speechpack.loader.tse.augment import EnrollAugment, NoiseSource
from speechpack.loader.tse.cues.resolve import label_field, resolve_cues
from speechpack.loader.tse.decode import Decoder
from speechpack.loader.tse.items import ItemIndex, length_filter, tse_items
from speechpack.loader.tse.items import check_batch_channels, unit_channels, unit_rows
from speechpack.loader.tse.online import OnlineMixer
from speechpack.loader.tse.stages.pipeline import build_pipeline
from speechpack.loader.tse.table import TableRows
from speechpack.loader.tse.windows import Chunking
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays
from speechpack.schemas.constants import KIND_SOURCES, KIND_TSE, STREAM_MIX, STREAM_SOURCE, STREAM_TARGET
from speechpack.schemas.errors import SpeechpackError


class TseBatchBuilder(BatchBuilder):
    """Builds collated TSE batches from planned item ids (``loader.tasks.BatchBuilder``)."""

    def __init__(self, packs: list[Pack], items: ItemIndex, args: DatasetArgs, state: str, seed: int,
                 cache: CacheSettings | None = None):
        """``cache``: the node cache of noise and RIR banks given by URL (the config's ``cache``)."""
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
        # a mainline recipe cuts val (and, as its infer.py, test without whole_utt) too (loader.tse.mainline)
        mainline = args.mainline is not None
        self.chunking = Chunking(chunk=not args.whole_utt and (state == "train" or mainline),
                                 chunk_len=args.chunk_samples(self.rate), random_start=args.chunk_random_start,
                                 short_policy=args.chunk_short_policy, mainline=mainline)
        #: Mainline val and test windows come from the mixture's own stream, the same every epoch.
        self.fixed_windows = mainline and state != "train"
        # train_window (train only): the plan's units are chunks of items, not items.
        self.train_windows: TrainWindows | None = None
        if args.train_window is not None and state == "train":
            if self.needs_resample:
                raise SpeechpackError("dataset_args.train_window needs packs at the loader's rate (pack at "
                                      f"{self.rate} Hz, or unset resample_rate)")
            self.train_windows = tile_windows(items.num_frames, args.train_window, args.hist_frames)
        self.mix_stream = STREAM_MIX if self.kind == KIND_TSE else STREAM_SOURCE
        self.target_stream = STREAM_TARGET if self.kind == KIND_TSE else STREAM_SOURCE
        self.decoder = Decoder(packs, self.rate, args.normalize)
        self.cues = resolve_cues(args, packs)  # the used cues, checked against every pack's cues.yaml
        self.label_spec = label_field(args)
        self.has_labels = any(p.cues_config is not None and p.cues_config.speaker_label_resource is not None
                              for p in packs)
        train_augment = args.augment if state == "train" else None  # WeSep augments training batches only
        # offline (pre-mixed) noise; online mixing adds its own noise while mixing
        self.offline_noise = (NoiseSource(train_augment, cache) if train_augment is not None and train_augment.noise_prob > 0
                              and not (args.online_mix and state == "train") else None)
        self.enroll_augment = (EnrollAugment(train_augment, self.rate, cache) if train_augment is not None
                               and (train_augment.reverb_enroll_prob > 0 or train_augment.noise_enroll_prob > 0)
                               else None)
        self.table = TableRows(packs, items, self.mix_stream, self.target_stream, self.decoder.normalizer,
                               self.chunking, self.train_windows,
                               (args.align_of("wav_mix"), args.align_of("wav_target")))
        self.online = (OnlineMixer(packs, items, args, self.kind, self.rate, self.chunking, self.decoder, seed, cache)
                       if args.online_mix and state == "train" else None)
        self.pipeline = build_pipeline(self)  # the stages, in order (loader.tse.stages.pipeline.STAGES)

    @property
    def units(self) -> PlanUnits:
        """The plan deals items, or train-window chunks (``train_window``)."""
        windows = self.train_windows
        return PlanUnits(count=len(self.items) if windows is None else len(windows), lengths=self.unit_lengths,
                         train_windows=windows, samples=self.unit_samples)

    def unit_samples(self) -> tuple[np.ndarray, np.ndarray]:
        return index_samples(self.items.pack, self.items.sample, self.train_windows)

    def unit_lengths(self, epoch: int = 0) -> np.ndarray:
        """Per plan unit, the row length the batch will have (samples at the loader's rate): the fed chunk
        (train_window), ``chunk_len`` (train, ``pad``), ``min(length, chunk_len)`` (``keep``), else whole."""
        if self.train_windows is not None:
            return self.train_windows.fed_length
        rates = np.asarray([p.sample_rate for p in self.packs], dtype=np.float64)[self.items.pack]
        whole = np.round(self.items.num_frames * (self.rate / rates)).astype(np.int64)
        return self.chunking.row_lengths(whole)

    @property
    def sample_rate(self) -> int:
        """The batches' rate: ``resample_rate``, else the packs' (one rate)."""
        return int(self.rate)

    def dry_run(self) -> DryRunView:
        """One row per target speaker of a pre-mixed mixture (``loader.tse.items.unit_rows``); pre-mixed batches
        refuse mixtures of different channel counts (``loader.tse.items``)."""
        channels = unit_channels(self)
        return DryRunView(rows=unit_rows(self), batch_check=None if channels is None
                          else functools.partial(check_batch_channels, self, channels))

    @property
    def plan_args(self) -> PlanArgs:
        """The default planning view, but mainline val as mainline's ``train.py`` runs it: ``val_iter = mixtures
        // world_size // batch_size`` full batches per rank (its val data repeats and ``executor.cv`` stops at
        ``val_iter``), in the same order every epoch: the plan with the last incomplete batch and round left out,
        whatever ``drop_last`` says, and without shuffling (mainline's val order is fixed: its sampler's epoch
        stays -1)."""
        args = super().plan_args
        if self.args.mainline is None or self.state != "val":
            return args
        return dataclasses.replace(args, shuffle=False, tail="drop", sync="drop")

    def check_plan(self, plan, world_size: int) -> None:
        """Mainline val: a dev set too small for one full val batch per rank is refused at start: mainline's
        ``val_iter`` is then 0 and its ``executor.cv`` fails (``UnboundLocalError``) or never ends."""
        if self.args.mainline is None or self.state != "val" or len(plan):
            return
        mixtures, batch_size = self.units.count, self.args.batch_size
        raise ConfigError(f"val: mainline WeSep validates on val_iter = {mixtures} dev mixture(s) // world_size "
                          f"{world_size} // batch_size {batch_size} = 0 full batches (wesep/bin/train.py), and its "
                          f"executor.cv fails on none: the dev packs need at least batch_size x world_size = "
                          f"{batch_size * world_size} mixtures, or lower dataloader_args.batch_size")

    def build_block(self, batches: list[tuple[np.ndarray, np.ndarray, int, int]],
                    arrays: BatchArrays = NUMPY) -> Iterator[dict]:
        """Collated numpy arrays and lists (see ``docs/loader.md`` for the fields) for several batches
        (``(item_ids, valid, epoch, global_batch)`` each; ``build``, one batch, is the default made of it), yielded
        one by one: the pipeline's stages in order (``loader.tse.stages``); pre-mixed batches share one table (the
        ``decode`` stage), each batch decoded when it is asked for; the batches are the same as built one at a
        time.  ``arrays`` makes the arrays the batches return (``BatchBuilder.build``)."""
        return self.pipeline.run(batches, arrays)

    def augment_batch(self, batch: dict) -> dict:
        """``augment_on: batch``: the batch's ``wav_mix`` and ``wav_target`` made from its records in torch, on
        the batch's device (``loader.tse.batch_augment``); a batch without records is returned as it is."""
        from speechpack.loader.tse.batch_augment import augment_batch

        return augment_batch(batch)


def prepare(config, state: str, packs: list, seed: int) -> Prepared:
    args = config.dataset_args
    if args.mainline is not None and args.augment is not None and args.augment.augment_on == "batch":
        raise ConfigError("dataset_args.augment_on: batch is not available with a mainline WeSep recipe (its batch "
                          "keys are made in the workers); use augment_on: worker")
    items = tse_items(packs, args.expand_targets)
    keep = length_filter(items, packs, args, state)
    kept = items.subset(keep)
    filtered = int(len(keep) - keep.sum())
    builder = TseBatchBuilder(packs, kept, args, state, seed, config.cache)
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
        """What each field's declaration says the fingerprint hashes (``loader.tse.args.DATASET_ARGS``: later keys
        while set, ``augment`` without where it runs, ``normalize: none`` as older states spelt it)."""
        return DATASET_ARGS.fingerprint(args)


TASK = TseTask()


__all__ = ["TASK", "TseBatchBuilder", "TseTask", "parse_dataset_args", "prepare"]
