"""The canonical description of an EAGLE-3 drafter.

Every checkpoint dialect (SafeAILab, SpecForge, AngelSlim, TorchSpec, ModelOpt, speculators, NeMo
Automodel) is read into one :class:`DrafterSpec`. Everything downstream (the SGLang model class,
the reference drafter, the command-line tools) is built from it and never looks at the raw
config again.

Aux hidden-state convention
---------------------------
Aux layers are recorded as **hidden-state indices**: index ``k`` is the residual stream that
*enters* decoder layer ``k`` of the target, i.e. HF transformers' ``output_hidden_states[k]``;
``0`` is the embedding output and ``N`` (the target depth) is the output of the last layer before
the final norm. This is vLLM's / speculators' meaning of an id. SGLang's
``eagle_config.eagle_aux_hidden_state_layer_ids`` name the layer whose *output* is tapped, so
SGLang id ``j`` is hidden-state index ``j + 1`` (:meth:`AuxLayers.sglang_layer_ids` converts back).
The index convention is used because it is the only one that can name every tap (embeddings and
the last layer's output included) and it can be checked directly against HF transformers.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import Any


class Dialect(str, enum.Enum):
    """Who wrote the checkpoint; decides where fields live and what ids mean."""

    FLAT = "flat"  # SafeAILab / SpecForge / TorchSpec: flat Llama config, `midlayer.*`
    ANGELSLIM = "angelslim"  # `Eagle3LlamaForCausalLM`, flat config
    MODELOPT = "modelopt"  # NVIDIA ModelOpt export: flat config + nested `eagle_config`
    SPECULATORS = "speculators"  # vLLM / RedHat speculators: `transformer_layer_config`
    NEMO = "nemo"  # NeMo Automodel `LlamaEagle3DraftModel`: `model.` prefix, target's depth


class IdConvention(str, enum.Enum):
    """What the integers written in a config mean."""

    HIDDEN_STATE_INDEX = "hidden_state_index"  # vLLM / speculators: input of layer k
    LAYER_OUTPUT = "layer_output"  # SGLang / SpecForge / ModelOpt / NeMo: output of layer k
    BOUNDARY = "boundary"  # SGLang gpt-oss rule: a list reaching N is already an index list


def default_aux_indices(num_target_layers: int) -> tuple[int, ...]:
    """The taps every producer uses when a checkpoint names none.

    SafeAILab taps ``h_2, h_{N//2}, h_{N-3}``; SGLang and speculators default to the same indices;
    ModelOpt and NeMo write ``[1, N//2-1, N-4]`` in the layer-output convention, which is the
    same three hidden states.
    """
    n = num_target_layers
    return (2, n // 2, n - 3)


@dataclass(frozen=True)
class AuxLayers:
    """Which target hidden states feed ``fc``, and where that fact came from.

    ``declared`` holds the integers exactly as written (``None`` when the checkpoint names no
    layers), ``convention`` their meaning, ``source`` the file and field they were read from.
    """

    declared: tuple[int, ...] | None
    convention: IdConvention
    source: str

    def hidden_state_indices(self, num_target_layers: int | None = None) -> tuple[int, ...] | None:
        """The canonical hidden-state indices (see the module docstring).

        ``num_target_layers`` (the target depth N) is needed for the default taps and to
        recognise a layer-output list that reaches N, which can only be a boundary list (SGLang's
        gpt-oss rule: layer N does not exist). Returns ``None`` when N is required but unknown.
        """
        if self.declared is None:
            return None if num_target_layers is None else default_aux_indices(num_target_layers)
        if self.convention is IdConvention.LAYER_OUTPUT:
            if num_target_layers is not None and max(self.declared) == num_target_layers:
                return self.declared
            return tuple(i + 1 for i in self.declared)
        return self.declared

    def sglang_layer_ids(self, num_target_layers: int | None = None) -> tuple[int, ...] | None:
        """The same taps in SGLang's ``eagle_aux_hidden_state_layer_ids`` convention for
        Llama/Qwen-family targets (output of layer ``j`` = index ``j + 1``)."""
        indices = self.hidden_state_indices(num_target_layers)
        return None if indices is None else tuple(i - 1 for i in indices)


class LaterLayerNorm(str, enum.Enum):
    """How decoder layers after the first normalise their input."""

    INPUT_LAYERNORM = "input_layernorm"  # vanilla decoder layer (speculators, vLLM, ModelOpt)
    HIDDEN_NORM = "hidden_norm"  # SGLang >= 0.5.12 built-in multi-layer drafters


@dataclass(frozen=True)
class DrafterSpec:
    """Everything needed to build, load and serve one EAGLE-3 drafter.

    Symbols: ``H`` = ``hidden_size``, ``T`` = ``target_hidden_size``, ``A`` =
    ``num_aux_hidden_states``, ``V`` = ``vocab_size`` (the target's), ``Vd`` =
    ``draft_vocab_size``, ``L`` = ``num_layers``.
    """

    # provenance
    path: str
    dialect: Dialect
    architecture: str
    files: tuple[str, ...]

    # draft decoder geometry (layer 0 takes [embed ; hidden] = 2H, later layers H)
    num_layers: int  # counted from tensor names, never from `num_hidden_layers`
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    hidden_act: str
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: str | None  # JSON text of the rope-scaling dict (kept hashable), or None
    max_position_embeddings: int
    layer_kind: str  # "llama", or "qwen3" (per-head q/k RMSNorm)
    attention_bias: bool
    later_layer_norm: LaterLayerNorm | None  # None for a one-layer drafter
    sliding_window: int | None
    layer_types: tuple[str, ...]  # per draft layer: "full_attention" | "sliding_attention"

    # aux hidden states -> fc
    use_aux_hidden_state: bool  # False: EAGLE-1-style head fed the target's last hidden state
    num_aux_hidden_states: int  # A; 1 when use_aux_hidden_state is False
    aux_layers: AuxLayers
    target_hidden_size: int  # T
    fc_bias: bool
    fc_norm: bool  # one RMSNorm [T] per aux chunk before fc (EAGLE 3.1)
    norm_before_fc: bool  # one RMSNorm [A*T] over the concatenation before fc
    norm_before_residual: bool  # layer 0 residual = hidden_norm(fc(aux)) instead of fc(aux)
    norm_output: bool  # the hidden state carried to the next step is post-final-norm

    # vocabulary and embeddings
    vocab_size: int  # V, the target's vocabulary
    draft_vocab_size: int  # Vd; == V when there is no map
    has_vocab_map: bool  # `d2t` offsets present: target_id = draft_id + d2t[draft_id]
    tie_word_embeddings: bool
    embed_tokens_from_target: bool  # the checkpoint has no embed_tokens
    lm_head_from_target: bool  # the checkpoint has no lm_head

    notes: tuple[str, ...] = ()  # harmless facts worth logging (ignored tensors, assumed defaults)

    @property
    def fc_in_features(self) -> int:
        return self.num_aux_hidden_states * self.target_hidden_size

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (enums as their values)."""

        def plain(value):
            if isinstance(value, enum.Enum):
                return value.value
            if isinstance(value, tuple):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return value

        data = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        data["aux_layers"] = {
            "declared": plain(self.aux_layers.declared),
            "convention": self.aux_layers.convention.value,
            "source": self.aux_layers.source,
        }
        data["rope_scaling"] = None if self.rope_scaling is None else json.loads(self.rope_scaling)
        data["fc_in_features"] = self.fc_in_features
        return data
