"""Checking finished packs: every check of a pack (``pack``), its files (``files``), cue banks (``cues``), ASD
tracks (``asd``), and the reports (``report``)."""
