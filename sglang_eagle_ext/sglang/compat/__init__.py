"""Everything that depends on the SGLang release, in one table.

Supported: SGLang 0.5.11 - 0.5.23 (:data:`SUPPORTED`). Each patch is a module holding the
releases that need it (a ``SpecifierSet`` on the installed SGLang's version), the SGLang module it
changes and its application, which checks with ``hasattr`` that the code it changes is there and
stops the server otherwise (:class:`~.patch.UnsupportedRelease`). :data:`PATCHES` lists them; the
plugin walks it, and the activation log line names the patches applied.

===========================  ===============  ===========================================
patch                        releases         what it fixes
===========================  ===============  ===========================================
draft-config                 all              every load of the drafter's config.json
target-capture-ids           all              the target captures the drafter's own taps
draft-extend-graph-width     0.5.11           draft-extend CUDA graph built ``3 * H`` wide
idle-draft-input-width       0.5.11           idle draft-extend inputs ``3 * H`` wide
hidden-size-for              0.5.12 - 0.5.14  draft-extend width read from the target config
prompt-token-range           all              client token ids outside the vocabulary crash
                                              the scheduler (now a 400)
===========================  ===============  ===========================================

Other release-dependent code: :mod:`.runtime` (accessors for the model class),
:mod:`.fused_verify` (the sampled-verify seams), :mod:`.tree_kernels` (SGLang's tree-kernel call
sites, per release), :mod:`.cpu` (running stock SGLang on a CPU-only host) and :mod:`.cpu_sampling`
(its sampled verify ops there).

The SGLang code each of them relies on (module, class, function, the parameters passed or read)
is declared once, as a :class:`~.patch.Target` next to the code that uses it, and checked against
the wheels of the supported releases by ``tests/sglang/test_release_source.py``.
"""

from __future__ import annotations

import importlib.metadata

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sglang_eagle_ext.sglang.compat import (capture_ids, config_loading, extend_graph_width, hidden_size_for,
                                            idle_input_width, prompt_token_range)
from sglang_eagle_ext.sglang.compat.patch import Patch, UnsupportedRelease, after_import

SUPPORTED = SpecifierSet(">=0.5.11,<0.5.24")
PATCHES: tuple[Patch, ...] = (config_loading.PATCH, *capture_ids.PATCHES, extend_graph_width.PATCH,
                              *idle_input_width.PATCHES, hidden_size_for.PATCH, prompt_token_range.PATCH)


def installed_release() -> Version:
    """The installed SGLang's version (from its distribution metadata, no import)."""
    return Version(importlib.metadata.version("sglang"))


def arm(release: Version) -> list[str]:
    """Schedule every patch ``release`` needs (each applies when SGLang imports its module);
    return their names for the log line. A release older than :data:`SUPPORTED` is refused;
    a newer one gets the newest release's patches, whose checks stop the server if its code
    has moved."""
    if release < Version("0.5.11"):
        raise UnsupportedRelease(f"sglang-eagle-ext: SGLang {release} is older than the supported "
                                 f"range ({SUPPORTED}); install a supported release or set SGLANG_EAGLE_EXT=0")
    names: list[str] = []
    for patch in PATCHES:
        if patch.needed(release):
            after_import(patch.module, patch.apply)
            if patch.name not in names:
                names.append(patch.name)
    return names


__all__ = ["PATCHES", "SUPPORTED", "Patch", "UnsupportedRelease", "after_import", "arm", "installed_release"]
