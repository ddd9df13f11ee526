"""One module per input family; each reads its input, plans and decodes its samples, and has a ``build_<family>``
entry point that hands them to ``packer.build.run.run_build``.

``ADAPTERS`` (``packer.adapters.registry``) maps the name used by ``speechpack build NAME`` to the family's build
function and its options, declared as plain data (``option_spec``); the CLI makes its ``build`` subcommands from
it.  The families: WeSep (``wesep``, the command: raw lists, split directories, and mainline WeSep's data, read
and packed by ``wesep_mainline``, its Kaldi embeddings through ``kaldi_vectors``; ``wesep_shards`` tar shards;
``wesep_lines``, the lines and samples every WeSep reader shares); ASR (``asr_jsonl``, ``asr_parquet``); Lhotse
(``lhotse``, cuts to samples, over ``lhotse_manifests``, the manifest lines every Lhotse input reads, and
``lhotse_shar``, Shar directories); ASD (``ava``, ``avcc``, ``msdwild``); augmentation banks (``audio_bank``, with ``noise_lmdb``
for WeSep's noise LMDB).  Shared code: ``tar_members`` (audio inside tars, read where it lies, for WeSep shards
and Lhotse Shar); ``asd_common`` (the canonical face track and the build every asd family runs) and
``asr_common`` (the asr sample).

``ADAPTERS`` is imported on first use: the registry imports every adapter, and a worker process that decodes one
family's samples imports only that family's module.
"""


def __getattr__(name: str):
    if name in ("ADAPTERS", "Adapter"):
        from speechpack.packer.adapters import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ADAPTERS", "Adapter"]
