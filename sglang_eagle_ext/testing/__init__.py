"""Test support shipped with the package: tiny random drafter checkpoints of every dialect, and
SGLang's own source of each release, read from its wheel (:mod:`.release_source`)."""
