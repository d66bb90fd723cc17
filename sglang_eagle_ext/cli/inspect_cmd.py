"""Describe a drafter checkpoint: what it is, what fits the target, what SGLang will capture.

Prints the canonical description, the files read, every problem found and what the installed
stock SGLang does with the drafter without this plugin (:mod:`sglang_eagle_ext.sglang.stock_check`,
stock's own code run in a child process); exits with status 1 when the drafter must not be served
(status 0 otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.errors import DrafterError, Problem
from sglang_eagle_ext.drafter.locate import locate_drafter, read_named_target
from sglang_eagle_ext.drafter.spec import DrafterSpec
from sglang_eagle_ext.drafter.target import TargetInfo, check_against_target
from sglang_eagle_ext.drafter.train_serve import producer_warnings
from sglang_eagle_ext.sglang import stock_check


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="drafter: model directory, a trainer's checkpoint folder, or a hub id")
    parser.add_argument("--target", help="target model: a directory, its config.json or a hub id (read from "
                        "the hub or its local cache): adds the checks that need the target and resolves the "
                        "captured layers")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-stock-check", action="store_true", help="skip running stock SGLang's own "
                        "loader on the drafter (it takes a child process and about 15 s)")


def capture_plan(spec: DrafterSpec, target: TargetInfo | None) -> dict[str, Any]:
    """Which target hidden states feed the drafter with this plugin."""
    if not spec.use_aux_hidden_state:
        return {"uses_aux_hidden_states": False}
    n = None if target is None else target.num_layers
    aux = spec.aux_layers
    plan: dict[str, Any] = {
        "uses_aux_hidden_states": True,
        "declared": None if aux.declared is None else list(aux.declared),
        "declared_in": aux.source,
        "declared_convention": aux.convention.value,
        "hidden_state_indices": _listed(aux.hidden_state_indices(n)),
        "sglang_eagle_config_ids": _listed(aux.sglang_layer_ids(n)),
    }
    if n is not None:
        plan["last_layer_output_needed"] = n in aux.hidden_state_indices(n)
    return plan


def _listed(values):
    return None if values is None else list(values)


def _print_text(spec: DrafterSpec | None, problems: list[Problem], plan: dict | None,
                target: TargetInfo | None, path: str, remote, stock: dict | None) -> None:
    if spec is None:
        print(f"drafter: {path}")
    else:
        print(f"drafter: {spec.path}")
        print(f"dialect: {spec.dialect.value} (architecture {spec.architecture or '-'})")
        print("files read:")
        for file in spec.files:
            print(f"  {file}" + ("  (on the hub: header and vocabulary map read by range)" if file in remote else ""))
        width = max(len(k) for k in spec.to_dict())
        print("description:")
        for key, value in spec.to_dict().items():
            if key not in ("path", "files", "notes", "dialect", "architecture"):
                print(f"  {key:<{width}}  {json.dumps(value)}")
        if spec.notes:
            print("notes:")
            for note in spec.notes:
                print(f"  - {note}")
        warnings = producer_warnings(spec)
        if warnings:
            print("warnings (its producer trained it otherwise than its config says to serve it):")
            for warning in warnings:
                print(f"  - {warning}")
    if target is not None:
        print(f"target: {target.source} ({target.model_type}, {target.num_layers} layers, "
              f"hidden {target.hidden_size}, vocab {target.vocab_size})")
    if plan is not None:
        print("capture:")
        if not plan["uses_aux_hidden_states"]:
            print("  no aux hidden states: the drafter reads the target's last hidden state")
        else:
            if plan["declared"] is None:
                print("  no ids in the config: the default taps [2, N//2, N-3]")
            else:
                print(f"  declared {plan['declared']} in {plan['declared_in']} "
                      f"({plan['declared_convention']})")
            print(f"  hidden-state indices (input of target layer k): {plan['hidden_state_indices']}"
                  + ("" if target else "  [pass --target to resolve defaults]"))
            print(f"  written for SGLang as eagle_config ids: {plan['sglang_eagle_config_ids']}")
    if problems:
        print(f"problems ({len(problems)}):")
        for problem in problems:
            print(f"  - {problem}")
    if stock is not None:
        indices = None if plan is None else plan.get("hidden_state_indices")
        for line in stock_check.describe(stock, indices, None if spec is None or problems else spec.num_layers):
            print(line)
    if problems:
        print("status: REJECTED")
    elif spec is not None:
        print("status: OK")


def run(args: argparse.Namespace) -> int:
    spec, plan, target, problems, remote, located, stock = None, None, None, [], {}, None, None
    try:
        target = None if args.target is None else read_named_target(args.target)
        if args.target is not None and target is None:
            print(f"target {args.target}: config.json not fetched (offline and not cached, gated, or not "
                  "there); the checks that need the target are skipped", file=sys.stderr)
        located = locate_drafter(args.path, weights=False)  # checks only: hub weights stay on the hub
        remote = located.remote
        if located.how != "model directory":
            print(f"reading {located.directory} ({located.how})", file=sys.stderr)
        spec = read_drafter(located.directory, remote=remote).spec
        if target is not None:
            problems = check_against_target(spec, target)
        plan = capture_plan(spec, target)
    except DrafterError as exc:
        problems = exc.problems
    if located is not None and not args.no_stock_check:
        if spec is None:  # stock's loader reads files unbounded: never hand it ones that failed validation
            stock = {"checked": False, "reason": "its files failed this package's validation (the problems above), "
                                                 "so stock's loader was not run on them"}
        elif remote:
            stock = {"checked": False, "reason": "the drafter's weights are on the hub (only headers were read)"}
        else:
            stock = stock_check.check(located.directory, target)
    if args.json:
        print(json.dumps({
            "status": "rejected" if problems else "ok",
            "description": None if spec is None else spec.to_dict(),
            "warnings": [] if spec is None else producer_warnings(spec),
            "read_by_range": sorted(remote),
            "target": None if target is None else vars(target),
            "capture": plan,
            "stock_sglang": stock,
            "problems": [vars(p) for p in problems],
        }, indent=2))
    else:
        _print_text(spec, problems, plan, target, args.path, remote, stock)
    return 1 if problems else 0
