"""``labels.speaker_label``: WeSep's ``spk2label.json`` (``{"speaker": class index}``), checked against the list
and stored as ``cues/labels/speakers.npy`` (sorted) and ``labels.npy``.

WeSep looks every slot's speaker up and raises ``KeyError`` mid-training for an unknown one; here a speaker of the
list without a label is a build problem.
"""

from __future__ import annotations

import json
import os
from typing import Iterable

import numpy as np

from speechpack.packer.cues.bank import bytes_array
from speechpack.packer.cues.problem import CueInputError, CueProblem
from speechpack.packer.cues.resource import key_problem, refuse_duplicates, utf8
from speechpack.packer.files import save_npy
from speechpack.schemas.cues import INDEX_DTYPE, LABEL_SPEAKERS_NAME, LABEL_VALUES_NAME

_MAX_LABEL = np.iinfo(INDEX_DTYPE).max


def read_labels(path: str, speakers: Iterable[tuple[str, int]]) -> tuple[dict[str, int] | None, list[CueProblem]]:
    """Read ``path``; ``speakers`` are ``(speaker, list line)`` pairs that must all have a label."""
    if not os.path.isfile(path):
        return None, [CueProblem(None, None, path, "speaker-label JSON not found (labels.speaker_label.resource)")]
    try:
        with open(path, "rb") as fp:
            obj = json.loads(fp.read().decode("utf-8"), object_pairs_hook=refuse_duplicates)
    except (OSError, UnicodeDecodeError, ValueError, CueInputError) as err:
        return None, [CueProblem(None, None, path, f"cannot read the speaker-label JSON ({err})")]
    if not isinstance(obj, dict):
        return None, [CueProblem(None, None, path, f"expected a JSON object mapping speaker to label, got "
                                                   f"{type(obj).__name__}")]
    problems = []
    labels = {}
    for speaker, label in obj.items():
        reason = key_problem(speaker)
        if reason is None and (isinstance(label, bool) or not isinstance(label, int) or not 0 <= label <= _MAX_LABEL):
            reason = f"label must be a non-negative integer, got {label!r}"
        if reason:
            problems.append(CueProblem(None, speaker, path, reason))
        else:
            labels[speaker] = label
    reported = set()
    for speaker, line in speakers:
        if speaker not in obj and speaker not in reported:
            reported.add(speaker)
            problems.append(CueProblem(None, speaker, path, "speaker of the list has no label", line=line))
    return labels, problems


def write_labels(directory: str, labels: dict[str, int]) -> None:
    os.makedirs(directory)
    speakers = sorted(labels, key=utf8)
    save_npy(os.path.join(directory, LABEL_SPEAKERS_NAME), bytes_array([utf8(s) for s in speakers]))
    save_npy(os.path.join(directory, LABEL_VALUES_NAME), np.array([labels[s] for s in speakers], dtype=INDEX_DTYPE))
