"""Automatic speech recognition (``task: asr``): Omnilingual-style batches from ``asr`` packs (docs/asr.md).

One job per module: ``fbank`` (Kaldi log-mel filterbanks over a padded batch, in torch), ``specaugment``
(frequency and time masks, on features or through an STFT round trip), ``waveform`` (mono, per-utterance
normalisation), ``tokenizer`` (the built-in character vocabulary, SentencePiece), ``filters`` (Omnilingual's
length and text filters, counted per reason), ``args`` (``dataset_args``), ``selection`` (splits) and
``partition_filter`` (fairseq2's filter text, parsed), ``items`` (the item universe and its targets), ``batch``
(collation), ``recipe`` (Omnilingual's ``dataset:`` block) and ``task`` (the loader hook).  Nothing is imported here, so ``import
loader.asr.tokenizer`` never pulls torch.
"""
