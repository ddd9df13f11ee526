"""Packs back to another tool's format (``speechpack export NAME``), so a user can leave speechpack as easily as
they came: one module per target (``packer.export.lhotse``).  What every target writes into shares one
directory discipline: ``output_dir`` claims, commits and tidies the export directory, and ``record`` holds the
records that say which of its entries speechpack wrote (so a resumed or replaced export deletes only those)."""
