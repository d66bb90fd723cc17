"""Triton tree-building and tree-verification kernels (installed as `sglang_eagle_ext.kernels`).

Modules, one job each:

* :mod:`.tree_build`: verify-tree construction (mask in SGLang's three layouts, positions, links);
* :mod:`.verify_greedy`: greedy acceptance, drop-in and fused with the target argmax;
* :mod:`.sampling`: target-only tree sampling, drop-in (:mod:`.sampling.drop_in`) and fused with
  temperature / top-k / top-p straight from the logits (:mod:`.sampling.from_logits`, three
  launches), with both ops in plain torch beside them (:mod:`.sampling.reference`); its package
  docstring lists its modules;
* :mod:`.launch`: low-overhead launches of compiled kernels (host time dominates small calls);
* :mod:`.device`: the device functions (``@triton.jit``) the kernels share;
* :mod:`.verify_shapes`: the entry points' check of the logits they take, a tree's register width;
* :mod:`.tree_mask_modes`, :mod:`.workspace`: shared constants and scratch.

Not here: SGLang's call sites are routed to these kernels by
:mod:`sglang_eagle_ext.sglang.compat.tree_kernels` (switch ``SGLANG_EAGLE_EXT_TREE_KERNELS``); the
independent pure-PyTorch references the tests hold them to (``tests/kit/kernel_reference.py``) and
random trees made like SGLang's draft loop makes them (tests, benchmarks: ``tests/kit/draft_trees.py``)
are the tests' kit, not installed. Measured figures behind the tuning choices:
``benchmarks/results/tree_kernels_tuning.md``.
"""
