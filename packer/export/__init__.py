"""Packs back to another tool's format (``speechpack export NAME``), so a user can leave speechpack as easily as
they came: one module per target (``packer.export.lhotse``)."""
