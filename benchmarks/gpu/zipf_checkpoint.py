"""``zipf_target``'s model and ``zipf_drafter`` written as ordinary checkpoints, for engines that cannot run
SGLang's plugin (benchmarks only; GPU).

``fused_verify_e2e`` and ``step_profile`` draw their Llama-3.1-8B-geometry target inside SGLang (the
``dummy`` loader, then ``zipf_target``'s rewrite). A peer engine (vLLM) cannot run that plugin, and a
side-by-side must give both engines the same weights: this script writes the model as files that any
engine loads with its default loader.

* ``OUTDIR/models/target``: ``fused_verify_e2e.LLAMA_31_8B``'s config.json and its weights in
  safetensors shards of at most ``SHARD_BYTES`` each with the index Hugging Face writes. Every tensor is drawn
  as SGLang's dummy loader draws it (uniform in [-1e-3, 1e-3], bfloat16; its own seeded generator per
  tensor), then ``zipf_target.rewrite`` sets the embeddings, final norm and lm_head on the same device the
  engines' plugin uses, so the next-token profiles are the ones the other benchmarks measured.
* ``OUTDIR/models/drafter``: ``fused_verify_e2e.build_models``'s drafter (``zipf_drafter``: 1 layer, 3 aux
  states, SpecForge layout, draft vocabulary 32000 with ``d2t``, no embeddings of its own), which drafts the
  target's profiles as a well-trained drafter does.

No tokenizer is written: the serving benchmarks take their prompts' ids from another model's tokenizer
(``--tokenizer``) and start the engines without one.

usage (repository root)::

    python3 benchmarks/gpu/zipf_checkpoint.py OUTDIR            # GPU: 16 GB of weights
    python3 benchmarks/gpu/zipf_checkpoint.py OUTDIR --smoke    # any device: fused_verify_e2e's tiny geometry
    python3 benchmarks/gpu/zipf_checkpoint.py OUTDIR --smoke --fewest-heads  # the same, 2 query heads on 1 KV head
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]  # this folder's modules, the checkout's tests.kit
from fused_verify_e2e import DRAFT_VOCAB, LLAMA_31_8B, SEED, SMOKE, build_models  # noqa: E402
from results_file import save_json  # noqa: E402
from zipf_target import rewrite  # noqa: E402

DUMMY_RANGE = 1e-3  # SGLang's and vLLM's dummy loaders draw uniform(-1e-3, 1e-3)
SHARD_BYTES = 4 << 30
# The fewest heads zipf_drafter drafts with (2 query heads on one KV head that holds every class), their width the
# hidden size as in Llama-3.1-8B: Triton's CPU interpreter runs SGLang's attention a program per request and head,
# so a CPU server of these runs it at half the smoke geometry's cost; the next-token law does not read the heads.
FEWEST_HEADS = dict(num_attention_heads=2, num_key_value_heads=1, head_dim=64)


def llama_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every weight of a Hugging Face ``LlamaForCausalLM`` with ``config``, in checkpoint order."""
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        shapes.update({layer + "input_layernorm.weight": (hidden,), layer + "self_attn.q_proj.weight": (q, hidden),
                       layer + "self_attn.k_proj.weight": (kv, hidden), layer + "self_attn.v_proj.weight": (kv, hidden),
                       layer + "self_attn.o_proj.weight": (hidden, q),
                       layer + "post_attention_layernorm.weight": (hidden,),
                       layer + "mlp.gate_proj.weight": (inter, hidden), layer + "mlp.up_proj.weight": (inter, hidden),
                       layer + "mlp.down_proj.weight": (hidden, inter)})
    shapes.update({"model.norm.weight": (hidden,), "lm_head.weight": (vocab, hidden)})
    return shapes


def drawn(shape: tuple[int, ...], index: int, device: str) -> torch.Tensor:
    """A tensor as the dummy loaders draw one: uniform in the range, from a generator seeded per tensor."""
    generator = torch.Generator(device=device).manual_seed(SEED + index)
    tensor = torch.empty(shape, dtype=torch.bfloat16, device=device)
    return tensor.uniform_(-DUMMY_RANGE, DUMMY_RANGE, generator=generator)


def save_atomically(tensors: dict[str, torch.Tensor], path: str) -> None:
    staging = path + ".partial"
    save_file(tensors, staging, metadata={"format": "pt"})
    os.replace(staging, path)


def write_target(directory: str, config: dict, device: str) -> dict:
    """The weights of ``directory`` (its config.json written before); returns the index written."""
    shapes = llama_shapes(config)
    # every row of these three is set by the rewrite
    special = {name: torch.empty(shapes[name], dtype=torch.bfloat16, device=device)
               for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")}
    rewrite(special["model.embed_tokens.weight"], special["model.norm.weight"], special["lm_head.weight"], SEED,
            config["vocab_size"])
    shards, current, size = [], {}, 0
    for index, (name, shape) in enumerate(shapes.items()):
        tensor = special[name] if name in special else drawn(shape, index, device)
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > SHARD_BYTES:  # a shard holds at most SHARD_BYTES (or one larger tensor)
            shards.append(current)
            current, size = {}, 0
        current[name] = tensor.cpu()
        size += nbytes
    if current:
        shards.append(current)
    weight_map, total = {}, 0
    for number, tensors in enumerate(shards, start=1):
        file = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        save_atomically(tensors, os.path.join(directory, file))
        for name, tensor in tensors.items():
            weight_map[name] = file
            total += tensor.numel() * tensor.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    save_json(os.path.join(directory, "model.safetensors.index.json"), index)  # last: the target is complete
    return index


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--smoke", action="store_true", help="fused_verify_e2e's tiny geometry (CPU-sized)")
    parser.add_argument("--fewest-heads", action="store_true", help="the geometry with FEWEST_HEADS' attention")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    config = SMOKE["target"] if args.smoke else LLAMA_31_8B
    if args.fewest_heads:
        config = dict(config, **FEWEST_HEADS)
    draft_vocab = SMOKE["draft_vocab"] if args.smoke else DRAFT_VOCAB
    written = os.path.join(args.out, "models", "target", "config.json")
    if os.path.exists(written):
        with open(written, encoding="utf-8") as handle:
            if json.load(handle) != config:
                parser.error(f"{written} holds another geometry's target (a run with other --smoke / --fewest-heads "
                             "options wrote it): choose an empty OUT")
    started = time.perf_counter()
    target, drafter = build_models(args.out, config, draft_vocab, args.device)
    if not os.path.exists(os.path.join(target, "model.safetensors.index.json")):
        index = write_target(target, config, args.device)
        print(f"target: {len(index['weight_map'])} tensors, {index['metadata']['total_size'] / 2**30:.2f} GiB "
              f"in {len(set(index['weight_map'].values()))} shard(s) -> {target}")
    print(f"drafter -> {drafter}; {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
