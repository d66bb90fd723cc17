"""Checkpoints written by the producers' own installed code, read as each producer meant them.

``tests/producer_files/<producer>/<variant>/`` was written by ``scripts/producers/<producer>.sh``:
the producer's own save/export path wrote ``drafter/``, and the producer's own module, run on
seeded inputs, wrote ``forward.safetensors`` (format: ``scripts/producers/record.py``). Nothing
there was written by this package, so the producer's code is the judge: the description must hold
the taps the producer's trainer uses, both the reference drafter and the SGLang model class (CPU)
must compute the producer's logits and carried state from the same inputs, and a drafter that
SGLang cannot feed as it was trained must be refused, never served.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
import yaml

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.train_serve import producer_warnings
from sglang_eagle_ext.errors import DrafterError
from tests.script_module import load_siblings

files, = load_siblings("scripts", "producer_files")
RECORDS = files.records()
TOLERANCE = dict(rtol=files.TOLERANCE, atol=files.TOLERANCE)


def fed_in_layer_order(record: dict) -> bool:
    """SGLang's target captures the aux states in layer order; a trainer that concatenated them in
    another order trained fc on permuted inputs."""
    taps = record["aux_hidden_state_indices"]
    return taps == sorted(taps)


def servable(record: dict) -> bool:
    return "refused" not in record["expect"] and fed_in_layer_order(record)


SERVED = [path for path in RECORDS if servable(json.load(open(path)))]
OUT_OF_ORDER = [path for path in RECORDS if not fed_in_layer_order(json.load(open(path)))]
REFUSED = [path for path in RECORDS if "refused" in json.load(open(path))["expect"]]


def test_every_producer_wrote_files():
    producers = {json.load(open(path))["producer"] for path in RECORDS}
    assert set(files.PRODUCERS) <= producers, producers


@pytest.mark.parametrize("record_path", SERVED, ids=files.variant_name)
def test_read_with_the_producers_conventions(record_path):
    variant = files.load_variant(record_path)
    spec = read_drafter(variant.directory, target=variant.target).spec
    assert spec.aux_layers.hidden_state_indices(variant.target.num_layers) == \
        tuple(variant.record["aux_hidden_state_indices"])
    described = spec.to_dict()
    for name, value in variant.record["expect"].items():
        if name in described:
            assert described[name] == value, name


@pytest.mark.parametrize("record_path", REFUSED, ids=files.variant_name)
def test_a_drafter_no_engine_serves_as_trained_is_refused_naming_the_field(record_path):
    variant = files.load_variant(record_path)
    with pytest.raises(DrafterError) as error:
        read_drafter(variant.directory, target=variant.target)
    assert any(p.field.endswith(variant.record["expect"]["refused"]) for p in error.value.problems), error.value


@pytest.mark.parametrize("record_path", OUT_OF_ORDER, ids=files.variant_name)
def test_taps_concatenated_out_of_layer_order_are_refused(record_path):
    variant = files.load_variant(record_path)
    with pytest.raises(DrafterError) as error:
        read_drafter(variant.directory, target=variant.target)
    problem, = [p for p in error.value.problems if "order" in p.message]
    assert "ascending" in problem.fix and "sort" not in problem.fix  # sorting the ids would permute fc silently


@pytest.mark.parametrize("record_path", SERVED, ids=files.variant_name)
def test_reference_drafter_computes_the_producers_forward(record_path):
    """As the producer's module trained it; where the export serves otherwise (a train/serve
    difference the record states with the producer's code), the served description differs by
    that alone, its forward differs from training, and the package warns about it."""
    variant = files.load_variant(record_path)
    served = read_drafter(variant.directory, target=variant.target).spec
    trained = variant.trained(served)
    out = files.reference_forward(variant, trained)
    torch.testing.assert_close(out.logits, variant.forward["logits"], **TOLERANCE)
    if "carried" in variant.forward:
        torch.testing.assert_close(out.carried, variant.forward["carried"], **TOLERANCE)
    warnings = producer_warnings(served)
    if trained != served:
        as_served = files.reference_forward(variant, served)
        assert not torch.allclose(as_served.logits, variant.forward["logits"], **TOLERANCE)
        assert len(warnings) == 1 and variant.record["package"].split("==")[1] in warnings[0]
    else:
        assert warnings == []


@pytest.mark.parametrize("record_path", SERVED, ids=files.variant_name)
def test_sglang_model_class_computes_the_producers_forward(record_path, sglang_dist, no_grad):
    """Our SGLang class loaded the way SGLang loads it (CPU, SGLang's own attention test kit): a
    prefill on the producer's inputs gives the producer's last-position logits and every carried
    state. A drafter whose export serves otherwise than it trained is served as its config says:
    there the class must compute the reference drafter of that description."""
    variant = files.load_variant(record_path)
    served = read_drafter(variant.directory, target=variant.target).spec
    if variant.trained(served) == served:
        expected_logits, expected_carried = variant.forward["logits"], variant.forward.get("carried")
    else:
        as_served = files.reference_forward(variant, served)
        expected_logits, expected_carried = as_served.logits, as_served.carried
    logits, carried = files.sglang_forward(variant)
    torch.testing.assert_close(logits, expected_logits[0, -1], **TOLERANCE)
    if expected_carried is not None:
        torch.testing.assert_close(carried, expected_carried[0], **TOLERANCE)


@pytest.mark.parametrize("record_path", SERVED, ids=files.variant_name)
def test_inspect_shows_the_train_serve_difference_with_its_evidence(record_path, capsys):
    """`sglang-eagle inspect` on the path a user gives: status OK, and a warning citing the
    producer's code exactly where the producer's module computed otherwise than the config serves."""
    from sglang_eagle_ext.cli import main

    variant = files.load_variant(record_path)
    assert main(["inspect", "--no-stock-check", variant.given, "--target", os.path.join(
        os.path.dirname(record_path), variant.record["target"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    served = read_drafter(variant.directory, target=variant.target).spec
    differs = variant.trained(served) != served
    assert bool(report["warnings"]) == differs
    assert all(variant.record["package"] in warning for warning in report["warnings"])


NEMO_TRAINED_IDS = os.path.join(files.FILES, "nemo", "aux_ids", "record.json")


def _nemo_copy(tmp_path):
    """NeMo's aux_ids variant (trained with aux_layer_ids [1, 3, 5] in its run config only), copied."""
    variant = files.load_variant(NEMO_TRAINED_IDS)
    step = os.path.dirname(os.path.dirname(variant.directory))  # epoch_*_step_*/ above model/consolidated/
    copy = shutil.copytree(step, tmp_path / "step")
    return variant, str(copy), str(copy / os.path.relpath(variant.directory, step))


def test_nemo_without_its_run_config_is_refused_and_the_fix_followed_reads_its_taps(tmp_path):
    """The trained ids live only in NeMo's config.yaml: weights moved away from it are refused with
    the reason; writing the run's ids where the fix says NeMo's belong (layer outputs) then reads
    the taps NeMo's trainer used."""
    variant, step, model_dir = _nemo_copy(tmp_path)
    run_config = yaml.safe_load(open(os.path.join(step, "config.yaml")))
    os.remove(os.path.join(step, "config.yaml"))
    with pytest.raises(DrafterError) as error:
        read_drafter(model_dir, target=variant.target)
    problem, = error.value.problems
    assert "config.yaml" in problem.message and "recipe_args.aux_layer_ids" in problem.message
    clause = next(c for c in problem.fix.split(", or as ") if "NeMo" in c)
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in clause
    config_file = os.path.join(model_dir, "config.json")
    config = json.load(open(config_file))
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": run_config["recipe_args"]["aux_layer_ids"]}
    json.dump(config, open(config_file, "w"))
    spec = read_drafter(model_dir, target=variant.target).spec
    assert list(spec.aux_layers.hidden_state_indices(variant.target.num_layers)) == \
        variant.record["aux_hidden_state_indices"]


def test_nemo_config_naming_other_taps_than_its_run_config_is_refused(tmp_path):
    variant, step, model_dir = _nemo_copy(tmp_path)
    config_file = os.path.join(model_dir, "config.json")
    config = json.load(open(config_file))
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}  # NeMo's defaults, not trained
    json.dump(config, open(config_file, "w"))
    with pytest.raises(DrafterError) as error:
        read_drafter(model_dir, target=variant.target)
    problem, = error.value.problems
    assert "run config" in problem.message and problem.expected == "hidden states [2, 4, 6]"


@pytest.mark.parametrize("record_path", SERVED, ids=files.variant_name)
def test_sglang_model_class_tells_the_attention_backend_its_window(record_path, sglang_dist, no_grad):
    """SGLang's attention backends build window indices only for the window the model reports
    (``get_attention_sliding_window_size``); a sliding draft layer under a backend told of none
    fails (Triton's multi-step draft backend asserts, seen on an H100 with speculators' trainer
    defaults) or sees the whole context. The class reports the window its sliding layers use, in
    SGLang's count (the producer's HF window minus the query's own token), and None when no layer
    slides."""
    from tests.kit.sglang_forward import build_draft

    variant = files.load_variant(record_path)
    model = build_draft(variant.directory, variant.target)
    layer_windows = [layer.self_attn.attn.sliding_window_size for layer in model.model.layers]
    with open(os.path.join(variant.directory, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    layer_config = config.get("transformer_layer_config", config)
    producer_types = layer_config.get("layer_types") or ["full_attention"] * len(layer_windows)
    producer_window = layer_config.get("sliding_window")
    expected = [producer_window - 1 if kind == "sliding_attention" else -1 for kind in producer_types]
    assert layer_windows == expected
    reported = model.get_attention_sliding_window_size()
    assert reported == (producer_window - 1 if "sliding_attention" in producer_types else None)
