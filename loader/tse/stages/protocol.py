"""What a TSE stage takes and gives: a ``BatchState`` (one planned batch on its way to a collated dict) in, the
same state, filled further, out; and ``Pipeline``, the stages run in order over a block of batches.

A stage works on an iterator of states (``Stage.apply``), so a stage that shares work across the batches of a
block (the table gather, ``loader.tse.stages.decode``) can see the whole block, while every other stage works
batch by batch (``Stage.step``) and a batch is still built only when it is asked for.  A stage's draws come from
its own stream (``Stage.stream``, declared in ``loader.rng``'s table of TSE stages), never from another's, so a
stage added or changed shifts no other stage's draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np

from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays


@dataclass
class BatchState:
    """One batch through the stages.  Given: ``units`` (the planned ids), ``valid``, ``epoch``, ``global_batch``.
    Filled by the stages: ``item_ids`` (the items the units read), ``chunks`` (train-window units, or None),
    ``draws`` (window draws), ``rows`` (``loader.tse.decode.Row``, mixture-major), ``audio`` (``wav_mix`` and
    ``wav_target``, or the records that make them), ``target_len``, ``real``, ``chunk_ratio``, ``source_keys``,
    ``fields`` (per-row fields after the audio and row metadata: labels, cues), ``extra`` (fields after the
    contract's last), and ``batch``, the collated dict.  ``arrays``: where the stages make the arrays the batch
    returns (``loader.transport.batch_arrays.BatchArrays``, given by the loader that runs the pipeline)."""

    units: np.ndarray
    valid: np.ndarray
    epoch: int
    global_batch: int
    arrays: BatchArrays = NUMPY
    item_ids: np.ndarray | None = None
    chunks: np.ndarray | None = None
    draws: np.ndarray | None = None
    rows: list | None = None
    audio: dict | None = None
    target_len: int = 0
    real: np.ndarray | None = None
    chunk_ratio: list | None = None
    source_keys: list | None = None
    fields: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    batch: dict | None = None


class Stage:
    """One step of a task's batch: ``name`` (unique in its pipeline), ``stream`` (the name of its stream in
    ``loader.rng``'s table; ``""``: it draws nothing), ``keys`` (the ``dataset_args`` fields it reads, each declared
    once: in ``loader.tse.args.DATASET_ARGS``, or for an added stage by ``register_stage(..., keys=)``; what it
    contributes to the resume fingerprint: ``loader.tse.stages.pipeline.stage_fingerprint``), and ``step(state)``,
    which fills ``state`` in place.  ``apply`` maps ``step`` over the block's states lazily; a stage that works on
    the whole block overrides it."""

    name: str = ""
    stream: str = ""
    keys: tuple[str, ...] = ()

    def step(self, state: BatchState) -> None:
        raise NotImplementedError

    def apply(self, states: Iterable[BatchState]) -> Iterator[BatchState]:
        for state in states:
            self.step(state)
            yield state


class Pipeline:
    """Stages run in order over a block of batches: ``run`` yields each batch's collated dict as it is asked for."""

    def __init__(self, stages: list[Stage]):
        names = [stage.name for stage in stages]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"a pipeline's stages need distinct names, got {names}")
        self.stages = stages

    @property
    def names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def run(self, batches: list[tuple[np.ndarray, np.ndarray, int, int]],
            arrays: BatchArrays = NUMPY) -> Iterator[dict]:
        """The collated batches of ``(units, valid, epoch, global_batch)`` each, their arrays made by ``arrays``."""
        states: Iterable[BatchState] = (BatchState(*batch, arrays) for batch in batches)
        for stage in self.stages:
            states = stage.apply(states)
        for state in states:
            yield state.batch

    def stage(self, name: str) -> Any:
        """The stage called ``name``."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)


__all__ = ["BatchState", "Pipeline", "Stage"]
