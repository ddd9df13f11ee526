"""Speaker cues per row: WeSep's cue layer (docs/loader.md "Cues") over a pack's cue banks.

``resolve_cues(args, packs)`` is WeSep's ``build_collect_keys`` for the cues: it checks ``dataset_args.cues``
against every pack's ``cues.yaml`` (a used cue the data lacks, ``required: true`` on a cue the data does not
guarantee) and returns one ``CueField`` per used cue, in ``dataset_args.cues`` order, with its collate spec.
``CueField.read(...)`` gives one slot's value, or ``None`` when an optional cue is missing:

- the lookup key is the speaker (``spk_id``) or ``"<key>::<speaker>"`` (``mix_spk_id``);
- ``random`` takes one of the key's entries with the batch's counter-based draws, ``fixed`` the first;
- a missing key, or an entry that cannot be used, is an error naming the cue, key and pack when the cue is
  required by the experiment or guaranteed by the data (WeSep's processors raise on ``guaranteed``); otherwise
  the slot is missing (filled at collation, ``<field>_present`` False);
- the value itself comes from the cue's representation (``loader.tse.cues.values``: waveforms at the loader's rate
  ``[C, T]``, embeddings ``[D]``, video ``[H, W, C, T]`` uint8 and the other time-varying cues cut to the row's
  audio chunk, textual phoneme ids int64 ``[L]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.loader.tse.args import DatasetArgs
from speechpack.loader.tse.decode import CUE_FIELDS, FieldSpec, resolve_field
from speechpack.loader.tse.cues.request import CueRequest
from speechpack.loader.tse.cues.values import ChunkInfo, cue_value
from speechpack.schemas.cues import CueSpec, lookup_key
from speechpack.schemas.errors import SpeechpackError

#: Uniform draws each cue takes per row from the batch's generator: the entry, then textual's span length and start.
DRAWS_PER_CUE = 3


class CueError(SpeechpackError):
    """A cue a row needs cannot be read: its lookup key is absent, or its resource is unusable."""


@dataclass
class CueField:
    """One used cue: its batch field, its collate spec, and per pack the bank and ``cues.yaml`` entry."""

    request: CueRequest
    field: FieldSpec
    representation: str
    required: bool
    banks: list  # per pack: loader.pack.cues.CueBank
    specs: list[CueSpec]  # per pack

    @property
    def name(self) -> str:
        return self.request.name

    def read(self, pack_id: int, pack_path: str, sample_key: str, speaker: str, chunk: ChunkInfo,
             draws: np.ndarray, source_key: str | None = None) -> np.ndarray | None:
        """The slot's cue value, or ``None`` when it is missing and neither required nor guaranteed.

        ``source_key``: an online mixture's source utterance (``mix_spk_id`` lookups use it, not the mix key)."""
        bank, spec = self.banks[pack_id], self.specs[pack_id]
        strict = self.required or spec.guaranteed
        key = lookup_key(spec.policy_key, sample_key, speaker, source_key)
        entries = bank.find(key)
        if len(entries) == 0:
            if strict:
                raise CueError(f"cue {self.name!r}: no entry for lookup key {key!r} ({spec.policy_key}) in pack "
                               f"{pack_path} (" + ("required by dataset_args.cues" if self.required else
                                                   "cues.yaml marks it guaranteed") + ")")
            return None
        entry = entries[pick_entry(len(entries), spec.policy_type, float(draws[0]))]
        try:
            return cue_value(self.representation).value(bank, spec, bank.entry_item(entry), chunk, draws)
        except (ValueError, IndexError, KeyError) as err:
            if strict:
                raise CueError(f"cue {self.name!r}: cannot use the entry of lookup key {key!r} in pack {pack_path}: "
                               f"{err}") from None
            return None

def resolve_cues(args: DatasetArgs, packs: list) -> list[CueField]:
    """The used cues checked against every pack (WeSep's three build_collect_keys errors, as ``ConfigError``)."""
    fields = []
    for request in args.used_cues:
        where = f"dataset_args.cues.{request.name}"
        specs, banks = [], []
        for pack in packs:
            config = pack.cues_config
            names = [spec.name for spec in config.cues] if config is not None else []
            if request.name not in names or request.name not in pack.cues:
                listed = f"its cues.yaml lists {', '.join(names)}" if names else "it was built without cues"
                raise ConfigError(f"{where}: the experiment uses cue {request.name!r}, but pack {pack.path} does not "
                                  f"provide it ({listed})")
            specs.append(config.cue(request.name))
            banks.append(pack.cues[request.name])
        representations = {spec.representation for spec in specs}
        if len(representations) > 1:
            raise ConfigError(f"{where}: packs give cue {request.name!r} as different representations "
                              f"({', '.join(sorted(representations))}); they cannot share a batch")
        not_guaranteed = [pack.path for pack, spec in zip(packs, specs) if not spec.guaranteed]
        required = request.required if request.required is not None else not not_guaranteed
        if required and not_guaranteed:
            raise ConfigError(f"{where}.required: the experiment requires cue {request.name!r} in every sample, but "
                              f"cues.yaml of pack {not_guaranteed[0]} marks it optional (guaranteed: false)")
        defaults = [_cue_defaults(spec) for spec in specs]
        if any(d != defaults[0] for d in defaults[1:]):
            raise ConfigError(f"{where}: the packs' cues.yaml give cue {request.name!r} different collate blocks "
                              f"({defaults[0]} vs {next(d for d in defaults if d != defaults[0])}); set them in "
                              f"{where} instead")
        for pack, spec in zip(packs, specs):
            _check_spec(spec, pack.path)
        field = resolve_field(CUE_FIELDS[request.name], defaults[0], request.collate_defaults(),
                              args.collate_of(CUE_FIELDS[request.name]), required)
        fields.append(CueField(request=request, field=field, representation=specs[0].representation,
                               required=required, banks=banks, specs=specs))
    return fields


def label_field(args: DatasetArgs) -> FieldSpec:
    """``speaker_label``: always emitted, -100 where a speaker has no label (WeSep's base spec + overrides)."""
    return resolve_field("speaker_label", collate=args.collate_of("speaker_label"))


def _cue_defaults(spec: CueSpec) -> dict[str, Any]:
    collate = spec.collate
    values = {"default_shape": collate.default_shape, "fill_value": collate.fill_value,
              "emit_present": collate.emit_present}
    return {key: value for key, value in values.items() if value is not None}


def _check_spec(spec: CueSpec, pack_path: str) -> None:
    check = cue_value(spec.representation).problem
    problem = check(spec) if check is not None else None
    if problem:
        raise ConfigError(f"cue {spec.name!r} of pack {pack_path}: {problem}")


def pick_entry(count: int, policy: str, u: float) -> int:
    """Which of a key's ``count`` entries: the first (``fixed``), or the one ``u`` in [0, 1) falls on (``random``)."""
    if policy == "fixed":
        return 0
    return min(int(u * count), count - 1)


__all__ = ["ChunkInfo", "CueError", "CueField", "DRAWS_PER_CUE", "label_field", "pick_entry", "resolve_cues"]
