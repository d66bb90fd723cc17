"""Test support shipped with the package: tiny random drafter checkpoints of every dialect."""
