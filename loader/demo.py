"""The loading half of ``speechpack demo``: one training epoch of the demo's ``tse`` pack (with ``plan``'s dry run
of it, and its picture when matplotlib is there) and one fbank batch of its ``asr`` pack, through ``build_loader``
as training would.

The packing half (``packer/demo.py``) makes the corpus and the packs; the ``demo`` command in ``cli.py`` runs it
first and passes the pack paths here.  Kept apart so that packer/ never imports the loader beyond the pack reader
(docs/architecture.md).
"""

from __future__ import annotations

import os
import time
from typing import Callable

import yaml

from speechpack.schemas.constants import DEFAULT_SAMPLE_RATE
from speechpack.schemas.plotting import plotting_available
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.units import plural
from speechpack.schemas.yaml_document import read_yaml

#: Training window of the loader step, in seconds.
DEMO_CHUNK_SECONDS = 1
#: Mixtures per training batch (the README's Python example takes a larger one on the same pack).
DEMO_BATCH_SIZE = 3
#: ``plan``'s picture of the demo's training config, in the demo directory.
PLAN_PICTURE = "plan.png"
#: The training config over both tse packs (one and two microphones), which ``plan`` refuses.
BOTH_MICS_CONFIG = "both-mics.yaml"
#: Rows of the asr batch shown.
ASR_BATCH_SIZE = 4


def load_demo(tse_pack: str, asr_pack: str, asr_summary: str, asr_seconds: float, out: str, started: float,
              echo: Callable[[str], None] = print, inspect_picture: str | None = None,
              tse_2mic_pack: str | None = None) -> str:
    """Echo steps 6 and 7 and the closing lines; return the written loader config's path.

    ``asr_summary`` and ``asr_seconds`` describe the asr build that the packing half ran; ``started`` is its
    ``time.monotonic()`` start, so the closing line gives the whole demo's time; ``inspect_picture`` is the
    packing half's picture, listed with the plan's; with ``tse_2mic_pack``, a config over both tse packs is written
    and dry-run too, to show ``plan`` refusing what the loader would refuse.
    """
    echo("")
    config_path, plan_picture = _load_batches(tse_pack, out, echo)
    if tse_2mic_pack is not None:
        _both_mics(config_path, tse_2mic_pack, out, echo)
    echo("")
    _asr_batch(asr_pack, asr_summary, asr_seconds, echo)
    echo("")
    pictures = [p for p in (inspect_picture, plan_picture) if p]
    echo(f"Done in {time.monotonic() - started:.1f} s." + (f"  Pictures: {', '.join(pictures)}" if pictures else ""))
    echo(f"Try:  speechpack inspect {tse_pack}")
    echo(f"      speechpack plan {config_path}")
    echo(f"      speechpack peek {config_path} --save-wavs {os.path.join(out, 'batch-wavs')}")
    return config_path


def _load_batches(tse_pack: str, out: str, echo: Callable[[str], None]) -> tuple[str, str | None]:
    """Write a loader config for the (one-microphone) tse pack, dry-run it as ``speechpack plan`` does (drawing
    its picture when matplotlib is there), load one training epoch through ``build_loader`` and describe it;
    return the config's path and the picture's (``None`` without matplotlib)."""
    from speechpack.loader import build_loader  # imported here: torch is only needed from this step on
    from speechpack.loader.peek import describe_batch
    from speechpack.loader.plan.planning_report import plan_report

    step = time.monotonic()
    config = {"packs": [{"path": tse_pack}],
              "dataset_args": {"chunk_len": DEMO_CHUNK_SECONDS * DEFAULT_SAMPLE_RATE, "batch_size": DEMO_BATCH_SIZE,
                               "normalize": "muvap"}}
    config_path = os.path.join(out, "train.yaml")
    with open(config_path, "w", encoding="utf-8") as fp:
        yaml.safe_dump(config, fp, sort_keys=False)
    report = plan_report(config, "train")
    picture = None
    if plotting_available():
        picture = os.path.join(out, PLAN_PICTURE)
        report.plot(picture)
    loader = build_loader(config, "train", seed=0)
    loader.set_epoch(0)
    batches = list(loader)
    mixtures = len({key for batch in batches for key, valid in zip(batch["key"], _row_valid(batch)) if valid})
    rows = sum(len(batch["key"]) for batch in batches)
    echo(f"6. Loaded one training epoch with build_loader ({os.path.relpath(config_path, out)}: "
         f"{DEMO_CHUNK_SECONDS} s chunks, MuVAP normalisation, {plural(DEMO_BATCH_SIZE, 'mixture')} per batch):")
    echo(f"   {plural(len(batches), 'batch')}, {plural(rows, 'row')} (one per target speaker of each mixture); "
         f"each of the {plural(mixtures, 'mixture')} exactly once  [{time.monotonic() - step:.2f} s]")
    echo(f"   the dry run, as `speechpack plan {config_path}` prints it (no audio read):")
    for line in report.describe().splitlines()[1:]:
        echo(f"     {line}")
    if picture:
        echo(f"   plan's picture (rows per batch, padding): {picture}")
    echo("   first batch:")
    for line in describe_batch(batches[0]).splitlines():
        echo(f"     {line}")
    return config_path, picture


def _both_mics(config_path: str, tse_2mic_pack: str, out: str, echo: Callable[[str], None]) -> None:
    """Write the training config over both tse packs and show that ``plan`` refuses it, before any audio is read."""
    from speechpack.loader.plan.planning_report import plan_report

    config = read_yaml(config_path)
    config["packs"].append({"path": tse_2mic_pack})
    path = os.path.join(out, BOTH_MICS_CONFIG)
    with open(path, "w", encoding="utf-8") as fp:
        yaml.safe_dump(config, fp, sort_keys=False)
    try:
        plan_report(config, "train")
    except SpeechpackError as err:  # the TSE builder's dry-run batch check (MixedChannels)
        if "different channel counts" not in str(err):
            raise
        echo(f"   with the two-microphone pack added ({BOTH_MICS_CONFIG}), `speechpack plan` refuses it:")
        echo(f"     {str(err).split('; the loader refuses')[0]}")
        return
    raise AssertionError(f"{path}: plan accepted mixtures of different channel counts in one batch")


def _row_valid(batch: dict) -> list[bool]:
    """Per row, whether it is real (a padded round repeats rows with ``valid`` False)."""
    valid = batch.get("valid")
    return [True] * len(batch["key"]) if valid is None else [bool(v) for v in valid]


def _asr_batch(asr_pack: str, asr_summary: str, asr_seconds: float, echo: Callable[[str], None]) -> None:
    """Step 7: one batch of the asr pack as 80-bin fbank features with character targets."""
    from speechpack.loader import build_loader
    from speechpack.loader.peek import describe_batch

    step = time.monotonic()
    config = {"task": "asr", "packs": [{"path": asr_pack}],
              "dataset_args": {"use_fbank": True, "batching_strategy": "STATIC", "batch_size": ASR_BATCH_SIZE,
                               "shuffle": False}}
    loader = build_loader(config, "val", seed=0)
    batch = next(iter(loader))
    echo(f"7. The same utterances as an ASR corpus (corpus/asr.jsonl; the transcripts name the voice, the voices "
         f"being synthetic), packed, validated and loaded with task: asr:")
    echo(f"     {asr_summary}")
    echo(f"   validated: OK (hashes, text UTF-8, hours per corpus and language); {plural(len(loader), 'batch')} of "
         f"{ASR_BATCH_SIZE} as 80-bin fbank with character targets  [{asr_seconds + time.monotonic() - step:.2f} s]")
    for line in describe_batch(batch).splitlines():
        echo(f"     {line}")


__all__ = ["BOTH_MICS_CONFIG", "DEMO_BATCH_SIZE", "DEMO_CHUNK_SECONDS", "PLAN_PICTURE", "load_demo"]
