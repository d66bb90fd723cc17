"""What the installed stock SGLang does with a drafter, found by running stock SGLang's own code.

With this plugin switched off, a fresh interpreter loads the drafter's config with SGLang's
``get_config``, resolves the draft class through SGLang's model registry, builds it and feeds it
the checkpoint's tensors through SGLang's weight iterators and the class's ``load_weights``,
then shares the target's embedding the way SGLang's EAGLE worker does. The report says whether
stock refuses the drafter (with its error), the depth it builds, the parameters it never loads,
the checkpoint tensors it drops, the hidden states the target captures, and, for a small drafter
this package reads, how a prefill and one decode step compare with the reference drafter
(:mod:`sglang_eagle_ext.reference.drafter`).

The check runs in a child process: it imports SGLang with the CPU shims and initialises SGLang's
single-process distributed state, neither of which may leak into the caller; the child is killed
after :data:`TIME_LIMIT_S`. Nothing here guesses: what could not be run is "not checked".
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import socket
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

from sglang_eagle_ext.drafter.target import TargetInfo
from sglang_eagle_ext.errors import counted

TIME_LIMIT_S = 240
# Above this many drafter parameters the forward step is not compared (time and memory on a CPU).
FORWARD_PARAMETER_LIMIT = 20_000_000
# fp32 rounding of a tiny drafter's forward, relative to the larger of 1 and the reference's
# largest magnitude; the differences stock's misreadings cause are thousands of times larger
EQUAL_TOLERANCE = 1e-4
SEED = 0
_RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
BUILTIN_DRAFT = "LlamaForCausalLMEagle3"  # SGLang's own EAGLE-3 draft class
# torch's dispatcher error for an operator with no kernel for CPU tensors
_NO_CPU_KERNEL = re.compile(r"Could not run '([^']+)' with arguments from the 'CPU' backend")


def check(directory: str, target: TargetInfo | None, time_limit_s: float = TIME_LIMIT_S) -> dict[str, Any]:
    """The stock report for the drafter at ``directory``, from a child process:
    ``{"checked": False, "reason": ...}`` when stock SGLang's code could not be run."""
    return check_many([(directory, target)], time_limit_s)[0]


def check_many(drafters: list[tuple[str, TargetInfo | None]], time_limit_s: float = TIME_LIMIT_S) -> list[dict]:
    """:func:`check` for several drafters in one child process (SGLang is imported once)."""
    request = [{"directory": d, "target": None if t is None else vars(t)} for d, t in drafters]
    # the caller's own torch.distributed rendezvous (a test session's, say) must not be reused
    env = {key: value for key, value in os.environ.items() if key not in _RENDEZVOUS}
    env.update(SGLANG_EAGLE_EXT="0", TRITON_INTERPRET="1")
    try:
        done = subprocess.run([sys.executable, "-m", __name__], input=json.dumps(request), capture_output=True,
                              text=True, timeout=time_limit_s, env=env)
    except subprocess.TimeoutExpired:
        return [{"checked": False,
                 "reason": f"stock SGLang's check took longer than {time_limit_s:g} s"}] * len(drafters)
    lines = done.stdout.strip().splitlines()
    try:
        reports = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except ValueError:
        reports = None
    if not isinstance(reports, list) or len(reports) != len(drafters):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [{"checked": False, "reason": f"the check's process failed: {last}"}] * len(drafters)
    return reports


def same_as_plugin(report: dict[str, Any], our_indices: list[int] | None) -> bool | None:
    """Whether stock serves the drafter as this plugin does: it loads every parameter and drops
    no tensor, its forward equals the reference, and its target captures the same hidden states
    (as a set: engines capture in layer order, so the order ids are written in never matters).
    None when that was not (fully) checked."""
    if not report.get("checked"):
        return None
    if report.get("loads") is False or report.get("built_with") or report.get("never_loaded") or report.get("dropped"):
        return False
    captures = report.get("target_captures")
    if captures is not None and our_indices is not None and sorted(captures) != sorted(our_indices):
        return False
    forward = report.get("forward", {})
    if forward.get("compared"):
        return bool(forward.get("equal"))
    return None


def _listed(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def describe(report: dict[str, Any], our_indices: list[int] | None, our_depth: int | None) -> list[str]:
    """The report as text lines (``sglang-eagle inspect``)."""
    if not report.get("checked"):
        return [f"stock SGLang: not checked ({report.get('reason')})"]
    lines = [f"stock SGLang {report['sglang']} without this plugin (its own loader run on this drafter):"]
    if report.get("resolves_to") and report.get("built_with"):
        lines.append(f"  architectures {report['architectures']} resolve to {report['resolves_to']}; "
                     f"below: its EAGLE-3 class, as built with {report['built_with']} written into the drafter's "
                     "config.json (--json-model-override-args would change the target's config too)")
    if report.get("loads") is False and "refusal" in report:
        lines.append(f"  refuses it: {report['refusal']}")
        return lines + ["  verdict: stock cannot serve it; this plugin can" if our_depth is not None
                        else "  verdict: refused by stock and by this plugin"]
    depth = report.get("depth")
    lines.append(f"  builds {report.get('built_class')} with {counted(depth, 'layer')}"
                 + ("" if our_depth is None or depth == our_depth else f" (the drafter has {our_depth})"))
    for error in report.get("load_errors", []):
        lines.append(f"  load_weights fails on {error}")
    if report.get("never_loaded"):
        lines.append(f"  never loads {counted(len(report['never_loaded']), 'parameter')}: "
                     f"{_listed(report['never_loaded'])}")
    if report.get("uninitialised"):
        held = len(report["uninitialised"])
        lines.append(f"  {held} of them {'holds' if held == 1 else 'hold'} uninitialised memory on a server "
                     "(NaN in this check's forward)")
    if report.get("dropped"):
        lines.append(f"  drops {counted(len(report['dropped']), 'checkpoint tensor')}: {_listed(report['dropped'])}")
    if "weights" in report:
        lines.append(f"  weights: {report['weights']}")
    if "target_captures" in report:
        captures = report["target_captures"]
        agrees = our_indices is None or sorted(captures) == sorted(our_indices)
        lines.append(f"  the target captures hidden states {captures} (from eagle_config ids "
                     f"{report['eagle_config_ids']}): " + ("the same layers as this plugin" if agrees
                                                           else f"NOT the drafter's {our_indices}"))
    forward = report.get("forward", {})
    if forward.get("compared"):
        if "error" in forward:
            lines.append(f"  forward fails: {forward['error']}")
        elif forward["equal"]:
            lines.append("  prefill + one decode step: equal to the reference drafter")
        else:
            diff = forward["max_abs_diff"]
            lines.append(f"  prefill + one decode step: DIFFERS from the reference drafter (logits up to "
                         f"{max_of(diff['prefill_logits'], diff['decode_logits'])}, carried state up to "
                         f"{max_of(diff['prefill_carried'], diff['decode_carried'])}; decode argmax "
                         f"{'equal' if forward['decode_argmax_equal'] else 'differs'}"
                         f"{'' if forward['vocab_map_equal'] else '; draft-to-target map differs'})")
    elif forward:
        lines.append(f"  {forward['reason']}")
    same = same_as_plugin(report, our_indices)
    if report.get("built_with") and same_as_plugin({**report, "built_with": None}, our_indices):
        return lines + ["  verdict: stock cannot serve it as written; with the config.json edit above, the same "
                        "as this plugin"]
    lines.append("  verdict: " + {True: "same as this plugin", False: "stock serves it WRONGLY; this plugin "
                                  "serves it as the reference" if our_depth is not None else "stock serves it "
                                  "differently", None: "not fully checked"}[same])
    return lines


def max_of(a: float | str, b: float | str) -> float | str:
    """The larger of two reported differences, "NaN" when either is."""
    return "NaN" if "NaN" in (a, b) else max(a, b)


# --- the child process ------------------------------------------------------------------------

def _installed_sglang() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def _quote(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def _init_distributed() -> None:
    import torch

    from sglang_eagle_ext.sglang.compat.runtime import init_single_process_distributed

    if torch.distributed.is_initialized():
        return

    with socket.socket() as probe:  # a free port for the gloo rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    init_single_process_distributed(port)


def _weight_files(directory: str) -> tuple[list[str], bool]:
    """The files SGLang's default loader reads: safetensors when there are any, else .bin/.pt."""
    names = sorted(os.listdir(directory))
    safetensors = [os.path.join(directory, n) for n in names if n.endswith(".safetensors")]
    if safetensors:
        return safetensors, True
    return [os.path.join(directory, n) for n in names if n.endswith((".bin", ".pt"))], False


def _checkpoint_tensors(directory: str, on_meta: bool):
    """The checkpoint's tensors as SGLang's weight iterators yield them; ``on_meta``: shaped from
    the safetensors headers on the meta device (nothing read), except the draft-to-target map,
    whose values stock's ``load_weights`` computes with."""
    from sglang.srt.model_loader.weight_utils import pt_weights_iterator, safetensors_weights_iterator

    files, is_safetensors = _weight_files(directory)
    if not on_meta:
        yield from (safetensors_weights_iterator if is_safetensors else pt_weights_iterator)(files)
        return
    import torch
    from safetensors import safe_open

    from sglang_eagle_ext.drafter.tensors import read_safetensors_header

    for file in files:
        for name, entry in read_safetensors_header(file).items():
            if name in ("d2t", "t2d"):
                with safe_open(file, "pt") as handle:
                    yield name, handle.get_tensor(name)
            else:
                yield name, torch.empty(entry.shape, device="meta")


def _load_and_trace(model, directory: str, on_meta: bool) -> tuple[list[str], list[str], list[str]]:
    """Feed the checkpoint to ``model.load_weights`` one tensor at a time, recording which
    parameter loaders each tensor reached. Returns (parameters never loaded, checkpoint tensors
    dropped, errors); a stacked parameter missing some of its shards counts as never loaded."""
    reached: dict[str, set] = {}
    current: list[str] = []

    def traced(name, loader):
        def load(param, weight, *shard):
            reached.setdefault(name, set()).add(shard[0] if shard else None)
            current.append(name)
            return loader(param, weight, *shard)
        return load

    from sglang.srt.model_loader.weight_utils import default_weight_loader

    expected_shards: dict[str, set] = {}
    for name, param in model.named_parameters():
        loader = getattr(param, "weight_loader", default_weight_loader)
        expected_shards[name] = ({"q", "k", "v"} if ".qkv_proj." in name
                                 else {0, 1} if ".gate_up_proj." in name else {None})
        param.weight_loader = traced(name, loader)
    dropped, errors = [], []
    hot_before = getattr(model, "hot_token_id", None)
    for name, tensor in _checkpoint_tensors(directory, on_meta):
        current.clear()
        try:
            model.load_weights(iter([(name, tensor)]))
        except Exception as exc:  # stock's loader refusing one tensor is a finding, not a crash
            errors.append(f"{name}: {_quote(exc)}")
            continue
        hot_now = getattr(model, "hot_token_id", None)
        if not current and hot_now is hot_before:
            dropped.append(name)
        hot_before = hot_now
    never = [name for name, shards in expected_shards.items()
             if not shards <= reached.get(name, set())]
    return never, dropped, errors


def _poison_uninitialised(model, never_loaded: list[str]) -> list[str]:
    """Fill the never-loaded parameters that SGLang allocates uninitialised with NaN, and return
    their names. SGLang's RMSNorm starts its weight at ones, every other layer's parameters hold
    whatever memory they were given (``torch.empty``): on a server, and in this check unless
    poisoned, their values (zeros, garbage) would make the forward's outcome a matter of luck."""
    from sglang.srt.layers.layernorm import RMSNorm

    initialised = {f"{name}.weight" for name, module in model.named_modules() if isinstance(module, RMSNorm)}
    params = dict(model.named_parameters())
    poisoned = [name for name in never_loaded if name not in initialised]
    for name in poisoned:
        params[name].data.fill_(float("nan"))
    return poisoned


def _share_as_stock_does(model, embed, head) -> None:
    """The worker's sharing (:func:`~sglang_eagle_ext.sglang.draft_forward.share_target_tensors`)
    run on stock's model: its setters synchronise the device (0.5.11 - 0.5.14: torch.cuda's, which a
    CPU-only torch refuses); on a CPU host nothing is pending, and the call skips the synchronisation."""
    import torch

    from sglang_eagle_ext.sglang.draft_forward import share_target_tensors

    if torch.cuda.is_available():
        share_target_tensors(model, embed, head)
        return
    synchronize = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *args, **kwargs: None
    try:
        share_target_tensors(model, embed, head)
    finally:
        torch.cuda.synchronize = synchronize


def _share_target_embedding(model, hf_config, target: dict | None, on_meta: bool) -> list[str]:
    """What SGLang's EAGLE worker does once the draft is loaded: the target's embedding (and,
    for a draft that asks for it, its lm_head) replace the draft's. Seeded stand-ins of the
    target's shapes are shared (without a target: the shapes the draft's config names, which the
    target's must have); returns the names of the parameters they replaced."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    device = "meta" if on_meta else "cpu"
    shape = (target["vocab_size"], target["hidden_size"]) if target is not None else \
        (hf_config.vocab_size, hf_config.hidden_size)
    embed = torch.nn.Parameter(torch.randn(shape, generator=gen, device="cpu").to(device) * 0.5)
    head = torch.nn.Parameter(torch.randn(shape, generator=gen, device="cpu").to(device) * 0.3)
    before = dict(model.named_parameters(remove_duplicate=False))
    _share_as_stock_does(model, embed, head)
    after = dict(model.named_parameters(remove_duplicate=False))
    return sorted(name for name, param in after.items() if param is embed or param is head
                  if before.get(name) is not param)


def _captured_layers(hf_config, target: dict | None) -> dict[str, Any]:
    """The hidden-state indices stock's Llama target captures for this drafter: the ids the model
    runner reads from the draft config (SGLang's spec_aux_hidden_state: ``eagle_config``'s
    ``eagle_aux_hidden_state_layer_ids``, None when absent) given to the target class's own
    ``set_eagle3_layers_to_capture``."""
    from sglang.srt.models.llama import LlamaForCausalLM

    eagle_config = getattr(hf_config, "eagle_config", None)
    try:
        ids = eagle_config["eagle_aux_hidden_state_layer_ids"]
    except Exception:  # SGLang's model runner treats any failure as "no ids"
        ids = None
    captured = {"eagle_config_ids": ids}
    if target is None:
        return captured
    stand_in = SimpleNamespace(pp_group=SimpleNamespace(is_last_rank=True), model=SimpleNamespace(),
                               config=SimpleNamespace(num_hidden_layers=target["num_layers"]))
    LlamaForCausalLM.set_eagle3_layers_to_capture(stand_in, ids)
    captured["target_captures"] = list(stand_in.model.layers_to_capture)
    return captured


def _finite(value: float) -> float | str:
    return round(value, 6) if math.isfinite(value) else "NaN"


def _compare_forward(model, directory: str, target: dict) -> dict[str, Any]:
    """Prefill and one decode step of stock's model against the reference drafter, both given
    the same target embedding, head and aux states. A failure on this package's side (reading the
    drafter, the reference drafter, the harness) is "not checked", never stock's behaviour."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_eagle_ext.drafter.reader import read_drafter
    from sglang_eagle_ext.errors import DrafterError
    from sglang_eagle_ext.reference.drafter import DraftCache
    from sglang_eagle_ext.sglang.compat import runtime
    from sglang_eagle_ext.sglang.draft_forward import TOKENS, DraftRunner, worker_inputs

    try:
        checkpoint = read_drafter(directory, target=TargetInfo(**target))
    except DrafterError as exc:
        return {"compared": False, "reason": f"this package refuses the drafter: {exc.problems[0]}"}
    spec = checkpoint.spec
    vocab = spec.draft_vocab_size
    try:
        reference, embed, head, ids, aux = worker_inputs(checkpoint, torch.Generator().manual_seed(SEED))
        cache = DraftCache()
        ours_prefill = reference(ids[None, :TOKENS], torch.arange(TOKENS), aux=aux[None], cache=cache)
        ours_decode = reference(ids[None, TOKENS:], torch.tensor([TOKENS]),
                                carried=ours_prefill.carried[:, -1:], cache=cache)
        layers = runtime.builtin_draft_layers(model)
        attn = layers[0].self_attn
        geometry = SimpleNamespace(num_attention_heads=attn.attn.tp_q_head_num,
                                   num_key_value_heads=attn.attn.tp_k_head_num, head_dim=attn.attn.head_dim,
                                   hidden_size=model.config.hidden_size, num_layers=len(layers))
        runner = DraftRunner(geometry)
    except Exception as exc:
        return {"compared": False, "reason": f"not checked: this package's side of the check failed "
                f"(reference drafter or harness: {_quote(exc)}); stock's forward was not run"}

    _share_as_stock_does(model, embed, head)
    stock = runner.forward(model, ForwardMode.EXTEND, ids[:TOKENS], aux, prefix=0)
    stock_logits, stock_carried = stock.next_token_logits[0, :vocab], stock.hidden_states
    pairs = {"prefill_logits": (stock_logits, ours_prefill.logits[0, -1]),
             "prefill_carried": (stock_carried, ours_prefill.carried[0])}
    stock = runner.forward(model, ForwardMode.DECODE, ids[TOKENS:], stock_carried[-1:], prefix=TOKENS)
    decode_logits = stock.next_token_logits[0, :vocab]
    pairs.update(decode_logits=(decode_logits, ours_decode.logits[0, -1]),
                 decode_carried=(stock.hidden_states, ours_decode.carried[0]))
    diffs = {key: (a - b).abs().max().item() for key, (a, b) in pairs.items()}
    scales = {key: max(1.0, b.abs().max().item()) for key, (a, b) in pairs.items()}

    hot = model.get_hot_token_id()
    draft_ids = torch.arange(vocab)
    map_equal = (hot is None and not spec.has_vocab_map) or (
        hot is not None and spec.has_vocab_map and torch.equal(hot, reference.to_target_ids(draft_ids)))
    argmax_equal = bool(decode_logits.argmax() == ours_decode.logits[0, -1].argmax())
    equal = map_equal and all(math.isfinite(v) and v <= EQUAL_TOLERANCE * scales[k] for k, v in diffs.items())
    return {"compared": True, "equal": equal, "vocab_map_equal": map_equal,
            "decode_argmax_equal": argmax_equal, "max_abs_diff": {k: _finite(v) for k, v in diffs.items()}}


def stock_report(directory: str, target: dict | None) -> dict[str, Any]:
    """The report, computed in this process (the child): see the module docstring."""
    release = _installed_sglang()
    if release is None:
        return {"checked": False, "reason": "SGLang is not installed"}
    from sglang_eagle_ext.sglang.compat import SUPPORTED, cpu

    if release not in SUPPORTED:  # other releases keep the loader's modules elsewhere, or differently
        return {"checked": False,
                "reason": f"SGLang {release} is outside the releases this check runs on ({SUPPORTED})"}

    cpu.install()
    import torch
    from sglang.srt.models.registry import ModelRegistry
    from sglang.srt.utils.hf_transformers.config import get_config

    from sglang_eagle_ext.sglang.compat import runtime

    report: dict[str, Any] = {"checked": True, "sglang": release}
    try:
        hf_config = get_config(directory, trust_remote_code=False)
    except Exception as exc:
        return {**report, "loads": False, "refusal": _quote(exc)}
    architectures = list(getattr(hf_config, "architectures", None) or [])
    report["architectures"] = architectures
    # SGLang's get_model_architecture: an architecture no SGLang class registers goes to the
    # Transformers backend, which has no EAGLE-3 draft (no fc over the aux states)
    if not any(runtime.has_sglang_class(arch) for arch in architectures):
        report["resolves_to"] = "TransformersForCausalLM (SGLang's Transformers fallback, not an EAGLE-3 draft class)"
        overrides = {"architectures": [BUILTIN_DRAFT]}
        # a user's fix is an edit of the drafter's config.json: --json-model-override-args would
        # change the target's architectures too
        report["built_with"] = json.dumps(overrides)
        hf_config = get_config(directory, trust_remote_code=False, model_override_args=overrides)
        architectures = overrides["architectures"]
    try:
        model_class, _ = ModelRegistry.resolve_model_cls(architectures)
    except Exception as exc:
        return {**report, "loads": False, "refusal": _quote(exc)}
    report.setdefault("resolves_to", model_class.__name__)
    report["built_class"] = f"{model_class.__module__}.{model_class.__name__}"
    report.update(_captured_layers(hf_config, target))
    _init_distributed()
    runtime.publish_default_server_args()  # what a server publishes before it builds the draft
    with torch.device("meta"):
        try:
            sizing = model_class(copy.deepcopy(hf_config))
        except Exception as exc:
            return {**report, "loads": False, "refusal": _quote(exc)}
    runtime.drop_meta_rotary_embeddings()  # the model built next must not share the sizing's
    parameters = sum(p.numel() for p in sizing.parameters())
    report.update(depth=len(runtime.builtin_draft_layers(sizing)) if hasattr(sizing, "model") else None,
                  parameters=parameters)
    small = parameters <= FORWARD_PARAMETER_LIMIT
    if not small and not _weight_files(directory)[1]:
        report.update(loads=None, weights="not checked: a large pickled checkpoint is not read for this check")
        return report
    with torch.no_grad():
        model = model_class(copy.deepcopy(hf_config)) if small else sizing
        never, dropped, errors = _load_and_trace(model, directory, on_meta=not small)
        # t2d only marks which target ids d2t reaches; stock rebuilds the map from d2t alone
        redundant = [name for name in dropped if name == "t2d" and model.get_hot_token_id() is not None]
        report.update(loads=not errors, load_errors=errors, redundant_dropped=redundant,
                      dropped=[name for name in dropped if name not in redundant])
        shared = _share_target_embedding(model, hf_config, target, on_meta=not small)
        never = [name for name in never if name not in shared]
        report.update(never_loaded=never, shared_from_target=shared)
        if small:
            report["uninitialised"] = _poison_uninitialised(model, never)
        if not small:
            report["forward"] = {"compared": False, "reason": f"forward not compared: {parameters} parameters "
                                 f"(this check runs forwards up to {FORWARD_PARAMETER_LIMIT})"}
        elif target is None:
            report["forward"] = {"compared": False, "reason": "forward not compared: no target given"}
        elif errors:
            report["forward"] = {"compared": False, "reason": "forward not compared: stock's load_weights failed"}
        elif runtime.attention_test_kit() is None:
            report["forward"] = {"compared": False, "reason": f"forward not compared: SGLang {release} ships no "
                                 f"attention test kit ({runtime.ATTENTION_KIT[0].releases}), which this check "
                                 "runs the forward on"}
        else:
            try:
                report["forward"] = _compare_forward(model, directory, target)
            except Exception as exc:
                report["forward"] = forward_failure(exc)
    return report


def forward_failure(exc: BaseException) -> dict[str, Any]:
    """The forward entry for a forward step that raised: not compared when an operator has no CPU
    kernel on this host (a GPU build of ``sgl_kernel``: the host cannot run the check, which says
    nothing of stock), else stock's own code failed."""
    missing = _NO_CPU_KERNEL.search(str(exc))
    if isinstance(exc, NotImplementedError) and missing:
        return {"compared": False, "reason": f"forward not compared: this host has no CPU kernel for "
                f"{missing.group(1)} (a GPU build of SGLang's kernels), and the check runs the forward on the CPU"}
    return {"compared": True, "equal": False, "error": _quote(exc)}


def main() -> None:
    """Reads ``[{"directory": ..., "target": TargetInfo fields or None}, ...]`` from stdin and
    prints the reports as one JSON line."""
    reports = []
    for request in json.loads(sys.stdin.read()):
        try:
            reports.append(stock_report(request["directory"], request["target"]))
        except Exception as exc:
            reports.append({"checked": False,
                            "reason": f"this check failed outside the steps it runs stock SGLang's code in, "
                                      f"so nothing is said of stock: {_quote(exc)}"})
    print(json.dumps(reports))


if __name__ == "__main__":
    main()
