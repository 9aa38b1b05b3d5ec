"""primus: fit proofs, legal-layout enumeration, throughput projection and tuning for LLM training."""

__version__ = "0.1.0"
