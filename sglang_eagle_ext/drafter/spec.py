"""The canonical description of an EAGLE-3 drafter: its fields, each declared once, and the tensors it asks for.

Every checkpoint dialect (SafeAILab, SpecForge, AngelSlim, TorchSpec, ModelOpt, speculators, NeMo
Automodel) is read into one :class:`DrafterSpec`. Everything downstream (the SGLang model class,
the reference drafter, the command-line tools) is built from it and never looks at the raw
config again.

Each field of :class:`DrafterSpec` carries its :class:`Declaration`: what it means, where each
dialect keeps it in ``config.json`` (:class:`Key`), its default, and where the canonical
``config.json`` writes it. Parsing (:mod:`.dialects`), the written config (:func:`canonical_config`)
and :meth:`DrafterSpec.to_dict` all follow from these declarations.

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

Tensors
-------
The canonical tensor names, with the shapes a description asks for (:func:`expected_shapes`;
``i`` = draft layer, ``j`` = aux chunk); :mod:`.tensors` indexes every dialect's spelling under
them::

    embed_tokens.weight                   [V, H]        only when the checkpoint has one
    fc.weight / fc.bias                   [H, A*T] / [H] absent when use_aux_hidden_state is False
    input_norm.weight                     [A*T]         norm_before_fc
    fc_norm.{j}.weight                    [T]           fc_norm
    layers.0.input_layernorm.weight       [H]           normalises the token embedding
    layers.0.hidden_norm.weight           [H]           normalises fc(aux) / the carried hidden
    layers.{i}.input_layernorm.weight     [H]           i >= 1, LaterLayerNorm.INPUT_LAYERNORM
    layers.{i}.hidden_norm.weight         [H]           i >= 1, LaterLayerNorm.HIDDEN_NORM
    layers.{i}.self_attn.{q,k,v}_proj.weight  [nh*d | nkv*d, 2H for i == 0 else H]
    layers.{i}.self_attn.{q,k,v}_proj.bias    [nh*d | nkv*d]  attention_bias
    layers.{i}.self_attn.o_proj.weight    [H, nh*d]
    layers.{i}.self_attn.o_proj.bias      [H]           o_proj_bias
    layers.{i}.self_attn.{q,k}_norm.weight [d]          layer_kind == "qwen3"
    layers.{i}.post_attention_layernorm.weight [H]
    layers.{i}.mlp.{gate,up}_proj.weight  [I, H]
    layers.{i}.mlp.down_proj.weight       [H, I]
    layers.{i}.mlp.{gate,up,down}_proj.bias [I | H]     mlp_bias
    norm.weight                           [H]
    lm_head.weight                        [Vd, H]       only when the checkpoint has one
    d2t                                   [Vd] int64    offsets, only when Vd < V
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from dataclasses import dataclass, field
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


def default_aux_indices(num_target_layers: int) -> tuple[int, ...]:
    """The taps every producer uses when a checkpoint names none (the one owner of this rule).

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
    layers), ``convention`` their meaning, ``source`` the field they were read from.
    """

    declared: tuple[int, ...] | None
    convention: IdConvention
    source: str

    def hidden_state_indices(self, num_target_layers: int | None = None) -> tuple[int, ...] | None:
        """The canonical hidden-state indices (see the module docstring).

        ``num_target_layers`` (the target depth N) is needed for the default taps and to
        recognise a layer-output list that reaches N, which can only be a boundary list (SGLang's
        gpt-oss rule: layer N does not exist). Returns ``None`` when N is required but unknown.

        Ascending, whatever order the ids were written in: every trainer and engine (SGLang, vLLM,
        ModelOpt's hooks) concatenates the captured states in layer order, and ModelOpt's Megatron
        export writes its default ids in Python set order (``[1, 28, 15]`` for a 32-layer target).
        """
        if self.declared is None:
            return None if num_target_layers is None else default_aux_indices(num_target_layers)
        if self.convention is IdConvention.LAYER_OUTPUT:
            if num_target_layers is not None and max(self.declared) == num_target_layers:
                return tuple(sorted(self.declared))
            return tuple(sorted(i + 1 for i in self.declared))
        return tuple(sorted(self.declared))

    def sglang_layer_ids(self, num_target_layers: int | None = None) -> tuple[int, ...] | None:
        """The same taps in SGLang's ``eagle_aux_hidden_state_layer_ids`` convention for
        Llama/Qwen-family targets (output of layer ``j`` = index ``j + 1``)."""
        indices = self.hidden_state_indices(num_target_layers)
        return None if indices is None else tuple(i - 1 for i in indices)


def aux_ids_fix(ids: tuple[int, ...] | list[int] | None = None) -> str:
    """The fix of every problem that asks for aux layer ids: the two places a config may hold
    them, each with what its integers mean. Never a bare "write the ids" or "rename the key": the
    same integers written in the other place tap the neighbouring layers without a word."""
    shown = "the ids" if ids is None else str(list(ids))
    return (f"write {shown} as eagle_config.eagle_aux_hidden_state_layer_ids if id j names the output of "
            "target layer j, i.e. hidden_states[j + 1] (SGLang, SpecForge, ModelOpt, NeMo, AngelSlim), or "
            "as top-level eagle_aux_hidden_state_layer_ids if id k names the input of layer k, i.e. "
            "hidden_states[k] (vLLM, speculators); the trainer's hidden-state capture code says which")


# Gated-MLP activations every engine serves (SGLang's SiluAndMul / GeluAndMul).
GATED_ACTIVATIONS = ("silu", "gelu", "gelu_pytorch_tanh")


class LaterLayerNorm(str, enum.Enum):
    """How decoder layers after the first normalise their input."""

    INPUT_LAYERNORM = "input_layernorm"  # vanilla decoder layer (speculators, vLLM, ModelOpt)
    HIDDEN_NORM = "hidden_norm"  # SGLang >= 0.5.12 built-in multi-layer drafters


# ---------------------------------------------------------------------------------------------
# Declarations
# ---------------------------------------------------------------------------------------------

class Place(str, enum.Enum):
    """Which part of ``config.json`` a key lives in."""

    LAYER = "layer"  # decoder geometry: the config itself, or speculators' `transformer_layer_config`
    TOP = "top"  # the top level
    EAGLE = "eagle"  # the nested `eagle_config` object


@dataclass(frozen=True)
class Key:
    """One place a fact may be written; ``name`` may be dotted (``rope_parameters.rope_theta``).
    ``dialects`` limits it to those producers (None: every dialect); ``ids`` is what the integers
    of an aux-layer-id key mean there (the same name means different layers in different places)."""

    place: Place
    name: str
    dialects: frozenset[Dialect] | None = None
    ids: IdConvention | None = None

    def path(self, dialect: Dialect) -> str:
        """The key as a user finds it in the file."""
        if self.place is Place.EAGLE:
            return f"eagle_config.{self.name}"
        if self.place is Place.LAYER and dialect is Dialect.SPECULATORS:
            return f"transformer_layer_config.{self.name}"
        return self.name

    def read_by(self, dialect: Dialect) -> bool:
        return self.dialects is None or dialect in self.dialects


def layer(name: str, *, only: set[Dialect] | None = None, skip: set[Dialect] = frozenset()) -> Key:
    dialects = frozenset(only or Dialect) - frozenset(skip)
    return Key(Place.LAYER, name, None if dialects == frozenset(Dialect) else dialects)


def top(name: str, *, only: set[Dialect] | None = None, ids: IdConvention | None = None) -> Key:
    return Key(Place.TOP, name, None if only is None else frozenset(only), ids)


def eagle(name: str, *, ids: IdConvention | None = None) -> Key:
    return Key(Place.EAGLE, name, None, ids)


REQUIRED = object()  # no default: the config must state it


@dataclass(frozen=True)
class Declaration:
    """How one :class:`DrafterSpec` field is known.

    ``keys``: where producers write it, tried in order (first present wins); ``default``: a value,
    or a function of the fields read before it, used when no key is present (``REQUIRED``: an
    error); ``written``: where the canonical ``config.json`` puts it (None: not written);
    ``tensors``: how the tensors decide or check it (None: they do not).
    """

    meaning: str
    keys: tuple[Key, ...] = ()
    default: Any = None
    written: Key | None = None
    tensors: str | None = None


def declare(meaning: str, *keys: Key, default: Any = None, written: Key | None = None,
            tensors: str | None = None) -> Any:
    return field(metadata={"declaration": Declaration(meaning, keys, default, written, tensors)})


# Defaults computed from fields declared before them; None when one of those is unknown (a
# config error already reported).

def _heads(values: dict) -> int | None:
    return values["num_attention_heads"]


def _head_dim(values: dict) -> int | None:
    hidden, heads = values["hidden_size"], values["num_attention_heads"]
    return hidden // heads if hidden and heads else None


def _hidden(values: dict) -> int | None:
    return values["hidden_size"]


def _vocab(values: dict) -> int | None:
    return values["vocab_size"]


def _later_layer_norm(values: dict) -> LaterLayerNorm | None:
    return LaterLayerNorm.INPUT_LAYERNORM if (values["num_layers"] or 0) >= 2 else None


def _layer_types(values: dict) -> tuple[str, ...]:
    return ("sliding_attention" if values["sliding_window"] else "full_attention",) * (values["num_layers"] or 0)


def _num_aux(values: dict) -> int:
    return 3 if values["use_aux_hidden_state"] is not False else 1


def _default_taps(values: dict) -> AuxLayers:
    return AuxLayers(None, IdConvention.HIDDEN_STATE_INDEX, "default taps (no ids in config)")


@dataclass(frozen=True)
class DrafterSpec:
    """Everything needed to build, load and serve one EAGLE-3 drafter.

    Symbols: ``H`` = ``hidden_size``, ``T`` = ``target_hidden_size``, ``A`` =
    ``num_aux_hidden_states``, ``V`` = ``vocab_size`` (the target's), ``Vd`` =
    ``draft_vocab_size``, ``L`` = ``num_layers``.
    """

    # provenance
    path: str = declare("the checkpoint directory", default=REQUIRED)
    dialect: Dialect = declare("the producer whose layout the checkpoint follows", default=REQUIRED)
    architecture: str = declare("`architectures[0]` as written", top("architectures"), default="")
    files: tuple[str, ...] = declare("every file read, config first", default=())

    # draft decoder geometry (layer 0 takes [embed ; hidden] = 2H, later layers H)
    num_layers: int = declare(
        "draft decoder layers (L)", layer("num_hidden_layers", skip={Dialect.NEMO}),
        default=REQUIRED, written=top("num_hidden_layers"),
        tensors="counted from `layers.{i}.*`; a config that says otherwise is an error "
                "(NeMo writes the target's depth there and is not read)")
    hidden_size: int = declare("draft model width (H)", layer("hidden_size"), default=REQUIRED,
                               written=top("hidden_size"))
    num_attention_heads: int = declare("query heads", layer("num_attention_heads"), default=REQUIRED,
                                       written=top("num_attention_heads"))
    num_key_value_heads: int = declare("key/value heads (GQA)", layer("num_key_value_heads"),
                                       default=_heads, written=top("num_key_value_heads"))
    head_dim: int = declare("per-head width (heads * head_dim may differ from H)", layer("head_dim"),
                            default=_head_dim, written=top("head_dim"))
    intermediate_size: int = declare("MLP width (I)", layer("intermediate_size"), default=REQUIRED,
                                     written=top("intermediate_size"))
    hidden_act: str = declare("gated MLP activation, one of GATED_ACTIVATIONS", layer("hidden_act"), default="silu",
                              written=top("hidden_act"))
    rms_norm_eps: float = declare("RMSNorm epsilon", layer("rms_norm_eps"), default=1e-6,
                                  written=top("rms_norm_eps"))
    rope_theta: float = declare("RoPE base", layer("rope_theta"), layer("rope_parameters.rope_theta"),
                                default=10000.0, written=top("rope_theta"))
    rope_scaling: str | None = declare(
        "RoPE scaling dict as JSON text (hashable), None for plain RoPE", layer("rope_scaling"),
        layer("rope_parameters"), written=top("rope_scaling"))
    max_position_embeddings: int = declare("positions RoPE is set up for", layer("max_position_embeddings"),
                                           default=2048, written=top("max_position_embeddings"))
    layer_kind: str = declare(
        '"llama", or "qwen3" (per-head q/k RMSNorm)', top("architectures"),
        layer("model_type", only={Dialect.SPECULATORS}), default="llama", written=top("architectures"),
        tensors="`self_attn.q_norm` / `k_norm` present make it qwen3")
    attention_bias: bool = declare("q/k/v projections carry a bias", layer("attention_bias"),
                                   default=False, written=top("attention_bias"))
    o_proj_bias: bool = declare(
        "the output projection carries a bias", default=False, tensors="`self_attn.o_proj.bias` present (HF Llama "
        "gives it one with attention_bias; other producers do not)")
    mlp_bias: bool = declare("the MLP projections carry biases (HF Llama's mlp_bias)", layer("mlp_bias"),
                             default=False, written=top("mlp_bias"))
    later_layer_norm: LaterLayerNorm | None = declare(
        "how layers after the first normalise their input (None for one layer)",
        default=_later_layer_norm, tensors="`input_layernorm` or `hidden_norm` of layers >= 1")
    sliding_window: int | None = declare(
        "window of sliding-attention layers", layer("sliding_window", skip={Dialect.NEMO}),
        written=top("sliding_window"))
    layer_types: tuple[str, ...] = declare(
        'per draft layer: "full_attention" or "sliding_attention"',
        layer("layer_types", skip={Dialect.NEMO}), default=_layer_types, written=top("layer_types"),
        tensors="one entry per layer counted; a list of another length is replaced by the default")

    # aux hidden states -> fc
    use_aux_hidden_state: bool = declare(
        "False: the head reads the target's last hidden state (no fc)",
        eagle("use_aux_hidden_state"), default=True, written=eagle("use_aux_hidden_state"))
    num_aux_hidden_states: int = declare(
        "aux hidden states concatenated into fc (A; 1 without aux states)", top("num_aux_hidden_states"),
        default=_num_aux, written=top("num_aux_hidden_states"), tensors="fc's width / T; every statement must agree")
    aux_layers: AuxLayers = declare(
        "which target hidden states feed fc",
        eagle("eagle_aux_hidden_state_layer_ids", ids=IdConvention.LAYER_OUTPUT),
        top("eagle_aux_hidden_state_layer_ids", ids=IdConvention.HIDDEN_STATE_INDEX),
        # AngelSlim's trainer taps hidden_states[id + 1] (see the dialect's notes in dialects.py)
        top("aux_hidden_states_layer_ids", only={Dialect.ANGELSLIM}, ids=IdConvention.LAYER_OUTPUT),
        default=_default_taps, written=eagle("eagle_aux_hidden_state_layer_ids", ids=IdConvention.LAYER_OUTPUT))
    target_hidden_size: int = declare("width of one target hidden state (T)", top("target_hidden_size"),
                                      default=_hidden, written=top("target_hidden_size"))
    fc_bias: bool = declare("fc carries a bias", top("bias"), default=False, written=top("bias"))
    fc_norm: bool = declare("one RMSNorm [T] per aux chunk before fc (EAGLE 3.1)", top("fc_norm"),
                            top("use_aux_norm"), default=False, written=top("fc_norm"))
    norm_before_fc: bool = declare("one RMSNorm [A*T] over the concatenation before fc",
                                   eagle("norm_before_fc"), top("norm_before_fc"), default=False,
                                   written=top("norm_before_fc"))
    norm_before_residual: bool = declare(
        "layer 0's residual is hidden_norm(fc(aux)) instead of fc(aux)", top("norm_before_residual"),
        default=False, written=top("norm_before_residual"))
    hidden_input_layernorm: bool = declare(
        "layer 0 normalises its hidden input with input_layernorm and then hidden_norm (the embedding with "
        "input_layernorm alone), as ModelOpt's HF EAGLE module trains it: transformers' LlamaDecoderLayer "
        "applies input_layernorm to fc's output before attention, and ModelOpt's attention pre-hook applies "
        "hidden_norm to that (nvidia-modelopt==0.47.0 modelopt/torch/speculative/plugins/modeling_eagle.py:"
        "114-127; checked against its module in tests/producer_files/modelopt). True by default in the "
        "ModelOpt layout; SGLang's and vLLM's classes apply hidden_norm alone",
        top("hidden_input_layernorm"), default=False, written=top("hidden_input_layernorm"))
    norm_output: bool = declare(
        "the hidden state carried to the next draft step is the final-normed one (logits always read "
        "the final-normed state). This is what `norm_output: true` means to speculators "
        "(vllm-project/speculators@c05b95b3 src/speculators/models/eagle3/core.py:302-306), NeMo "
        "Automodel (NVIDIA-NeMo/Automodel@36044ad3 nemo_automodel/components/speculative/eagle/"
        "draft_llama.py:934-941) and SGLang's llama_eagle3. SpecForge's `norm_output` means something "
        "else (sgl-project/SpecForge@a6b6b023 specforge/modeling/draft/llama3_eagle.py:1690,1772-1777; "
        "specforge/algorithms/eagle3/model.py:386-400): it gates the final norm before lm_head "
        "(default true) and the carried state is always the pre-norm one, so in the flat "
        "(SpecForge) layout `norm_output: true` reads as false here and `false` (lm_head on the "
        "un-normed state, which no engine serves) is refused. This package writes the fact as "
        "`carry_normed_state` (read the same in every layout) next to SGLang's `norm_output`",
        top("carry_normed_state"), top("norm_output"), default=False, written=top("carry_normed_state"))

    # vocabulary and embeddings
    vocab_size: int = declare("the target's vocabulary (V)", layer("vocab_size"), default=REQUIRED,
                              written=top("vocab_size"))
    draft_vocab_size: int = declare(
        "rows of the draft lm_head (Vd; V without a map)", top("draft_vocab_size"),
        layer("draft_vocab_size"), default=_vocab, written=top("draft_vocab_size"),
        tensors="lm_head rows when the config names none")
    has_vocab_map: bool = declare("`d2t` offsets present: target_id = draft_id + d2t[draft_id]",
                                  default=False, tensors="`d2t` in the weights or NeMo's eagle_meta.pt")
    tie_word_embeddings: bool = declare("lm_head is the embedding matrix", layer("tie_word_embeddings"),
                                        top("tie_word_embeddings"), default=False,
                                        written=top("tie_word_embeddings"))
    embed_tokens_from_target: bool = declare("the checkpoint has no embed_tokens", default=False,
                                             tensors="`embed_tokens.weight` absent")
    lm_head_from_target: bool = declare("the checkpoint has no lm_head (and does not tie)", default=False,
                                        tensors="`lm_head.weight` absent")
    torch_dtype: str | None = declare("the dtype the drafter was saved for", top("torch_dtype"),
                                      top("dtype"), layer("torch_dtype"), layer("dtype"),
                                      written=top("torch_dtype"))

    notes: tuple[str, ...] = field(default=(), metadata={"declaration": Declaration(
        "harmless facts worth logging (ignored tensors and keys, assumed defaults)", default=())})

    @classmethod
    def from_values(cls, **values: Any) -> DrafterSpec:
        """A spec of the given fields, every other one at its declared default (computed from
        the fields before it where the default is a function)."""
        complete: dict[str, Any] = {}
        for name, declaration in declarations().items():
            complete[name] = values.pop(name) if name in values else default_of(declaration, complete)
            if complete[name] is REQUIRED:
                raise TypeError(f"DrafterSpec.from_values: {name} has no default and was not given")
        if values:
            raise TypeError(f"DrafterSpec.from_values: unknown fields {sorted(values)}")
        return cls(**complete)

    @property
    def fc_in_features(self) -> int:
        return self.num_aux_hidden_states * self.target_hidden_size

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (enums as their values)."""
        data = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        data["rope_scaling"] = None if self.rope_scaling is None else json.loads(self.rope_scaling)
        data["fc_in_features"] = self.fc_in_features
        return data


def plain(value: Any) -> Any:
    """``value`` as JSON data: enums as their values, tuples as lists, dataclasses as dicts."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def declarations() -> dict[str, Declaration]:
    """Field name -> declaration, in field order."""
    return {f.name: f.metadata["declaration"] for f in dataclasses.fields(DrafterSpec)}


def default_of(declaration: Declaration, values: dict[str, Any]) -> Any:
    """The declared default, computed from the fields already known where it is a function."""
    default = declaration.default
    return default(values) if callable(default) else default


# ---------------------------------------------------------------------------------------------
# The tensors a description asks for
# ---------------------------------------------------------------------------------------------

# Tensors that some producers save but no engine uses at inference. Reading them is noted,
# never an error: `t2d` is the inverse of `d2t`, the `verifier_*` pair is speculators'
# training-only copy of the target head.
IGNORED_TENSORS = {
    "t2d": "target-to-draft membership mask; inference uses d2t only (it is checked against d2t)",
    "verifier_norm.weight": "speculators training-only copy of the target's final norm",
    "verifier_lm_head.weight": "speculators training-only copy of the target's lm_head",
}

# Tensors that only a parallel-drafting (P-EAGLE) head has.
PARALLEL_DRAFTING_TENSORS = ("mask_hidden",)

# fused name -> (canonical parts in concatenation order)
FUSED_PROJECTIONS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}
_LAYER_RE = re.compile(r"^layers\.(\d+)\.")


def fused_parts(name: str) -> tuple[str, ...] | None:
    """The canonical parts of a fused projection name, in concatenation order (None otherwise)."""
    for fused, parts in FUSED_PROJECTIONS.items():
        if name.endswith(f".{fused}.weight") and layer_index(name) is not None:
            prefix = name[: -len(f"{fused}.weight")]
            return tuple(f"{prefix}{part}.weight" for part in parts)
    return None


def layer_index(name: str) -> int | None:
    """The draft layer a canonical name belongs to, or None for model-level tensors."""
    match = _LAYER_RE.match(name)
    return int(match.group(1)) if match else None


def expected_shapes(spec: DrafterSpec) -> dict[str, tuple[int, ...]]:
    """Every canonical tensor the checkpoint must contain for ``spec``, with its shape."""
    h, t, a = spec.hidden_size, spec.target_hidden_size, spec.num_aux_hidden_states
    q_out = spec.num_attention_heads * spec.head_dim
    kv_out = spec.num_key_value_heads * spec.head_dim
    inter = spec.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"norm.weight": (h,)}
    if not spec.embed_tokens_from_target:
        shapes["embed_tokens.weight"] = (spec.vocab_size, h)
    if not spec.lm_head_from_target and not spec.tie_word_embeddings:
        shapes["lm_head.weight"] = (spec.draft_vocab_size, h)
    if spec.has_vocab_map:
        shapes["d2t"] = (spec.draft_vocab_size,)
    if spec.use_aux_hidden_state:
        shapes["fc.weight"] = (h, a * t)
        if spec.fc_bias:
            shapes["fc.bias"] = (h,)
        if spec.norm_before_fc:
            shapes["input_norm.weight"] = (a * t,)
        if spec.fc_norm:
            shapes.update({f"fc_norm.{j}.weight": (t,) for j in range(a)})
    for i in range(spec.num_layers):
        p = f"layers.{i}."
        in_features = 2 * h if i == 0 else h
        if i == 0 or spec.later_layer_norm is LaterLayerNorm.INPUT_LAYERNORM:
            shapes[p + "input_layernorm.weight"] = (h,)
        if i == 0 or spec.later_layer_norm is LaterLayerNorm.HIDDEN_NORM:
            shapes[p + "hidden_norm.weight"] = (h,)
        for proj, out in (("q_proj", q_out), ("k_proj", kv_out), ("v_proj", kv_out)):
            shapes[f"{p}self_attn.{proj}.weight"] = (out, in_features)
            if spec.attention_bias:
                shapes[f"{p}self_attn.{proj}.bias"] = (out,)
        shapes[p + "self_attn.o_proj.weight"] = (h, q_out)
        if spec.o_proj_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        if spec.layer_kind == "qwen3":
            shapes[p + "self_attn.q_norm.weight"] = (spec.head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (spec.head_dim,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, h)
        shapes[p + "mlp.up_proj.weight"] = (inter, h)
        shapes[p + "mlp.down_proj.weight"] = (h, inter)
        if spec.mlp_bias:
            shapes.update({p + "mlp.gate_proj.bias": (inter,), p + "mlp.up_proj.bias": (inter,),
                           p + "mlp.down_proj.bias": (h,)})
    return shapes


# ---------------------------------------------------------------------------------------------
# The written config
# ---------------------------------------------------------------------------------------------

SERVED_ARCHITECTURE = "LlamaForCausalLMEagle3"  # the architecture SGLang knows EAGLE-3 drafts by
_QWEN3_ARCHITECTURE = "Eagle3Qwen3ForCausalLM"


def _aux_ids(spec: DrafterSpec, config: dict[str, Any]) -> list[int] | None:
    indices = spec.aux_layers.hidden_state_indices()
    if indices is not None and min(indices) == 0:
        config["eagle_aux_hidden_state_layer_ids"] = list(indices)
        return None
    return None if indices is None else [i - 1 for i in indices]


# Fields whose written form is not their plain value.
_WRITTEN_AS = {
    "layer_kind": lambda spec, config: [_QWEN3_ARCHITECTURE if spec.layer_kind == "qwen3" else SERVED_ARCHITECTURE],
    "rope_scaling": lambda spec, config: None if spec.rope_scaling is None else json.loads(spec.rope_scaling),
    "aux_layers": _aux_ids,
}


def canonical_config(spec: DrafterSpec) -> dict[str, Any]:
    """The one ``config.json`` this package writes for a drafter (exports of legacy checkpoints,
    distilled tiny drafters, the config SGLang is given): a flat ``LlamaForCausalLMEagle3`` config
    holding every fact of ``spec`` that a checkpoint's config carries (tensors carry the rest),
    from which the reader reads back the same description.

    Every field goes where its declaration says it is written. Aux taps are written where SGLang's
    target reads them (``eagle_config``, layer-output ids j = index - 1) unless a tap is the
    embedding output (index 0), which that convention cannot name; then they are written at the
    top level as hidden-state indices.
    """
    config: dict[str, Any] = {"model_type": "llama", "eagle_config": {}}
    for name, declaration in declarations().items():
        key = declaration.written
        if key is None:
            continue
        writer = _WRITTEN_AS.get(name)
        value = writer(spec, config) if writer else plain(getattr(spec, name))
        if value is None and name in ("torch_dtype", "aux_layers"):
            continue
        (config["eagle_config"] if key.place is Place.EAGLE else config)[key.name] = value
    config["use_sliding_window"] = spec.sliding_window is not None
    # SGLang's llama_eagle3 reads the carried-state switch as `norm_output` (speculators' and
    # NeMo's meaning, not SpecForge's); `carry_normed_state` above is what this package reads back.
    config["norm_output"] = spec.norm_output
    if not spec.use_aux_hidden_state:
        config.pop("num_aux_hidden_states")
    return config
