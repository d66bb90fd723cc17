"""Every SGLang-version-specific detail of the integration, gated by feature detection.

Supported: SGLang 0.5.11 - 0.5.23. Nothing here compares version numbers; each patch looks for
the code shape it fixes and applies only where that shape exists:

* ``draft-config``: all versions. SGLang loads a drafter's ``config.json`` separately for the
  target (which aux layers to capture), the draft worker (KV depth, buffer widths) and the
  model; every load gets the normalised config of :mod:`.sglang_draft_config`.
* ``draft-extend-graph-width``: <= 0.5.11 sizes the draft-extend CUDA-graph input ``3 * H``.
* ``idle-draft-input-width``: <= 0.5.11 builds idle draft-extend inputs ``3 * H`` wide.
* ``hidden-size-for``: 0.5.12 - 0.5.14 size draft-extend inputs from the *target* config.
0.5.15+ read the width from the draft config, which the normalised config states.
* ``target-capture-ids``: the target's ``ModelRunner`` reads its capture ids from the drafter
  config in ``__init__`` and applies them later (``init_aux_hidden_state_capture`` in 0.5.11,
  ``init_attention_backends`` in 0.5.16+); they are resolved again from the normalised config
  right before they are applied. Needed with the ``SGLANG_EXTERNAL_MODEL_PACKAGE`` fallback,
  which activates us when SGLang imports its model registry, i.e. after the target's runner has
  read the raw drafter config; with the entry point it re-states the same ids.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import logging
import os
import sys
from typing import Any, Callable

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Runtime accessors for the model class
# ---------------------------------------------------------------------------------------------

def _runtime_context():
    try:
        return importlib.import_module("sglang.srt.runtime_context")
    except ImportError:
        return None


def tp_world_size() -> int:
    context = _runtime_context()
    if context is not None and hasattr(context, "get_parallel"):
        return context.get_parallel().tp_size
    from sglang.srt.distributed import get_tensor_model_parallel_world_size

    return get_tensor_model_parallel_world_size()


def pp_group():
    context = _runtime_context()
    if context is not None and hasattr(context, "get_parallel"):
        return context.get_parallel().pp_group
    from sglang.srt.distributed import get_pp_group

    return get_pp_group()


def eagle3_draft_parallel_spec():
    """0.5.23 resolves the draft's tensor-parallel layout from a class attribute."""
    try:
        module = importlib.import_module("sglang.srt.configs.draft_parallel")
    except ImportError:
        return None
    return module.DraftParallelSpec(tp_execution=module.DraftTPExecution.SINGLE_GROUP)


def draft_window_size() -> int | None:
    """``--speculative-draft-window-size`` (0.5.12+), None where the option does not exist: the
    runtime context's bags (0.5.17+), else the global server args (0.5.12 - 0.5.16)."""
    context = _runtime_context()
    for getter in ("get_spec", "get_server_args"):
        if context is not None and hasattr(context, getter):
            return getattr(getattr(context, getter)(), "speculative_draft_window_size", None)
    server_args = importlib.import_module("sglang.srt.server_args")
    if not hasattr(server_args, "get_global_server_args"):
        return None
    return getattr(server_args.get_global_server_args(), "speculative_draft_window_size", None)


# ---------------------------------------------------------------------------------------------
# Patch helpers
# ---------------------------------------------------------------------------------------------

_PATCHED_MARK = "__eagle_ext_original__"


def _wrap_method(owner: Any, name: str, make: Callable[[Callable], Callable]) -> bool:
    """Replace ``owner.name`` by ``make(original)`` once; keeps classmethods class-bound."""
    raw = inspect.getattr_static(owner, name)
    if getattr(raw, _PATCHED_MARK, None) is not None or getattr(
            getattr(raw, "__func__", None), _PATCHED_MARK, None) is not None:
        return False
    is_classmethod = isinstance(raw, classmethod)
    original = raw.__func__ if is_classmethod else raw
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, _PATCHED_MARK, original)
    setattr(owner, name, classmethod(wrapper) if is_classmethod else wrapper)
    return True


def draft_input_width(hf_config) -> int | None:
    """Width of the target states fed to the draft's fc (``A * T``), None without aux states.

    The normalised config states ``num_aux_hidden_states`` and ``target_hidden_size``; for a
    config that did not pass through it the same order of precedence as SGLang 0.5.15+ applies.
    """
    eagle_config = getattr(hf_config, "eagle_config", None) or {}
    if not isinstance(eagle_config, dict):
        eagle_config = vars(eagle_config)
    if not eagle_config.get("use_aux_hidden_state", True):
        return None
    count = getattr(hf_config, "num_aux_hidden_states", None)
    for ids in (eagle_config.get("eagle_aux_hidden_state_layer_ids"),
                getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)):
        if count is None and ids:
            count = len(ids)
    width = getattr(hf_config, "target_hidden_size", None) or hf_config.hidden_size
    return (count or 3) * width


# ---------------------------------------------------------------------------------------------
# Patch: normalised drafter configs (all versions)
# ---------------------------------------------------------------------------------------------

class DraftConfigLoader:
    """Wraps SGLang's ``get_config``: drafter directories get the normalised config.

    The target's config is loaded before any drafter config in every SGLang process (the
    scheduler builds the target's model config first); it is remembered to resolve the aux
    layers (default taps, the boundary rule, range checks) against the real target depth.
    """

    def __init__(self, original: Callable):
        self.original = original
        self.target = None

    def __call__(self, model, *args, **kwargs):
        raw = self._drafter_config(model)
        if raw is None:
            config = self.original(model, *args, **kwargs)
            self._remember_target(config)
            return config
        return self._normalised(model, kwargs.get("model_override_args"))

    @staticmethod
    def _drafter_config(model) -> dict | None:
        from .sglang_draft_config import is_drafter_config

        path = os.path.join(os.fspath(model), "config.json") if isinstance(model, (str, os.PathLike)) else ""
        if not path or not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
        return raw if is_drafter_config(raw) else None

    def _remember_target(self, config) -> None:
        from .target import read_target

        try:
            self.target = read_target(config)
        except Exception:  # a config without decoder geometry (vision towers...): not a target
            pass

    def _normalised(self, model, override_args):
        from transformers import LlamaConfig

        from .checkpoint import read_drafter
        from .sglang_draft_config import sglang_config_dict

        spec = read_drafter(model, target=self.target).spec
        values = sglang_config_dict(spec, self.target)
        if override_args:  # --json-model-override-args applies to the draft config too
            values.update(override_args)
        config = LlamaConfig(**values)
        for key, value in values.items():  # keys LlamaConfig does not know are kept verbatim
            if not hasattr(config, key):
                setattr(config, key, value)
        config._name_or_path = spec.path
        return config


def patch_draft_config_loading(model_config_module) -> bool:
    """Route every binding of SGLang's ``get_config`` through :class:`DraftConfigLoader`.

    Modules import it by name (the model config, server-argument resolution in 0.5.23...), so
    the defining module and every already-imported copy are rebound; later imports read the
    defining module's (patched) attribute.
    """
    original = model_config_module.get_config
    if isinstance(original, DraftConfigLoader):
        return False
    loader = DraftConfigLoader(original)
    defining = sys.modules.get(getattr(original, "__module__", ""), None)
    for module in [defining, model_config_module, *list(sys.modules.values())]:
        if module is not None and getattr(module, "__dict__", {}).get("get_config") is original:
            module.get_config = loader
    return True


# ---------------------------------------------------------------------------------------------
# Patch: draft-extend CUDA-graph input width (<= 0.5.11)
# ---------------------------------------------------------------------------------------------

def _uses_aux_states(worker) -> bool:
    algorithm = worker.speculative_algorithm
    return algorithm.is_eagle3() and getattr(worker, "eagle_use_aux_hidden_state", True)


def patch_draft_extend_graph_width(runner_cls) -> bool:
    """Before capture, resize the graph's hidden-state input to the draft's ``A * T``.

    Stock capture feeds a ``3 * H`` buffer into fc (capture fails for A != 3), and replay skips
    the copy when widths differ (silently stale inputs)."""

    def make(original):
        def capture(self, *args, **kwargs):
            want = draft_input_width(self.model_runner.model_config.hf_config)
            holder = getattr(self, "buffers", self)
            buffer = holder.hidden_states
            if (want is not None and _uses_aux_states(self.eagle_worker) and buffer is not None
                    and buffer.shape[1] != want):
                holder.hidden_states = buffer.new_zeros((buffer.shape[0], want))
            return original(self, *args, **kwargs)
        return capture

    return _wrap_method(runner_cls, "capture", make)


# ---------------------------------------------------------------------------------------------
# Patch: idle draft-extend input width (<= 0.5.11)
# ---------------------------------------------------------------------------------------------

_IDLE_INPUT_WIDTH: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "eagle_ext_idle_input_width", default=None)


def patch_idle_draft_input_width(draft_input_cls, worker_classes) -> bool:
    """Idle draft-extend inputs get the draft's ``A * T`` width instead of ``3 * H``.

    ``forward_draft_extend_after_decode`` computes the width inline and passes it to
    ``EagleDraftInput.create_idle_input``; the worker method publishes the right width for the
    duration of the call and ``create_idle_input`` uses it."""

    def make_worker_method(original):
        def forward_draft_extend_after_decode(self, *args, **kwargs):
            width = draft_input_width(self.model_config.hf_config) if _uses_aux_states(self) else None
            token = _IDLE_INPUT_WIDTH.set(width)
            try:
                return original(self, *args, **kwargs)
            finally:
                _IDLE_INPUT_WIDTH.reset(token)
        return forward_draft_extend_after_decode

    def make_create_idle_input(original):
        signature = inspect.signature(original)

        def create_idle_input(cls, *args, **kwargs):
            width = _IDLE_INPUT_WIDTH.get()
            if width is not None:
                bound = signature.bind(cls, *args, **kwargs)
                bound.arguments["hidden_size"] = width
                return original(*bound.args, **bound.kwargs)
            return original(cls, *args, **kwargs)
        return create_idle_input

    changed = _wrap_method(draft_input_cls, "create_idle_input", make_create_idle_input)
    for worker_cls in worker_classes:
        changed |= _wrap_method(worker_cls, "forward_draft_extend_after_decode", make_worker_method)
    return changed


# ---------------------------------------------------------------------------------------------
# Patch: EagleDraftExtendInput.hidden_size_for (0.5.12 - 0.5.14)
# ---------------------------------------------------------------------------------------------

def _draft_runner(worker):
    for name in ("draft_runner", "draft_model_runner", "model_runner"):
        runner = getattr(worker, name, None)
        if runner is not None and getattr(runner, "is_draft_worker", True):
            return runner
    return None


def patch_hidden_size_for(draft_extend_input_cls) -> bool:
    """Draft-extend input width from the *draft* config (stock reads the target's: ``3 * H``)."""

    def make(original):
        def hidden_size_for(cls, worker, *args, **kwargs):
            runner = _draft_runner(worker)
            if runner is not None and _uses_aux_states(worker):
                width = draft_input_width(runner.model_config.hf_config)
                if width is not None:
                    return width
            return original(cls, worker, *args, **kwargs)
        return hidden_size_for

    return _wrap_method(draft_extend_input_cls, "hidden_size_for", make)


# ---------------------------------------------------------------------------------------------
# Patch: target capture ids resolved when they are applied (all versions)
# ---------------------------------------------------------------------------------------------

def normalised_capture_ids(runner) -> tuple[bool, list[int] | None]:
    """``(True, ids)``: the capture ids of the normalised config of this target runner's drafter
    (None: SGLang's default taps); ``(False, None)`` when the drafter is not a local EAGLE-3
    checkpoint directory (a hub id is left to SGLang)."""
    path = getattr(runner.server_args, "speculative_draft_model_path", None)
    if path is None or DraftConfigLoader._drafter_config(path) is None:
        return False, None
    loader = DraftConfigLoader(original=None)
    loader._remember_target(runner.model_config.hf_config)
    return True, loader._normalised(path, None).eagle_config["eagle_aux_hidden_state_layer_ids"]


# ModelRunner method that applies the target's capture ids -> where it reads them from
CAPTURE_APPLIERS = {
    "init_aux_hidden_state_capture": "",  # 0.5.11: self.eagle_aux_hidden_state_layer_ids
    "init_attention_backends": "spec_aux_config",  # 0.5.16+: self.spec_aux_config.<same>
}


def patch_target_capture_ids(runner_cls, method: str) -> bool:
    """Right before the target runner applies its capture ids, set them from the normalised
    drafter config, whatever config the runner read in ``__init__``."""
    holder_name = CAPTURE_APPLIERS[method]

    def make(original):
        def apply_capture_ids(self, *args, **kwargs):
            holder = getattr(self, holder_name) if holder_name else self
            if getattr(holder, "eagle_use_aux_hidden_state", False) and not self.is_draft_worker:
                known, ids = normalised_capture_ids(self)
                if known:
                    holder.eagle_aux_hidden_state_layer_ids = ids
            return original(self, *args, **kwargs)
        return apply_capture_ids

    return _wrap_method(runner_cls, method, make)


# ---------------------------------------------------------------------------------------------
# Apply everything that this SGLang needs, when the patched modules load
# ---------------------------------------------------------------------------------------------
# Plugins run at the start of every SGLang process, before SGLang has imported its model runner;
# importing the speculative modules (or the model registry, which imports every model) from
# there breaks SGLang's own import order (0.5.11: NameError 'ModelRunner'). Each patch is
# therefore applied right after its module is first imported by SGLang itself (at once if it
# already is). Which patches this release needs is read from its source text beforehand, without
# importing it, so the activation log line can name them; each patch checks the code shape again
# when it applies and raises if it is not there.

_SPECULATIVE = "sglang.srt.speculative."


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module.rsplit(".", 1)[0])  # the package exists: no import of module
    for folder in (spec.submodule_search_locations or []):
        path = os.path.join(folder, module.rsplit(".", 1)[1] + ".py")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return handle.read()
    return ""


def width_patches_needed() -> list[str]:
    """The width patches this SGLang release needs (see the module docstring)."""
    if "def get_draft_input_from_target_hidden_dim" in _source(_SPECULATIVE + "eagle_utils"):
        return []  # 0.5.15+: the width comes from the draft config
    info = _source(_SPECULATIVE + "eagle_info")
    if "class EagleDraftExtendInput" in info:
        return ["hidden-size-for"] if "def hidden_size_for" in info else []
    return ["draft-extend-graph-width", "idle-draft-input-width"]


class _PostImportHooks(importlib.abc.MetaPathFinder):
    """Runs ``hook(module)`` once right after ``name`` is first executed."""

    def __init__(self):
        self.hooks: dict[str, list[Callable]] = {}

    def find_spec(self, name, path=None, target=None):
        if name not in self.hooks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _HookedLoader(spec.loader, self.hooks.pop(name))
        return spec


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, inner, hooks):
        self._inner, self._hooks = inner, hooks

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        for hook in self._hooks:
            hook(module)


_post_import = _PostImportHooks()


def after_import(name: str, hook: Callable) -> None:
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    if _post_import not in sys.meta_path:
        sys.meta_path.insert(0, _post_import)
    _post_import.hooks.setdefault(name, []).append(hook)


_MODEL_RUNNER = "sglang.srt.model_executor.model_runner"


_CAPTURE_SHAPES = {  # the applying method, and the source text showing where it reads the ids
    "init_aux_hidden_state_capture": "self.eagle_aux_hidden_state_layer_ids",
    "init_attention_backends": "eagle_aux_hidden_state_layer_ids=self.spec_aux_config.eagle_aux_hidden_state_layer_ids",
}


def capture_ids_applier() -> str | None:
    """The ModelRunner method that applies the target's capture ids in this release, if known."""
    source = _source(_MODEL_RUNNER)
    for method, reads in _CAPTURE_SHAPES.items():
        if f"def {method}(" in source and reads in source:
            return method
    return None


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(f"sglang-eagle-ext: {what} not found in this SGLang; the plugin does "
                           "not support this release (set SGLANG_EAGLE_EXT=0 to use stock SGLang)")


def _patch_extend_input(eagle_info) -> None:
    cls = getattr(eagle_info, "EagleDraftExtendInput", None)
    _require(cls is not None and hasattr(cls, "hidden_size_for"), "EagleDraftExtendInput.hidden_size_for")
    patch_hidden_size_for(cls)


def _patch_model_runner(method: str):
    def patch(module) -> None:
        cls = getattr(module, "ModelRunner", None)
        _require(cls is not None and hasattr(cls, method), f"ModelRunner.{method}")
        patch_target_capture_ids(cls, method)
    return patch


def _patch_graph_runner(module) -> None:
    cls = getattr(module, "EAGLEDraftExtendCudaGraphRunner", None)
    _require(cls is not None and hasattr(cls, "capture"), "EAGLEDraftExtendCudaGraphRunner.capture")
    patch_draft_extend_graph_width(cls)


def _patch_idle_worker(class_name: str, required: bool = True):
    def patch(module) -> None:
        worker = getattr(module, class_name, None)
        has_method = worker is not None and hasattr(worker, "forward_draft_extend_after_decode")
        if not required and not has_method:
            return
        _require(has_method, f"{class_name}.forward_draft_extend_after_decode")
        draft_input = getattr(sys.modules.get(_SPECULATIVE + "eagle_info"), "EagleDraftInput", None)
        _require(draft_input is not None and hasattr(draft_input, "create_idle_input"),
                 "EagleDraftInput.create_idle_input")
        patch_idle_draft_input_width(draft_input, [worker])
    return patch


def arm_patches(register: Callable[[Any], None]) -> list[str]:
    """Schedule the model registration (``register(registry_module)``) and every patch this
    release needs; return the patch names for the log line."""
    after_import("sglang.srt.models.registry", register)
    after_import("sglang.srt.configs.model_config", patch_draft_config_loading)
    needed = width_patches_needed()
    applier = capture_ids_applier()
    if applier is not None:
        needed = ["target-capture-ids"] + needed
        after_import(_MODEL_RUNNER, _patch_model_runner(applier))
    if "hidden-size-for" in needed:
        after_import(_SPECULATIVE + "eagle_info", _patch_extend_input)
    if "draft-extend-graph-width" in needed:
        after_import(_SPECULATIVE + "eagle_draft_extend_cuda_graph_runner", _patch_graph_runner)
        after_import(_SPECULATIVE + "eagle_worker", _patch_idle_worker("EAGLEWorker"))
        after_import(_SPECULATIVE + "multi_layer_eagle_worker", _patch_idle_worker("MultiLayerEagleWorker", required=False))
    return ["draft-config"] + needed
