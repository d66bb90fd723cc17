"""Trained settings a producer keeps beside the weights rather than in ``config.json``.

NeMo Automodel's EAGLE-3 recipe saves the target's ``config.json`` (with its draft keys over it) and
records the aux layer ids it trained with only in the run config it dumps next to the weights:
``epoch_*_step_*/config.yaml``, ``recipe_args.aux_layer_ids`` (nemo-automodel==0.7.0
nemo_automodel/recipes/llm/train_eagle3.py:1681 -> components/checkpoint/checkpointing.py:2410),
absent when the run used its default ``[1, N//2-1, N-4]``. Its ids are layer outputs (a forward hook
on layer j's output, components/speculative/eagle/target.py:278,285), concatenated in the order
written (target.py:361). The weights sit in ``model/consolidated/`` (or ``model/``) under that folder.
"""

from __future__ import annotations

import os
from typing import Any

from sglang_eagle_ext.drafter.spec import AuxLayers, IdConvention, aux_ids_fix
from sglang_eagle_ext.drafter.tensors import JSON_FILE_LIMIT
from sglang_eagle_ext.errors import Problem

NEMO_RUN_CONFIG = "config.yaml"
NEMO_IDS_PATH = ("recipe_args", "aux_layer_ids")
_FIELD = ".".join(NEMO_IDS_PATH)


def find_nemo_run_config(directory: str) -> str | None:
    """The run config of the NeMo checkpoint whose weights are in ``directory`` (the folder itself,
    ``model/`` or ``model/consolidated/`` of a step folder)."""
    folder = directory
    for _ in range(3):
        path = os.path.join(folder, NEMO_RUN_CONFIG)
        if os.path.isfile(path):
            return path
        folder = os.path.dirname(folder)
    return None


def nemo_aux_layers(directory: str, config_file: str, stated_in_config: bool,
                    problems: list[Problem]) -> tuple[AuxLayers | None, str | None]:
    """The aux layers NeMo trained with, from its run config: ``(layers, run config path)``.
    ``layers`` is None where the run config names none (NeMo's default taps, the package's) or
    where ``config.json`` states the ids itself; a missing or unreadable run config is a problem
    unless ``config.json`` states them."""
    path = find_nemo_run_config(directory)
    if path is None:
        if not stated_in_config:
            problems.append(Problem(
                config_file, "aux layer ids", "a NeMo Automodel checkpoint whose run config (config.yaml, which "
                f"holds the trained {_FIELD}) is not beside its weights, and config.json names no aux layers: the "
                "taps it was trained with are unknown", "serve the step folder as NeMo wrote it (epoch_*_step_*/, "
                "holding config.yaml and model/), or " + aux_ids_fix() + f" (NeMo's {_FIELD}; [1, N//2-1, N-4] "
                "if the run set none)"))
        return None, None
    run_config = _load_yaml(path, problems)
    if run_config is None:
        return None, path
    ids: Any = run_config
    for part in NEMO_IDS_PATH:
        ids = ids.get(part) if isinstance(ids, dict) else None
    if ids is None:
        return None, path
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                       for i in ids) or len(set(ids)) != len(ids):
        problems.append(Problem(path, _FIELD, "must list distinct non-negative layer ids",
                                "restore the run config NeMo wrote with this checkpoint", found=repr(ids)[:80]))
        return None, path
    return AuxLayers(tuple(ids), IdConvention.LAYER_OUTPUT, f"{NEMO_RUN_CONFIG}: {_FIELD}"), path


def _load_yaml(path: str, problems: list[Problem]) -> dict | None:
    import yaml

    try:
        if os.path.getsize(path) > JSON_FILE_LIMIT:
            raise ValueError(f"{os.path.getsize(path)} bytes, far larger than a run config")
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
        if not isinstance(data, dict):
            raise ValueError(f"a YAML {type(data).__name__}, not a mapping of settings")
    except (OSError, ValueError, yaml.YAMLError) as exc:
        problems.append(Problem(path, NEMO_RUN_CONFIG, f"unreadable run config ({str(exc).splitlines()[0]})",
                                "restore the config.yaml NeMo wrote with this checkpoint"))
        return None
    return data


def nemo_run_config_text(aux_layer_ids: list[int] | None) -> str:
    """A run config as NeMo's recipe dumps it, holding only what this package reads (for writers of
    NeMo's layout); ``None``: the run used NeMo's default ids, which it then does not write."""
    lines = ["recipe_args:", "  ttt_steps: 1"]
    if aux_layer_ids is not None:
        lines += ["  aux_layer_ids:"] + [f"  - {i}" for i in aux_layer_ids]
    return "\n".join(lines) + "\n"
