"""The TSE pipeline: its stages in order (``STAGES``), each made for a loader by its factory, and
``register_stage``, which adds one (docs/extending.md, "A stage").

A factory takes the TSE batch builder (``loader.tse.task.TseBatchBuilder``: the packs, items, args, state, seed,
rate and the collaborators it sets up) and returns the stage, or None where the stage has nothing to do for that
loader (no online mixing in val, no noise without ``noise_prob``, ...).  Pre-mixed batches run ``windows``,
``decode``, ``noise``, ``cues``, ``collate`` (and ``mainline`` for a mainline recipe); online mixing runs
``online_mix`` in place of the first three.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable

from speechpack.loader.config_keys import Key
from speechpack.loader.tse.args import DATASET_ARGS
from speechpack.loader.tse.stages.collate import Collate
from speechpack.loader.tse.stages.keys import add_stage_keys, remove_stage_keys, stage_keys_of
from speechpack.loader.tse.stages.cues import Cues
from speechpack.loader.tse.stages.decode import DecodeRows
from speechpack.loader.tse.stages.mainline import MainlineCollate
from speechpack.loader.tse.stages.noise import OfflineNoise
from speechpack.loader.tse.stages.online_mix import OnlineMix
from speechpack.loader.tse.stages.protocol import Pipeline, Stage
from speechpack.loader.tse.stages.windows import WindowDraws

#: A stage's factory: the TSE batch builder -> the stage, or None (not used by this loader).
Factory = Callable[[Any], "Stage | None"]


def _windows(b) -> Stage | None:
    return None if b.online is not None else WindowDraws(b.seed, b.items, b.chunking.draws_per_window, b.train_windows,
                                                         b.fixed_windows)


def _decode(b) -> Stage | None:
    if b.online is not None:
        return None
    return DecodeRows(None if b.needs_resample else b.table, b.decoder, b.items, b.chunking, b.train_windows,
                      (b.mix_stream, b.target_stream), (b.args.align_of("wav_mix"), b.args.align_of("wav_target")))


def _online_mix(b) -> Stage | None:
    return None if b.online is None else OnlineMix(b.online)


def _noise(b) -> Stage | None:
    return None if b.offline_noise is None else OfflineNoise(b.seed, b.offline_noise, b.args.augment.noise_prob,
                                                             b.rate)


def _cues(b) -> Stage | None:
    return Cues(b.seed, b.packs, b.cues, b.label_spec, b.has_labels, b.enroll_augment, b.rate,
                0 if b.online is not None else b.chunking.draws_per_window, b.offline_noise is not None,
                b.args.mainline)


def _collate(b) -> Stage | None:
    return Collate(b.train_windows)


def _mainline(b) -> Stage | None:
    return None if b.args.mainline is None else MainlineCollate(b.args.mainline, b.cues, b.state, b.seed, b.rate)


#: The stages in the order they run: (name, factory).
STAGES: list[tuple[str, Factory]] = [
    ("windows", _windows),
    ("decode", _decode),
    ("online_mix", _online_mix),
    ("noise", _noise),
    ("cues", _cues),
    ("collate", _collate),
    ("mainline", _mainline),
]


def register_stage(name: str, factory: Factory, after: str, keys: tuple[Key, ...] = ()) -> None:
    """Run the stage ``factory`` makes (``name``, its stream's name too: ``loader.rng.stage_rng``) right after
    stage ``after``, in every TSE loader built from now on.  Its draws come from its own stream, so no other
    stage's change.  ``keys``: the stage's config keys (``loader.config_keys.Key``, each declared once in the
    stage's module), which ``dataset_args`` then parses, checks, defaults, documents and fingerprints
    (``loader.tse.stages.keys``; the stage reads them with ``args.stage_arg(name)``)."""
    names = [n for n, _ in STAGES]
    if not isinstance(name, str) or not name or name in names:
        raise ValueError(f"register_stage: a new stage name is required, got {name!r} (taken: {', '.join(names)})")
    if after not in names:
        raise ValueError(f"register_stage: no stage {after!r} to run after (stages: {', '.join(names)})")
    add_stage_keys(name, keys, {k.name for k in DATASET_ARGS.config_keys})
    STAGES.insert(names.index(after) + 1, (name, factory))


def unregister_stage(name: str) -> None:
    """Remove a stage ``register_stage`` added, and its keys (the built-in ones stay)."""
    if name in _BUILT_IN:
        raise ValueError(f"unregister_stage: {name!r} is a built-in stage")
    STAGES[:] = [(n, f) for n, f in STAGES if n != name]
    remove_stage_keys(name)


_BUILT_IN = frozenset(n for n, _ in STAGES)


#: The ``dataset_args`` fields the plan reads (``TseBatchBuilder.units``, ``plan_args``, the item filters), not a
#: stage: with the stages' ``keys``, every field of ``DATASET_ARGS`` has a reader.
PLAN_KEYS = ("batch_size", "batching", "shuffle", "tail", "expand_targets", "filter_len", "min_num_seconds",
             "max_num_seconds", "train_window", "hist_frames", "mainline", "shard_window")


def stage_fingerprint(stage: Stage, args) -> dict:
    """The resume fingerprint's fields that the keys ``stage`` reads contribute (``Stage.keys``, and an added
    stage's keys: ``register_stage(..., keys=)``), as ``DATASET_ARGS`` hashes them for the ``DatasetArgs``
    ``args``."""
    hashed = DATASET_ARGS.fingerprint(asdict(args))
    added = {key.name for key in stage_keys_of(stage.name)}
    out = {name: hashed[name] for name in stage.keys if name in hashed}
    staged = {name: value for name, value in hashed.get("stage_args", {}).items() if name in added}
    return {**out, "stage_args": staged} if staged else out


def build_pipeline(builder) -> Pipeline:
    """The pipeline of ``builder``: every stage whose factory makes one, in ``STAGES`` order; a stage is named as
    registered."""
    stages = []
    for name, factory in STAGES:
        stage = factory(builder)
        if stage is not None:
            if stage.name != name:
                raise ValueError(f"stage {name!r}: its factory made a stage named {stage.name!r}")
            stages.append(stage)
    return Pipeline(stages)


__all__ = ["Factory", "PLAN_KEYS", "STAGES", "build_pipeline", "register_stage", "stage_fingerprint",
           "unregister_stage"]
