"""``speechpack plan`` estimates what decoding a compressed pack costs: seconds of audio decoded per epoch and the
core time at the decoders' measured speed; a pcm16 plan has no such line."""

from __future__ import annotations

import numpy as np

from factories.asr import librivox_span_pack
from factories.compressed import recode
from factories.tse import real_mixtures_config
from speechpack.loader.pack import open_pack
from speechpack.loader.plan.decode_cost import DECODE_SPEED, FLAC_FRAME
from speechpack.loader.plan.planning_report import plan_report


def test_plan_counts_the_whole_utterances_asr_decodes(tmp_path):
    pack = recode(librivox_span_pack(tmp_path, count=12, seed=3, seconds=(0.6, 2.5), words=4), tmp_path / "flac",
                  "flac", block_frames=8000)
    config = {"task": "asr", "packs": [{"path": pack}],
              "dataset_args": {"batching_strategy": "STATIC", "batch_size": 3, "drop_remainder": False}}
    report = plan_report(config, "train", epochs=2)
    total = float(open_pack(pack).duration.sum())
    for epoch in report.epochs:
        assert epoch.decode.seconds.keys() == {"flac"}
        assert np.isclose(epoch.decode.seconds["flac"], total)  # every utterance decoded whole, once
        assert np.isclose(epoch.decode.core_seconds, total / DECODE_SPEED["flac"])
    assert f"decode: about {total:.1f} s of flac" in report.describe()


def test_plan_counts_a_window_and_its_lead_in_per_segment_of_a_mixture(real_audio, wesep_list, tmp_path):
    config = real_mixtures_config(real_audio, wesep_list, tmp_path / "tse", count=6, seconds=1.5, seconds_step=0.3,
                                  seconds_cycle=3, start_step=0.1, partner=1)
    assert "decode" not in plan_report(config, "train").describe()
    pcm16 = config["packs"][0]["path"]
    config["packs"][0]["path"] = recode(pcm16, tmp_path / "opus", "opus", block_frames=4000)
    report = plan_report(config, "train")
    # six mixtures of two speakers: three segments each, a 0.5 s chunk plus half a 0.25 s block before it (Opus
    # decodes from a block's start)
    assert np.isclose(report.epochs[0].decode.seconds["opus"], 6 * 3 * 0.625)
    assert "decode: about 11.2 s of opus at 140x real time per epoch" in report.describe()
    config["packs"][0]["path"] = recode(pcm16, tmp_path / "flac", "flac", block_frames=4000)
    # FLAC seeks to the frame holding the chunk's start: half a 4096-sample frame before it, capped by the segment
    lead_in = FLAC_FRAME / 2 / 16000
    seconds = plan_report(config, "train").epochs[0].decode.seconds["flac"]
    assert np.isclose(seconds, 6 * 3 * (0.5 + lead_in))
