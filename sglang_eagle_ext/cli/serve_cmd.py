"""Launch stock SGLang with EAGLE-3 for any drafter checkpoint (hub id, model dir, trainer output).

The drafter may be a hub id (fetched into the local Hugging Face cache), a model directory of any
supported dialect (SafeAILab, SpecForge, AngelSlim, ModelOpt, speculators, NeMo), a trainer's
checkpoint folder epoch_<E>_step_<S>/ (its model/ or model/consolidated/ is used, or the legacy
draft_model.pt it holds) or a legacy draft_model.pt + config.json folder (exported once into a
model directory). It is validated against the target before anything starts; this package's
SGLang plugin then serves it with the right capture layers. The server is started as each
release recommends (``sglang serve``, with no option the release deprecates); arguments after --
go to it unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys

from sglang_eagle_ext.cli.options import SERVING_DEVICES, device_problem, positive_int, serving_device
from sglang_eagle_ext.drafter.locate import Located, locate_drafter, read_named_target
from sglang_eagle_ext.drafter.train_serve import producer_warnings
from sglang_eagle_ext.errors import DrafterError, counted
from sglang_eagle_ext.sglang.compat import SUPPORTED, cpu, launcher, releases
from sglang_eagle_ext.sglang.compat.adaptive_shape import ENV_SWITCH as ADAPTIVE_SWITCH
from sglang_eagle_ext.sglang.compat.adaptive_shape import RELEASES as ADAPTIVE_RELEASES
from sglang_eagle_ext.sglang.compat.adaptive_trees import RELEASES as TREE_RELEASES
from sglang_eagle_ext.sglang.compat.adaptive_trees import TreeSet
from sglang_eagle_ext.sglang.shape_policy import DEFAULT_STEPS

_CHAINS = [str(steps) for steps in DEFAULT_STEPS if steps > 0]
_DEPTHS = ", ".join(_CHAINS[:-1]) + " or " + _CHAINS[-1]
# a tree in the set is launched as its envelope: the deepest of the policy's depths, with the draft tokens its
# deepest chain verifies (what adaptive_trees.TreeSet.checked asks of a launch on these depths)
_TREE_STEPS = max(DEFAULT_STEPS)
_TREE_MIN_DRAFT_TOKENS = max(steps for steps in DEFAULT_STEPS if steps != _TREE_STEPS) + 1

INSTALL_HINT = ("SGLang is not installed in this Python environment. With a GPU:\n"
                f"    pip install 'sglang{SUPPORTED}'\n"
                "On a CPU-only machine (from this package's clone):\n"
                "    pip install '.[cpu]' && pip install --no-deps sglang==0.5.23\n"
                "(docs/install.md); or use --print-only to see the command.")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="target model: a local directory or a hub id")
    parser.add_argument("--draft", required=True, help="drafter: hub id, model directory, "
                        "epoch_<E>_step_<S>/ training checkpoint or legacy draft_model.pt directory")
    parser.add_argument("--algorithm", default="EAGLE3", choices=["EAGLE3"], help="SGLang's speculative algorithm")
    parser.add_argument("--num-steps", type=positive_int, default=3, help="draft steps per verify step")
    parser.add_argument("--topk", type=positive_int, default=1, help="branching of the draft tree (1: chain)")
    parser.add_argument("--num-draft-tokens", type=positive_int, default=None,
                        help="verified tokens per step (default: num-steps + 1 for topk 1, else "
                             "topk * num-steps + 1)")
    parser.add_argument("--adaptive", action="store_true",
                        help="choose the drafting depth per decode step, per batch size, from measured step "
                             f"costs and live acceptance: no speculation or a chain of {_DEPTHS} steps (SGLang "
                             f"0.5.21+, --topk 1, --num-steps one of those), or, with --topk above 1 (SGLang "
                             f"{TREE_RELEASES}), that tree too, launched as the deepest: --num-steps "
                             f"{_TREE_STEPS} and at least {_TREE_MIN_DRAFT_TOKENS} draft tokens; adds "
                             f"--speculative-adaptive and {ADAPTIVE_SWITCH}=1")
    parser.add_argument("--device", choices=SERVING_DEVICES, default="auto",
                        help="auto: the GPU when one is visible, else the CPU (float32, Triton's "
                             "interpreter, SGLang's CPU flags added unless given after --)")
    parser.add_argument("--cpu-kv-tokens", type=positive_int, default=cpu.DEFAULT_KV_TOKENS,
                        help="on a CPU host, tokens of SGLang's KV pool (its --max-total-tokens; without it "
                             "SGLang takes most of the host's memory); the memory it takes is printed")
    parser.add_argument("--export-dir", default=None,
                        help="where legacy checkpoints are exported (default: <user cache>/exports)")
    parser.add_argument("--stock-check", action="store_true",
                        help="before launching, also run stock SGLang's own loader on the drafter with this plugin "
                             "off (as `inspect` does; a child process, bounded in time) and say what stock would "
                             "serve")
    parser.add_argument("--print-only", action="store_true",
                        help="write nothing; print the command and the paths a launch would use")
    parser.add_argument("extra", nargs=argparse.REMAINDER, metavar="SGLANG_ARGS",
                        help="-- followed by arguments for SGLang's server (sglang serve)")


def cache_dir() -> str:
    from sglang_eagle_ext.targets import cache_root

    return str(cache_root())


def export_directory(located: Located, export_dir: str | None) -> str:
    """Where a legacy checkpoint's model directory is written (one per source path)."""
    digest = hashlib.sha256(located.directory.encode()).hexdigest()[:12]
    return os.path.join(export_dir or os.path.join(cache_dir(), "exports"),
                        f"{os.path.basename(located.directory.rstrip(os.sep))}-{digest}")


def serving_release():
    """The SGLang release the command is written for: the installed one, else the newest supported
    (what installing SGLang as the install hint says gives)."""
    try:
        return releases.installed_release()
    except importlib.metadata.PackageNotFoundError:
        return releases.NEWEST


def draft_tokens_of(args) -> int:
    """Verified tokens per step: ``--num-draft-tokens``, else every token the shape drafts and the bonus."""
    return args.num_draft_tokens or (args.num_steps + 1 if args.topk == 1 else args.topk * args.num_steps + 1)


def build_command(args, model_dir: str, device: str) -> list[str]:
    draft_tokens = draft_tokens_of(args)
    release = serving_release()
    installed = importlib.util.find_spec("sglang") is not None
    command = [*launcher.server_command(installed), "--model-path", args.target,
               "--speculative-algorithm", args.algorithm,
               "--speculative-draft-model-path", model_dir,
               "--speculative-num-steps", str(args.num_steps),
               "--speculative-eagle-topk", str(args.topk),
               "--speculative-num-draft-tokens", str(draft_tokens)]
    if args.adaptive:  # stock builds a graph set per candidate depth; this package's policy picks among them
        command.append("--speculative-adaptive")
    extra = list(args.extra)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if device == "cpu":
        command += cpu.server_flags(extra, args.cpu_kv_tokens, release)
    return command + extra


def adaptive_problem(args) -> str | None:
    """Why ``--adaptive`` cannot serve these options (SGLang would refuse them at start-up), else None."""
    if not args.adaptive:
        return None
    release = serving_release()
    if release not in ADAPTIVE_RELEASES:
        return f"needs SGLang 0.5.21 or later (its --speculative-adaptive takes a policy); this is {release}"
    if args.topk > 1 and not releases.ADAPTIVE_TREES.holds(release):  # else stock serves the tree fixed, warned
        return f"with --topk {args.topk} (a tree in the set) needs SGLang {TREE_RELEASES}; this is {release}"
    if cpu.flag_given("--speculative-adaptive-config", args.extra):
        return None  # other depths than the policy's: the plugin checks the launch against that file at start-up
    if args.topk > 1:
        return adaptive_tree_problem(args)
    if args.num_steps not in DEFAULT_STEPS or args.num_draft_tokens not in (None, args.num_steps + 1):
        return (f"chooses among chains (top-k 1) of {_DEPTHS} steps and no speculation: start it at one of them "
                f"(--topk 1 --num-steps {max(DEFAULT_STEPS)}, no --num-draft-tokens)")
    return None


def adaptive_tree_problem(args) -> str | None:
    """Why ``--adaptive`` with ``--topk`` above 1 cannot launch, else None: the plugin's own launch check
    (``TreeSet.checked``: the launch is the set's tree and envelope, the deepest of the policy's depths with draft
    tokens for its deepest chain), its refusal said in this command's options (the plugin's names SGLang's flags)."""
    try:
        TreeSet.checked(args.num_steps, args.topk, draft_tokens_of(args), sorted(DEFAULT_STEPS))
    except ValueError:
        return (f"with --topk {args.topk} launches the set's tree as its deepest shape, beside no speculation and "
                f"chains of {', '.join(_CHAINS[:-1])} steps: --num-steps {_TREE_STEPS} and --num-draft-tokens of "
                f"at least {_TREE_MIN_DRAFT_TOKENS} (chain {_TREE_MIN_DRAFT_TOKENS - 1} verifies "
                f"{_TREE_MIN_DRAFT_TOKENS} tokens; SGLang's default Llama tree is --topk 4 --num-steps 5 "
                f"--num-draft-tokens 8)")
    return None


def kv_pool_line(args, spec, device: str) -> list[str]:
    """The KV pool a CPU server takes, target and drafter (the target's config read where it is a
    local directory); nothing on a GPU, where SGLang sizes the pool by --mem-fraction-static."""
    if device != "cpu":
        return []
    if cpu.flag_given("--max-total-tokens", args.extra):
        return ["kv pool:        as --max-total-tokens after -- says"]
    tokens = args.cpu_kv_tokens
    draft = cpu.kv_pool_bytes(spec.num_layers, spec.num_key_value_heads, spec.head_dim, tokens)
    target = _target_kv_bytes(args.target, tokens)
    size = "" if target is None else f"target {target / 2**20:,.0f} MiB + "
    return [f"kv pool:        {tokens:,} tokens, float32: {size}drafter {draft / 2**20:,.0f} MiB "
            "(--cpu-kv-tokens sets it)"]


def _target_kv_bytes(target: str, tokens: int) -> int | None:
    config_file = os.path.join(target, "config.json")
    try:
        with open(config_file, encoding="utf-8") as handle:
            config = json.load(handle)
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        return cpu.kv_pool_bytes(config["num_hidden_layers"], config.get("num_key_value_heads", heads),
                                 head_dim, tokens)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None  # a hub id, or a config of another shape: the drafter's share is still shown


def run(args) -> int:
    from sglang_eagle_ext.drafter.export import export_is_current, export_legacy
    from sglang_eagle_ext.drafter.reader import read_drafter
    from sglang_eagle_ext.sglang.compat.config_loading import capture_layer_ids

    device = serving_device(args.device)
    problem = device_problem(device)
    if problem:
        print(f"serve: --device {problem}", file=sys.stderr)
        return 2
    problem = adaptive_problem(args)
    if problem:
        print(f"serve: --adaptive {problem}", file=sys.stderr)
        return 2
    try:
        located = locate_drafter(args.draft)
        target = read_named_target(args.target)
        spec = read_drafter(located.directory, target=target).spec
        ids = capture_layer_ids(spec, target)
    except DrafterError as exc:
        print(exc, file=sys.stderr)
        return 1
    served_from = export_directory(located, args.export_dir) if located.legacy else located.directory
    command = build_command(args, served_from, device)
    needs_export = located.legacy and not export_is_current(located.directory, served_from)
    capture = ("SGLang default taps" if ids is None else
               f"{list(ids)} (SGLang layer-output ids = hidden-state indices {[i + 1 for i in ids]})")
    lines = [f"drafter:        {located.given} ({located.how}"
             + (", exported to a model directory)" if located.legacy else ")"),
             f"served from:    {served_from}" + (" (to be written)" if needs_export else ""),
             f"drafter:        {spec.dialect.value} dialect, {counted(spec.num_layers, 'layer')}, "
             f"{spec.num_aux_hidden_states} aux, draft vocab {spec.draft_vocab_size}",
             f"target:         {args.target}" + ("" if target else " (config not fetched: checks that need "
                                                  "the target were skipped)"),
             f"target capture: {capture}"]
    lines += [f"note:           {note}" for note in spec.notes]
    lines += [f"WARNING:        {warning}" for warning in producer_warnings(spec)] + [f"device:         {device}"]
    lines += kv_pool_line(args, spec, device)
    # On a CPU the server needs the shims' variables too: the printed line runs as printed in a shell.
    environment = server_environment(dict(os.environ), device)
    if args.adaptive:
        environment[ADAPTIVE_SWITCH] = "1"
    variables = {name: value for name, value in environment.items() if os.environ.get(name) != value}
    command_line = "command:        " + " ".join([f"{name}={shlex.quote(value)}" for name, value in variables.items()]
                                                + [shlex.join(command)])
    hidden_state_indices = None if ids is None else [i + 1 for i in ids]
    if args.print_only:
        stock = _stock_lines(args, served_from, target, spec, hidden_state_indices, exported=not needs_export)
        print("\n".join(lines + stock + [command_line]))
        return 0
    if importlib.util.find_spec("sglang") is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    if needs_export:
        try:
            export_legacy(located.directory, served_from, target=target)
        except DrafterError as exc:
            print(exc, file=sys.stderr)
            return 1
    lines += _stock_lines(args, served_from, target, spec, hidden_state_indices, exported=True) + [command_line]
    print("\n".join(lines), file=sys.stderr, flush=True)
    return launch(command, environment if variables else None)


def _stock_lines(args, served_from: str, target, spec, hidden_state_indices, exported: bool) -> list[str]:
    """What stock SGLang would do with the drafter (``--stock-check``), else why that was not checked."""
    from sglang_eagle_ext.sglang import stock_check

    if not args.stock_check:
        report = {"checked": False, "reason": "--stock-check runs stock SGLang's own loader on it"}
    elif not exported:
        report = {"checked": False, "reason": "the legacy checkpoint is exported only at launch; run without "
                                              "--print-only"}
    else:
        report = stock_check.check(served_from, target)
    return stock_check.describe(report, hidden_state_indices, spec.num_layers)


# The folder this package is imported from: a source checkout (or any folder outside the
# interpreter's site-packages) goes on the server's PYTHONPATH, since the `sglang` script, unlike
# `python -m` run from the checkout, would otherwise load whichever copy is installed.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def server_environment(env: dict, device: str) -> dict:
    """``env`` for the server's process tree: the CPU shims' variables on a CPU; this package's
    folder on ``PYTHONPATH`` where it is not an installed one."""
    import site

    if device == "cpu":
        env = cpu.process_environment(env)
    installed = {os.path.abspath(path) for path in [*site.getsitepackages(), site.getusersitepackages()]}
    paths = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    if PACKAGE_ROOT not in installed and PACKAGE_ROOT not in paths:
        env = {**env, "PYTHONPATH": os.pathsep.join([*paths, PACKAGE_ROOT])}
    return env


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
