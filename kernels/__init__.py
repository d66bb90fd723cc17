"""Triton tree-building and tree-verification kernels (installed as `sglang_eagle_ext.kernels`).

Modules, one job each:

* :mod:`.tree_build`: verify-tree construction (mask in SGLang's three layouts, positions, links);
* :mod:`.verify_greedy`: greedy acceptance, drop-in and fused with the target argmax;
* :mod:`.tree_sampling`: target-only tree sampling, drop-in and fused with temperature / top-k /
  top-p straight from the logits;
* :mod:`.sglang_binding`: routes SGLang's call sites to these (switch ``SGLANG_EAGLE_EXT_TREE_KERNELS``);
* :mod:`.reference`: pure-PyTorch references written from the semantics (for tests);
* :mod:`.draft_trees`: random trees made like SGLang's draft loop makes them (tests, benchmarks);
* :mod:`.launch`: low-overhead launches of compiled kernels (host time dominates small calls);
* :mod:`.tree_mask_modes`, :mod:`.tree_walk`, :mod:`.workspace`: shared constants and helpers.
"""
