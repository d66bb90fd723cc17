"""What a drafter's tensor headers say about it: the layer count, the layer kind, biases, how later
layers normalise their input, the aux count fc takes, and whether every tensor the description
asks for is there with its shape (:func:`read_tensor_facts`, :func:`check_shapes`)."""

from __future__ import annotations

from typing import Any

from sglang_eagle_ext.drafter import weight_names
from sglang_eagle_ext.drafter.dialects import ConfigValues
from sglang_eagle_ext.drafter.spec import DrafterSpec, LaterLayerNorm, aux_ids_fix
from sglang_eagle_ext.drafter.tensors import TensorIndex
from sglang_eagle_ext.errors import DrafterError, Problem


def read_tensor_facts(values: ConfigValues, spec_values: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                      weights_file: str, config_file: str, problems: list[Problem], notes: list[str]) -> None:
    """Set in ``spec_values`` what the tensors state (names and shapes from :func:`split_fused`)."""
    names = set(shapes)
    spec_values["num_layers"] = num_layers = _count_layers(names, weights_file, values, problems)
    if "layers.0.self_attn.q_norm.weight" in names and spec_values["layer_kind"] != "qwen3":
        spec_values["layer_kind"] = "qwen3"
        notes.append("q_norm/k_norm tensors present: Qwen3-style draft layers")
    spec_values["o_proj_bias"] = "layers.0.self_attn.o_proj.bias" in names
    for flag, tensor in (("attention_bias", "layers.0.self_attn.q_proj.bias"),
                         ("mlp_bias", "layers.0.mlp.gate_proj.bias")):
        if flag not in values.stated and tensor in names:
            # a config serialised as a diff against its class's defaults (gpt-oss: attention_bias
            # true) leaves the flag out; the biases in the weights state it
            spec_values[flag] = True
            notes.append(f"{flag} not in the config: true, as the weights hold {tensor}")
    spec_values["later_layer_norm"] = _later_layer_norm(names, num_layers, weights_file, problems)
    layer_types = spec_values.pop("layer_types")
    if layer_types is not None and len(layer_types) == num_layers:
        spec_values["layer_types"] = layer_types
    elif layer_types is not None:  # a wrong length is the layer count's problem, reported there
        notes.append(f"layer_types lists {len(layer_types)} layers; the tensors hold {num_layers}")
    use_aux = spec_values["use_aux_hidden_state"]
    first_q = shapes.get("layers.0.self_attn.q_proj.weight")
    if (not use_aux and "layers.0.hidden_norm.weight" not in names and first_q
            and first_q[-1] == spec_values["hidden_size"]):
        raise DrafterError([Problem(
            config_file, values.stated.get("use_aux_hidden_state", "eagle_config.use_aux_hidden_state"),
            "an EAGLE head without aux hidden states whose first layer reads only the target's last hidden "
            "state (q/k/v of width H, no fc, no hidden_norm) and never the token embedding, which SGLang's "
            "EAGLE3 worker always feeds it (layer 0 of an EAGLE-3 drafter is 2H wide)",
            "serve it with the runtime it was exported for (ModelOpt / TensorRT-LLM), or re-train it as an "
            "EAGLE-3 drafter (use_aux_hidden_state: true)", expected=f"layers.0 q_proj input width "
            f"{2 * spec_values['hidden_size']}", found=f"{first_q[-1]} ({weights_file})")])
    if not use_aux and "fc.weight" in names:
        problems.append(Problem(config_file, "eagle_config.use_aux_hidden_state",
                                "false, but the weights contain fc.weight",
                                "set use_aux_hidden_state to true"))
    spec_values["num_aux_hidden_states"] = _num_aux(values, shapes, weights_file, problems) if use_aux else 1


def split_fused(index: TensorIndex) -> dict[str, tuple[int, ...]]:
    """Canonical name -> shape, with fused projections replaced by their parts' names.

    The parts' first dimensions are unknown until the spec exists, so they carry the fused
    shape with a leading ``-1``; :func:`check_shapes` checks the sum instead.
    """
    shapes = {}
    for name, entry in index.entries.items():
        fused = weight_names.fused_parts(name)
        for part in fused or ():
            shapes[part] = (-1,) + entry.shape[1:]
        if fused is None:
            shapes[name] = entry.shape
    return shapes


def _count_layers(names, weights_file: str, values: ConfigValues, problems: list[Problem]) -> int:
    layer_ids = sorted({i for i in map(weight_names.layer_index, names) if i is not None})
    if not layer_ids:
        problems.append(Problem(weights_file, "layers.*", "no decoder layer tensors",
                                "check that the file is an EAGLE-3 drafter"))
        return 0
    if layer_ids != list(range(len(layer_ids))):
        problems.append(Problem(weights_file, "layers.*", "draft layers are not numbered 0..L-1",
                                "re-export the drafter", found=str(layer_ids)))
    count = len(layer_ids)
    claimed = values.values["num_layers"]
    if claimed is not None and claimed != count:
        problems.append(Problem(
            values.file, values.stated["num_layers"], f"the config says {claimed} draft layer(s), the "
            f"weights hold {count} ({weights_file})", "use the config written with these weights, or "
            f"set {values.stated['num_layers']} to {count} if the weights are the ones you trained",
            expected=f"{count} (layers in the weights)", found=str(claimed)))
    return count


def _later_layer_norm(names: set[str], num_layers: int, weights_file: str,
                      problems: list[Problem]) -> LaterLayerNorm | None:
    if num_layers < 2:
        return None
    styles = set()
    for i in range(1, num_layers):
        has_input = f"layers.{i}.input_layernorm.weight" in names
        has_hidden = f"layers.{i}.hidden_norm.weight" in names
        if has_input == has_hidden:
            problems.append(Problem(
                weights_file, f"layers.{i}.input_layernorm / layers.{i}.hidden_norm",
                "cannot tell how this layer normalises its input (exactly one of the two "
                "norms must exist for layers after the first)",
                "vanilla decoder layers (speculators, vLLM, ModelOpt) keep input_layernorm; "
                "SGLang-style layers keep hidden_norm; drop the unused one",
                found="both" if has_input else "neither"))
            continue
        styles.add(LaterLayerNorm.INPUT_LAYERNORM if has_input else LaterLayerNorm.HIDDEN_NORM)
    if len(styles) > 1:
        problems.append(Problem(weights_file, "layers.*", "later layers mix norm conventions",
                                "re-export the drafter"))
    return styles.pop() if len(styles) == 1 else LaterLayerNorm.INPUT_LAYERNORM


def _num_aux(values: ConfigValues, shapes: dict, weights_file: str, problems: list[Problem]) -> int:
    """The aux count: every place that states it must agree with fc's width."""
    fc = shapes.get("fc.weight")
    t = values.values["target_hidden_size"]
    declared, aux = values.values["num_aux_hidden_states"], values.values["aux_layers"]
    claims: dict[str, int] = {}
    if declared is not None:
        claims[f"{values.file}: num_aux_hidden_states"] = declared
    if aux.declared is not None:
        claims[f"{values.file}: {aux.source}"] = len(aux.declared)
    if fc is not None and len(fc) == 2 and t:
        if fc[1] % t:
            problems.append(Problem(
                weights_file, "fc.weight", "fc input width is not a multiple of the target hidden "
                "size", "set target_hidden_size to the width of one target hidden state",
                expected=f"A * {t} columns", found=f"shape {list(fc)}"))
            return declared or 3
        claims[f"{weights_file}: fc.weight (width {fc[1]} / target_hidden_size {t})"] = fc[1] // t
    counts = set(claims.values())
    if len(counts) > 1:
        problems.append(Problem(values.file, "num_aux_hidden_states / aux layer ids / fc.weight",
                                "the number of aux hidden states is inconsistent",
                                "make the ids, num_aux_hidden_states and fc agree (fc is what "
                                "the drafter was trained with)",
                                found="; ".join(f"{k} -> {v}" for k, v in claims.items())))
    return counts.pop() if len(counts) == 1 else 3


def check_aux_layers_named(spec: DrafterSpec, values: ConfigValues, config_file: str,
                           problems: list[Problem]) -> None:
    """fc taking other than the default three aux states needs the trained layer ids."""
    if spec.num_aux_hidden_states != 3 and spec.aux_layers.declared is None and values.values["use_aux_hidden_state"]:
        problems.append(Problem(
            config_file, "eagle_aux_hidden_state_layer_ids",
            f"fc takes {spec.num_aux_hidden_states} aux hidden states but the config names no "
            "layers, and the default taps are three", aux_ids_fix()))


def _shape_differs(found: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """Shapes differ; a leading -1 (a part of a fused projection) matches any height."""
    if len(found) != len(expected):
        return True
    return found[1:] != expected[1:] or found[0] not in (-1, expected[0])


def check_shapes(spec: DrafterSpec, shapes: dict[str, tuple[int, ...]], index: TensorIndex,
                  weights_file: str, problems: list[Problem]) -> list[str]:
    """Every expected tensor present with its shape and a usable dtype; anything else is an
    error or a note."""
    expected = weight_names.expected_shapes(spec)
    notes = []
    for name, entry in index.entries.items():
        fused = weight_names.fused_parts(name)
        if fused is not None:
            total = sum(expected.get(p, (0,))[0] for p in fused)
            if entry.shape[0] != total:
                problems.append(Problem(entry.file, entry.raw_name, "fused projection has the "
                                        "wrong height", "re-export the drafter",
                                        expected=str(total), found=str(entry.shape[0])))
        integral = name in ("d2t", "t2d")
        if (name in expected or fused) and (entry.dtype is None or entry.dtype.is_floating_point == integral):
            problems.append(Problem(entry.file, entry.raw_name, "unusable dtype",
                                    "re-export the drafter in its training dtype",
                                    expected="an integer table" if integral else "a floating-point weight",
                                    found=str(entry.dtype).replace("torch.", "")))
    for name, shape in expected.items():
        if name not in shapes:
            if name == "d2t":
                continue  # reported by the vocab-map check, which knows about meta files
            problems.append(Problem(weights_file, name, "tensor missing",
                                    "use the complete checkpoint, or fix the config flag that "
                                    "asks for this tensor", expected=str(list(shape))))
        elif _shape_differs(shapes[name], shape):
            entry = index.entries.get(name) or next(e for n, e in index.entries.items()
                                                     if name in (weight_names.fused_parts(n) or ()))
            problems.append(Problem(entry.file, entry.raw_name, "wrong shape",
                                    "the config does not describe these weights; fix the config "
                                    "or use the matching checkpoint",
                                    expected=str(list(shape)), found=str(list(entry.shape))))
    for name in shapes:
        if name in expected:
            continue
        if name in weight_names.IGNORED_TENSORS:
            notes.append(f"{name} ignored: {weight_names.IGNORED_TENSORS[name]}")
            continue
        entry = index.entries[name]
        problems.append(Problem(entry.file, entry.raw_name, "unexpected tensor: no config flag "
                                "asks for it, and dropping it silently would change the model",
                                "set the config flag this tensor belongs to (bias, "
                                "attention_bias, fc_norm, norm_before_fc...) or remove it",
                                found=str(list(entry.shape))))
    return notes
