"""Stacks: a framework and its release as data (`stacks/NAME.yaml`), so a job's unstated settings are
what the framework the user runs would do. `core` loads and resolves `NAME[@RELEASE]`, `apply` puts a
stack's settings under a job's own keys, `allocator` holds the allocator reserves, `doc` writes
docs/stacks.md's tables."""

from primus.stacks.core import DEFAULT_STACK, Stack, catalog_stacks, resolve_stack, stack_of_source

__all__ = ["DEFAULT_STACK", "Stack", "catalog_stacks", "resolve_stack", "stack_of_source"]
