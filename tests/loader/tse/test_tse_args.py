"""The TSE ``dataset_args`` ranges (docs/loader.md): every numeric value out of range is a
``ConfigError`` naming its key, from ``from_dict``, from a directly built args object, and from ``speechpack plan``
(a dry run that reads no audio), before anything is allocated or resampled.  Also the shared ``normalize``
vocabulary (issue 14 item 6)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader.asd.args import parse_dataset_args as parse_asd
from speechpack.loader.asr.args import parse_dataset_args as parse_asr
from speechpack.loader.config import ConfigError, LoaderConfig
from speechpack.loader.tse.args import DatasetArgs, MixArgs, TimelineArgs
from speechpack.loader.tse.cues.request import CueRequest

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

ONLINE = {"online_mix": True, "num_speakers": {"distribution": [0.0, 1.0, 0.0], "max_speakers": 2}}

#: (the key an error must name, the bad dataset_args)
BAD_VALUES = [
    ("resample_rate", {"resample_rate": 1_000_000_000}),  # used to SIGSEGV inside soxr
    ("resample_rate", {"resample_rate": 10}),
    ("resample_rate", {"resample_rate": 0}),
    ("chunk_len", {"chunk_len": 10 ** 12}),
    ("chunk_len", {"chunk_len": -1}),
    ("batch_size", {"batch_size": 10 ** 18}),  # used to exhaust memory while planning
    ("batch_size", {"batch_size": 0}),
    ("batching.batch_size", {"batching": {"type": "static", "batch_size": 10 ** 18}}),
    ("batching.max_frames", {"batching": {"type": "budget", "max_frames": 10 ** 26}}),  # used to overflow
    ("batching.max_num_elements", {"batching": {"type": "budget", "max_num_elements": 10 ** 21}}),
    ("batching.min_batch", {"batching": {"type": "budget", "max_frames": 1000, "min_batch": 10 ** 9}}),
    ("batching.max_batch", {"batching": {"type": "budget", "max_frames": 1000, "max_batch": 10 ** 9}}),
    ("batching.num_seqs_multiple_of", {"batching": {"type": "budget", "max_frames": 1000,
                                                    "num_seqs_multiple_of": 10 ** 9}}),
    ("batching.sort_window", {"batching": {"type": "budget", "max_frames": 1000, "sort_window": 10 ** 12}}),
    ("train_window", {"train_window": 10 ** 12}),
    ("hist_frames", {"train_window": 1000, "hist_frames": 10 ** 12}),
    ("filter_len_args.max_num_seconds", {"filter_len_args": {"max_num_seconds": math.inf}}),
    ("filter_len_args.min_num_seconds", {"filter_len_args": {"min_num_seconds": -1}}),
    ("filter_len_args.min_num_seconds", {"filter_len_args": {"min_num_seconds": math.nan}}),
    ("num_speakers.max_speakers", {**ONLINE, "num_speakers": {"distribution": [0, 0, 1], "max_speakers": 10 ** 6}}),
    ("num_speakers.distribution", {**ONLINE, "num_speakers": {"distribution": [math.nan, 1, 0]}}),
    ("mix_snr.range", {**ONLINE, "mix_snr": {"range": [-5, 1e9]}}),
    ("mix_snr.range", {**ONLINE, "mix_snr": {"range": [-math.inf, 10]}}),
    ("mix_snr.gain", {**ONLINE, "mix_snr": {"gain": [-1e6, 0]}}),
    ("mix_snr.gain", {**ONLINE, "mix_snr": {"gain": [math.nan, 0]}}),
    ("noise_snr", {**ONLINE, "noise_snr": [-5, 1e30]}),
    ("reverb_prob", {**ONLINE, "reverb_prob": 1.5, "rir_banks": [{"path": "rirs"}]}),
    ("noise_prob", {**ONLINE, "noise_prob": -0.1, "noise_banks": [{"path": "noises"}]}),
    ("timeline.two_speaker.middle_mode.containment", {**ONLINE, "timeline": {"two_speaker": {
        "middle_mode": {"containment": "2"}}}}),
    ("timeline.two_speaker.overlap_ratio", {**ONLINE, "timeline": {"two_speaker": {"overlap_ratio": [0.2, 3]}}}),
    ("timeline.extra_speaker_activity", {**ONLINE, "timeline": {"extra_speaker_activity": [math.nan, 1]}}),
    ("timeline.two_speaker.overlap_position", {**ONLINE, "timeline": {"two_speaker": {
        "overlap_position": {"head": 1, "middle": -1}}}}),
    ("reverb_conf.rt60", {**ONLINE, "reverb_conf": {"rt60": [0.1, 1e6]}}),
    ("reverb_conf.min_max_room", {**ONLINE, "reverb_conf": {"min_max_room": [[3, 3, 2.5], [1e9, 6, 4]]}}),
    ("shuffle_args.shuffle_size", {"shuffle_args": {"shuffle_size": 0}}),
    ("online_buffer_size", {"online_buffer_size": 10 ** 12}),
    ("cue_processing.audio.noise_enroll_prob", {"cue_processing": {"audio": {"noise_enroll_prob": 2}}}),
    ("cues.audio.default_shape", {"cues": {"audio": {"use": True, "default_shape": [1, 10 ** 6, 10 ** 6]}}}),
    ("collate.audio_aux.default_shape", {"cues": {"audio": {"use": True}},
                                         "collate": {"audio_aux": {"default_shape": [10 ** 5, 10 ** 5]}}}),
]


@pytest.mark.parametrize("key, dataset_args", BAD_VALUES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BAD_VALUES)])
def test_a_bad_value_is_refused_naming_its_key(key, dataset_args):
    with pytest.raises(ConfigError, match=f"config.dataset_args.{key}[:\\[]"):
        LoaderConfig.from_dict({"packs": [{"path": "nowhere"}], "dataset_args": dataset_args})


@pytest.mark.parametrize("key, dataset_args", BAD_VALUES[:6], ids=[k for k, _ in BAD_VALUES[:6]])
def test_plan_refuses_a_bad_value_before_reading_a_pack(key, dataset_args, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    body = "\n".join(f"  {name}: {value!r}" for name, value in dataset_args.items())
    cfg.write_text(f"packs:\n  - path: {tmp_path / 'no-such-pack'}\ndataset_args:\n{body}\n")
    result = CliRunner().invoke(main, ["plan", str(cfg)])
    assert result.exit_code == 1, result.output
    assert f"dataset_args.{key}:" in result.output


def test_a_directly_built_args_object_is_checked_too():
    with pytest.raises(ConfigError, match=r"^dataset_args.resample_rate: must be in \[1000, 384000\] Hz"):
        DatasetArgs(resample_rate=10 ** 9)
    with pytest.raises(ConfigError, match=r"^dataset_args.chunk_short_policy"):
        DatasetArgs(chunk_short_policy="stretch")
    with pytest.raises(ConfigError, match=r"^dataset_args.mix_snr.range"):
        MixArgs(snr_range=(math.nan, 1.0))
    with pytest.raises(ConfigError, match=r"^dataset_args.num_speakers.max_speakers"):
        MixArgs(distribution=(0.0, 0.0, 1.0), max_speakers=2)
    with pytest.raises(ConfigError, match=r"^dataset_args.timeline.two_speaker.middle_mode"):
        TimelineArgs(middle_mode=(-1.0, 1.0))
    with pytest.raises(ConfigError, match=r"^dataset_args.cues.visual.default_shape"):
        CueRequest(name="visual", default_shape=(2 ** 20, 2 ** 20))


def test_values_at_the_edges_of_the_ranges_are_accepted():
    args = DatasetArgs.from_dict({"resample_rate": 384_000, "chunk_len": 2 ** 28, "batch_size": 2 ** 20,
                                  "filter_len_args": {"min_num_seconds": 0, "max_num_seconds": 0}})
    assert (args.resample_rate, args.chunk_len, args.batch_size) == (384_000, 2 ** 28, 2 ** 20)
    mix = DatasetArgs.from_dict({**ONLINE, "mix_snr": {"range": [-100, 100], "gain": [0, 0]}}).mix
    assert mix.snr_range == (-100.0, 100.0)
    assert DatasetArgs().chunk_samples(16000) == 48000 and DatasetArgs(chunk_len=100).chunk_samples(16000) == 100


def test_one_normalisation_vocabulary_across_tasks():
    for spelling in ("muvap", True, {"type": "muvap"}):
        assert DatasetArgs.from_dict({"normalize": spelling}).normalize == "muvap"
        assert parse_asd({"normalize": spelling}, "dataset_args").normalize == "muvap"
    for spelling in ("none", False, None):
        assert DatasetArgs.from_dict({"normalize": spelling}).normalize == "none"
        assert parse_asd({"normalize": spelling}, "dataset_args").normalize == "none"
        assert parse_asr({"normalize": spelling}, "dataset_args").normalize == "none"
    assert parse_asr({"normalize": "utterance"}, "dataset_args").normalize_audio is True
    # Omnilingual's own key stays a drop-in alias.
    assert parse_asr({"normalize_audio": True}, "dataset_args").normalize == "utterance"
    assert parse_asr({"normalize_audio": True, "normalize": "utterance"}, "dataset_args").normalize_audio
    with pytest.raises(ConfigError, match="dataset_args.normalize: 'none' contradicts normalize_audio"):
        parse_asr({"normalize_audio": True, "normalize": "none"}, "dataset_args")
    # A word of the vocabulary that a task does not build is named as such.
    with pytest.raises(ConfigError, match=r"dataset_args.normalize: 'utterance' is not one of muvap, none "
                                          r"\(utterance is not built for this task\)"):
        DatasetArgs.from_dict({"normalize": "utterance"})
    with pytest.raises(ConfigError, match=r"dataset_args.normalize: 'muvap' is not one of utterance, none"):
        parse_asr({"normalize": "muvap"}, "dataset_args")
