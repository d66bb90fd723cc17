"""Target-only tree speculative sampling: accept draft children by the target distribution, then
draw the bonus token from what is left. Two ops:

* :func:`tree_speculative_sampling_target_only` (:mod:`.drop_in`): drop-in for SGLang's op of
  that name, on ready-made target probabilities;
* :func:`tree_sampling_from_logits` (:mod:`.from_logits`): temperature, top-k, top-p, the walk
  and the residual draw fused, straight from the logits, in three launches.

Modules of the fused sampler, one job each:

* :mod:`.row_pass`: launch 1, one program per (row, chunk) reads the chunk's logits once and keeps
  its statistics and a shortlist of its best tokens;
* :mod:`.row_filter`: launch 2, one program per row decides top-k / top-p from its shortlists;
* :mod:`.walk`: launch 3, one program per request walks its tree and draws the bonus token;
* :mod:`.exact_filter`: the walk's exact passes over rows the shortlists cannot decide;
* :mod:`.plan`: tuning constants, the kernels of one call shape, and the three launches, made
  there and nowhere else;
* :mod:`.scratch`: the scratch the three launches share, its layout defined once;
* :mod:`.reference`: both ops and SGLang's top-k / top-p renorm ops in plain torch, the
  references the tests hold the kernels to and what samples where SGLang has no kernels;
* device functions both ops use (order keys, filters, walk step, draws) are in
  :mod:`sglang_eagle_ext.kernels.device`, with those the greedy kernels share.

The two ops are imported on first use, so that :mod:`.reference` comes without Triton.
"""

import importlib

_OP_MODULES = {"tree_speculative_sampling_target_only": "drop_in", "tree_sampling_from_logits": "from_logits"}

__all__ = sorted(_OP_MODULES)


def __getattr__(name: str):
    if name not in _OP_MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    op = getattr(importlib.import_module(f"{__name__}.{_OP_MODULES[name]}"), name)
    globals()[name] = op  # found directly from now on
    return op
