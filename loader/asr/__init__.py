"""Automatic speech recognition (``task: asr``): Omnilingual-style batches from ``asr`` packs (docs/asr.md).

One job per module: ``features`` (Kaldi log-mel filterbanks over a padded batch, SpecAugment masks and
per-utterance normalisation, in torch), ``tokenizer`` (the built-in character vocabulary, SentencePiece), ``items``
(the item universe, its targets, and Omnilingual's length and text filters, counted per reason), ``args``
(``dataset_args``, and Omnilingual's ``dataset:`` block translated into them), ``selection`` (splits, and
fairseq2's ``partition_filters`` text, parsed) and ``task`` (the loader hook and its batch builder).  Nothing is
imported here, so ``import speechpack.loader.asr.tokenizer`` never pulls torch.
"""
