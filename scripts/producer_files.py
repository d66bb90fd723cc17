"""The drafters the producers' own code wrote (``tests/producer_files``), read by this package and
compared with the producer's own forward; ``main`` records the table docs/producers.md shows.

``tests/producer_files/<producer>/<variant>/`` is written by ``scripts/producers/<producer>.sh``
(format: ``scripts/producers/record.py``): ``drafter/`` as the producer's save/export code wrote
it, ``forward.safetensors`` from the producer's own module on seeded inputs, ``record.json`` with
the producer's version, its code cited, and the taps its trainer uses::

    .venv/bin/python scripts/producer_files.py    # -> benchmarks/results/cpu/producer_files.json

Every check here also runs in ``tests/test_producer_files.py``.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import os
import platform
import subprocess
import sys

import torch
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout's package, not an installed copy

from sglang_eagle_ext.drafter.locate import locate_drafter  # noqa: E402
from sglang_eagle_ext.drafter.reader import read_drafter  # noqa: E402
from sglang_eagle_ext.drafter.spec import DrafterSpec  # noqa: E402
from sglang_eagle_ext.drafter.target import TargetInfo, read_target  # noqa: E402
from sglang_eagle_ext.errors import DrafterError  # noqa: E402
from sglang_eagle_ext.reference.drafter import ReferenceDrafter  # noqa: E402

FILES = os.path.join(ROOT, "tests", "producer_files")
RESULT = os.path.join(ROOT, "benchmarks", "results", "cpu", "producer_files.json")
PRODUCERS = ("speculators", "specforge", "modelopt", "nemo", "angelslim")
# float32 on both sides; the producers' modules and this package order their sums differently
TOLERANCE = 1e-4


def records() -> list[str]:
    return sorted(glob.glob(os.path.join(FILES, "*", "*", "record.json")))


def variant_name(record_path: str) -> str:
    return os.path.relpath(os.path.dirname(record_path), FILES)


@dataclasses.dataclass
class Variant:
    record: dict
    directory: str  # the model directory the package resolves the user's path to
    given: str  # the path a user gives (the producer's docs' path)
    target: TargetInfo
    forward: dict[str, torch.Tensor]

    def trained(self, served: DrafterSpec) -> DrafterSpec:
        """The description the producer's module computed with: the served one, less the
        train/serve difference the record states (``forward.trained_rope``: the RoPE training used
        where the export writes another)."""
        rope = self.record["forward"].get("trained_rope")
        if rope is None:
            return served
        settings = {k: v for k, v in rope.items() if k != "why" and not k.startswith("config_")}
        kind = settings.get("rope_type", settings.get("type", "default"))
        scaling = None if kind == "default" else json.dumps(
            {k: v for k, v in settings.items() if k != "rope_theta"}, sort_keys=True)
        return dataclasses.replace(served, rope_scaling=scaling,
                                   rope_theta=float(rope.get("rope_theta", served.rope_theta)))


def load_variant(record_path: str) -> Variant:
    base = os.path.dirname(record_path)
    with open(record_path, encoding="utf-8") as handle:
        record = json.load(handle)
    given = os.path.join(base, record["drafter"])
    return Variant(record, locate_drafter(given).directory, given,
                   read_target(os.path.join(base, record["target"])),
                   load_file(os.path.join(base, "forward.safetensors")))


def reference_forward(variant: Variant, spec: DrafterSpec):
    """The reference drafter of ``spec`` on the producer's inputs (float32)."""
    checkpoint = read_drafter(variant.directory, target=variant.target)
    model = ReferenceDrafter.from_tensors(
        spec, checkpoint.load_tensors(torch.float32),
        target_embed=variant.forward.get("target_embed"), target_lm_head=variant.forward.get("target_lm_head"))
    with torch.no_grad():
        return model(variant.forward["input_ids"], variant.forward["positions"], aux=variant.forward["aux"])


def sglang_forward(variant: Variant):
    """Our SGLang class loaded the way SGLang loads it, one prefill on the producer's inputs (CPU,
    SGLang's attention test kit; SGLang's distributed state must be initialised):
    ``(last-position draft logits, carried states)``."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_eagle_ext.sglang.draft_forward import DraftRunner, share_target_tensors
    from tests.kit.sglang_forward import build_draft

    checkpoint = read_drafter(variant.directory, target=variant.target)
    spec = checkpoint.spec
    model = build_draft(variant.directory, variant.target)
    own = checkpoint.load_tensors(torch.float32)
    share_target_tensors(model, variant.forward.get("target_embed", own.get("embed_tokens.weight")),
                         variant.forward.get("target_lm_head", own.get("lm_head.weight")))
    with torch.no_grad():
        prefill = DraftRunner(spec).forward(model, ForwardMode.EXTEND, variant.forward["input_ids"][0],
                                            variant.forward["aux"][0], prefix=0)
    return prefill.next_token_logits[0, :spec.draft_vocab_size], prefill.hidden_states


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def row(record_path: str) -> dict:
    """One variant: how it reads, how far each forward is from the producer's, stock's verdict."""
    from sglang_eagle_ext.drafter.train_serve import producer_warnings
    from sglang_eagle_ext.sglang import stock_check

    variant = load_variant(record_path)
    record = variant.record
    entry = {"variant": variant_name(record_path), "producer": record["producer"], "package": record["package"],
             "written_by": record["written_by"]}
    try:
        served = read_drafter(variant.directory, target=variant.target).spec
    except DrafterError as exc:  # what the record expects is asserted in tests/test_producer_files.py
        problem = exc.problems[0]
        return {**entry, "refused": f"`{problem.field}`: {problem.message}"}
    trained = variant.trained(served)
    taps = served.aux_layers.hidden_state_indices(variant.target.num_layers)
    entry.update(dialect=served.dialect.value, layers=served.num_layers, taps_read=list(taps),
                 taps_trained=record["aux_hidden_state_indices"],
                 warnings=producer_warnings(served))
    ours = reference_forward(variant, trained)
    entry["reference_max_abs_diff"] = _max_diff(ours.logits, variant.forward["logits"])
    if "carried" in variant.forward:
        entry["reference_carried_max_abs_diff"] = _max_diff(ours.carried, variant.forward["carried"])
    if trained != served:
        entry["as_served_max_abs_diff"] = _max_diff(reference_forward(variant, served).logits,
                                                    variant.forward["logits"])
    else:
        logits, carried = sglang_forward(variant)
        entry["sglang_max_abs_diff"] = _max_diff(logits, variant.forward["logits"][0, -1])
        if "carried" in variant.forward:
            entry["sglang_carried_max_abs_diff"] = _max_diff(carried, variant.forward["carried"][0])
    stock, = stock_check.check_many([(variant.directory, variant.target)])
    verdict = stock_check.describe(stock, list(taps), served.num_layers)[-1].strip()
    entry["stock_verdict"] = verdict.removeprefix("verdict: ")
    return entry


def main() -> None:
    from sglang_eagle_ext.sglang.compat import cpu
    from sglang_eagle_ext.sglang.compat.runtime import init_single_process_distributed

    cpu.install()
    init_single_process_distributed(29517)
    rows = [row(path) for path in records()]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"command": "python scripts/producer_files.py", "date": datetime.date.today().isoformat(),
              "commit": commit, "machine": f"{platform.processor() or platform.machine()}, CPU",
              "tolerance": TOLERANCE, "rows": rows}
    from pathlib import Path

    from readme_numbers import write_atomically

    write_atomically(Path(RESULT), json.dumps(result, indent=2) + "\n")
    for entry in rows:
        print(json.dumps(entry))


if __name__ == "__main__":
    main()
