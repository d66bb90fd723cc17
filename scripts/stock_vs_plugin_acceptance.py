"""Stock SGLang against this plugin on trained drafters, served end to end in each producer's layout.

For each layout where stock SGLang's forward differs from the reference (docs/stock-sglang.md),
the demo's distiller trains a drafter of the features the layout has for the demo's tiny target
and writes it as that producer's export code does
(:mod:`sglang_eagle_ext.drafter.producer_export`). SGLang then serves the same prompts greedily
twice, with the plugin off (``SGLANG_EAGLE_EXT=0``: stock's built-in class) and on, through the
demo's engine path (:func:`sglang_eagle_ext.demo.run.serve_greedy`). Recorded per layout and arm:
whether the server ran (else stock's error, quoted), the acceptance length (overall and per
prompt), and whether the output equals plain greedy decoding of the target (HF transformers);
where stock refuses the drafter's architecture, stock again with the edit of config.json that makes
it build its EAGLE-3 class (what its check reports as ``built_with``);
and, for the trained weights, stock's own loader against the reference drafter
(:mod:`sglang_eagle_ext.sglang.stock_check`).

A misread moves the drafter's logits by a bounded amount; it changes what is drafted only where
the drafter's top candidates lie closer than that. So every layout runs on two targets
(:data:`TARGETS`): the demo's, whose next token is well ahead of the runner-up, and a flatter one.

    python scripts/stock_vs_plugin_acceptance.py                # CPU, chain (3 steps)
    python scripts/stock_vs_plugin_acceptance.py --device cuda --out $OUT   # GPU, tree 4/3/8

Writes ``benchmarks/results/<cpu|gpu>/stock_vs_plugin_acceptance_sglang-<release>_<target>.json``
(or into ``--out``), one file per target; models are built under ``--workdir`` and reused. A run of
some ``--layouts`` replaces those layouts' rows in the target's record (the one in ``--out``, else
the committed one) when it was served the same way, so the layouts can be run in separate calls;
each row says which commit and command produced it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from readme_numbers import write_atomically  # noqa: E402 (a sibling script: scripts/ is on sys.path)
from sglang_eagle_ext.sglang.compat import cpu  # noqa: E402 (before anything imports torchvision)

cpu.install()

from sglang_eagle_ext.cli.serve_cmd import cache_dir  # noqa: E402
from sglang_eagle_ext.demo.distill import LAYOUT_SETTINGS, DistillSettings, built_with, train, write_drafter  # noqa: E402
from sglang_eagle_ext.demo.run import DemoFailure, plain_greedy, serve_greedy  # noqa: E402
from sglang_eagle_ext.corpus import prompts as corpus_prompts  # noqa: E402
from sglang_eagle_ext.demo.tiny_target import TinyTargetSettings, build_tiny_target  # noqa: E402
from sglang_eagle_ext.drafter.model_dir import staged_directory, write_json  # noqa: E402
from sglang_eagle_ext.drafter.producer_export import LayoutMismatch  # noqa: E402
from sglang_eagle_ext.errors import DrafterError  # noqa: E402

# (label, producer_export layout): the layouts of the stock-vs-plugin table whose forward stock
# gets wrong, and the demo's own; what is distilled for each: distill.LAYOUT_SETTINGS
LAYOUTS = (
    ("SGLang flat (the demo's drafter), 2 layers", "sglang"),
    ("speculators, 2 layers", "speculators"),
    ("ModelOpt HF export, 2 layers", "modelopt-hf"),
    ("ModelOpt Megatron export (`midlayer.{i}`)", "modelopt-megatron"),
    ("SpecForge EAGLE 3.1 (`norm_output: true`)", "specforge"),
    ("NeMo EAGLE 3.1 (config carries the target's depth)", "nemo"),
)
NEW_TOKENS = 32  # per prompt
PROMPT_SEED = 7  # corpus prompts, served as one batch


def _target(key: str, name: str, settings: TinyTargetSettings) -> tuple[str, str, TinyTargetSettings]:
    p = settings.likely_successor  # the trained target's lead of its next token over the runner-up
    return key, f"{name} (next token {math.log(p / (1 - p)):.1f} nats ahead)", settings


# (key, name, settings): the demo's target, and one whose pairs' two successors are nearly tied
TARGETS = (
    _target("demo-target", "the demo's target", TinyTargetSettings()),
    _target("flatter-target", "a flatter target", TinyTargetSettings(likely_successor=0.55)),
)


def drafters(workdir: str, target: str, layouts=LAYOUTS) -> list[tuple[str | None, str]]:
    """Each layout's drafter directory, or None and why the layout cannot express the distilled drafter;
    one training run per distinct settings, reused when built."""
    trained: dict[DistillSettings, tuple] = {}
    paths = []
    for _, layout in layouts:
        settings = LAYOUT_SETTINGS[layout]
        directory = os.path.join(workdir, f"drafter-{layout}")
        if built_with(directory) != settings:
            if settings not in trained:
                print(f"distilling {settings}", flush=True)
                trained[settings] = train(target, settings)
            drafter, summary = trained[settings]
            try:
                write_drafter(directory, drafter, target, summary, settings, layout)
            except (DrafterError, LayoutMismatch) as exc:
                paths.append((None, str(exc).splitlines()[0]))
                continue
        paths.append((directory, ""))
    return paths


def served(target: str, drafter: str, plugin: bool, expected, prompts: list[str], args) -> dict:
    try:
        run = serve_greedy(target, drafter, args.device, args.num_steps, NEW_TOKENS, plugin=plugin,
                           topk=args.topk, draft_tokens=args.draft_tokens, timeout=args.timeout, prompts=prompts)
    except DemoFailure as exc:  # the error names the drafter's folder: not this machine's path in a record
        return {"served": False, "error": exc.error_line().replace(os.path.dirname(drafter), "<workdir>")}
    outputs = [o["output_ids"] for o in run.outputs]
    return {"served": True, "accept_length": round(run.accept_length, 4),
            "verify_steps": [o["spec_verify_ct"] for o in run.outputs],
            "equals_plain_greedy": outputs == expected,
            "class": next((line for line in run.activation if "drafts served by" in line or "disabled by" in line),
                          "")[:200]}


def target_rows(folder: str, settings: TinyTargetSettings, layouts, prompts: list[str], args) -> list[dict]:
    """One row per layout for the target built with ``settings`` under ``folder``: what was
    distilled, stock's loader on it, and both arms served."""
    target = build_tiny_target(os.path.join(folder, "target"), settings)
    written = drafters(folder, target, layouts)
    expected = plain_greedy(target, NEW_TOKENS, prompts=prompts)
    stock_reports = iter(stock_forward([path for path, _ in written if path is not None], target))
    rows = []
    for (label, layout), (path, unwritten) in zip(layouts, written):
        distilled = LAYOUT_SETTINGS[layout]
        row = {"label": label, "layout": layout,
               "distilled": {k: v for k, v in vars(distilled).items() if v != getattr(DistillSettings(), k)}}
        if path is None:  # the layout cannot hold this drafter for this target (the writer says why)
            rows.append({**row, "written": False, "reason": unwritten})
            continue
        row["stock_check"] = next(stock_reports)
        arms = [("stock", path, False), ("ours", path, True)]
        edit = row["stock_check"].get("built_with")
        if edit:  # stock refuses the architecture: also serve it as a user who edits config.json would
            arms.insert(1, ("stock_edited", with_config_edit(path, json.loads(edit)), False))
        for arm, drafter, plugin in arms:
            row[arm] = served(target, drafter, plugin, expected, prompts, args)
            print(os.path.basename(folder), label, arm, row[arm], flush=True)
        rows.append(row)
    return rows


def with_config_edit(drafter: str, edit: dict) -> str:
    """A copy of ``drafter`` beside it with ``edit`` written into its config.json (the other files
    linked), written atomically."""
    with open(os.path.join(drafter, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    copy = drafter.rstrip("/") + "-config-edited"
    with staged_directory(copy) as staging:
        for name in os.listdir(drafter):
            if name != "config.json":
                os.symlink(os.path.join(os.path.abspath(drafter), name), os.path.join(staging, name))
        write_json(os.path.join(staging, "config.json"), {**config, **edit})
    return copy


def stock_forward(paths: list[str], target: str) -> list[dict]:
    """Stock's loader on the trained weights: what it never loads and how its forward compares."""
    from sglang_eagle_ext.drafter.target import read_target
    from sglang_eagle_ext.sglang import stock_check

    info = read_target(target)
    reports = stock_check.check_many([(path, info) for path in paths])
    keys = ("loads", "refusal", "built_with", "depth", "never_loaded", "dropped", "forward")
    return [json.loads(json.dumps({k: r[k] for k in keys if k in r}).replace(path, "{drafter}"))
            for r, path in zip(reports, paths)]


def merged(path: Path, fallback: Path, record: dict, rows: list[dict]) -> dict:
    """``record`` with ``rows`` replacing the same layouts' rows of the record at ``path`` (else
    ``fallback``) when that one was served the same way, and its note (written by hand); rows in
    :data:`LAYOUTS` order."""
    same = ("sglang", "device", "target", "drafting", "prompts", "new_tokens_per_prompt")
    earlier: dict = {"rows": []}
    for existing in (path, fallback):
        if existing.is_file():
            found = json.loads(existing.read_text())
            if all(found.get(key) == record[key] for key in same):
                earlier = found
                break
            print(f"{existing}: served another way; its rows are not kept")
    kept = {row["layout"]: row for row in earlier["rows"]}
    kept.update({row["layout"]: row for row in rows})
    note = {"note": earlier["note"]} if "note" in earlier else {}
    return {**record, **note, "rows": [kept[layout] for _, layout in LAYOUTS if layout in kept]}


def main() -> None:
    from importlib.metadata import version

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--workdir", default=os.path.join(cache_dir(), "stock-acceptance"),
                        help="where the tiny models are built once and reused")
    parser.add_argument("--out", default=None, help="folder of the results file (default: benchmarks/results/...)")
    parser.add_argument("--layouts", default=None, help="comma-separated producer_export layouts (default: all)")
    parser.add_argument("--targets", default=",".join(key for key, _, _ in TARGETS),
                        help="comma-separated keys of TARGETS (default: all)")
    parser.add_argument("--prompts", type=int, default=16, help="corpus prompts served (one batch)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per SGLang run")
    parser.add_argument("--commit", default=None,
                        help="the commit the working tree is at, recorded in each row (default: git's HEAD; "
                             "give it where the tree is a copy without that history)")
    args = parser.parse_args()
    # chain on the CPU (what its Triton interpreter serves in minutes), a tree on the GPU
    args.num_steps, args.topk, args.draft_tokens = (3, 1, 4) if args.device == "cpu" else (3, 4, 8)
    layouts = [row for row in LAYOUTS if args.layouts is None or row[1] in args.layouts.split(",")]

    prompts = corpus_prompts(args.prompts, PROMPT_SEED)
    release = version("sglang")
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip()
    device = "CPU"
    if args.device == "cuda":
        import torch

        device = torch.cuda.get_device_name()
    # the run's command without this machine's folders (--out, --workdir)
    command = " ".join(["python scripts/stock_vs_plugin_acceptance.py", f"--device {args.device}",
                        *([f"--layouts {args.layouts}"] if args.layouts else []), f"--targets {args.targets}",
                        f"--prompts {args.prompts}"])
    committed = ROOT / "benchmarks" / "results" / ("cpu" if args.device == "cpu" else "gpu")
    for key, target_name, target_settings in TARGETS:
        if key not in args.targets.split(","):
            continue
        today = datetime.date.today().isoformat()
        rows = [{**row, "run": {"commit": commit, "date": today, "command": command}}
                for row in target_rows(os.path.join(args.workdir, key), target_settings, layouts, prompts, args)]
        record = {"sglang": release, "date": today, "device": device,
                  "target": {"name": target_name, "likely_successor": target_settings.likely_successor},
                  "drafting": {"kind": "chain" if args.topk == 1 else "tree", "num_steps": args.num_steps,
                               "topk": args.topk, "draft_tokens": args.draft_tokens},
                  "prompts": len(prompts), "new_tokens_per_prompt": NEW_TOKENS}
        name = f"stock_vs_plugin_acceptance_sglang-{release}_{key}.json"
        path = (Path(args.out) if args.out else committed) / name
        write_atomically(path, json.dumps(merged(path, committed / name, record, rows), indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
