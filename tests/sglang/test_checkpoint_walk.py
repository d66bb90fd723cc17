"""Following a checkpoint into SGLang's weight loading: the modules of this package whose functions
run, traced in a fresh interpreter from the plugin's activation to the model class's
``load_weights`` (issue 36 point 5; ``docs/architecture.md`` gives the walk).

The traced run does what an SGLang server's processes do with a drafter: SGLang's plugin loader
activates the plugin, SGLang's own ``ModelConfig`` loads the target's config and then the drafter's
(the config-loading patch routes both), the target runner asks for its capture ids, and the class
SGLang's registry holds for the architecture is built from the drafter's config and loads its
weights. It runs for every fixture the tiny Llama target serves (every producer's layout and file
format; F5's taps need a gpt-oss target). A module counts when at least one of its functions ran;
module and class bodies (imports) do not.

Left out, with everything they call: what the plugin does for its other jobs, namely the patches
that do not carry the checkpoint (each row of the patch table but draft-config and
target-capture-ids, by the module of its application and switch), the switches read from the
environment (``env.py``), and the CPU host's import shims (``compat/cpu.py``), which a GPU server
does not have.
"""

import json
import os
import subprocess
import sys

from tests.conftest import needs_sglang

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The modules met, under sglang_eagle_ext/: 11 (17 when this list was first written, issue 36)
WALK = [
    "drafter/dialects.py",
    "drafter/reader.py",
    "drafter/spec.py",
    "drafter/target.py",
    "drafter/tensors.py",
    "sglang/compat/config_loading.py",
    "sglang/compat/patch.py",
    "sglang/compat/releases.py",
    "sglang/compat/runtime.py",
    "sglang/model.py",
    "sglang/plugin.py",
]
# The patches that carry the checkpoint: the drafter's config wherever SGLang loads it
CHECKPOINT_PATCHES = ("draft-config", "target-capture-ids")
# Functions the walk must pass, wherever they live: without them the trace did not follow a checkpoint
LANDMARKS = {"activate", "_register", "DraftConfigLoader.__call__", "read_target", "load_drafter",
             "normalised_capture_ids", "served_drafter", "LlamaForCausalLMEagle3.__init__",
             "LlamaForCausalLMEagle3.load_weights"}


def trace_walk() -> None:
    """The child's work: print ``{"walk": {module: [function, ...]}, "left_out": [module, ...]}``."""
    import inspect
    import socket
    import tempfile
    from types import SimpleNamespace

    from sglang_eagle_ext.sglang.compat import cpu as cpu_shims

    cpu_shims.install()  # before anything imports SGLang

    import torch
    from sglang.test.layer_ut_utils import init_single_process_dist

    import sglang_eagle_ext
    from sglang_eagle_ext import env
    from sglang_eagle_ext.sglang import compat
    from tests.kit import fixtures

    package = os.path.dirname(sglang_eagle_ext.__file__)
    other_jobs = {env.__file__, cpu_shims.__file__}
    for patch in compat.PATCHES:
        if patch.name not in CHECKPOINT_PATCHES:
            other_jobs.update(sys.modules[function.__module__].__file__
                              for function in (patch.apply, patch.switch) if function is not None)

    root = tempfile.mkdtemp()
    target = os.path.join(root, "target")
    os.makedirs(target)
    with open(os.path.join(target, "config.json"), "w") as handle:
        json.dump(fixtures.target_config(), handle)
    drafters = [fixtures.build(name, os.path.join(root, name), seed=1)
                for name in fixtures.FIXTURES if not name.startswith("F5-")]
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    init_single_process_dist(master_port=port)

    walk: dict[str, set[str]] = {}
    left_out: set[str] = set()

    def called(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(package):
            return
        module = os.path.relpath(code.co_filename, package)
        caller = frame
        while caller is not None:
            if caller.f_code.co_filename in other_jobs:
                left_out.add(module)
                return
            caller = caller.f_back
        if code.co_flags & inspect.CO_NEWLOCALS:  # a function, not a module or class body
            walk.setdefault(module, set()).add(code.co_qualname)

    sys.setprofile(called)
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.models.registry import ModelRegistry

    from sglang_eagle_ext.sglang.compat import config_loading

    target_config = ModelConfig(model_path=target)
    for drafter in drafters:
        draft_config = ModelConfig(model_path=drafter, is_draft_model=True)
        runner = SimpleNamespace(server_args=SimpleNamespace(speculative_draft_model_path=drafter),
                                 model_config=target_config)
        config_loading.normalised_capture_ids(runner)  # what the patched target runner asks
        with torch.no_grad():
            model = ModelRegistry.models[draft_config.hf_config.architectures[0]](draft_config.hf_config)
            model.load_weights(iter(()))
    sys.setprofile(None)
    print(json.dumps({"walk": {module: sorted(functions) for module, functions in walk.items()},
                      "left_out": sorted(left_out - set(walk))}))


@needs_sglang
def test_following_a_checkpoint_meets_the_declared_modules():
    # the plugin's switches at their defaults; the distributed rendezvous the parent's tests set up left out
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("SGLANG_EXTERNAL_MODEL_PACKAGE", "SGLANG_EAGLE_EXT", "MASTER_ADDR", "MASTER_PORT",
                                  "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environment.update(PYTHONPATH=ROOT, TRITON_INTERPRET="1")
    result = subprocess.run([sys.executable, "-c", "from tests.sglang.test_checkpoint_walk import trace_walk; "
                             "trace_walk()"], capture_output=True, text=True, env=environment, cwd=ROOT,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    traced = json.loads(result.stdout.strip().splitlines()[-1])
    walk = traced["walk"]
    functions = {function for module in walk.values() for function in module}
    assert LANDMARKS <= functions, sorted(LANDMARKS - functions)
    # the rule that leaves the other jobs out acted (their functions ran), and took nothing of the walk
    assert {"env.py", "sglang/compat/cpu.py", "sglang/compat/tree_kernels.py",
            "sglang/compat/fused_verify.py"} <= set(traced["left_out"]), traced["left_out"]
    assert sorted(walk) == WALK, {"met, not declared": sorted(set(walk) - set(WALK)),
                                  "declared, not met": sorted(set(WALK) - set(walk))}
