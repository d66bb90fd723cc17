"""Soak an EAGLE-3 SGLang server: N concurrent ``openai`` clients for M minutes (or a fixed number of
requests of each kind), loopback only, with a seeded mix of greedy, sampled (top-p, top-k, min-p),
stop-string, JSON-schema, logprobs, aborted-stream and malformed requests
(``benchmarks/soak_requests.py``).

It records the requests served and the errors by kind, server restarts, output tokens/s, the
acceptance length (SGLang's per-request ``spec_verify_ct``) and the server's memory over time, and
checks (``benchmarks/soak_checks.py``): greedy outputs under load equal those of a sequential run
made first; constrained outputs parse and satisfy their schema; every request is answered as
expected; no restart; no traceback in the server's log; memory does not grow; once the clients
stop, no request is left running or waiting (abandoned streams freed). The results file
holds the command, date, device, versions, commit, configuration, counts and each check's numbers;
the exit status is 1 when a check fails.

Either it starts ``sglang-eagle serve`` itself (the demo's models, built or reused under
``--workdir``, unless ``--target`` / ``--drafter`` are given; arguments after ``--`` go to SGLang) and
stops it afterwards, or it soaks a running server given by ``--base-url`` (on this machine; its log
file by ``--server-log``). Constrained outputs must end within a bounded length: start an external
server with ``--constrained-json-disable-any-whitespace``, as the soak does its own.

usage: python benchmarks/soak.py --out RESULTS.json [--clients 64] [--duration-s 630] [...]
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import random
import shlex
import subprocess
import sys
import threading
import time

import httpx
import openai
import soak_checks
import soak_requests
from gpu.results_file import save_json
from soak_server import (ServerWatch, SoakError, listener_pid, loopback_base_url, start_server, stop_server,
                         wait_until_idle)

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOAD_STARTED = "load started"  # benchmarks/gpu/run_soak.sh waits for "[soak] load started"
SERVER_START_TIMEOUT_S = 900
SERVER_FLAGS = ["--constrained-json-disable-any-whitespace"]
IDLE_TIMEOUT_S = 60  # for the server to free every request once the clients have stopped


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the results JSON file (written atomically)")
    parser.add_argument("--base-url", help="soak this running server (http://127.0.0.1:PORT) instead of starting one")
    parser.add_argument("--server-log", help="with --base-url: the server's log file, scanned for tracebacks")
    parser.add_argument("--server-pid", type=int, help="with --base-url: the server's pid (default: the port's "
                                                       "listener)")
    parser.add_argument("--workdir", help="where the demo's models are built or reused (default: the demo's)")
    parser.add_argument("--target", help="target model directory (default: the demo's tiny target)")
    parser.add_argument("--drafter", help="drafter directory (default: the demo's 2-layer drafter)")
    parser.add_argument("--topk", type=int, default=4, help="tree branching of the server the soak starts")
    parser.add_argument("--num-steps", type=int, default=3, help="draft steps of the server the soak starts")
    parser.add_argument("--num-draft-tokens", type=int, default=8, help="verified tokens per step, likewise")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="of the server it starts")
    parser.add_argument("--server-log-out", help="where the started server's log goes (default: beside --out)")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients, one thread each")
    parser.add_argument("--duration-s", type=float, default=630.0, help="load duration; every loop checks it")
    parser.add_argument("--requests-per-kind", type=int,
                        help="send exactly this many requests of each kind (still bounded by --duration-s)")
    parser.add_argument("--max-tokens-cap", type=int, default=512, help="max_tokens is drawn from 1 to this")
    parser.add_argument("--greedy-prompts", type=int, default=len(soak_requests.PROMPTS),
                        help="how many of the fixed greedy prompts are used")
    parser.add_argument("--greedy-rule", choices=["exact", "near-tie"],
                        help="exact: greedy outputs under load equal the sequential ones; near-tie: a difference "
                             "must start at a near-tie of the sequential run (default: exact on a CPU server, "
                             "near-tie on a GPU one, whose bf16 results depend on the batch)")
    parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request")
    parser.add_argument("--sample-every", type=float, default=2.0, help="seconds between memory samples")
    parser.add_argument("--progress-every", type=float, default=30.0, help="seconds between progress lines")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--commit", default=os.environ.get("SOAK_COMMIT"), help="default: git rev-parse HEAD")
    parser.add_argument("sglang_args", nargs=argparse.REMAINDER, help="-- then arguments for SGLang's server")
    args = parser.parse_args(argv)
    if args.sglang_args[:1] == ["--"]:
        args.sglang_args = args.sglang_args[1:]
    if args.base_url and not args.server_log:
        parser.error("--base-url needs --server-log: the soak checks the server's log for tracebacks")
    if args.server_log and not os.path.isfile(args.server_log):
        parser.error(f"--server-log {args.server_log}: no such file (the log the server writes)")
    for name in ("clients", "duration_s", "max_tokens_cap", "greedy_prompts", "request_timeout", "sample_every"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if not 1 <= args.greedy_prompts <= len(soak_requests.PROMPTS):
        parser.error(f"--greedy-prompts must be 1 to {len(soak_requests.PROMPTS)}")
    return args


def say(message: str) -> None:
    print(f"[soak] {message}", flush=True)


def commit_of(given: str | None) -> str:
    if given:
        return given
    head = subprocess.run(["git", "-C", REPOSITORY, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if not head.stdout.strip():
        return "unknown"
    changed = subprocess.run(["git", "-C", REPOSITORY, "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True)
    return head.stdout.strip() + ("-dirty" if changed.stdout.strip() else "")


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True)
        return done.stdout.strip() or "cuda"
    model = ""
    if os.path.exists("/proc/cpuinfo"):
        model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                      if line.startswith("model name")), "")
    return f"CPU, {os.cpu_count()} cores, {platform.machine()}" + (f" ({model})" if model else "")


def demo_models(workdir: str | None) -> tuple[str, str]:
    """The demo's tiny target and 2-layer drafter, built as the demo builds them (or reused)."""
    from sglang_eagle_ext.cli.serve_cmd import cache_dir
    from sglang_eagle_ext.demo.build import TARGET_DIR, build_models, drafter_dir

    workdir = os.path.abspath(workdir or os.path.join(cache_dir(), "demo"))
    if build_models(workdir) != 0:
        raise SystemExit("soak: building the demo's models failed (its output is above)")
    return os.path.join(workdir, TARGET_DIR), os.path.join(workdir, drafter_dir("sglang"))


def server_info(base_url: str) -> dict:
    """The server's arguments and version (``/server_info``; releases before it: ``/get_server_info``)."""
    answer = httpx.get(f"{base_url}/server_info", timeout=60)
    if answer.status_code == 404:
        answer = httpx.get(f"{base_url}/get_server_info", timeout=60)
    answer.raise_for_status()
    return answer.json()


class Jobs:
    """Which kind each client sends next: drawn by weight until the deadline, or a fixed shuffled list."""

    def __init__(self, seed: int, per_kind: int | None, deadline: float):
        self.deadline, self.lock = deadline, threading.Lock()
        self.fixed = None
        if per_kind:
            self.fixed = [kind for kind in soak_requests.KINDS for _ in range(per_kind)]
            random.Random(seed).shuffle(self.fixed)

    def next(self, rng: random.Random) -> str | None:
        if time.monotonic() >= self.deadline:
            return None
        if self.fixed is None:
            kinds = list(soak_requests.WEIGHTS)
            return rng.choices(kinds, weights=[soak_requests.WEIGHTS[k] for k in kinds])[0]
        with self.lock:
            return self.fixed.pop() if self.fixed else None


def run_load(args, base_url: str, model: str, context_length: int, cases, watch: ServerWatch) -> tuple[list, float]:
    """The clients' loop; returns the outcomes and the seconds the load ran."""
    outcomes: list[soak_requests.Outcome] = []
    lock = threading.Lock()
    start = time.monotonic()
    jobs = Jobs(args.seed, args.requests_per_kind, start + args.duration_s)
    bodies = soak_requests.malformed_bodies(model, context_length)

    def client_loop(index: int) -> None:
        rng = random.Random(args.seed * 100_003 + index)
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="soak", max_retries=0, timeout=args.request_timeout)
        with httpx.Client(base_url=base_url, timeout=args.request_timeout) as http:
            while not watch.server_gone:
                kind = jobs.next(rng)
                if kind is None:
                    return
                sent = time.monotonic()
                try:
                    if kind == "malformed":
                        outcome = soak_requests.malformed(http, rng, bodies)
                    else:
                        outcome = soak_requests.SENDERS[kind](client, model, rng, args.max_tokens_cap, cases)
                except Exception as error:  # an answer the judges could not read: counted, never lost
                    outcome = soak_requests.Outcome(kind, f"unreadable answer ({type(error).__name__})",
                                                    detail=str(error)[:300])
                outcome.seconds = time.monotonic() - sent
                with lock:
                    outcomes.append(outcome)

    threads = [threading.Thread(target=client_loop, args=(index,), daemon=True) for index in range(args.clients)]
    say(f"{LOAD_STARTED}: {args.clients} clients, up to {args.duration_s:.0f} s")
    for thread in threads:
        thread.start()
    last_report = start
    while any(thread.is_alive() for thread in threads):
        # a request in flight at the deadline may take its whole timeout; none may take longer
        if time.monotonic() > start + args.duration_s + args.request_timeout + 30:
            say("clients still busy past the deadline and the request timeout: left behind")
            break
        time.sleep(1)
        if time.monotonic() - last_report >= args.progress_every:
            last_report = time.monotonic()
            with lock:
                done = list(outcomes)
            tokens = sum(o.tokens for o in done if o.error is None)
            rss = f", server RSS {watch.rss[-1][1]:.0f} MiB" if watch.rss else ""
            say(f"t={last_report - start:.0f} s: {len(done)} requests, {sum(o.error is not None for o in done)} "
                f"errors, {tokens / (last_report - start):.1f} output tokens/s{rss}")
    with lock:
        return list(outcomes), time.monotonic() - start


def acceptance(outcomes) -> float | None:
    counted = [o for o in outcomes if o.error is None and o.verify_steps]
    steps = sum(o.verify_steps for o in counted)
    return round(sum(o.tokens for o in counted) / steps, 3) if steps else None


def by_kind(outcomes) -> dict:
    """Per kind, over requests served: seconds at the median, the 95th percentile and the maximum, mean
    completion tokens and the acceptance length."""
    table = {}
    for kind in soak_requests.KINDS:
        served = [o for o in outcomes if o.kind == kind and o.error is None]
        if served:
            seconds = sorted(o.seconds for o in served)
            table[kind] = {"p50_s": round(seconds[len(seconds) // 2], 2),
                           "p95_s": round(seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))], 2),
                           "max_s": round(seconds[-1], 2),
                           "mean_tokens": round(sum(o.tokens for o in served) / len(served), 1),
                           "acceptance_length": acceptance(served)}
    return table


def summarise(args, outcomes, seconds: float, references, watch: ServerWatch, log_text: str,
              load_start: float, device: str, idle: dict) -> dict:
    served = collections.Counter(o.kind for o in outcomes if o.error is None)
    errors: dict = collections.defaultdict(collections.Counter)
    examples: dict = collections.defaultdict(list)
    for o in outcomes:
        if o.error is not None:
            errors[o.kind][o.error] += 1
            if len(examples[f"{o.kind}: {o.error}"]) < 3:
                examples[f"{o.kind}: {o.error}"].append(o.detail)
    classes = collections.Counter()
    mismatches = []
    for o in outcomes:
        if o.kind == "greedy" and o.error is None:
            verdict = soak_checks.classify_greedy(references[o.greedy_case], o.text)
            classes[verdict] += 1
            if verdict != "exact" and len(mismatches) < 5:
                mismatches.append({"case": o.greedy_case, "verdict": verdict, "under_load": o.text[:200],
                                   "sequential": references[o.greedy_case]["text"][:200]})
    tokens = sum(o.tokens for o in outcomes if o.error is None)
    rule = args.greedy_rule or ("exact" if device == "cpu" else "near-tie")
    load_end = load_start + seconds
    unexpected = sum(sum(counter.values()) for counter in errors.values())
    checks = {
        "greedy equals sequential": soak_checks.greedy_check(dict(classes), rule),
        "constrained outputs valid": soak_checks.count_check(served["json"], sum(errors.get("json", {}).values()),
                                                             "JSON-schema outputs"),
        "every request answered as expected": soak_checks.count_check(len(outcomes) - unexpected, unexpected,
                                                                      "requests"),
        "no server restart": {"pass": not watch.events, "restarts": len(watch.events), "events": watch.events,
                              "helper_processes_ended": watch.helpers_ended},
        "server idle after the load": idle,
        "no traceback in the server log": soak_checks.traceback_check(log_text),
        "server memory flat": soak_checks.memory_check(watch.rss, load_start, load_end, "server RSS"),
    }
    if device != "cpu":
        checks["GPU memory flat"] = soak_checks.memory_check(watch.gpu_mib, load_start, load_end, "GPU memory used")
    return {
        "counts": {"requests": len(outcomes), "served": dict(served),
                   "errors": {kind: dict(counter) for kind, counter in errors.items()},
                   "error_examples": dict(examples), "server_restarts": len(watch.events),
                   "load_seconds": round(seconds, 1), "output_tokens": tokens,
                   "output_tokens_per_s": round(tokens / seconds, 2) if seconds else None,
                   "by_kind": by_kind(outcomes), "acceptance_length": acceptance(outcomes)},
        "greedy": {"cases": [{"max_tokens": r["max_tokens"], "prompt": r["prompt"]} for r in references],
                   "classes": dict(classes), "differences": mismatches},
        "memory": {"server_rss_mib": [[round(t - load_start, 1), round(v, 1)] for t, v in watch.rss],
                   "gpu_used_mib": [[round(t - load_start, 1), round(v, 1)] for t, v in watch.gpu_mib],
                   "gpu_measured": sorted(watch.gpu_scope)},
        "checks": checks,
        "passed": all(check["pass"] for check in checks.values()),
    }


def plugin_lines(log_text: str) -> list[str]:
    """This package's lines in the server's log: which class serves drafts, which verify path."""
    seen = []
    for line in log_text.splitlines():
        if "sglang-eagle-ext:" in line and line not in seen:
            seen.append(line.strip()[:800])
    return seen[:12]


def soak(args) -> int:
    out = os.path.abspath(args.out)
    commit = commit_of(args.commit)  # the checkout that runs, before anyone can change it
    process = None
    if args.base_url:
        base_url, log_path = loopback_base_url(args.base_url), args.server_log
    else:
        target, drafter = args.target, args.drafter
        if not (target and drafter):
            say("building (or reusing) the demo's models ...")
            demo_target, demo_drafter = demo_models(args.workdir)
            target, drafter = target or demo_target, drafter or demo_drafter
        log_path = args.server_log_out or os.path.splitext(out)[0] + ".server.log"
        serve_args = ["--target", target, "--draft", drafter, "--topk", str(args.topk), "--num-steps",
                      str(args.num_steps), "--num-draft-tokens", str(args.num_draft_tokens), "--device", args.device]
        say(f"starting sglang-eagle serve {shlex.join(serve_args)} (log: {log_path}) ...")
        process, base_url = start_server(serve_args, SERVER_FLAGS + args.sglang_args, log_path, SERVER_START_TIMEOUT_S)
    try:
        info = server_info(base_url)
        model_card = httpx.get(f"{base_url}/v1/models", timeout=60).json()["data"][0]
        port = int(base_url.rsplit(":", 1)[1])
        pid = args.server_pid or (process.pid if process else listener_pid(port))
        if pid is None:
            raise SoakError(f"no process of this user listens on port {port}: give --server-pid")
        device = str(info.get("device", "unknown"))
        watch = ServerWatch(pid, port, args.sample_every, gpu=device.startswith("cuda"))
        watch.start()
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="soak", max_retries=0, timeout=args.request_timeout)
        cases = soak_requests.greedy_cases(args.max_tokens_cap, args.greedy_prompts)
        say(f"sequential greedy pass: {len(cases)} prompts, one at a time ...")
        references = soak_requests.sequential_reference(client, model_card["id"], cases)
        load_start = time.monotonic()
        outcomes, seconds = run_load(args, base_url, model_card["id"], int(model_card["max_model_len"]), cases, watch)
        idle = wait_until_idle(base_url, IDLE_TIMEOUT_S)
        time.sleep(2 * args.sample_every)  # one more sample after the last request
        watch.stop()
        log_text = open(log_path, errors="replace").read()
        result = summarise(args, outcomes, seconds, references, watch, log_text, load_start, device, idle)
    finally:
        if process is not None:
            stop_server(process)
    server_keys = ("version", "device", "dtype", "speculative_algorithm", "speculative_num_steps",
                   "speculative_eagle_topk", "speculative_num_draft_tokens", "attention_backend", "sampling_backend",
                   "model_path", "speculative_draft_model_path", "constrained_json_disable_any_whitespace",
                   "grammar_backend")
    record = {
        "command": "python benchmarks/soak.py " + shlex.join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": device_name(device),
        "sglang": info.get("version"), "commit": commit,
        "config": {"clients": args.clients, "duration_s": args.duration_s, "requests_per_kind": args.requests_per_kind,
                   "max_tokens_cap": args.max_tokens_cap, "seed": args.seed, "request_timeout_s": args.request_timeout,
                   "weights": soak_requests.WEIGHTS, "sampling": soak_requests.SAMPLING,
                   "stop": soak_requests.STOP_STRINGS, "schema": soak_requests.SCHEMA,
                   "fused_verify_env": os.environ.get("SGLANG_EAGLE_EXT_FUSED_VERIFY"),
                   "server": {key: info.get(key) for key in server_keys}},
        "plugin_log": plugin_lines(log_text),
        "fused_sampler_served": "served by the fused sampler" in log_text, **result}
    save_json(out, record)
    counts = record["counts"]
    say(f"{counts['requests']} requests in {counts['load_seconds']} s, {counts['output_tokens_per_s']} output "
        f"tokens/s, acceptance {counts['acceptance_length']}, errors {counts['errors'] or 'none'}; results: {out}")
    for name, check in record["checks"].items():
        numbers = {k: v for k, v in check.items() if k not in ("pass", "first", "events")}
        say(f"{'pass' if check['pass'] else 'FAIL'}: {name} {numbers}")
    return 0 if record["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return soak(args)
    except SoakError as error:
        print(f"soak: {error}", file=sys.stderr)
        return 2
    except (openai.OpenAIError, httpx.HTTPError) as error:
        print(f"soak: the server did not answer as SGLang does ({type(error).__name__}: {error}); is it "
              "running, and is this its address?", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
