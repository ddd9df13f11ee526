"""``speechpack peek``: show one model-ready batch (WeSep's ``tools/test_dataset.py``), optionally as WAV files.

Check a config here before launching a training run: field names, shapes, dtypes and value ranges are what the
model will receive.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import soundfile

from speechpack.loader import build_loader
from speechpack.loader.plan.no_batch import no_batch_message
from speechpack.loader.recipe import ignored_line
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.yaml_document import read_yaml

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def load_config(path: str, packs: tuple[str, ...] = ()) -> dict:
    """Read a YAML (or JSON) loader config, naming the file on error.

    ``packs`` (``--pack``) are the pack directories of a WeSep recipe read unchanged: they become its ``packs``
    entries (a config that has ``packs`` already is an error, so nothing is silently replaced)."""
    try:
        config = read_yaml(path)
    except OSError as err:
        raise SpeechpackError(f"{path}: cannot read config ({err.strerror})") from None
    if not isinstance(config, dict):
        raise SpeechpackError(f"{path}: a config is a mapping with packs and dataset_args")
    if packs:
        if "packs" in config:
            raise SpeechpackError(f"{path}: has packs already; --pack adds packs to a config without them")
        config = {**config, "packs": [{"path": pack} for pack in packs]}
    return config


def describe_batch(batch: dict) -> str:
    """One line per field: shape, dtype and range for tensors (integers exactly, ``_present`` flags as a count);
    length and first values for lists."""
    width = max([14, *(len(name) + 1 for name in batch)])
    lines = []
    for name, value in batch.items():
        if hasattr(value, "shape"):
            array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
            if array.size and array.dtype == bool:
                span = f"{int(array.sum())} of {array.size} true"
            elif array.size and array.dtype.kind in "iu":
                span = f"range [{int(array.min())}, {int(array.max())}]"
            elif array.size:
                span = f"range [{array.min():.4g}, {array.max():.4g}]"
            else:
                span = "empty"
            lines.append(f"{name:<{width}} {str(tuple(array.shape)):<18} {str(array.dtype):<8} {span}")
        else:
            shown = ", ".join(repr(v) for v in value[:4]) + (", ..." if len(value) > 4 else "")
            lines.append(f"{name:<{width}} list[{len(value)}]{'':<9} {shown}")
    return "\n".join(lines)


def save_batch_wavs(batch: dict, sample_rate: int, out_dir: str) -> list[str]:
    """Write the batch's audio as float WAV files and return their paths: per TSE row its mixture (all channels),
    target and waveform enrollment (when the batch has one); per ASR row its waveform (``source_seqs`` up to its
    length); per ASD row its audio."""
    os.makedirs(out_dir, exist_ok=True)
    if "wav_mix" in batch:
        return _save_tse(batch, sample_rate, out_dir)
    if "source_seqs" in batch:
        if batch["source_seqs"].ndim != 2:
            raise SpeechpackError("--save-wavs: this ASR batch holds fbank features, not waveforms (use_fbank)")
        rows = [batch["source_seqs"][row, :int(length)] for row, length in enumerate(batch["source_seq_lens"])]
    elif "audio" in batch and "faces" in batch:
        rows = [batch["audio"][row, 0] for row in range(len(batch["key"]))]
    else:
        raise SpeechpackError(f"--save-wavs: no audio field in this batch ({', '.join(batch)})")
    written = []
    for row, (key, audio) in enumerate(zip(batch["key"], rows)):
        path = os.path.join(out_dir, f"{row:03d}_{_UNSAFE.sub('_', key)}.wav")
        soundfile.write(path, np.asarray(audio), sample_rate, subtype="FLOAT")
        written.append(path)
    return written


@dataclass(frozen=True)
class PeekReport:
    """What ``peek_config`` saw: the plan's counts for the state, the first batch described field by field, and
    the WAV files written (when asked)."""

    state: str
    items: int
    filtered: int
    batches: int
    padded_items: int
    dropped_items: int
    batch: str
    wavs: list[str] = field(default_factory=list)
    wav_dir: str | None = None
    #: A WeSep recipe's trainer sections, ignored by the loader.
    ignored: tuple[str, ...] = ()
    #: The WeSep dialect the recipe was read as (``LoaderReport.dialect``).
    dialect: str | None = None

    def describe(self) -> str:
        text = (f"{self.state}: {self.items} items, {self.filtered} filtered out, {self.batches} batches per rank, "
                f"{self.padded_items} padded items, {self.dropped_items} dropped\n"
                + (f"read as a {self.dialect} recipe\n" if self.dialect else "")
                + (f"{ignored_line(self.ignored)}\n" if self.ignored else "") + self.batch)
        if self.wav_dir is not None:
            text += f"\nwrote {len(self.wavs)} WAV files to {self.wav_dir}"
        return text


def peek_config(config_path: str, state: str, seed: int = 0, save_wavs: str | None = None,
                packs: tuple[str, ...] = ()) -> PeekReport:
    """``speechpack peek CONFIG``: build the loader of a YAML config for ``state`` (with ``packs`` for a WeSep
    recipe that has none, ``load_config``), take its first batch, describe it and, with ``save_wavs``, write its
    audio there (``save_batch_wavs``).  One batch needs no worker processes, whatever ``dataloader_args`` say."""
    with warnings.catch_warnings():  # an empty plan is the error below, said once
        warnings.filterwarnings("ignore", message=r".* plan holds no batch: ")
        loader = build_loader(load_config(config_path, packs), state, seed=seed, num_workers=0)
    report = loader.report()
    batch = next(iter(loader), None)
    if batch is None:
        raise SpeechpackError(no_batch_message(state, report.no_batch or "it deals none", where=config_path))
    wavs = save_batch_wavs(batch, loader.builder.sample_rate, save_wavs) if save_wavs else []
    return PeekReport(state=state, items=report.items, filtered=report.filtered, batches=len(loader),
                      padded_items=report.padded_items, dropped_items=report.dropped_items,
                      batch=describe_batch(batch), wavs=wavs, wav_dir=save_wavs, ignored=report.ignored,
                      dialect=report.dialect)


def _save_tse(batch: dict, sample_rate: int, out_dir: str) -> list[str]:
    written = []
    for row, (key, speaker) in enumerate(zip(batch["key"], batch["spk"])):
        stem = os.path.join(out_dir, f"{row:03d}_{_UNSAFE.sub('_', key)}_{_UNSAFE.sub('_', speaker)}")
        # a mainline WeSep batch has wav_targets [rows, T] (and no contract keys unless asked)
        target = "wav_target" if "wav_target" in batch else "wav_targets"
        for field, name in (("wav_mix", "mix"), (target, "target")):
            path = f"{stem}_{name}.wav"
            soundfile.write(path, batch[field][row].numpy().T, sample_rate, subtype="FLOAT")
            written.append(path)
        enroll = batch.get("audio_aux")
        present = batch.get("audio_aux_present")
        if enroll is not None and enroll.ndim == 3 and (present is None or bool(present[row])):
            path = f"{stem}_enroll.wav"  # a waveform audio cue (not an embedding), as the model sees it
            soundfile.write(path, enroll[row].numpy().T, sample_rate, subtype="FLOAT")
            written.append(path)
    return written
