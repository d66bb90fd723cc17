"""Everything that depends on the SGLang release: the release facts (:mod:`.releases`) and the
table of patches built on them.

Supported: SGLang 0.5.11 - 0.5.23 (:data:`SUPPORTED`). Every behaviour of SGLang that differs
between releases is a row of :mod:`.releases` (its releases, as a ``SpecifierSet`` on the
installed SGLang's version). Each patch lives in a module with the releases that need it (such a
row), the SGLang module it changes and its application, which checks with ``hasattr`` that the
code it changes is there and stops the server otherwise (:class:`~.patch.UnsupportedRelease`);
``draft-config`` and ``target-capture-ids`` share :mod:`.config_loading` (both give SGLang the
normalised drafter config).
:data:`PATCHES` lists them; the plugin walks it (:func:`sglang_eagle_ext.sglang.plugin.arm`), and
the activation log line is made from it: the fixes applied by name, then each binding's phrase.

===========================  ===============  ===========================================
patch                        releases         what it does
===========================  ===============  ===========================================
draft-config                 all              every load of the drafter's config.json
target-capture-ids           all              the target captures the drafter's own taps
draft-extend-graph-width     0.5.11           draft-extend CUDA graph built ``3 * H`` wide
idle-draft-input-width       0.5.11           idle draft-extend inputs ``3 * H`` wide
hidden-size-for              0.5.12 - 0.5.14  draft-extend width read from the target config
prompt-token-range           all              client token ids outside the vocabulary crash
                                              the scheduler (now a 400)
first-stop-string            0.5.14 -         a verify step accepting several tokens ends at the
                                              stop string listed first, not reached first
tree-kernels                 all              binding, ``SGLANG_EAGLE_EXT_TREE_KERNELS``: SGLang's
                                              tree-kernel call sites to our Triton kernels
fused-verify                 all              binding, ``SGLANG_EAGLE_EXT_FUSED_VERIFY``:
                                              sampled verify by the fused sampler
adaptive-shape               0.5.21 -         binding, ``SGLANG_EAGLE_EXT_ADAPTIVE``: the drafting
                                              depth per step by cost under ``--speculative-adaptive``
adaptive-tree-launch         0.5.23 -         part of adaptive-shape (not listed by name): a launch
                                              at top-k above 1 checked in the main process
===========================  ===============  ===========================================

Other release-dependent code: :mod:`.runtime` (accessors for the model class), :mod:`.cpu`
(running stock SGLang on a CPU-only host) and :mod:`.cpu_sampling` (its sampled verify ops there).

The SGLang code each of them relies on (module, class, function, the parameters passed or read)
is declared once, as a :class:`~.patch.Target` next to the code that uses it, and checked against
the wheels of the supported releases by ``tests/sglang/test_release_source.py``.
"""

from __future__ import annotations

from sglang_eagle_ext.sglang.compat import (adaptive_shape, adaptive_trees, config_loading, extend_graph_width,
                                            fused_verify, hidden_size_for, idle_input_width, prompt_token_range,
                                            stop_strings, tree_kernels)
from sglang_eagle_ext.sglang.compat.patch import Patch
from sglang_eagle_ext.sglang.compat.releases import SUPPORTED, installed_release

# the bindings last, tree kernels first: the fused-verify dispatcher wraps the greedy op bound then
PATCHES: tuple[Patch, ...] = (config_loading.PATCH, *config_loading.CAPTURE_IDS_PATCHES, extend_graph_width.PATCH,
                              *idle_input_width.PATCHES, hidden_size_for.PATCH, prompt_token_range.PATCH,
                              stop_strings.PATCH, tree_kernels.PATCH, fused_verify.PATCH, adaptive_shape.PATCH,
                              adaptive_trees.LAUNCH_CHECK)
BINDINGS: tuple[Patch, ...] = tuple(patch for patch in PATCHES if patch.switch is not None)

__all__ = ["BINDINGS", "PATCHES", "SUPPORTED", "installed_release"]
