"""speechpack: speech corpora packed once into versioned, sharded, memory-mapped packs, fed to training at memcpy
speed.

The installed package maps the repository's top level (see ``pyproject.toml``): ``speechpack.schemas`` (the
contracts), ``speechpack.media`` (foreign media both sides decode: WeSep's noise LMDB, bounded libsndfile reads),
``speechpack.packer`` (from sources to packs), ``speechpack.loader`` (from packs to batches) and ``speechpack.cli``
(the ``speechpack`` command).  Training code imports ``from speechpack.loader import
build_loader``.  Importing this package imports nothing else, so every command starts light.
"""


def __getattr__(name):
    # The version is looked up on first use: importlib.metadata scans the installed distributions, which every
    # ``speechpack --help`` would otherwise pay for.
    if name == "__version__":
        from speechpack.schemas.constants import tool_version

        return tool_version()
    raise AttributeError(f"module 'speechpack' has no attribute {name!r}")
