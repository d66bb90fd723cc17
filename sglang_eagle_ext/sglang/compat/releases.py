"""What differs between the supported SGLang releases, one row per fact.

Each row (:class:`Fact`) names one behaviour of SGLang's code and the releases that have it, as a
``packaging`` specifier on the installed version; that specifier is how the package detects it.
Every :class:`~.patch.Target` (the SGLang code compat code relies on) and every
:class:`~.patch.Patch` takes its releases from a row here, so that each release boundary is written
once, and ``tests/sglang/test_release_source.py`` checks those targets against the releases' wheels:
a row whose specifier is wrong fails there. Code asks ``FACT.holds(installed_release())``; it never
compares versions itself or probes SGLang for a getter (``tests/sglang/test_releases.py``).

Besides SGLang's facts, the rows where the fused sampler serves sampled verify by default
(:data:`FUSED_VERIFY_DEFAULT_ON`) and why the others are held back (:data:`FUSED_VERIFY_HELD_BACK`):
this package's measurements (``benchmarks/results/fused_verify.md``), not SGLang's code.
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

SUPPORTED = SpecifierSet(">=0.5.11,<0.5.24")
OLDEST = Version(next(spec.version for spec in SUPPORTED if spec.operator == ">="))
# The last line SUPPORTED takes: what `pip install 'sglang<SUPPORTED>'` installs, so what a command
# printed where no SGLang is installed yet is written for
NEWEST = Version("0.5.23")


@dataclass(frozen=True)
class Fact:
    """A behaviour of SGLang's code (``what``) and the releases that have it."""

    name: str
    releases: SpecifierSet
    what: str

    def holds(self, release: Version) -> bool:
        return self.releases.contains(release, prereleases=True)


def _fact(name: str, releases: str, what: str) -> Fact:
    return Fact(name, SpecifierSet(releases), what)


EVERY_RELEASE = _fact("every-release", ">=0.5.11", "the code every supported release has alike")
# Sizing draft inputs 3 * H, wherever the draft's fc takes A * T
DRAFT_EXTEND_3H = _fact("draft-extend-3h", "<0.5.12",
                        "the draft-extend CUDA graph and idle draft-extend inputs are built 3 * H wide")
HIDDEN_SIZE_FOR = _fact("hidden-size-for", ">=0.5.12,<0.5.15",
                        "EagleDraftExtendInput.hidden_size_for sizes draft-extend inputs from the target config")
CAPTURE_IDS_ON_RUNNER = _fact("capture-ids-on-runner", ">=0.5.11,<0.5.16",
                              "ModelRunner.init_aux_hidden_state_capture applies the capture ids held by the runner")
CAPTURE_IDS_IN_SPEC_AUX_CONFIG = _fact("capture-ids-in-spec-aux-config", ">=0.5.16",
                                       "ModelRunner.init_attention_backends applies spec_aux_config's capture ids")
# Finishing a request
STOP_STRINGS_IN_STEP = _fact("stop-strings-in-step", ">=0.5.14",
                             "Req._check_str_based_finish looks for the stop strings in all the tokens a verify step "
                             "accepted and ends the output at the match (Req._locate_str_stop_finished_len)")
# Where the server's state is read
GLOBAL_SERVER_ARGS = _fact("global-server-args", "<0.5.15", "server args from get_global_server_args")
RUNTIME_PARALLEL = _fact("runtime-parallel", ">=0.5.14", "the runtime context's get_parallel: TP/PP sizes and groups")
DISTRIBUTED_GETTERS = _fact("distributed-getters", "<0.5.14",
                            "TP/PP sizes and groups from sglang.srt.distributed's getters")
RUNTIME_SERVER_ARGS = _fact("runtime-server-args", ">=0.5.15", "the runtime context's get_server_args")
RUNTIME_SPEC = _fact("runtime-spec", ">=0.5.17", "the runtime context's get_spec: speculative settings")
DRAFT_PARALLEL_SPEC = _fact("draft-parallel-spec", ">=0.5.23",
                            "the draft's tensor-parallel layout from a DraftParallelSpec class attribute")
# Speculating
ADAPTIVE_POLICY = _fact("adaptive-policy", ">=0.5.21",
                        "--speculative-adaptive asks a policy object (the AdaptiveSpecPolicy protocol) for each step's "
                        "depth, constructed from eagle_worker_v2's AdaptiveSpeculativeParams")
PLAIN_OFF = _fact("plain-off", ">=0.5.23",
                  "at adaptive depth 0 the v2 worker verifies a width-1 input (_build_trivial_verify_input) through "
                  "EAGLEWorkerV2.verify and runs the draft extend from its result, which a plain DECODE step can "
                  "stand in for (the result fields, ForwardBatch.init_new and the KV-location plan as of 0.5.23)")
ADAPTIVE_TREES = _fact("adaptive-trees", ">=0.5.23",
                        "the v2 worker's adaptive states are built and switched by build_adaptive_runtime_state, "
                        "_override_worker_state and apply_runtime_state, the next step's top-k computed by the "
                        "draft extends with the drafter's topk (as of 0.5.23), so a tree joins the set")
# How the server is started (every release: `sglang serve`, which launch_server's __main__ recommends)
CUDA_GRAPH_BACKEND_FLAGS = _fact("cuda-graph-backend-flags", ">=0.5.14",
                                 "CUDA graphs are switched off per phase, --cuda-graph-backend-{decode,prefill}="
                                 "disabled (ServerArgs cuda_graph_backend_decode/_prefill); --disable-cuda-graph is "
                                 "a DeprecatedStoreTrueAction naming them, disable_cuda_graph a legacy no-CLI field")
# What the stock check (stock_check.py) and the forward harness (draft_forward.py) run on
ARCH_SUPPORTED_QUERY = _fact("arch-supported-query", ">=0.5.21",
                             "get_model_architecture asks ModelRegistry.is_arch_supported whether an architecture "
                             "has an SGLang class (before: membership in get_supported_archs)")
SINGLE_MIDLAYER_DRAFT = _fact("single-midlayer-draft", "<0.5.12",
                              "SGLang's own EAGLE-3 draft class builds one decoder layer, model.midlayer, and "
                              "refuses a config of any other depth (0.5.12+: model.layers)")
ATTENTION_TEST_KIT = _fact("attention-test-kit", ">=0.5.13",
                           "SGLang ships its attention-backend test kit (a mock model runner and forward batches), "
                           "which the forward comparisons run a drafter on")
# Verify: where the greedy/sampled branch is and what it reads
VERIFY_IN_WORKER_INPUTS = _fact("verify-in-worker-inputs", "<0.5.14",
                                "the v1 and v2 workers' verify inputs branch between greedy and sampled verify, "
                                "with the tree ops imported at module level")
EAGLE_SAMPLE = _fact("eagle-sample", ">=0.5.14",
                     "eagle_utils.eagle_sample branches between greedy and sampled verify; rejection sampling option")
VERIFY_SETTINGS_FROM_SERVER_ARGS = _fact("verify-settings-from-server-args", ">=0.5.16,<0.5.17",
                                         "the verify branch reads its thresholds from get_server_args")
VERIFY_SETTINGS_FROM_GLOBAL_ARGS = _fact("verify-settings-from-global-args", "<0.5.16",
                                         "the verify branch reads its thresholds from get_global_server_args")
VERIFY_COINS = _fact("verify-coins", ">=0.5.17", "eagle_utils._verify_coins draws the sampled arm's coins")
UNO = _fact("uno", ">=0.5.21", "eagle_sample takes UNO target sampling's uno_target_max_top_k")
WATERMARK = _fact("watermark", ">=0.5.23", "eagle_sample takes a watermark_state")
# SGLang's tree ops: where they live and which acceptance test they apply
SGL_KERNEL_SAMPLING = _fact("sgl-kernel-sampling", ">=0.5.14,<0.5.23",
                            "eagle_sample imports tree_speculative_sampling_target_only from sgl_kernel")
JIT_TREE_OPS = _fact("jit-tree-ops", ">=0.5.21",
                     "the greedy op in sglang.kernels.ops.speculative.tree (JIT ops)")
JIT_SAMPLING_OP = _fact("jit-sampling-op", ">=0.5.21,<0.5.23",
                        "eagle_sample imports the tree sampling op from sglang.kernels.ops.speculative.sampling")
STRICT_ACCEPTANCE = _fact("strict-acceptance", ">=0.5.21",
                          "the tree sampling op accepts with a half-open `coin <` and never a child without "
                          "target mass (its sampling.cuh)")
TREE_BUILD_IN_EAGLE_UTILS = _fact("tree-build-in-eagle-utils", "<0.5.23",
                                  "eagle_utils binds the tree-build leaf op sgl_build_tree_kernel_efficient")
SPEC_TREE_DISPATCHERS = _fact("spec-tree-dispatchers", ">=0.5.23",
                              "platform dispatchers in sglang.kernels.ops.speculative.spec_tree; the tree "
                              "sampling op bound in eagle_utils at module level")

FACTS: tuple[Fact, ...] = tuple(value for value in tuple(globals().values()) if isinstance(value, Fact))

# This package's measurements: where the fused sampler serves sampled verify unless switched off
# (ran end to end on a GPU, never slower than stock beyond the A/A spread, outputs as stock's), with
# the evidence the activation line gives, and the releases it ran on but stays opt-in, with why.
FUSED_VERIFY_DEFAULT_ON = {
    Version("0.5.16"): "it ran end to end on a GPU at stock's speed or better with stock's outputs",
    Version("0.5.23"): "it ran end to end on a GPU at stock's speed or better; its draws are stock's but where a "
                       "coin lies within 1e-6 of a boundary of the distribution (3 of 2.56 million requests)",
}
FUSED_VERIFY_HELD_BACK = {
    Version("0.5.21"): "ran end to end on a GPU, but one engine drifted in the chain cells; a rerun decides",
}


@functools.cache  # read by the model's accessors on every call; a process never changes its SGLang
def installed_release() -> Version:
    """The installed SGLang's version (from its distribution metadata, no import)."""
    return Version(importlib.metadata.version("sglang"))


def older_than_supported(release: Version) -> bool:
    return release < OLDEST
