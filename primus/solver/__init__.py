"""The rule engine: the CP-SAT model of a job's legal layouts, fit proofs, cores and enumeration."""
