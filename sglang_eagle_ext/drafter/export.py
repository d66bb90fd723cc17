"""Export a legacy training checkpoint (``draft_model.pt`` + ``config.json``) as a model directory.

NeMo Automodel's older trainers save the drafter as a pickled state dict with a config whose
``architectures`` is the trainer's class and whose ``num_hidden_layers`` is the *target's* depth;
the draft vocabulary lives in ``eagle_meta.pt`` (legacy ``eagle3_meta.pt``). Serving needs an
ordinary model directory: ``model.safetensors`` with canonical names plus ``d2t``/``t2d``, and a
flat ``LlamaForCausalLMEagle3`` config with the true layer count. Everything is read through
:func:`read_drafter` (pickles with ``weights_only=True`` only); the directory is written into a
sibling staging directory, checked by reading it back, and renamed into place with ``os.replace``.
"""

from __future__ import annotations

import dataclasses
import json
import os

from safetensors.torch import save_file

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.errors import DrafterError, Problem
from sglang_eagle_ext.drafter.model_dir import membership_mask, staged_directory, write_json
from sglang_eagle_ext.drafter.spec import canonical_config

EXPORT_RECORD = "exported_from.json"
# Fields that legitimately differ between the legacy checkpoint and its export.
_PROVENANCE = {"path", "dialect", "architecture", "files", "notes", "aux_layers"}


def source_fingerprint(directory: str) -> list[list]:
    """Names, sizes and mtimes of the files an export depends on (to reuse a finished export)."""
    return [[name, os.path.getsize(p), os.stat(p).st_mtime_ns]
            for name in sorted(os.listdir(directory))
            if os.path.isfile(p := os.path.join(directory, name))]


def export_is_current(source: str, directory: str) -> bool:
    try:
        with open(os.path.join(directory, EXPORT_RECORD), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return False
    return record.get("fingerprint") == source_fingerprint(source)


def export_legacy(source: str, directory: str, target=None) -> str:
    """Write the model directory for legacy checkpoint ``source`` into ``directory``."""
    source = os.path.abspath(source)
    checkpoint = read_drafter(source, target=target)
    spec = checkpoint.spec
    tensors = checkpoint.load_tensors()
    if spec.has_vocab_map:
        tensors["t2d"] = membership_mask(tensors["d2t"], spec.vocab_size)
    with staged_directory(directory) as staging:
        save_file({k: v.contiguous() for k, v in tensors.items()},
                  os.path.join(staging, "model.safetensors"))
        write_json(os.path.join(staging, "config.json"), canonical_config(spec))
        write_json(os.path.join(staging, EXPORT_RECORD),
                   {"source": source, "fingerprint": source_fingerprint(source)})
        exported = read_drafter(staging, target=target).spec
        differing = [f.name for f in dataclasses.fields(spec) if f.name not in _PROVENANCE
                     and getattr(spec, f.name) != getattr(exported, f.name)]
        if spec.aux_layers.hidden_state_indices() != exported.aux_layers.hidden_state_indices():
            differing.append("aux_layers")
        if differing:
            raise DrafterError([Problem(staging, ", ".join(differing),
                                        "the export does not read back as the same drafter",
                                        "report this as a bug with the source config.json")])
    return directory
