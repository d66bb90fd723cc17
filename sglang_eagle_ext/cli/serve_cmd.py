"""Launch stock SGLang with EAGLE-3 for any drafter checkpoint (hub id, model dir, trainer output).

The drafter may be a hub id (passed through untouched), a model directory of any supported
dialect (SafeAILab, SpecForge, AngelSlim, ModelOpt, speculators, NeMo), an outer training
checkpoint ``epoch_<E>_step_<S>/`` (its ``model/`` is used) or a legacy ``draft_model.pt`` +
``config.json`` (exported once into a model directory). It is validated against the target
before anything starts; this package's SGLang plugin then serves it with the right capture
layers. Arguments after ``--`` go to ``python -m sglang.launch_server`` unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys

from sglang_eagle_ext.errors import DrafterError

INSTALL_HINT = ("SGLang is not installed in this Python environment. Install it with\n"
                "    pip install 'sglang-eagle-ext[sglang]'\n"
                "(on a CPU-only machine: pip install -r requirements/sglang-cpu-0.5.23.txt), "
                "or use --print-only to see the command.")
_EPOCH_DIR = re.compile(r"^epoch_\d+_step_\d+$")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="target model (directory or hub id)")
    parser.add_argument("--draft", required=True, help="drafter: hub id, model directory, "
                        "epoch_<E>_step_<S>/ training checkpoint or legacy draft_model.pt dir")
    parser.add_argument("--algorithm", default="EAGLE3", choices=["EAGLE3"])
    parser.add_argument("--num-steps", type=int, default=3)
    parser.add_argument("--topk", type=int, default=1)
    parser.add_argument("--num-draft-tokens", type=int, default=None,
                        help="default: num-steps + 1 for topk 1, else topk * num-steps + 1")
    parser.add_argument("--export-dir", default=None,
                        help="where legacy checkpoints are exported (default: the user cache)")
    parser.add_argument("--print-only", action="store_true",
                        help="write nothing; print the command and the paths a launch would use")
    parser.add_argument("extra", nargs=argparse.REMAINDER,
                        help="-- followed by arguments for sglang.launch_server")


def cache_dir() -> str:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "sglang-eagle-ext")


def is_hub_id(value: str) -> bool:
    return not os.path.exists(value) and re.fullmatch(r"[\w.-]+/[\w.-]+", value) is not None


class Resolution:
    """Where the drafter SGLang will load lives, and what has to happen first."""

    def __init__(self, given: str, model_dir: str, reason: str, export_from: str | None = None):
        self.given, self.model_dir, self.reason, self.export_from = given, model_dir, reason, export_from


def resolve_draft(draft: str, export_dir: str | None) -> Resolution:
    if is_hub_id(draft):
        return Resolution(draft, draft, "hub id, passed through untouched")
    path = os.path.abspath(draft)
    if not os.path.isdir(path):
        raise DrafterError([_problem(path, "path", "does not exist or is not a directory",
                                     "pass a drafter directory or a hub id such as org/name")])
    if _EPOCH_DIR.match(os.path.basename(path.rstrip(os.sep))) or (
            os.path.isdir(os.path.join(path, "model")) and not os.path.isfile(
                os.path.join(path, "config.json"))):
        inner = os.path.join(path, "model")
        if not os.path.isdir(inner):
            raise DrafterError([_problem(path, "model/", "training checkpoint without a model/ "
                                         "directory", "point --draft at the model directory")])
        return _resolve_local(inner, "training checkpoint: its model/ directory", export_dir)
    return _resolve_local(path, "model directory", export_dir)


def _resolve_local(path: str, reason: str, export_dir: str | None) -> Resolution:
    from sglang_eagle_ext.drafter.export import is_legacy_checkpoint

    if is_legacy_checkpoint(path):
        digest = hashlib.sha256(path.encode()).hexdigest()[:12]
        target = os.path.join(export_dir or os.path.join(cache_dir(), "exports"),
                              f"{os.path.basename(path.rstrip(os.sep))}-{digest}")
        return Resolution(path, target, reason + " with a legacy draft_model.pt: exported to a "
                          "model directory", export_from=path)
    return Resolution(path, path, reason)


def _problem(file, field, message, fix):
    from sglang_eagle_ext.errors import Problem

    return Problem(file, field, message, fix)


def build_command(args, model_dir: str) -> list[str]:
    draft_tokens = args.num_draft_tokens or (
        args.num_steps + 1 if args.topk == 1 else args.topk * args.num_steps + 1)
    command = [sys.executable, "-m", "sglang.launch_server", "--model-path", args.target,
               "--speculative-algorithm", args.algorithm,
               "--speculative-draft-model-path", model_dir,
               "--speculative-num-steps", str(args.num_steps),
               "--speculative-eagle-topk", str(args.topk),
               "--speculative-num-draft-tokens", str(draft_tokens)]
    extra = list(args.extra)
    if extra and extra[0] == "--":
        extra = extra[1:]
    return command + extra


def run(args) -> int:
    from sglang_eagle_ext.drafter.reader import read_drafter
    from sglang_eagle_ext.drafter.export import export_is_current, export_legacy
    from sglang_eagle_ext.sglang.draft_config import capture_layer_ids
    from sglang_eagle_ext.drafter.target import read_target

    try:
        resolution = resolve_draft(args.draft, args.export_dir)
        target_info = read_target(args.target) if os.path.exists(args.target) else None
        capture_ids = "decided by SGLang (hub id)"
        spec = None
        if resolution.export_from is None and not is_hub_id(resolution.model_dir):
            spec = read_drafter(resolution.model_dir, target=target_info).spec
        elif resolution.export_from is not None:
            spec = read_drafter(resolution.export_from, target=target_info).spec
        if spec is not None:
            ids = capture_layer_ids(spec, target_info)
            capture_ids = ("SGLang default taps" if ids is None else
                           f"{list(ids)} (SGLang layer-output ids = hidden-state indices "
                           f"{[i + 1 for i in ids]})")
    except DrafterError as exc:
        print(exc, file=sys.stderr)
        return 1
    command = build_command(args, resolution.model_dir)
    needs_export = resolution.export_from is not None and not export_is_current(
        resolution.export_from, resolution.model_dir)
    lines = [f"drafter:        {resolution.given} ({resolution.reason})",
             f"served from:    {resolution.model_dir}"
             + (" (to be written)" if needs_export else "")]
    if spec is not None:
        lines.append(f"drafter:        {spec.dialect.value} dialect, {spec.num_layers} layer(s), "
                     f"{spec.num_aux_hidden_states} aux, draft vocab {spec.draft_vocab_size}")
    lines += [f"target capture: {capture_ids}", "command:        " + shlex.join(command)]
    if args.print_only:
        print("\n".join(lines))
        return 0
    if importlib.util.find_spec("sglang") is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    if needs_export:
        try:
            export_legacy(resolution.export_from, resolution.model_dir, target=target_info)
        except DrafterError as exc:
            print(exc, file=sys.stderr)
            return 1
    print("\n".join(lines), file=sys.stderr, flush=True)
    return launch(command)


def launch(command: list[str], env: dict | None = None) -> int:
    """Run the server, forward SIGINT/SIGTERM/SIGHUP to it, return its exit code."""
    process = subprocess.Popen(command, env=env)

    def forward(signum, _frame):
        if process.poll() is None:
            process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return process.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
