"""``LlamaForCausalLMEagle3`` for SGLang, built from the canonical drafter description.

One class serves every dialect: multi-layer drafters whose later layers follow the checkpoint's
norm convention, any number of aux hidden states, per-aux ``fc_norm``, ``norm_before_fc``,
``norm_output``, ``norm_before_residual``, Qwen3-style layers (q/k norms), a drafter narrower or
wider than the target, and embeddings / lm_head shared from the target only when the checkpoint
has none. It is made of SGLang's own layers (parallel linears, RadixAttention, RMSNorm, rotary
embedding, logits processor) and keeps the contract SGLang's EAGLE worker relies on: the model
returns ``(hidden_for_logits, [hidden_for_next_step])``, ``hot_token_id`` comes from ``d2t``,
``fc`` runs only on the target's concatenated aux states (width ``A*T``, never ``H``).

Data flow of one forward (``L`` layers; ``x`` = the token embedding)::

    h = fc(fc_norm(input_norm(aux)))   (first draft step; later steps feed the draft's own h)
    layer 0: n = hidden_norm(input_layernorm(h) if hidden_input_layernorm else h)
             r = n if norm_before_residual else h
             a = attn([input_layernorm(x) ; n]);  h, r = post_norm(a, r); h = mlp(h)
    layer i: h, r = later_norm(h, r);  a = attn(h);  h, r = post_norm(a, r);  h = mlp(h)
    out, pre = norm(h, r)   -> logits from out; next step carries out if norm_output else pre
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Iterable, Optional

import torch
from torch import nn

from sglang.srt.layers.activation import GeluAndMul, SiluAndMul
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from sglang.srt.layers.logits_processor import LogitsProcessor
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.layers.rotary_embedding import get_rope
from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from sglang.srt.models.llama import LlamaForCausalLM

from sglang_eagle_ext.drafter.reader import DrafterCheckpoint
from sglang_eagle_ext.sglang.compat import runtime
from sglang_eagle_ext.sglang.compat.config_loading import served_drafter
from sglang_eagle_ext.errors import DrafterError, Problem
from sglang_eagle_ext.drafter.spec import DrafterSpec, LaterLayerNorm

logger = logging.getLogger(__name__)

# canonical projection name -> (fused parameter, shard id) for SGLang's stacked linears
_STACKED = {"q_proj": ("qkv_proj", "q"), "k_proj": ("qkv_proj", "k"), "v_proj": ("qkv_proj", "v"),
            "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}


def _prefix(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class DraftAttention(nn.Module):
    """Self-attention of one draft layer; ``in_features`` is ``2H`` for layer 0, ``H`` after."""

    def __init__(self, spec: DrafterSpec, layer_id: int, in_features: int, quant_config, prefix: str):
        super().__init__()
        tp = runtime.tp_world_size()
        self.num_heads = spec.num_attention_heads // tp
        self.num_kv_heads = max(1, spec.num_key_value_heads // tp)
        self.head_dim = spec.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = QKVParallelLinear(
            in_features, spec.head_dim, spec.num_attention_heads, spec.num_key_value_heads,
            bias=spec.attention_bias, quant_config=quant_config, prefix=_prefix(prefix, "qkv_proj"))
        self.o_proj = RowParallelLinear(
            spec.num_attention_heads * spec.head_dim, spec.hidden_size, bias=spec.o_proj_bias,
            quant_config=quant_config, prefix=_prefix(prefix, "o_proj"))
        if spec.layer_kind == "qwen3":
            self.q_norm = RMSNorm(spec.head_dim, eps=spec.rms_norm_eps)
            self.k_norm = RMSNorm(spec.head_dim, eps=spec.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.rotary_emb = get_rope(
            spec.head_dim, rotary_dim=spec.head_dim, max_position=spec.max_position_embeddings,
            base=spec.rope_theta, is_neox_style=True,
            rope_scaling=None if spec.rope_scaling is None else json.loads(spec.rope_scaling))
        sliding = spec.layer_types[layer_id] == "sliding_attention" and spec.sliding_window
        window = runtime.draft_window_size()  # the server's draft window wins, as upstream
        if window is None:
            # HF's sliding_window counts the query's own token (a query sees itself and window-1
            # before it); SGLang's sliding_window_size counts only the tokens before it (gemma2.py
            # passes config.sliding_window - 1)
            window = spec.sliding_window - 1 if sliding else -1
        self.attn = RadixAttention(
            self.num_heads, spec.head_dim, spec.head_dim ** -0.5, num_kv_heads=self.num_kv_heads,
            layer_id=layer_id, sliding_window_size=window,
            quant_config=quant_config, prefix=_prefix(prefix, "attn"))

    def _per_head_norm(self, norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        return norm(x.reshape(-1, self.head_dim)).view(x.shape)

    def forward(self, positions, hidden_states, forward_batch):
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.q_norm is not None:
            q = self._per_head_norm(self.q_norm, q)
            k = self._per_head_norm(self.k_norm, k)
        q, k = self.rotary_emb(positions, q, k)
        out, _ = self.o_proj(self.attn(q, k, v, forward_batch))
        return out


class DraftMLP(nn.Module):
    def __init__(self, spec: DrafterSpec, quant_config, prefix: str):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            spec.hidden_size, [spec.intermediate_size] * 2, bias=spec.mlp_bias, quant_config=quant_config,
            prefix=_prefix(prefix, "gate_up_proj"))
        self.down_proj = RowParallelLinear(
            spec.intermediate_size, spec.hidden_size, bias=spec.mlp_bias, quant_config=quant_config,
            prefix=_prefix(prefix, "down_proj"))
        # the reader admits only the activations of GATED_ACTIVATIONS
        self.act_fn = SiluAndMul() if spec.hidden_act == "silu" else GeluAndMul(
            "tanh" if spec.hidden_act == "gelu_pytorch_tanh" else "none")

    def forward(self, x):
        gate_up, _ = self.gate_up_proj(x)
        out, _ = self.down_proj(self.act_fn(gate_up))
        return out


class DraftDecoderLayer(nn.Module):
    """One draft layer. Layer 0 attends over ``[input_layernorm(embed) ; hidden_norm(h)]``; later
    layers normalise the carried state with the norm the checkpoint was trained with."""

    def __init__(self, spec: DrafterSpec, layer_id: int, quant_config, prefix: str):
        super().__init__()
        h, eps = spec.hidden_size, spec.rms_norm_eps
        self.is_input_layer = layer_id == 0
        self.norm_before_residual = spec.norm_before_residual and self.is_input_layer
        self.hidden_input_layernorm = spec.hidden_input_layernorm and self.is_input_layer
        self.self_attn = DraftAttention(spec, layer_id, 2 * h if self.is_input_layer else h,
                                        quant_config, _prefix(prefix, "self_attn"))
        self.mlp = DraftMLP(spec, quant_config, _prefix(prefix, "mlp"))
        self.post_attention_layernorm = RMSNorm(h, eps=eps)
        if self.is_input_layer or spec.later_layer_norm is LaterLayerNorm.INPUT_LAYERNORM:
            self.input_layernorm = RMSNorm(h, eps=eps)
        if self.is_input_layer or spec.later_layer_norm is LaterLayerNorm.HIDDEN_NORM:
            self.hidden_norm = RMSNorm(h, eps=eps)
        # the norm that layers after the first apply to the carried state
        self.later_norm_name = ("hidden_norm" if spec.later_layer_norm is LaterLayerNorm.HIDDEN_NORM
                                else "input_layernorm")

    def forward(self, positions, embeds, hidden_states, forward_batch, residual):
        if self.is_input_layer:
            normed = self.hidden_norm(self.input_layernorm(hidden_states) if self.hidden_input_layernorm
                                      else hidden_states)
            residual = normed if self.norm_before_residual else hidden_states
            hidden_states = torch.cat([self.input_layernorm(embeds), normed], dim=-1)
        else:
            later_norm = getattr(self, self.later_norm_name)
            hidden_states, residual = later_norm(hidden_states, residual)
        hidden_states = self.self_attn(positions, hidden_states, forward_batch)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual


class DraftModel(nn.Module):
    """Embedding, aux-state projection, decoder layers and final norm (the ``model.`` subtree)."""

    def __init__(self, spec: DrafterSpec, quant_config, prefix: str):
        super().__init__()
        h, t, a, eps = spec.hidden_size, spec.target_hidden_size, spec.num_aux_hidden_states, spec.rms_norm_eps
        self.hidden_size = h
        self.num_aux_hidden_states = a
        self.embed_tokens = VocabParallelEmbedding(spec.vocab_size, h, prefix=_prefix(prefix, "embed_tokens"))
        self.input_norm = RMSNorm(a * t, eps=eps) if spec.use_aux_hidden_state and spec.norm_before_fc else None
        self.fc_norm = (nn.ModuleList([RMSNorm(t, eps=eps) for _ in range(a)])
                        if spec.use_aux_hidden_state and spec.fc_norm else None)
        self.fc = nn.Linear(a * t, h, bias=spec.fc_bias) if spec.use_aux_hidden_state else None
        self.layers = nn.ModuleList([DraftDecoderLayer(spec, i, quant_config, _prefix(prefix, f"layers.{i}"))
                                     for i in range(spec.num_layers)])
        self.norm = RMSNorm(h, eps=eps)
        self.norm_output = spec.norm_output

    def _project_aux(self, aux: torch.Tensor) -> torch.Tensor:
        if self.input_norm is not None:
            aux = self.input_norm(aux)
        if self.fc_norm is not None:
            chunks = aux.chunk(self.num_aux_hidden_states, dim=-1)
            aux = torch.cat([norm(chunk) for norm, chunk in zip(self.fc_norm, chunks)], dim=-1)
        return self.fc(aux)

    def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
        embeds = self.embed_tokens(input_ids) if input_embeds is None else input_embeds
        hidden_states = forward_batch.spec_info.hidden_states
        # The target's aux states arrive A*T wide on the first draft step (and in draft-extend);
        # later steps carry the draft's own H-wide state, which must not pass through fc.
        if hidden_states.shape[-1] != self.hidden_size and self.fc is not None:
            hidden_states = self._project_aux(hidden_states)
        if hidden_states.shape[0] == 0:  # idle batch (DP attention)
            return hidden_states, [hidden_states]
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, embeds, hidden_states, forward_batch, residual)
        normed, pre_norm = self.norm(hidden_states, residual)
        return normed, [normed if self.norm_output else pre_norm]


class LlamaForCausalLMEagle3(LlamaForCausalLM):
    """SGLang's EAGLE-3 draft model class, for every drafter this package can read.

    Inherits ``forward`` (logits + captured hidden) and the embed/head accessors from SGLang's
    ``LlamaForCausalLM``; its own ``__init__`` replaces the target's.
    """

    draft_parallel_spec = runtime.eagle3_draft_parallel_spec()

    def __init__(self, config, quant_config=None, prefix: str = "") -> None:
        nn.Module.__init__(self)
        self.checkpoint: DrafterCheckpoint = served_drafter(config)  # what `config` was made from
        spec = self.spec = self.checkpoint.spec
        self.config = config
        self.quant_config = quant_config
        self.pp_group = runtime.pp_group()
        self.model = DraftModel(spec, quant_config, _prefix(prefix, "model"))
        self.load_lm_head_from_target = spec.lm_head_from_target
        if spec.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = ParallelLMHead(spec.draft_vocab_size, spec.hidden_size,
                                          quant_config=quant_config, prefix=_prefix(prefix, "lm_head"))
        logits_config = copy.deepcopy(config)
        logits_config.vocab_size = spec.draft_vocab_size  # the draft head's own vocabulary
        self.logits_processor = LogitsProcessor(logits_config)
        self.capture_aux_hidden_states = True
        self.hot_token_id = None
        logger.info("sglang-eagle-ext: building the %d-layer %s draft %s (%d aux)",
                    spec.num_layers, spec.dialect.value, spec.path, spec.num_aux_hidden_states)

    def get_hot_token_id(self):
        return self.hot_token_id

    def get_attention_sliding_window_size(self) -> Optional[int]:
        """The window SGLang's attention backends size their per-step window rails by: the server's
        draft window when given, else the drafter's own (SGLang's count, HF's minus one) when any of
        its layers slides. None for a drafter of full-attention layers: a backend told of no window
        builds no window indices, and one of its sliding layers then fails (Triton's multi-step
        draft backend asserts) or attends to the whole context."""
        window = runtime.draft_window_size()
        if window is None and self.spec.sliding_window and "sliding_attention" in self.spec.layer_types:
            window = self.spec.sliding_window - 1
        return window

    def set_embed(self, embed):
        """Share the target's embedding only when the checkpoint has none of its own."""
        if self.spec.embed_tokens_from_target:
            super().set_embed(embed)

    def set_embed_and_head(self, embed, head):
        """Called when the checkpoint has no lm_head; its own embedding (if any) is kept."""
        del self.lm_head.weight
        self.lm_head.weight = head
        self.set_embed(embed)

    def _parameter_for(self, name: str):
        """(parameter name, shard id) of a canonical tensor name, or None when it has none."""
        if name == "lm_head.weight":
            return ("lm_head.weight", None)
        parts = name.split(".")
        if len(parts) >= 3 and parts[-2] in _STACKED:
            fused, shard = _STACKED[parts[-2]]
            return (f"model.{'.'.join(parts[:-2] + [fused, parts[-1]])}", shard)
        return (f"model.{name}", None)

    def load_weights(self, weights: Iterable) -> None:
        """Load every canonical tensor of the checkpoint; any mismatch is an error.

        SGLang's iterator yields raw names from whichever weight file it picked; the checkpoint
        reader already validated the tensors against the spec and knows each dialect's spelling
        (fused projections, NeMo's ``model.`` prefix, vocabulary maps in side files), so the
        tensors stream from it, one at a time, and the iterator is left unread.
        """
        del weights
        params = dict(self.named_parameters())
        if self.spec.tie_word_embeddings:
            params.pop("lm_head.weight", None)
        expected = {pname: {"q", "k", "v"} if ".qkv_proj." in pname else {0, 1} if ".gate_up_proj." in pname
                    else {None} for pname in params}
        loaded: dict[str, set] = {}
        problems = []
        with torch.device("cpu"):
            for name, tensor in self.checkpoint.tensors():
                if name == "d2t":  # offsets -> target ids; the worker moves the table to the GPU
                    self.hot_token_id = tensor + torch.arange(tensor.shape[0], dtype=tensor.dtype)
                    continue
                pname, shard = self._parameter_for(name)
                param = params.get(pname)
                if param is None or shard not in expected[pname]:
                    problems.append(Problem(self.spec.path, name, "no parameter of the draft model "
                                            "takes this tensor", "report this drafter layout"))
                    continue
                loader = getattr(param, "weight_loader", None)
                if loader is None:
                    if param.shape != tensor.shape:
                        problems.append(Problem(self.spec.path, name, "wrong shape", "re-export",
                                                expected=str(list(param.shape)), found=str(list(tensor.shape))))
                        continue
                    param.data.copy_(tensor)
                else:
                    loader(param, tensor, *([] if shard is None else [shard]))
                loaded.setdefault(pname, set()).add(shard)
        shared = {name for name, from_target in (("model.embed_tokens.weight", self.spec.embed_tokens_from_target),
                                                 ("lm_head.weight", self.spec.lm_head_from_target)) if from_target}
        for pname, shards in expected.items():
            if pname not in shared and loaded.get(pname) != shards:
                problems.append(Problem(self.spec.path, pname, "parameter left unloaded",
                                        "report this drafter layout",
                                        expected=str(sorted(map(str, shards))),
                                        found=str(sorted(map(str, loaded.get(pname, ()))))))
        if problems:
            raise DrafterError(problems)
