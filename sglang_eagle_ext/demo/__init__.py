"""Tiny models built locally (never downloaded): a random target with its own tokenizer and a
drafter distilled from that target, for demos, tests and benchmarks."""
