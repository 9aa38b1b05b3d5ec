"""Measurements that check the ledger against traced torch code (the `measure` extra).

Nothing here is imported by the ledger or the CLI at start-up: torch is optional, so the submodules
(`functions`, `reference`, `trace`) are imported only by the code that needs them.
"""
