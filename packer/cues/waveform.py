"""``wav/waveform`` (audio cue): enrollment recordings, decoded, resampled to the pack's rate and stored as int16.

Resource value: a list of ``{"utt_id", "path"}``.  Decoding, resampling (soxr) and quantisation are the ones the
pack's own audio goes through (``packer.audio``), so an enrollment reads back exactly like a target would.  Every
channel of the file is kept (WeSep hands the processor ``[C, T]``).
"""

from __future__ import annotations

from speechpack.packer.audio import AudioError, StoredAudio, read_audio, resample, to_stored
from speechpack.packer.cues.payload import FlatPayload, LoadContext, file_provenance
from speechpack.packer.cues.problem import CueInputError
from speechpack.packer.cues.resource import EntryContext, ItemSource, entry_path, entry_utt_id

READS_FILES = True
provenance = file_provenance


def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
    return ItemSource(entry_path(entry, context)), entry_utt_id(entry)


def load(source: ItemSource, context: LoadContext) -> tuple[StoredAudio, int]:
    """The stored audio and the file's original rate."""
    try:
        audio = read_audio(source.path, int16_at=context.sample_rate)
    except AudioError as err:
        raise CueInputError(err.reason) from None
    return to_stored(resample(audio, context.sample_rate)), audio.sample_rate


class Payload(FlatPayload):
    representation = "waveform"

    def add(self, source: ItemSource, loaded: tuple[StoredAudio, int]) -> None:
        stored, orig_rate = loaded
        offset = self.append(stored.data)
        self.rows.append((offset, stored.channels, stored.length, stored.scale, orig_rate))

    def finish(self) -> dict:
        super().finish()
        return {"sample_rate": self.context.sample_rate}
