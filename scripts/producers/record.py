"""How every producer script records what its producer wrote (run inside that producer's own venv).

Standalone on purpose: a producer's venv has torch and safetensors but not this package. One
variant is one folder ``tests/producer_files/<producer>/<variant>/`` holding

* ``drafter/``: exactly the files the producer's own save/export code wrote (nothing edited);
* ``target/config.json``: the tiny HF Llama target the drafter was built for (no weights);
* ``forward.safetensors``: the producer's own module run on seeded inputs (below);
* ``record.json``: who wrote what, with which code (file:line citations), and the facts the
  package must read: see :func:`write_record`.

Tensors in ``forward.safetensors`` (float32 unless said; ``T`` tokens, one sequence):

* ``input_ids`` int64 ``[1, T]``: target-vocabulary ids, as the producer's module takes them;
* ``positions`` int64 ``[T]``;
* ``aux`` ``[1, T, A*Th]``: the target hidden states concatenated in the order the producer feeds
  them to ``fc`` (the ``aux_hidden_state_indices`` of the record, HF ``output_hidden_states``
  indices);
* ``target_embed`` ``[V, H]`` / ``target_lm_head`` ``[V, H]``: only when the written drafter lacks
  its own ``embed_tokens`` / ``lm_head`` (the producer's module had them from the target);
* ``logits`` ``[1, T, Vd]``: the producer's module's draft-vocabulary logits for every position;
* ``carried`` ``[1, T, H]`` (optional): the hidden state the producer's module feeds its next
  draft step (the record's ``forward.carried`` says which state that is, with the code cited).
"""

from __future__ import annotations

import json
import os
import tempfile

import torch
from safetensors.torch import save_file

# One tiny geometry for every producer: a few hundred KB per variant.
TINY = {
    "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "intermediate_size": 128, "vocab_size": 256, "draft_vocab_size": 128, "target_layers": 8,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
}
TOKENS = 7


def tiny_target_config() -> dict:
    """The HF ``LlamaForCausalLM`` config of the target every producer's drafter is built for."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": TINY["hidden_size"], "num_attention_heads": TINY["num_attention_heads"],
        "num_key_value_heads": TINY["num_key_value_heads"], "head_dim": TINY["head_dim"],
        "intermediate_size": TINY["intermediate_size"], "num_hidden_layers": TINY["target_layers"],
        "vocab_size": TINY["vocab_size"], "max_position_embeddings": TINY["max_position_embeddings"],
        "rms_norm_eps": TINY["rms_norm_eps"], "rope_theta": TINY["rope_theta"], "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "float32",
    }


def seeded_inputs(seed: int, aux_width: int, vocab: int = TINY["vocab_size"], tokens: int = TOKENS) -> dict:
    """``input_ids``, ``positions`` and ``aux`` drawn from ``seed`` (never zeros)."""
    gen = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(0, vocab, (1, tokens), generator=gen),
            "positions": torch.arange(tokens),
            "aux": torch.randn(1, tokens, aux_width, generator=gen)}


def _atomic_write(path: str, write) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    os.close(handle)
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def write_record(variant_dir: str, *, producer: str, package: str, variant: str, written_by: str,
                 sources: list[str], drafter: str, aux_hidden_state_indices: list[int],
                 tensors: dict[str, torch.Tensor], forward: dict, expect: dict | None = None,
                 notes: list[str] | None = None) -> None:
    """Write ``target/config.json``, ``forward.safetensors`` and ``record.json`` of one variant.

    ``drafter``: the path, relative to ``variant_dir``, a user would point ``sglang-eagle`` at
    (what the producer's docs say to serve); ``written_by``: the producer's function or command
    that wrote it; ``sources``: ``repo-or-package@version path:line`` citations of the producer code
    that decides each convention the record states; ``forward``: ``{"module": ..., "dtype": ...,
    "carried": ...}`` and any producer train/serve difference: ``"trained_rope"`` is the RoPE the
    module computed with where the written config says otherwise, as HF writes RoPE settings
    (``rope_type``, ``rope_theta``, the scaling keys), with ``why`` and ``config_*`` keys as evidence;
    ``expect``: facts the package must read (``dialect``, ``num_layers``, ...), or
    ``{"refused": FIELD}`` for a drafter no engine serves as its producer trained it, whose refusal
    must name ``FIELD``.
    """
    _atomic_write(os.path.join(variant_dir, "target", "config.json"),
                  lambda p: open(p, "w").write(json.dumps(tiny_target_config(), indent=2) + "\n"))
    plain = {name: t.detach().contiguous() for name, t in tensors.items()}
    _atomic_write(os.path.join(variant_dir, "forward.safetensors"), lambda p: save_file(plain, p))
    record = {"producer": producer, "package": package, "variant": variant, "written_by": written_by,
              "sources": sources, "drafter": drafter, "target": "target",
              "target_num_hidden_layers": TINY["target_layers"],
              "aux_hidden_state_indices": aux_hidden_state_indices, "forward": forward,
              "expect": expect or {}, "notes": notes or []}
    _atomic_write(os.path.join(variant_dir, "record.json"),
                  lambda p: open(p, "w").write(json.dumps(record, indent=2) + "\n"))


def cite(root: str, package: str, path: str, snippet: str, nth: int = 1, span: int = 0) -> str:
    """``<package> <path>:<line>`` (``:<line>-<line+span>``) of the ``nth`` line of the installed file
    ``root/path`` holding ``snippet``; raises when absent, so a citation is checked, never typed."""
    seen = 0
    with open(os.path.join(root, path), encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if snippet in line:
                seen += 1
                if seen == nth:
                    return f"{package} {path}:{number}" + (f"-{number + span}" if span else "")
    raise LookupError(f"{path}: {snippet!r} (occurrence {nth}) not found")


def perturb(model: torch.nn.Module, seed: int, keep) -> None:
    """Stand-in for training: every parameter ``keep(name, param)`` does not hold drawn from
    ``seed``; RMSNorm weights at 1 + 0.3 * noise so that skipping or misplacing a norm changes the
    output, matrices scaled by 1/sqrt(fan-in)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if keep(name, param):
                continue
            noise = torch.randn(param.shape, generator=gen)
            if "norm" in name:
                param.copy_(1.0 + 0.3 * noise)
            else:
                param.copy_(noise / param.shape[-1] ** 0.5)
