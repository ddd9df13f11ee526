"""Cues read from media files FFmpeg decodes: ``wav/waveform`` (audio cue) and ``mp4/raw_video`` (visual cue).

``wav/waveform``: enrollment recordings, decoded, resampled to the pack's rate and stored as int16.  Resource value:
a list of ``{"utt_id", "path"}``.  Decoding, resampling (soxr) and quantisation are the ones the pack's own audio
goes through (``packer.audio``), so an enrollment reads back exactly like a target would.  Every channel of the
file is kept (WeSep hands the processor ``[C, T]``).

``mp4/raw_video``: face videos decoded once, at build time, to uint8 RGB frames.  Resource value: a list of
``{"utt_id", "path"}``.  WeSep decodes with ``torchvision.io.read_video`` in every epoch; here PyAV decodes each
file once (any container FFmpeg reads, despite the ``mp4`` type name) to ``[T, H, W, 3]`` at its native size and
frame rate, and the stream's average frame rate is kept for the loader's alignment to audio.  A file FFmpeg cannot
decode, without a video stream or frames, with fewer frames than its container declares (FFmpeg stops quietly at the
end of a truncated file), or whose frame size changes is refused.
"""

from __future__ import annotations

import numpy as np

from speechpack.packer.audio import AudioError, StoredAudio, read_audio, resample, to_stored
from speechpack.packer.cues.payload import FlatWriter, LoadContext
from speechpack.packer.cues.resource import CueInputError, ItemSource


class WaveformWriter(FlatWriter):
    representation = "waveform"

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> tuple[StoredAudio, int]:
        """The stored audio and the file's original rate."""
        try:
            audio = read_audio(source.path, int16_at=context.sample_rate)
        except AudioError as err:
            raise CueInputError(err.reason) from None
        return to_stored(resample(audio, context.sample_rate)), audio.sample_rate

    def add(self, source: ItemSource, loaded: tuple[StoredAudio, int]) -> None:
        stored, orig_rate = loaded
        offset = self.append(stored.data)
        self.rows.append((offset, stored.channels, stored.length, stored.scale, orig_rate))

    def finish(self) -> dict:
        super().finish()
        return {"sample_rate": self.context.sample_rate}


class RawVideoWriter(FlatWriter):
    representation = "raw_video"

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> tuple[np.ndarray, float]:
        """``(frames [T, H, W, 3] uint8, fps)``."""
        import av  # imported lazily, as in packer.audio

        frames = []
        try:
            with av.open(source.path) as container:
                if not container.streams.video:
                    raise CueInputError("no video stream")
                stream = container.streams.video[0]
                for frame in container.decode(stream):
                    frames.append(frame.to_ndarray(format="rgb24"))
                rate = stream.average_rate or stream.guessed_rate
                declared = stream.frames  # 0 when the container does not say
        except (av.error.FFmpegError, ValueError) as err:
            raise CueInputError(f"cannot decode video ({err})") from None
        if not frames:
            raise CueInputError("the video has no frames")
        if len(frames) < declared:
            raise CueInputError(f"truncated: the container declares {declared} frames, {len(frames)} decode")
        if not rate or rate <= 0:
            raise CueInputError("the video stream has no frame rate")
        if len({frame.shape for frame in frames}) != 1:
            raise CueInputError(f"the frame size changes within the video ({sorted({f.shape for f in frames})})")
        return np.stack(frames), float(rate)

    def add(self, source: ItemSource, loaded: tuple[np.ndarray, float]) -> None:
        frames, fps = loaded
        offset = self.append(frames)
        self.rows.append((offset, *frames.shape, fps))
