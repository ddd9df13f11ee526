"""The ASR loader task (``task: asr``) on packs built from the librivox clips: batches, filters, LENGTH and STATIC
batching, tokenizers, normalisation, fbank, SpecAugment and corpus/language weighting."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from speechpack.loader import build_loader, open_pack
from speechpack.loader.asr.args import parse_dataset_args
from speechpack.loader.asr.features import fbank
from speechpack.loader.asr.task import prepare
from speechpack.loader.config import ConfigError, LoaderConfig
from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl
from speechpack.packer.adapters.asr_parquet import build_parquet
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.constants import STREAM_AUDIO
from factories import require
from factories.asr import librivox_clips, librivox_span_pack, write_jsonl_manifest, write_parquet_dataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
RATE = 16000


@pytest.fixture(scope="module")
def clips():
    return librivox_clips()


@pytest.fixture(scope="module")
def parquet_pack(tmp_path_factory, clips):
    """Three groups: librivox/en (2 train rows), librivox/fr (1), austen/en (2)."""
    require("pyarrow", "parquet")
    root = tmp_path_factory.mktemp("asr")
    data = write_parquet_dataset(root / "data", clips)
    return build_parquet(str(data), BuildOptions(out=str(root / "pq"), progress=False), split="train").out


@pytest.fixture(scope="module")
def spans_pack(tmp_path_factory):
    """40 spans (0.5-2.5 s) of the clips, corpus austen, language fr, two words a second: many lengths for LENGTH
    batching."""
    return librivox_span_pack(tmp_path_factory.mktemp("spans"), 40, seed=5, seconds=(0.5, 2.5),
                              words=lambda seconds: max(1, int(seconds * 2)), key="span{}", corpus="austen",
                              language="fr")


def config(*packs, weighting=None, hours_beta=False, **dataset_args) -> dict:
    cfg = {"task": "asr", "packs": [{"path": p, **({"hours_beta": True} if hours_beta else {})} for p in packs],
           "dataset_args": dataset_args}
    if weighting is not None:
        cfg["weighting"] = weighting
    return cfg


def epoch(loader) -> list[dict]:
    return list(loader)


def test_batches_hold_the_audio_text_language_corpus_and_key(parquet_pack, clips):
    loader = build_loader(config(parquet_pack, batching_strategy="STATIC", batch_size=2, shuffle=False), "val")
    pack = open_pack(parquet_pack)
    texts = {c.key: c.text for c in clips}
    by_key = {k: i for i, k in enumerate(pack.keys.tolist())}
    tokenizer = loader.tokenizer  # public: what sizes a model's output layer
    assert tokenizer is loader.builder.tokenizer and len(tokenizer) > 0
    seen = []
    for batch in epoch(loader):
        assert batch["source_seqs"].dtype == torch.float32 and batch["target_seqs"].dtype == torch.int64
        for row, key in enumerate(batch["key"]):
            if not batch["valid"][row]:
                continue
            seen.append(key)
            i = by_key[key]
            n = int(batch["source_seq_lens"][row])
            audio = pack.sample(i).targets[0]
            assert n == len(audio)
            np.testing.assert_array_equal(batch["source_seqs"][row, :n].numpy(), audio)
            assert not batch["source_seqs"][row, n:].any()
            s = int(batch["target_seq_lens"][row])
            text = tokenizer.decode(batch["target_seqs"][row, :s].tolist())
            assert text == pack.sample(i).data["text"].tobytes().decode()
            assert text in texts.values()
            assert (batch["target_seqs"][row, s:] == tokenizer.pad_id).all()
            assert batch["corpus"][row] == pack.attrs["corpus"][i]
            assert batch["language"][row] == pack.attrs["language"][i]
    assert sorted(seen) == sorted(pack.keys.tolist())  # every utterance exactly once


def test_length_batches_keep_the_budget_and_the_multiple(spans_pack, parquet_pack):
    budget, multiple = 160_000, 4
    loader = build_loader(config(spans_pack, max_num_elements=budget, num_seqs_multiple_of=multiple,
                                 max_audio_len=40_000), "train", seed=3)
    lengths = loader.builder.unit_lengths()
    valid_items = Counter()
    for e in range(2):
        loader.set_epoch(e)
        plan = loader.dataset.plan(e)
        for b in range(len(plan)):
            items, valid = plan.batch(b)
            assert len(items) % multiple == 0
            assert len(items) * lengths[items].max() <= budget
            if e == 0:
                valid_items.update(items[valid].tolist())
    assert sorted(valid_items) == list(range(loader.builder.units.count)) and set(valid_items.values()) == {1}
    batch = next(iter(loader))
    assert batch["source_seqs"].shape[0] % multiple == 0
    assert batch["source_seqs"].shape[0] * batch["source_seqs"].shape[1] <= budget
    # fairseq2's rule: when fewer than num_seqs_multiple_of rows fit, a batch holds what fits (never over budget)
    small = build_loader(config(parquet_pack, max_num_elements=200_000), "train")
    lengths = small.builder.unit_lengths()
    plan = small.dataset.plan(0)
    for b in range(len(plan)):
        items, _ = plan.batch(b)
        assert len(items) * lengths[items].max() <= 200_000 and (len(items) % 8 == 0 or len(items) < 8)
    with pytest.raises(ConfigError, match="cannot hold the longest kept utterance"):
        build_loader(config(parquet_pack, max_num_elements=int(lengths.max()) - 1), "train")


def test_length_budget_is_rounded_down_to_a_multiple_of_max_audio_len(spans_pack):
    # Omnilingual's add_length_batching: 170,000 with max_audio_len 40,000 is 160,000 (a warning there, the rule here)
    loader = build_loader(config(spans_pack, max_num_elements=170_000, num_seqs_multiple_of=1, max_audio_len=40_000),
                          "train", seed=3)
    assert loader.builder.args.length_budget == 160_000
    lengths = loader.builder.unit_lengths()
    plan = loader.dataset.plan(0)
    costs = [len(items) * int(lengths[items].max()) for items in (plan.batch(b)[0] for b in range(len(plan)))]
    assert max(costs) <= 160_000
    unrounded = build_loader(config(spans_pack, max_num_elements=170_000, num_seqs_multiple_of=1,
                                    max_audio_len=42_000), "train", seed=3)  # 170,000 // 42,000 = 4: 168,000
    plan = unrounded.dataset.plan(0)
    assert unrounded.builder.args.length_budget == 168_000
    assert max(len(items) * int(lengths[items].max()) for items in (plan.batch(b)[0] for b in range(len(plan)))) \
        > 160_000
    # below max_audio_len Omnilingual's rounding would leave 0 (fairseq2 refuses): the budget is kept as given
    assert parse_dataset_args({"max_num_elements": 200_000}, "d").length_budget == 200_000


def test_length_epoch_remainder_is_a_short_batch_or_dropped(spans_pack):
    # Omnilingual's bucket_by_length flushes a partly filled bucket as a short batch, and drops it with
    # drop_remainder: the epoch's remainder (fewer than the multiple) is served alone, every row valid, or dropped
    args = dict(max_num_elements=320_000, max_audio_len=40_000, min_audio_len=9_000, num_seqs_multiple_of=8)
    served = build_loader(config(spans_pack, **args), "train", seed=3)
    kept = served.report().items
    assert kept % 8
    batches = epoch(served)
    assert sorted(b["source_seqs"].shape[0] % 8 for b in batches) == [0] * (len(batches) - 1) + [kept % 8]
    assert all(b["valid"].all() for b in batches) and sum(len(b["valid"]) for b in batches) == kept
    dropped = build_loader(config(spans_pack, drop_remainder=True, **args), "train", seed=3)
    batches = epoch(dropped)
    assert all(b["source_seqs"].shape[0] % 8 == 0 and b["valid"].all() for b in batches)
    assert dropped.report().dropped_items == kept % 8


def test_static_batches_and_drop_remainder(spans_pack):
    loader = build_loader(config(spans_pack, batching_strategy="static", batch_size=6, drop_remainder=True),
                          "train")
    batches = epoch(loader)
    assert len(batches) == 40 // 6 and all(b["source_seqs"].shape[0] == 6 for b in batches)
    assert loader.report().dropped_items == 40 % 6


def test_filters_count_every_removed_item_by_reason(parquet_pack, spans_pack, clips):
    pack = open_pack(spans_pack)
    frames = pack.num_frames
    texts = [pack.sample(i).data["text"].tobytes().decode() for i in range(len(pack))]
    args = dict(min_audio_len=12_000, max_audio_len=36_000, min_samples_per_char=2000,
                filter_long_text_threshold=8, shuffle=False)
    report = build_loader(config(spans_pack, batching_strategy="STATIC", **args), "train").report()
    expected = Counter()
    for n, text in zip(frames, texts):
        if n < 12_000:
            expected["audio_too_short"] += 1
        elif n > 36_000:
            expected["audio_too_long"] += 1
        elif n < 2000 * len(text):  # Omnilingual's order: the speaking rate before the token count
            expected["too_fast"] += 1
        elif len(text) > 8:
            expected["text_too_long"] += 1
    assert list(report.filter_report) == ["audio_too_short", "audio_too_long", "empty_text", "too_fast",
                                          "unknown_only", "text_too_long"]
    assert report.filter_report == {reason: expected[reason] for reason in report.filter_report}
    assert expected["too_fast"] > 0 and expected["text_too_long"] > 0, expected
    assert report.filtered == sum(expected.values()) and report.items == 40 - report.filtered
    assert report.filtered > 0 and report.items > 0


def test_remove_unknown_with_another_packs_vocabulary(parquet_pack, spans_pack, tmp_path, clips):
    # A vocabulary from a pack whose one transcript lacks most letters: unknown characters become <unk> ...
    manifest = write_jsonl_manifest(tmp_path / "tiny.jsonl", [
        {"audio_filepath": clips[0].path, "text": "he man", "language": "en", "corpus": "x"}])
    tiny = build_asr_jsonl(str(manifest), BuildOptions(out=str(tmp_path / "tiny"), progress=False)).out
    kept = build_loader(config(parquet_pack, tokenizer={"char": tiny}, batching_strategy="STATIC", shuffle=False),
                        "val")
    assert loader_text(kept, 0).count("<unk>") > 0
    # ... and with remove_unknown they are deleted from the targets (and counted)
    removed = build_loader(config(parquet_pack, tokenizer={"char": [tiny]}, remove_unknown=True,
                                  batching_strategy="STATIC", shuffle=False), "val")
    text = loader_text(removed, 0)
    assert "<unk>" not in text and set(text) <= set("he man")
    assert removed.builder.unknown_tokens_removed > 0
    assert removed.report().filter_report["empty_text"] == 0


def loader_text(loader, row: int) -> str:
    batch = next(iter(loader))
    n = int(batch["target_seq_lens"][row])
    return loader.tokenizer.decode(batch["target_seqs"][row, :n].tolist())


def test_normalised_audio_and_fbank_features(parquet_pack):
    base = dict(batching_strategy="STATIC", batch_size=5, shuffle=False)
    raw = next(iter(build_loader(config(parquet_pack, **base), "val")))
    norm = next(iter(build_loader(config(parquet_pack, normalize_audio=True, **base), "val")))
    for row in range(5):
        n = int(norm["source_seq_lens"][row])
        expected = torch.nn.functional.layer_norm(raw["source_seqs"][row, :n], (n,))  # Omnilingual's rule
        torch.testing.assert_close(norm["source_seqs"][row, :n], expected, atol=1e-4, rtol=1e-4)
        assert abs(float(norm["source_seqs"][row, :n].double().mean())) < 1e-5
    feats = next(iter(build_loader(config(parquet_pack, use_fbank=True, **base), "val")))
    expected, frames = fbank(raw["source_seqs"], raw["source_seq_lens"], RATE)
    assert feats["source_seqs"].shape[2] == 80
    torch.testing.assert_close(feats["source_seqs"], expected)
    assert feats["source_seq_lens"].tolist() == frames.tolist()


def test_fbank_features_ignore_normalize_audio_as_omnilingual_does(parquet_pack):
    # Omnilingual's fbank path (add_fbank_processing) computes the features from the decoded waveform as it is
    base = dict(batching_strategy="STATIC", batch_size=5, shuffle=False, use_fbank=True)
    raw = next(iter(build_loader(config(parquet_pack, batching_strategy="STATIC", batch_size=5, shuffle=False),
                                 "val")))
    feats = next(iter(build_loader(config(parquet_pack, normalize_audio=True, **base), "val")))
    expected, _ = fbank(raw["source_seqs"], raw["source_seq_lens"], RATE)
    torch.testing.assert_close(feats["source_seqs"], expected, rtol=0, atol=0)


def test_spec_augment_is_drawn_per_batch_and_train_only(parquet_pack):
    args = dict(batching_strategy="STATIC", batch_size=5, shuffle=False, use_fbank=True, spec_aug_p=1.0,
                spec_aug_freq_mask_param=27, spec_aug_time_mask_param=50)
    first = next(iter(build_loader(config(parquet_pack, **args), "train", seed=1)))
    again = next(iter(build_loader(config(parquet_pack, **args), "train", seed=1)))
    other = next(iter(build_loader(config(parquet_pack, **args), "train", seed=2)))
    clean = next(iter(build_loader(config(parquet_pack, **args), "val", seed=1)))
    torch.testing.assert_close(first["source_seqs"], again["source_seqs"])
    assert not torch.equal(first["source_seqs"], other["source_seqs"])
    changed = first["source_seqs"] != clean["source_seqs"]
    assert changed.any() and (first["source_seqs"][changed] == 0).all()  # masks only zero cells
    for row in range(5):
        frames = int(first["source_seq_lens"][row])
        masked_bins = (first["source_seqs"][row, :frames] == 0).all(dim=0).sum()
        assert masked_bins < 27
    wave = dict(args, use_fbank=False)
    w1 = next(iter(build_loader(config(parquet_pack, **wave), "train", seed=1)))
    w0 = next(iter(build_loader(config(parquet_pack, **wave), "val", seed=1)))
    assert not torch.equal(w1["source_seqs"], w0["source_seqs"]) and w1["source_seqs"].shape == w0["source_seqs"].shape


def test_corpus_and_language_weighting_by_hand(parquet_pack, spans_pack):
    packs = [open_pack(parquet_pack), open_pack(spans_pack)]
    cfg = LoaderConfig.from_dict(config(parquet_pack, spans_pack, hours_beta=True, shuffle=True,
                                        batching_strategy="STATIC",
                                        weighting={"beta_corpus": 0.5, "beta_language": 0.5, "epoch_items": 1000}))
    prepared = prepare(cfg, "train", packs, seed=0)
    weighting = prepared.builder.weighting
    items = prepared.builder.items
    assert items.groups == (("austen", "en"), ("austen", "fr"), ("librivox", "en"), ("librivox", "fr"))
    h = {}
    for pack in packs:
        for corpus, languages in pack.manifest.hours_by_corpus.items():
            for language, hours in languages.items():
                h[(corpus, language)] = h.get((corpus, language), 0.0) + hours
    total = sum(h.values())
    austen, librivox = h["austen", "en"] + h["austen", "fr"], h["librivox", "en"] + h["librivox", "fr"]
    wa, wl = (austen / total) ** 0.5, (librivox / total) ** 0.5
    lang = {g: (h[g] / (austen if g[0] == "austen" else librivox)) ** 0.5 for g in h}
    expected = []
    for g in items.groups:
        corpus_share = (wa if g[0] == "austen" else wl) / (wa + wl)
        siblings = [x for x in h if x[0] == g[0]]
        expected.append(corpus_share * lang[g] / sum(lang[x] for x in siblings))
    np.testing.assert_allclose(weighting.targets, expected, rtol=1e-12)
    assert sum(weighting.counts) == 1000
    np.testing.assert_allclose(np.array(weighting.counts) / 1000, expected, atol=1e-3)
    chosen = weighting.items(seed=0, epoch=0)
    realised = Counter(items.groups[g] for g in items.group[chosen].tolist())
    assert [realised[g] for g in items.groups] == list(weighting.counts)
    # Every item of a group appears once before any repeats (librivox/fr has a single utterance).
    spans = np.flatnonzero(items.group == 1)
    picked = chosen[np.isin(chosen, spans)]
    assert set(picked[:len(spans)].tolist()) == set(spans.tolist())
    report = weighting.report(chosen)
    assert report["corpora"]["austen"]["items"] == weighting.counts[0] + weighting.counts[1]


def test_loader_applies_the_group_weighting_of_asr_packs(parquet_pack):
    # ASR packs hold several corpora and languages: the loader weighs (corpus, language) groups, as the task says.
    cfg = config(parquet_pack, hours_beta=True, weighting={"beta_corpus": 0.5, "beta_language": 0.5})
    loader = build_loader(cfg, "train")
    weighting = loader.builder.weighting
    assert loader.weighting is weighting
    report = loader.report().weighting
    assert sum(group["items"] for group in report["packs"].values()) == sum(weighting.counts)
    selected = weighting.items(0, 0)
    assert len(selected) == sum(weighting.counts)


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory):
    """Corpus a: 24 spans of 0.5-2.5 s; corpus b: 16 spans of 2.0-3.0 s (LibriVox speech, one language each)."""
    a = librivox_span_pack(tmp_path_factory.mktemp("a"), 24, seed=1, seconds=(0.5, 2.5), words=2, corpus="a", language="en")
    b = librivox_span_pack(tmp_path_factory.mktemp("b"), 16, seed=2, seconds=(2.0, 3.0), words=2, corpus="b", language="fr")
    return a, b


def test_group_shares_follow_the_weights_times_the_rows_the_filters_keep(two_corpora):
    # Omnilingual samples a partition's rows by weight, then filters them: a group that loses half its rows to
    # min_audio_len gets half its weighted share of the kept items (the seed's stream measured this: docs/asr.md)
    cfg = config(*two_corpora, hours_beta=True, min_audio_len=24_000, batching_strategy="STATIC",
                 weighting={"beta_corpus": 0.5, "beta_language": 0.5, "epoch_items": 1000})
    loader = build_loader(cfg, "train")
    weighting = loader.builder.weighting
    frames = [open_pack(p).num_frames for p in two_corpora]
    keep = np.array([np.mean(f >= 24_000) for f in frames])
    assert 0.2 < keep[0] < 0.8 and keep[1] == 1.0
    expected = np.array(weighting.targets) * keep
    np.testing.assert_allclose(np.array(weighting.counts) / 1000, expected / expected.sum(), atol=1e-3)
    report = loader.report().weighting
    assert report["corpora"]["a"]["items"] == weighting.counts[0] and sum(weighting.counts) == 1000


def test_val_reads_every_utterance_once_without_weighting_or_partition_filters(two_corpora):
    # Omnilingual weighs and applies partition_filters to the training stream only (held-out corpora validate)
    cfg = config(*two_corpora, hours_beta=True, batching_strategy="STATIC", batch_size=4,
                 partition_filters='pc.field("corpus") == "a"',
                 weighting={"beta_corpus": 0.5, "beta_language": 0.5, "epoch_items": 1000})
    train = build_loader(cfg, "train")
    assert set(train.builder.items.groups[g] for g in train.builder.items.group) == {("a", "en")}
    val = build_loader(cfg, "val")
    keys = [k for batch in val for k, v in zip(batch["key"], batch["valid"].tolist()) if v]
    everything = [k for p in two_corpora for k in open_pack(p).keys.tolist()]
    assert sorted(keys) == sorted(everything) and len(keys) == 40
    assert val.report().weighting["corpora"]["b"]["items"] == 16


def test_per_pack_weighting_keeps_pack_order(parquet_pack, spans_pack):
    loader = build_loader(config(parquet_pack, spans_pack, batching_strategy="STATIC") | {
        "packs": [{"path": parquet_pack, "choose": 2}, {"path": spans_pack, "repeat": 0.5}]}, "train")
    assert np.all(np.diff(loader.item_pack) >= 0)
    report = loader.report().weighting
    assert report["packs"][parquet_pack]["items"] == 2 and report["packs"][spans_pack]["items"] == 20


def test_sentencepiece_targets(parquet_pack, tmp_path, clips):
    sentencepiece = require("sentencepiece", "sentencepiece")
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(c.text for c in clips) + "\n")
    sentencepiece.SentencePieceTrainer.Train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=60,
                                             hard_vocab_limit=False, minloglevel=2)
    model = str(tmp_path / "sp.model")
    loader = build_loader(config(parquet_pack, tokenizer={"sentencepiece": model}, batching_strategy="STATIC",
                                 batch_size=5, shuffle=False), "val")
    batch = next(iter(loader))
    processor = sentencepiece.SentencePieceProcessor(model_file=model)
    pack = open_pack(parquet_pack)
    for row in range(5):
        n = int(batch["target_seq_lens"][row])
        key = batch["key"][row]
        text = pack.sample(pack.keys.tolist().index(key)).data["text"].tobytes().decode()
        assert batch["target_seqs"][row, :n].tolist() == processor.encode(text)


def test_config_errors_name_the_key(parquet_pack):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) min_len"):
        parse_dataset_args({"min_len": 3}, "config.dataset_args")
    with pytest.raises(ConfigError, match="example_shuffle_window: 0 \\(whole\\), 1 \\(none\\) or a window, got -2"):
        parse_dataset_args({"example_shuffle_window": -2}, "config.dataset_args")
    with pytest.raises(ConfigError, match="sync_mode: 'UNTIL_NEVER' is not one of UNTIL_FIRST, UNTIL_LAST"):
        parse_dataset_args({"sync_mode": "UNTIL_NEVER"}, "d")
    with pytest.raises(ConfigError, match="sync_batches: speechpack always gives every rank"):
        parse_dataset_args({"sync_batches": False}, "d")
    with pytest.raises(ConfigError, match="d.partition_filters: cannot read"):
        parse_dataset_args({"partition_filters": "__import__('os')"}, "d")
    with pytest.raises(ConfigError, match="batching_strategy: 'BUCKET' is not one of LENGTH, STATIC"):
        parse_dataset_args({"batching_strategy": "BUCKET"}, "d")
    with pytest.raises(ConfigError, match="spec_aug_p: must be in"):
        parse_dataset_args({"spec_aug_p": 1.5}, "d")
    with pytest.raises(ConfigError, match="d.tokenizer: expected 'char'"):
        parse_dataset_args({"tokenizer": "bpe"}, "d")
    with pytest.raises(ConfigError, match="max_audio_len: 5 is below min_audio_len 10"):
        parse_dataset_args({"min_audio_len": 10, "max_audio_len": 5}, "d")
    with pytest.raises(Exception, match="model file .* not found"):
        build_loader(config(parquet_pack, tokenizer={"sentencepiece": "/nonexistent.model"}), "train")
    args = parse_dataset_args(None, "d")
    assert args.batching.budget == 3_200_000 and args.batching.multiple_of == 8 and args.tail == "pad"


def test_multichannel_audio_is_mixed_to_mono_with_utf8_labels(tmp_path, clips):
    import soundfile

    a = soundfile.read(clips[0].path, dtype="int16")[0][:24000]
    b = soundfile.read(clips[1].path, dtype="int16")[0][:24000]
    soundfile.write(tmp_path / "stereo.wav", np.stack([a, b], axis=1), RATE, subtype="PCM_16")
    manifest = write_jsonl_manifest(tmp_path / "m.jsonl", [
        {"audio_filepath": "stereo.wav", "text": "deux voix, zwei Stimmen", "language": "français",
         "corpus": "café"}])
    pack = build_asr_jsonl(str(manifest), BuildOptions(out=str(tmp_path / "pack"), progress=False)).out
    assert open_pack(pack).stored_segment(STREAM_AUDIO, 0)[0].shape == (2, 24000)  # the pack keeps both channels
    batch = next(iter(build_loader(config(pack, batching_strategy="STATIC", batch_size=1), "val")))
    expected = (a.astype(np.float32) + b.astype(np.float32)) / 2 / 32768
    np.testing.assert_allclose(batch["source_seqs"][0].numpy(), expected, atol=1e-7)
    assert batch["language"] == ["français"] and batch["corpus"] == ["café"]  # UTF-8 labels


def test_workers_and_resume_give_the_same_batches(spans_pack):
    cfg = config(spans_pack, max_num_elements=160_000, num_seqs_multiple_of=4, max_audio_len=40_000,
                 spec_aug_p=0.5, spec_aug_time_mask_param=20)
    inline = epoch(build_loader(cfg, "train", seed=9))
    workers = build_loader(cfg, "train", seed=9, num_workers=2)
    assert_same(inline, epoch(workers))
    resumed = build_loader(cfg, "train", seed=9)
    iterator = iter(resumed)
    next(iterator)
    state = resumed.state_dict()
    fresh = build_loader(cfg, "train", seed=9)
    fresh.load_state_dict(state)
    assert_same(inline[1:], epoch(fresh))


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x["key"] == y["key"]
        torch.testing.assert_close(x["source_seqs"], y["source_seqs"], rtol=0, atol=0)
        assert torch.equal(x["target_seqs"], y["target_seqs"])


def test_weighting_hours_from_a_dataset_summary(parquet_pack, tmp_path):
    summary = tmp_path / "stats.tsv"
    summary.write_text("corpus\tlanguage\tsplit\tnum_samples\ttotal_audio_seconds\n"
                       "austen\ten\ttrain\t1\t3600\nlibrivox\ten\ttrain\t1\t3600\nlibrivox\tfr\ttrain\t1\t10800\n"
                       "librivox\tfr\tdev\t1\t99999\n")
    cfg = LoaderConfig.from_dict(config(parquet_pack, hours_beta=True, dataset_summary_path=str(summary),
                                        weighting={"beta_corpus": 1.0, "beta_language": 1.0}))
    weighting = prepare(cfg, "train", [open_pack(parquet_pack)], seed=0).builder.weighting
    # beta 1 keeps the natural proportions: austen/en 1 h, librivox/en 1 h, librivox/fr 3 h of 5 h
    np.testing.assert_allclose(weighting.targets, [0.2, 0.2, 0.6])
    summary.write_text("corpus\tlanguage\thours\nausten\ten\t1\n")
    with pytest.raises(ConfigError, match="no hours for librivox/en, librivox/fr"):
        prepare(cfg, "train", [open_pack(parquet_pack)], seed=0)


def test_a_missing_dataset_summary_path_is_named_without_hours_beta(parquet_pack, tmp_path):
    missing = tmp_path / "no-such-stats.tsv"
    cfg = LoaderConfig.from_dict(config(parquet_pack, dataset_summary_path=str(missing)))
    with pytest.raises(ConfigError, match=f"{missing}: cannot read the dataset summary"):
        prepare(cfg, "train", [open_pack(parquet_pack)], seed=0)


def test_group_weighting_report_names_corpus_language_groups(parquet_pack):
    cfg = config(parquet_pack, hours_beta=True, weighting={"beta_corpus": 0.0, "beta_language": 0.0})
    loader = build_loader(cfg, "train")
    report = loader.report().weighting
    weighting = loader.builder.weighting
    assert set(report["packs"]) == set(weighting.paths)
    assert all("/" in name for name in report["packs"])  # groups are named corpus/language, not pack paths


def test_a_char_tokenizers_packs_by_url_are_read_through_the_cache_it_is_given(s3_store, tmp_path):
    """The tokenizer's packs named by URL go through the node cache the loader config names (``config.cache``),
    handed to ``make_tokenizer`` explicitly: no ambient setting is needed."""
    from pathlib import Path

    from factories.s3 import publish
    from speechpack.loader.asr.task import make_tokenizer
    from speechpack.loader.asr.tokenizer import TokenizerSpec
    from speechpack.loader.cache import CacheSettings

    local = librivox_span_pack(tmp_path, 3, 0, (1.0, 2.0), 3)
    url = publish(Path(local), "tokenizer/asr")
    cache = CacheSettings.from_dict({"dir": str(tmp_path / "node-cache")})
    by_url = make_tokenizer(TokenizerSpec(packs=(url,)), [], cache)
    assert by_url.characters == make_tokenizer(TokenizerSpec(packs=(local,)), []).characters
    assert any(p.is_file() for p in (tmp_path / "node-cache").rglob("*"))
