"""The byte ledger: exact per-rank, per-stage memory of a fully pinned layout."""
