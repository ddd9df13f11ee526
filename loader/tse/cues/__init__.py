"""Speaker cues at batch time: which cues the experiment uses (``request``), checked against the packs and read per
row (``resolve``), and what a batch makes of each bank item (``values``).  Reading the banks themselves is the pack
reader's (``loader/pack/cues.py``)."""
