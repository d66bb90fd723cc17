"""Sampled EAGLE verify for devices SGLang has no kernels for (a CPU-only host): the plain-torch
references of the sampling ops (:mod:`sglang_eagle_ext.kernels.sampling.reference`), under the
names SGLang calls.

SGLang 0.5.23 binds three names in ``sglang.srt.speculative.eagle_utils`` per platform and leaves
them ``None`` where it has no kernel; its sampled verify (``eagle_sample``, temperature > 0) then
calls ``None`` and the scheduler dies. These are the same three ops with the same arguments and
results, for any device torch runs on:

* :func:`top_k_renorm_prob`, :func:`top_p_renorm_prob`: FlashInfer's renorm semantics (which
  SGLang uses on CUDA), on ``[rows, V]`` probabilities with one ``top_k`` / ``top_p`` per row;
* :func:`tree_speculative_sampling_target_only`: the target-only tree sampler, in place, with the
  acceptance test of the installed release (``strict_acceptance``: SGLang 0.5.21+'s).

They are bound by :mod:`sglang_eagle_ext.sglang.compat.cpu` only where SGLang's name is ``None``.
"""

from sglang_eagle_ext.kernels.sampling.reference import (top_k_renorm_prob, top_p_renorm_prob,
                                                         tree_speculative_sampling_target_only)

__all__ = ["top_k_renorm_prob", "top_p_renorm_prob", "tree_speculative_sampling_target_only"]
