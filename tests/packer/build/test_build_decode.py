"""What a build's decoding step hands the writer: statistics measured where the audio is decoded (the workers, when
they stream to one writer) equal the writer's own, and damaged or missing inputs keep their messages (a FLAC file
cut short is found when it is decoded and names its line and file)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.adapters.wesep_lines import load_wesep_sample, read_wesep_list
from speechpack.packer.audio import AudioError, StoredAudio, int16_statistics, probe_audio, read_audio
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.build.shards import decode_measured
from speechpack.schemas.errors import BuildError
from factories import Mix


def test_missing_and_directory_paths_keep_their_messages(tmp_path):
    for read in (probe_audio, read_audio):
        with pytest.raises(AudioError, match="file not found"):
            read(str(tmp_path / "absent.wav"))
        (tmp_path / "folder.wav").mkdir(exist_ok=True)
        with pytest.raises(AudioError, match="not a regular file"):
            read(str(tmp_path / "folder.wav"))


def test_streamed_workers_measure_what_the_writer_would(real_audio, wesep_list):
    """``decode_measured`` (run in the pool's workers when they stream to one writer) attaches each audio
    segment's statistics; they are exactly the writer's."""
    ps, alsa = real_audio("pocketsphinx", 2), real_audio("alsa", 2)
    case = wesep_list([Mix("a", tuple(ps), subtype="PCM_16"), Mix("b", tuple(alsa), seconds=0.5, start=0.1, layout="stereo")])
    load = functools.partial(load_wesep_sample, sample_rate=16000)
    for line in read_wesep_list(str(case.list_path)).lines:
        sample = decode_measured(load, line)
        segments = [seg for segs in sample.streams.values() for seg in segs]
        assert segments and all(isinstance(seg, StoredAudio) for seg in segments)
        for seg in segments:
            assert seg.stats == int16_statistics(seg.data, seg.scale)


def flac_copy(path: str, out, subtype: str = "PCM_16", channels: int = 1) -> str:
    data, rate = soundfile.read(path, dtype="float32")
    data = np.stack([data] * channels, axis=1) if channels > 1 else data
    soundfile.write(str(out), data, rate, subtype=subtype)
    return str(out)


def test_a_cut_flac_file_still_fails_its_line(real_audio, wesep_list, tmp_path):
    """Cut short, a FLAC file still declares its length; the build finds the damage when it decodes (libsndfile's
    probe reads only the metadata too) and names the line and file."""
    path = Path(flac_copy(real_audio("pocketsphinx", 1)[0], tmp_path / "cut.flac"))
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    probe_audio(str(path))  # the header is intact: the probe (metadata only) accepts the file
    listed = tmp_path / "cut.list"
    listed.write_text(json.dumps({"key": "cut", "spk": ["s1"], "src": {"s1": [str(path)]}}) + "\n")
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    [problem] = err.value.problems
    assert problem.line == 1 and problem.path == str(path) and "cannot decode audio" in problem.reason


def test_a_channel_count_mismatch_is_named_as_one(real_audio):
    """A file whose decoded channel count differs from its header's (same length) says so, instead of "decoded to
    N samples per channel, the file headers promised N"."""
    from speechpack.packer.build.shards import check_decoded
    from speechpack.packer.build.plan import PackedSample, SamplePlan
    from speechpack.schemas.constants import STREAM_SOURCE

    data, _rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")
    frames = len(data)
    decoded = PackedSample(key="k", speakers=("s",), line=3, orig_sample_rate=16000, num_frames=frames,
                           provenance={}, streams={STREAM_SOURCE: [StoredAudio(data[None, :], 1.0)]})
    plan = SamplePlan(line=3, key="k", num_frames=frames, elements={STREAM_SOURCE: 2 * frames})
    problem = check_decoded(decoded, plan)
    assert problem.reason == (f"stream 'source' decoded to {frames} rows, the file headers promised {2 * frames}: "
                              f"1 channel(s) decoded, 2 promised (a file changed, or its header lies)")
    shorter = SamplePlan(line=3, key="k", num_frames=frames + 5, elements={STREAM_SOURCE: frames + 5})
    assert check_decoded(decoded, shorter).reason.startswith(f"decoded to {frames} samples per channel, the file "
                                                             f"headers promised {frames + 5}")


def test_the_decoding_thread_measures_only_while_the_writer_is_behind(real_audio):
    """``submit_decoded``: a sample handed over while the writer thread has half its queue or more waiting arrives
    measured (exactly the writer's statistics); one handed to an idle writer arrives as decoded."""
    import threading

    from speechpack.packer.build.executor import CONSUMER_QUEUE, BackgroundConsumer
    from speechpack.packer.build.plan import PackedSample
    from speechpack.packer.build.shards import submit_decoded
    from speechpack.schemas.constants import STREAM_SOURCE

    data, _rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")

    def sample(key: str) -> PackedSample:
        return PackedSample(key=key, speakers=("s",), line=1, orig_sample_rate=16000, num_frames=len(data),
                            provenance={}, streams={STREAM_SOURCE: [StoredAudio(data[None, :], 1.0)]})

    taken, release = threading.Event(), threading.Event()
    received: list = []

    def consume(item) -> None:
        taken.set()
        release.wait()
        received.append(item)

    consumer = BackgroundConsumer(consume)
    assert not consumer.backlogged()
    submit_decoded(consumer, "a problem passes as it is")  # the writer takes it and waits on ``release``
    assert taken.wait(10)
    for index in range(CONSUMER_QUEUE // 2):
        submit_decoded(consumer, sample(f"idle-{index}"))
    assert consumer.backlogged()
    submit_decoded(consumer, sample("behind"))
    release.set()
    consumer.close()
    assert received[0] == "a problem passes as it is"
    stats = {s.key: s.streams[STREAM_SOURCE][0].stats for s in received[1:]}
    assert all(stats[f"idle-{index}"] is None for index in range(CONSUMER_QUEUE // 2))
    assert stats["behind"] == int16_statistics(data[None, :], 1.0)
