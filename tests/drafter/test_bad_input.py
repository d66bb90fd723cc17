"""No traceback on any input: valid drafters of every dialect, mutated (config values of the wrong
type, keys dropped, misspelt or moved, values out of range; weight files truncated, duplicated,
transposed, of the wrong dtype, overwritten), either read as a description or are refused with the
package's error, every problem naming a file, a field and a fix."""

import json
import shutil
import os
import random
import string

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from safetensors.torch import load_file, save_file

from sglang_eagle_ext.drafter.reader import DrafterCheckpoint, load_drafter
from sglang_eagle_ext.errors import DrafterError
from tests.kit import fixtures

VALUES = [None, True, False, 0, -3, 1, 7, 10 ** 12, 0.5, float("nan"), "", "64", "true", "silu", [], [1, 2],
          [1, 1, 1], ["a"], {}, {"x": 1}]


def check_outcome(directory):
    """The read either succeeds or raises DrafterError whose every problem is actionable."""
    try:
        checkpoint = load_drafter(directory)
    except DrafterError as error:
        assert error.problems
        for problem in error.problems:
            assert problem.file and problem.field and problem.fix, problem
            assert os.path.abspath(problem.file).startswith(os.path.abspath(directory)), problem
        return "refused"
    assert isinstance(checkpoint, DrafterCheckpoint)
    return "read"


def config_paths(config, prefix=()):
    """Every (path, value) of a config, nested objects included."""
    for key, value in config.items():
        yield prefix + (key,), value
        if isinstance(value, dict):
            yield from config_paths(value, prefix + (key,))


def holder(config, path):
    for key in path[:-1]:
        config = config[key]
    return config


def mutate_config(config, rng: random.Random):
    paths = list(config_paths(config))
    path, _ = rng.choice(paths)
    parent, key = holder(config, path), path[-1]
    kind = rng.choice(["value", "drop", "misspell", "move", "nest", "top"])
    if kind == "value":
        parent[key] = rng.choice(VALUES)
    elif kind == "drop":
        del parent[key]
    elif kind == "misspell":
        i = rng.randrange(len(key))
        edit = rng.choice(["delete", "insert", "swap"])
        if edit == "delete" and len(key) > 1:
            new = key[:i] + key[i + 1:]
        elif edit == "swap" and i + 1 < len(key):
            new = key[:i] + key[i + 1] + key[i] + key[i + 2:]
        else:
            new = key[:i] + rng.choice(string.ascii_lowercase) + key[i:]
        parent[new] = parent.pop(key)
    elif kind == "move":  # into or out of eagle_config
        value = parent.pop(key)
        if parent is config:
            nested = config.setdefault("eagle_config", {})
            (nested if isinstance(nested, dict) else config)[key] = value
        else:
            config[key] = value
    elif kind == "nest":
        config["eagle_config"] = rng.choice(["ids", [1, 2, 3], 3, None, {"eagle_config": {}}])
    else:
        return rng.choice([[config], 3, "config", None])
    return config


def mutate_weights(directory, rng: random.Random):
    path = os.path.join(directory, "model.safetensors")
    kind = rng.choice(["truncate", "garbage", "duplicate", "transpose", "dtype", "drop", "extra"])
    if kind == "truncate":
        size = os.path.getsize(path)
        with open(path, "r+b") as handle:
            handle.truncate(rng.randrange(size))
        return
    if kind == "garbage":
        with open(path, "r+b") as handle:
            handle.seek(rng.randrange(16))
            handle.write(bytes(rng.randrange(256) for _ in range(64)))
        return
    tensors = load_file(path)
    name = rng.choice(sorted(tensors))
    if kind == "duplicate":  # the same tensor in two shards
        os.remove(path)
        save_file(tensors, os.path.join(directory, "model-00001-of-00002.safetensors"))
        save_file({name: tensors[name]}, os.path.join(directory, "model-00002-of-00002.safetensors"))
        weight_map = {k: "model-00001-of-00002.safetensors" for k in tensors}
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as handle:
            json.dump({"weight_map": weight_map | {name: "model-00002-of-00002.safetensors"}}, handle)
        return
    if kind == "transpose" and tensors[name].dim() == 2:
        tensors[name] = tensors[name].t().contiguous()
    elif kind == "dtype":
        tensors[name] = tensors[name].to(rng.choice([torch.int32, torch.float16, torch.bool, torch.float64]))
    elif kind == "drop":
        del tensors[name]
    else:
        tensors[f"layers.{rng.randrange(3)}.extra.weight"] = torch.ones(3)
    save_file(tensors, path)


SAFETENSORS_FIXTURES = sorted(name for name in fixtures.FIXTURES if name not in ("F1-safeailab",))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(fixtures.FIXTURES)), seed=st.integers(0, 2 ** 31 - 1),
       edits=st.integers(1, 3))
def test_mutated_configs_never_raise_anything_else(tmp_path_factory, name, seed, edits):
    directory = fixtures.build(name, str(tmp_path_factory.mktemp("c") / "d"), seed=seed % 1000)
    rng = random.Random(seed)
    config_file = os.path.join(directory, "config.json")
    with open(config_file) as handle:
        config = json.load(handle)
    for _ in range(edits):
        if not isinstance(config, dict) or not config:
            break
        config = mutate_config(config, rng)
    with open(config_file, "w") as handle:
        json.dump(config, handle)
    check_outcome(directory)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(SAFETENSORS_FIXTURES), seed=st.integers(0, 2 ** 31 - 1))
def test_mutated_weight_files_never_raise_anything_else(tmp_path_factory, name, seed):
    directory = fixtures.build(name, str(tmp_path_factory.mktemp("w") / "d"), seed=seed % 1000)
    mutate_weights(directory, random.Random(seed))
    check_outcome(directory)


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", "", "\udcff", "null"])
def test_config_that_is_not_a_json_object(tmp_path, text):
    directory = fixtures.build("F1-specforge", str(tmp_path / "d"))
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(text)
    with pytest.raises(DrafterError) as error:
        load_drafter(directory)
    (problem,) = error.value.problems
    assert problem.file.endswith("config.json") and "point at the drafter" not in problem.fix


@pytest.mark.parametrize("key, value, field, expected", [
    ("hidden_size", "64", "hidden_size", "an integer"),
    ("rms_norm_eps", "1e-5", "rms_norm_eps", "a number"),
    ("norm_output", "true", "norm_output", "true or false"),
    ("eagle_config", "[1, 5, 8]", "eagle_config", "JSON object"),
    ("intermediate_size", -128, "intermediate_size", "out of range"),
])
def test_wrong_types_name_the_key(tmp_path, key, value, field, expected):
    directory = fixtures.build("F3-modelopt", str(tmp_path / "d"))
    config_file = os.path.join(directory, "config.json")
    config = json.load(open(config_file))
    config[key] = value
    json.dump(config, open(config_file, "w"))
    with pytest.raises(DrafterError) as error:
        load_drafter(directory)
    assert any(p.field == field and expected in str(p) for p in error.value.problems), error.value


@pytest.mark.parametrize("wrong, right", [
    ("norm_before_residul", "norm_before_residual"),
    ("draft_vocab_sise", "draft_vocab_size"),
])
def test_misspelt_keys_are_errors_that_name_the_nearest_key(tmp_path, wrong, right):
    directory = fixtures.build("F1-specforge", str(tmp_path / "d"))
    config_file = os.path.join(directory, "config.json")
    config = json.load(open(config_file))
    config.pop(right, None)
    config[wrong] = [1, 5, 8] if "layer" in wrong else (False if "norm" in wrong else 128)
    json.dump(config, open(config_file, "w"))
    with pytest.raises(DrafterError) as error:
        load_drafter(directory)
    (problem,) = [p for p in error.value.problems if p.field == wrong]
    assert f"did you mean {right!r}" in problem.fix


def test_unknown_keys_far_from_any_field_are_notes(tmp_path):
    directory = fixtures.build("F1-specforge", str(tmp_path / "d"))
    config_file = os.path.join(directory, "config.json")
    config = json.load(open(config_file))
    config["trained_by"] = "me"
    json.dump(config, open(config_file, "w"))
    notes = load_drafter(directory).spec.notes
    assert any("trained_by" in note for note in notes)


def test_layer_count_disagreement_names_the_config_and_the_weights(tmp_path):
    directory = fixtures.build("F8-speculators-4-aux", str(tmp_path / "d"))  # has layer_types
    config_file = os.path.join(directory, "config.json")
    config = json.load(open(config_file))
    config["transformer_layer_config"]["num_hidden_layers"] = 2
    config["transformer_layer_config"]["layer_types"] = ["sliding_attention"] * 2
    json.dump(config, open(config_file, "w"))
    with pytest.raises(DrafterError) as error:
        load_drafter(directory)
    (problem,) = error.value.problems
    assert problem.field == "transformer_layer_config.num_hidden_layers"
    assert "says 2 draft layers, the weights hold 1" in problem.message and "layer_types" not in problem.field


# --- every fix a problem names, applied: it must give the drafter as written, never a misread --

def _misspelt(key: str) -> str:
    return key[:-1] if key.endswith("s") else key + "s"


def _config_keys(config: dict) -> list[tuple[str, ...]]:
    """Paths of the declared keys a config states (nested objects one level down)."""
    from sglang_eagle_ext.drafter.spec import declarations

    names = {key.name.split(".")[0] for declaration in declarations().values() for key in declaration.keys}
    paths = []
    for key, value in config.items():
        if isinstance(value, dict) and key in ("eagle_config", "transformer_layer_config"):
            paths += [(key, inner) for inner in value if inner in names]
        elif key in names and key != "architectures":
            paths.append((key,))
    return paths


def _moved(config: dict, path: tuple[str, ...], new_name: str) -> dict:
    edited = json.loads(json.dumps(config))
    holder = edited if len(path) == 1 else edited[path[0]]
    holder[new_name] = holder.pop(path[-1])
    return edited


_WRITER = {"F1-specforge": "SpecForge", "F2-angelslim": "AngelSlim", "F3-modelopt": "ModelOpt",
           "F7-speculators-2-layers": "speculators"}


_COMPARED = ("num_layers", "hidden_size", "draft_vocab_size", "norm_before_residual", "norm_before_fc",
             "norm_output", "fc_norm", "rope_theta", "tie_word_embeddings", "num_aux_hidden_states",
             "use_aux_hidden_state")


def _assert_same_reading(spec, truth, path) -> None:
    assert spec.aux_layers.hidden_state_indices(12) == truth.aux_layers.hidden_state_indices(12), path
    for name in _COMPARED:
        assert getattr(spec, name) == getattr(truth, name), (path, name)


@pytest.mark.parametrize("layout", sorted(_WRITER))
def test_following_a_misspelt_keys_fix_gives_the_drafter_as_written(tmp_path, layout):
    """Each declared key a producer's config states, misspelt: either the drafter reads the same
    (the key held its default) or a problem names the key, and its fix applied as it reads restores
    the same description. A rename is applied as named; the aux-id fix, which names the place per
    producer, is followed for the producer that wrote the file. A fix that led to a different
    description would be a silent misread."""
    original = fixtures.build(layout, str(tmp_path / "original"))
    truth = load_drafter(original).spec
    config = json.load(open(os.path.join(original, "config.json")))
    fixes_followed = 0
    for path in _config_keys(config):
        directory = str(tmp_path / "_".join(path))
        shutil.copytree(original, directory)
        config_file = os.path.join(directory, "config.json")
        wrong = _misspelt(path[-1])
        json.dump(_moved(config, path, wrong), open(config_file, "w"))
        try:
            _assert_same_reading(load_drafter(directory).spec, truth, path)
            continue
        except DrafterError as error:
            (problem,) = [p for p in error.problems if p.field.endswith(wrong)]
        if "did you mean" in problem.fix:
            fixed = _moved(config, path, wrong)
            holder = fixed if len(path) == 1 else fixed[path[0]]
            holder[problem.expected.split(".")[-1]] = holder.pop(wrong)
        else:  # the aux-id fix: one place per convention, each naming its producers
            clause = next(c for c in problem.fix.split(", or as ") if _WRITER[layout] in c)
            fixed = _moved(config, path, "_removed")
            ids = (fixed if len(path) == 1 else fixed[path[0]]).pop("_removed")
            if "eagle_config." in clause:
                fixed.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = ids
            else:
                fixed["eagle_aux_hidden_state_layer_ids"] = ids
        json.dump(fixed, open(config_file, "w"))
        _assert_same_reading(load_drafter(directory).spec, truth, path)
        fixes_followed += 1
    assert fixes_followed >= 1


def test_the_aux_id_fix_names_each_place_with_its_meaning():
    """Followed for the producer named, each clause puts the ids where they are read as that
    producer's trainer taps them (checked against the declarations, the one owner of the fact)."""
    from sglang_eagle_ext.drafter.spec import IdConvention, aux_ids_fix, declarations

    conventions = {(key.place.value, key.name): key.ids for key in declarations()["aux_layers"].keys}
    nested, top_level = aux_ids_fix([1, 5, 8]).split(", or as ")
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in nested and "hidden_states[j + 1]" in nested
    assert conventions[("eagle", "eagle_aux_hidden_state_layer_ids")] is IdConvention.LAYER_OUTPUT
    assert "top-level eagle_aux_hidden_state_layer_ids" in top_level and "hidden_states[k]" in top_level
    assert conventions[("top", "eagle_aux_hidden_state_layer_ids")] is IdConvention.HIDDEN_STATE_INDEX
    for producer in ("SpecForge", "ModelOpt", "NeMo", "AngelSlim"):
        assert producer in nested and producer not in top_level
    assert "speculators" in top_level and "speculators" not in nested
