"""SGLang engines for the real-target runs: one set of options for every script, CPU or GPU.

On a GPU: bfloat16, Triton attention unless told otherwise (FA3, SGLang 0.5.23's default on Hopper,
only where ``benchmarks/gpu/fa3_ops.py`` put it into the GPU kit, which leaves it out), PyTorch
sampling, decode CUDA graphs of the measured batch sizes only (each captured size lengthens every
start), the prefix cache off (each round prefills its prompts in full, as the first one did). On a
CPU: this package's CPU options (float32, Triton's interpreter, no CUDA graphs) and a small KV pool;
slow, for checking a script before it costs GPU time.

Call :func:`prepare_process` first in a script's main process: on a CPU it installs this package's
shims and the environment SGLang's child processes inherit.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field

from sglang_eagle_ext.sglang.compat.adaptive_shape import ENV_SWITCH as ADAPTIVE_SWITCH
from sglang_eagle_ext.sglang.plugin import SWITCH as PLUGIN_SWITCH  # noqa: F401 ("0": stock's own class)

# a depth policy -> ADAPTIVE_SWITCH's value ("hold": this package's policy keeping the launch depth, a diagnostic)
POLICY_SWITCH_VALUES = {"cost": "1", "stock": "0", "hold": "hold"}


@dataclass(frozen=True)
class Shape:
    """A drafting shape: SGLang's --speculative-num-steps / -eagle-topk / -num-draft-tokens; with ``policy``,
    the deepest of the depths SGLang's --speculative-adaptive switches between per step, chosen by this
    package's cost policy (``"cost"``, SGLANG_EAGLE_EXT_ADAPTIVE=1) or by stock's (``"stock"``). ``candidates``:
    the depths the policy may choose at every batch size, or per batch size as ``{batch: depths}`` (a batch
    takes the nearest key's, as SGLang's slots do) (:meth:`adaptive_config`; empty: the policy's own
    defaults); one depth pins it, so that the adaptive engine runs one shape as a fixed engine does and the two
    differ only by the adaptive path's per-step work. ``trace``: this package's policy writes its record of
    every step (``SGLANG_EAGLE_EXT_ADAPTIVE_TRACE``). ``env``: further environment its engine runs under."""

    name: str
    steps: int
    topk: int
    draft_tokens: int
    policy: str | None = None
    candidates: tuple[int, ...] | dict[int, tuple[int, ...]] = ()
    trace: bool = True
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.policy is not None and self.policy not in POLICY_SWITCH_VALUES:
            raise ValueError(f"shape {self.name}: policy {self.policy!r} is not one of {sorted(POLICY_SWITCH_VALUES)}")
        slots = self.candidates.values() if isinstance(self.candidates, dict) else [self.candidates]
        every = sorted({depth for depths in slots for depth in depths})
        if every and (self.policy is None or self.steps not in every):
            raise ValueError(f"shape {self.name}: candidates {every} need a policy and the launch "
                             f"depth {self.steps} among them (SGLang's --speculative-adaptive refuses it otherwise)")

    def label(self) -> str:
        return f"{self.name} {self.steps}/{self.topk}/{self.draft_tokens}"

    def environment(self) -> dict:
        """The switch of the depth policy this shape runs under (none for a fixed shape), and ``env``."""
        return {**({} if self.policy is None else {ADAPTIVE_SWITCH: POLICY_SWITCH_VALUES[self.policy]}), **self.env}

    def adaptive_config(self) -> dict | None:
        """SGLang's ``--speculative-adaptive-config`` for ``candidates`` (its file format, which this package's
        policy reads too: a batch-size key per slot, one for every batch size): None for the policy's own
        defaults."""
        if not self.candidates:
            return None
        slots = self.candidates if isinstance(self.candidates, dict) else {1: self.candidates}
        return {str(batch): {"candidate_steps": list(depths)} for batch, depths in sorted(slots.items())}


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_environment() -> dict:
    """What every engine's benchmark records of its run beside the engine's own versions: the date, the device
    (the GPU's name, else the CPU's), torch's version, the commit (``E2E_COMMIT``, else the checkout's), the
    command line, and where on its host the engine ran (the GPUs it saw, ``CUDA_VISIBLE_DEVICES``, unset: all;
    the host's name), so that a comparison page can tell runs on two GPUs of one host from runs on one."""
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
    return {"date": datetime.date.today().isoformat(), "device": name, "torch": torch.__version__,
            "commit": os.environ.get("E2E_COMMIT") or commit or "unknown", "command": " ".join(sys.argv),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "all"), "host": platform.node()}


def prepare_process() -> str:
    """The device, with a CPU host's shims installed and its environment exported to children."""
    where = device()
    if where == "cpu":
        from sglang_eagle_ext.sglang.compat import cpu

        cpu.install()
        os.environ.update(cpu.process_environment(dict(os.environ)))
    return where


ATTENTION_BACKEND = "triton"  # on a GPU unless told otherwise: the GPU kit has it; FA3 needs fa3_ops.py


def options(where: str, graph_bs=(1,), context_length: int = 2048, max_running: int = 64,
            kv_tokens: int | None = None, attention_backend: str = ATTENTION_BACKEND, log_level: str = "error",
            **extra) -> dict:
    """``sglang.Engine`` keywords on ``where``: only the fields this release's ServerArgs has. ``log_level``
    "info" puts SGLang's start-up stages (weights, KV pool, each CUDA graph capture) with their times in the log."""
    from sglang_eagle_ext.sglang.compat import releases
    from sglang_eagle_ext.sglang.compat.runtime import decode_graph_options, server_option_names

    if where == "cpu":
        from sglang_eagle_ext.sglang.compat import cpu

        wanted = {**cpu.engine_options(releases.installed_release()),
                  "max_total_tokens": kv_tokens or cpu.DEFAULT_KV_TOKENS}
    else:
        wanted = dict(dtype="bfloat16", attention_backend=attention_backend, sampling_backend="pytorch",
                      mem_fraction_static=0.7, **decode_graph_options(list(graph_bs)))
        if kv_tokens:
            wanted["max_total_tokens"] = kv_tokens
    wanted.update(context_length=context_length, max_running_requests=max_running, disable_radix_cache=True,
                  log_level=log_level, **extra)
    fields = server_option_names()
    return {name: value for name, value in wanted.items() if name in fields}


def speculative(drafter: str, shape: Shape) -> dict:
    return dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=drafter,
                speculative_num_steps=shape.steps, speculative_eagle_topk=shape.topk,
                speculative_num_draft_tokens=shape.draft_tokens,
                **({"speculative_adaptive": True} if shape.policy else {}))


def start(target: str, where: str, drafter: str | None = None, shape: Shape | None = None, **extra):
    import sglang

    spec = speculative(drafter, shape) if drafter is not None else {}
    return sglang.Engine(model_path=target, **options(where, **extra), **spec)


def chat_ids(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Each prompt as a one-turn chat, formatted by the target's own template, ready for the answer."""
    ids = []
    for prompt in prompts:
        encoded = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                tokenize=True)
        ids.append(list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded))
    return ids
