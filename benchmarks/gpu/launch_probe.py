"""Which way our Triton kernels launch on the installed Triton, and what each way costs.

usage: python3 benchmarks/gpu/launch_probe.py OUT.json [--bs 1] [--commit SHA]
       (from the repository root with it on PYTHONPATH, on a CUDA GPU; sized for under a minute on an H200)

1. Cost: the drop-in sampling op's kernel, with the op's own compile-time keywords and arguments,
   launched three ways: the kept kernel's native ``launch`` (the op as it runs), the kept kernel's
   wrapper (``CompiledKernel.run``: the path on a Triton the table does not know) and
   ``kernel[grid](...)``. Per way: host time per call (no GPU wait; median over alternating loops),
   eager time per call (back-to-back calls, CUDA events) and GPU time (replays of a CUDA graph
   holding one call), with ``benchmarks/tree_kernels.py``'s timing helpers.
2. Paths: runs each op of ``benchmarks/tree_kernels.py`` (build, greedy verify, drop-in sampling
   op, fused sampling pipeline) at the same tree shape and reports, per kernel of
   ``sglang_eagle_ext.kernels`` (its :class:`~sglang_eagle_ext.kernels.launch.Launcher`), how many
   of its kept kernels launch through Triton's native ``launch`` and how many through the launcher
   wrapper; and the installed wrapper's digest with what ``launch._KNOWN_WRAPPERS`` says of it.

The draft-probability scratch is zeroed once, not before every call, so its contents drift from
the op's contract over the timed calls: the times are of launches, the outputs are not checked
(the GPU equality tests check them).

Prints a table; writes OUT.json after each part (atomically).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import os
import pkgutil
import platform
import statistics
import sys
import time
from unittest import mock

import torch
import triton
from triton.backends.nvidia.driver import CudaLauncher

from results_file import save_json

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tree_kernels  # noqa: E402  (benchmarks/tree_kernels.py: shapes, inputs and timing helpers)

import sglang_eagle_ext.kernels as kernels  # noqa: E402
from sglang_eagle_ext.kernels import launch, sampling, tree_build, verify_greedy  # noqa: E402
from sglang_eagle_ext.kernels.sampling import drop_in  # noqa: E402

TREE = (8, 5, 32)  # topk, steps, n: one of the anchor shapes
HOST_LOOPS = 41  # alternating host-time loops per way (each up to 50 calls)


def launchers() -> dict:
    """Every Launcher of ``sglang_eagle_ext.kernels``, by the module and name of its kernel."""
    found = {}
    for info in pkgutil.walk_packages(kernels.__path__, kernels.__name__ + "."):
        for value in vars(importlib.import_module(info.name)).values():
            if isinstance(value, launch.Launcher):
                fn = value.kernel.fn
                found[f"{fn.__module__.removeprefix(kernels.__name__ + '.')}.{fn.__name__}"] = value
    return found


def kept_paths(specialisations) -> dict:
    """How the kernels these Specialised keep launch: through the wrapper, or natively. (Reads the
    launcher's internals: what it decided, not what it was meant to.)"""
    counts = {"native": 0, "wrapper": 0}
    for fixed in specialisations:
        for function, _, _ in fixed._compiled.values():
            counts["wrapper" if isinstance(function, CudaLauncher) else "native"] += 1
    return counts


def installed_wrapper() -> dict:
    digest = launch._source_digest(CudaLauncher.__call__)
    tritons, convention = launch._KNOWN_WRAPPERS.get(digest, ((), None))
    return {"digest": digest, "known": convention is not None, "table_tritons": list(tritons),
            "convention": convention.__name__ if convention else None}


def sampling_launches(case, bs: int, steps: int, n: int) -> dict:
    """The drop-in op's kernel at ``case``, launched each way (see the module docstring)."""
    block_v = inspect.signature(sampling.tree_speculative_sampling_target_only).parameters["block_v"].default
    native = drop_in._sampling_target_only_specialised(block_v, n, steps, False)  # what the op launches
    kernel, kwargs, grid = drop_in._sampling_target_only_kernel, native.kwargs, (bs,)
    args = (*case.outputs, *case.links, case.coins, case.final_coins, case.probs, torch.zeros_like(case.probs),
            1.0, 1.0, case.probs.shape[-1])
    via_wrapper = launch.Launcher(kernel).specialise(**kwargs)
    with mock.patch.dict(launch._wrapper_conventions, {CudaLauncher: None}):  # as on a Triton not in the table
        via_wrapper.launch(grid, *args)  # compiles (or finds the binary) and keeps it with the wrapper's entry
    native.launch(grid, *args)
    ways = {"native launch": native, "wrapper (CompiledKernel.run)": via_wrapper, "kernel[grid]": None}
    fns = [lambda: native.launch(grid, *args), lambda: via_wrapper.launch(grid, *args),
           lambda: kernel[grid](*args, **kwargs)]
    eager_loops = tree_kernels.loop_times_us(fns)
    eager = [statistics.median(times) for times in eager_loops]
    host = tree_kernels.host_medians_us(fns, eager, loops=HOST_LOOPS)
    replays = [tree_kernels.captured(fn) for fn in fns]
    graph_loops = iter(tree_kernels.loop_times_us([replay for replay in replays if replay is not None]))
    return {way: {"kept": kept_paths([fixed]) if fixed else None, "host_us": host_us, "eager_us": eager_us,
                  "graph_us": statistics.median(next(graph_loops)) if replay is not None else None}
            for (way, fixed), host_us, eager_us, replay in zip(ways.items(), host, eager, replays)}


def run_every_op(case) -> None:
    """Each op of benchmarks/tree_kernels.py once: every launcher they use keeps its kernels."""
    tree_build.build_eagle_tree(*case.tree_args)
    verify_greedy.verify_tree_greedy_from_logits(*case.outputs, *case.links, case.logits)
    sampling.tree_speculative_sampling_target_only(*case.outputs, *case.links, case.coins, case.final_coins,
                                                   case.probs, torch.zeros_like(case.probs))
    sampling.tree_sampling_from_logits(*case.outputs, *case.links, case.coins, case.final_coins, case.logits,
                                       case.temps, case.top_ks, case.top_ps)
    torch.cuda.synchronize()


def print_costs(record) -> None:
    wrapper, shape = record["wrapper"], record["shape"]
    print(f"Triton {record['meta']['triton']}, torch {record['meta']['torch']}, {record['meta']['device']}")
    print(f"launcher wrapper digest {wrapper['digest']}: known {wrapper['known']}, convention "
          f"{wrapper['convention']}, table names Triton {', '.join(wrapper['table_tritons']) or '-'}")
    print(f"drop-in sampling op's kernel, tree {shape['topk']}/{shape['steps']}/{shape['n']}, bs {shape['bs']}, "
          f"V {shape['vocab']}: us per call")
    print(f"  {'way':30s} {'host':>8s} {'eager':>8s} {'graph':>8s}  kept native / wrapper")
    for way, row in record["sampling_op"].items():
        kept = f"{row['kept']['native']} / {row['kept']['wrapper']}" if row["kept"] else "-"
        graph = f"{row['graph_us']:8.2f}" if row["graph_us"] is not None else f"{'-':>8s}"
        print(f"  {way:30s} {row['host_us']:8.2f} {row['eager_us']:8.2f} {graph}  {kept}", flush=True)


def print_paths(record) -> None:
    print("kept kernels per kernel, native / wrapper:")
    for name, counts in record["paths"].items():
        print(f"  {name:48s} {counts['native']} / {counts['wrapper']}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--bs", type=int, default=1, help="requests in the batch (default 1)")
    parser.add_argument("--commit", default="?", help="commit of the code measured (for the record)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    topk, steps, n = TREE
    shown = ["OUT.json" if a == args.out else a for a in (argv or sys.argv[1:])]  # no machine paths
    record = {"meta": {"command": "python3 benchmarks/gpu/launch_probe.py " + " ".join(shown),
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
                       "commit": args.commit, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "python": platform.python_version(),
                       "fast_path_available": launch.Launcher.fast},
              "shape": {"topk": topk, "steps": steps, "n": n, "bs": args.bs, "vocab": tree_kernels.VOCAB},
              "wrapper": installed_wrapper()}
    case = tree_kernels.verify_case(args.bs, topk, steps, n, torch.Generator().manual_seed(0))
    # The costs first (one kernel to compile), then the other ops' kernels for the paths: a run
    # cut short keeps the costs.
    record["sampling_op"] = sampling_launches(case, args.bs, steps, n)
    save_json(args.out, record)
    print_costs(record)
    run_every_op(case)
    record["paths"] = {name: kept_paths(launcher._specialised.values()) for name, launcher in launchers().items()}
    record["seconds"] = round(time.perf_counter() - started, 1)
    save_json(args.out, record)
    print_paths(record)
    print(f"{record['seconds']} s; wrote {args.out}")


if __name__ == "__main__":
    main()
