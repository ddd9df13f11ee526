"""Speaker cues at batch time: reading a pack's cue banks and choosing each row's cues."""
