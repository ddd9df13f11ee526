"""``speechpack build wesep`` on mainline WeSep's own files (github.com/wenet-e2e/wesep): ``inputs`` reads and finds
them, ``build`` packs them with their enrollments as the pack's audio cue (docs/wesep.md, "Coming from mainline
WeSep")."""
