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
* device functions both ops use (order keys, filters, walk step, draws) are in
  :mod:`sglang_eagle_ext.kernels.device`, with those the greedy kernels share.
"""

from sglang_eagle_ext.kernels.sampling.drop_in import tree_speculative_sampling_target_only
from sglang_eagle_ext.kernels.sampling.from_logits import tree_sampling_from_logits

__all__ = ["tree_sampling_from_logits", "tree_speculative_sampling_target_only"]
