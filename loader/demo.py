"""The loading half of ``speechpack demo``: one training epoch of the demo's ``tse`` pack and one fbank batch of
its ``asr`` pack, through ``build_loader`` as training would.

The packing half (``packer/demo.py``) makes the corpus and the packs; the ``demo`` command in ``cli.py`` runs it
first and passes the pack paths here.  Kept apart so that packer/ never imports the loader beyond the pack reader
(docs/architecture.md).
"""

from __future__ import annotations

import os
import time
from typing import Callable

import yaml

from schemas.constants import DEFAULT_SAMPLE_RATE

#: Training window of the loader step, in seconds.
DEMO_CHUNK_SECONDS = 1
#: Rows of the asr batch shown.
ASR_BATCH_SIZE = 4


def load_demo(tse_pack: str, asr_pack: str, asr_summary: str, asr_seconds: float, out: str, started: float,
              echo: Callable[[str], None] = print) -> str:
    """Echo steps 6 and 7 and the closing lines; return the written loader config's path.

    ``asr_summary`` and ``asr_seconds`` describe the asr build that the packing half ran; ``started`` is its
    ``time.monotonic()`` start, so the closing line gives the whole demo's time.
    """
    echo("")
    config_path = _load_batches(tse_pack, out, echo)
    echo("")
    _asr_batch(asr_pack, asr_summary, asr_seconds, echo)
    echo("")
    echo(f"Done in {time.monotonic() - started:.1f} s.  Try:  speechpack validate {tse_pack}")
    echo(f"                   speechpack peek {config_path} --save-wavs {os.path.join(out, 'batch-wavs')}")
    return config_path


def _load_batches(tse_pack: str, out: str, echo: Callable[[str], None]) -> str:
    """Write a loader config for the tse pack, load one training epoch through ``build_loader`` and describe it.

    One mixture per batch: the demo has a two-channel mixture, and mixtures of different channel counts cannot
    share a batch (as in WeSep).
    """
    from loader import build_loader  # imported here: torch is only needed from this step on
    from loader.peek import describe_batch

    step = time.monotonic()
    config = {"packs": [{"path": tse_pack}],
              "dataset_args": {"chunk_len": DEMO_CHUNK_SECONDS * DEFAULT_SAMPLE_RATE, "batch_size": 1, "normalize": "muvap"}}
    config_path = os.path.join(out, "train.yaml")
    with open(config_path, "w", encoding="utf-8") as fp:
        yaml.safe_dump(config, fp, sort_keys=False)
    loader = build_loader(config, "train", seed=0)
    loader.set_epoch(0)
    batches = list(loader)
    rows = sum(len(batch["key"]) for batch in batches)
    echo(f"6. Loaded one training epoch with build_loader ({os.path.relpath(config_path, out)}: "
         f"{DEMO_CHUNK_SECONDS} s chunks, MuVAP normalisation, one mixture per batch):")
    echo(f"   {len(batches)} batches, {rows} rows (one per target speaker), every mixture exactly once  "
         f"[{time.monotonic() - step:.2f} s]")
    echo("   first batch:")
    for line in describe_batch(batches[0]).splitlines():
        echo(f"     {line}")
    return config_path


def _asr_batch(asr_pack: str, asr_summary: str, asr_seconds: float, echo: Callable[[str], None]) -> None:
    """Step 7: one batch of the asr pack as 80-bin fbank features with character targets."""
    from loader import build_loader
    from loader.peek import describe_batch

    step = time.monotonic()
    config = {"task": "asr", "packs": [{"path": asr_pack}],
              "dataset_args": {"use_fbank": True, "batching_strategy": "STATIC", "batch_size": ASR_BATCH_SIZE,
                               "shuffle": False}}
    loader = build_loader(config, "val", seed=0)
    batch = next(iter(loader))
    echo(f"7. The same utterances as an ASR corpus (corpus/asr.jsonl; the transcripts name the voice, the voices "
         f"being synthetic), packed, validated and loaded with task: asr:")
    echo(f"     {asr_summary}")
    echo(f"   validated: OK (hashes, text UTF-8, hours per corpus and language); {len(loader)} batches of "
         f"{ASR_BATCH_SIZE} as 80-bin fbank with character targets  [{asr_seconds + time.monotonic() - step:.2f} s]")
    for line in describe_batch(batch).splitlines():
        echo(f"     {line}")


__all__ = ["DEMO_CHUNK_SECONDS", "load_demo"]
