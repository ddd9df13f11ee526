"""Target speaker extraction (``task: tse``): WeSep's data pipeline over tse and sources packs."""
