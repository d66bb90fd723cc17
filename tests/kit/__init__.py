"""The tests' kit, not installed with the package: tiny random drafter checkpoints of every dialect
from producers' published configs (:mod:`.fixtures`, :mod:`.producer_layouts`, :mod:`.code_layouts`,
:mod:`.matched_drafter`), SGLang's own source of each release, read from its wheel
(:mod:`.release_source`), our draft class against the reference drafter (:mod:`.sglang_forward`),
the kernels' independent references (:mod:`.kernel_reference`), random verify trees
(:mod:`.draft_trees`) and SGLang's verify inputs (:mod:`.verify_batch`).

Importable as ``tests.kit`` from the checkout's root: pytest puts it on ``sys.path``; the scripts
and benchmarks that use the kit put it there themselves.
"""
