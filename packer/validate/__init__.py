"""Checking finished packs: every check of a pack, its cue banks included (``pack``), its files (``files``), ASD
tracks (``asd``), and the reports (``report``)."""
