"""Stock SGLang against this plugin on the producer layouts of issue 24, through SGLang's real loader.

For each layout (built by the fixture builders of the tests' kit, seeded), on the installed SGLang:

* stock: :func:`sglang_eagle_ext.sglang.stock_check.check_many`, stock's own ``get_config``,
  model registry, built-in class and ``load_weights`` with this plugin off, and a prefill plus one
  decode step against the reference drafter;
* ours: this package's class loaded as SGLang loads it, the same forward against the reference
  (:func:`tests.kit.sglang_forward.assert_forward_matches_reference`).

Writes ``benchmarks/results/cpu/stock_vs_plugin_sglang-<release>.json`` (date, commit, release)::

    .venv/bin/python scripts/stock_vs_plugin.py            # measure and write the results file
    .venv/bin/python scripts/readme_numbers.py             # then render the README's table

Another release: install it into a venv (``pip install --no-deps sglang==X`` over the CPU setup)
and run this script there; ``readme_numbers.py`` renders one table per results file.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from readme_numbers import write_atomically  # noqa: E402 (a sibling script: scripts/ is on sys.path)
from sglang_eagle_ext.sglang.compat import cpu  # noqa: E402 (before anything imports torchvision)

cpu.install()

# (README label, builder module, layout name): every layout of issue 24's table that the
# package's fixture builders write
LAYOUTS = (
    ("speculators, 2 layers", "fixtures", "F7-speculators-2-layers"),
    ("speculators converter output", "producer_layouts", "speculators-convert-eagle3"),
    ("SpecForge EAGLE 3.1 (`norm_output: true`)", "code_layouts", "specforge-eagle3.1"),
    ("NeMo EAGLE 3.1 (config carries the target's depth)", "code_layouts", "nemo-eagle3.1"),
    ("ModelOpt HF export, 2 layers", "producer_layouts", "modelopt-hf-eagle3-2-layers"),
    ("ModelOpt Megatron export (`midlayer.{i}`)", "producer_layouts", "modelopt-megatron-eagle3-deep"),
    ("SpecForge, 1 layer", "fixtures", "F1-specforge"),
    ("ModelOpt HF export, 1 layer", "fixtures", "F3-modelopt"),
)
BUILD_SEED = 7
FORWARD_SEED = 11


def results_path(release: str) -> Path:
    return ROOT / "benchmarks" / "results" / "cpu" / f"stock_vs_plugin_sglang-{release}.json"


def build(builder: str, name: str, directory: str):
    """Write layout ``name`` into ``directory``; returns (directory, the target's TargetInfo)."""
    from sglang_eagle_ext.drafter.target import read_target
    from tests.kit import code_layouts, fixtures, producer_layouts

    if builder == "producer_layouts":
        layout = producer_layouts.LAYOUTS[name]
        return producer_layouts.build(layout, directory, BUILD_SEED), read_target(layout.target)
    module = fixtures if builder == "fixtures" else code_layouts
    return module.build(name, directory, seed=BUILD_SEED), read_target(fixtures.target_config())


def ours_matches_reference(directory: str, target) -> dict:
    import torch

    from sglang_eagle_ext.errors import DrafterError
    from tests.kit.sglang_forward import assert_forward_matches_reference

    try:
        with torch.no_grad():
            assert_forward_matches_reference(directory, target, seed=FORWARD_SEED)
    except DrafterError as exc:
        return {"equal": False, "refused": str(exc.problems[0])}
    except AssertionError as exc:
        return {"equal": False, "difference": str(exc).strip().splitlines()[0]}
    except Exception as exc:  # the harness itself (built for the CI's release) failing is "not checked"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"equal": None, "not_checked": f"the package's SGLang forward harness fails on this release "
                                              f"({type(exc).__name__}: {first})"}
    return {"equal": True}


def scrubbed(report: dict, directory: str) -> dict:
    """``report`` without the temporary directory's path (the file must not depend on it)."""
    return json.loads(json.dumps(report).replace(directory, "{drafter}"))


def measure(layouts=LAYOUTS) -> list[dict]:
    """One row per layout: what stock and this plugin do with it."""
    import os

    import torch

    from sglang_eagle_ext.sglang import stock_check
    from sglang_eagle_ext.sglang.compat.runtime import init_single_process_distributed

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        built = [build(builder, name, os.path.join(scratch, name)) for _, builder, name in layouts]
        stock = stock_check.check_many(built)
        if not torch.distributed.is_initialized():  # a test session may have done it already
            init_single_process_distributed(29000 + os.getpid() % 1000)
        for (label, builder, name), (directory, target), report in zip(layouts, built, stock):
            rows.append({"label": label, "layout": f"{builder}:{name}", "stock": scrubbed(report, directory),
                         "ours": ours_matches_reference(directory, target)})
    return rows


def main() -> None:
    from importlib.metadata import version

    release = version("sglang")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"sglang": release, "date": datetime.date.today().isoformat(), "commit": commit,
              "command": "python scripts/stock_vs_plugin.py", "device": "CPU", "rows": measure()}
    path = results_path(release)
    write_atomically(path, json.dumps(result, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
