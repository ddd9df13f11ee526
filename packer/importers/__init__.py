"""Importers: packs written by other tools, converted into speechpack packs without decoding their media again.

One module per foreign layout (``muvap``: MuVAP's ``muvap-asd-mmap`` ASD packs, read, checked and imported; their
files are opened by descriptor without following links by ``muvap_files``); each ends in the
ordinary build (``packer.build.run.run_build``), so an imported pack is sharded, hashed, resumable and validated
like a built one.  ``speechpack import NAME`` runs them.
"""
