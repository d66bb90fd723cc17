"""Render results.json files of ``e2e_sglang.py`` as the Markdown tables of
``benchmarks/results/sglang_e2e.md``:  python benchmarks/gpu/e2e_table.py RESULTS.json..."""

import json
import sys


def row_lines(results: dict):
    for record in results["rows"]:
        row = record["row"]
        head = (f"| {results['sglang']} | {row['layers']} | {row['num_aux']} | "
                f"{'on' if row['fc_norm'] else 'off'} | {row['dialect']} | {row['topk']} | "
                f"{row['steps']}/{row['draft_tokens']} | {row['kernels']} | {row.get('activation', 'entry-point')} |")
        if "error" in record or "exact" not in record:
            yield head + f" no ({record.get('error', 'no baseline')}) | | | | |"
            continue
        other = [f"p{m['prompt']}@{m['position']} (margin {m['margin']})" for m in record["mismatch"]]
        agree = (f"{record['exact']} identical + {record['near_tie']} identical up to a near-tie "
                 f"= {record['exact'] + record['near_tie']}/{record['prompts']}")
        if other:
            agree += "; diverged elsewhere: " + ", ".join(other)
        yield (head + f" yes ({record['start_s']} s) | {agree} | "
               f"{record['spec_verify_ct']} / {record['completion_tokens']} | "
               f"{record['accept_length']} | {record['output_digest']} |")


def speed_lines(results: dict):
    speed = results.get("speed")
    if not speed or "error" in speed:
        return
    arms = list(speed["arms"])
    yield (f"| measurement (SGLang {results['sglang']}, {results['date']}, commit {results['commit']}, "
           f"{speed['rounds']} rounds) | ") + " | ".join(
        f"batch {key[len('batch'):]} ({speed[key]['new_tokens']} new tokens each)"
        for key in speed if key.startswith("batch")) + " |"
    shapes = [speed[key] for key in speed if key.startswith("batch")]
    yield "|---|" + "---|" * len(shapes)
    for arm in arms:
        yield f"| {arm}, output tok/s (median) | " + " | ".join(
            str(s["tok_s_median"][arm]) for s in shapes) + " |"
    for arm in arms:
        if arm == "builtin":
            continue
        yield f"| **{arm} / builtin**, median of per-round ratios | " + " | ".join(
            f"**{s[f'{arm}_vs_builtin']['ratio_median']}**" for s in shapes) + " |"
        yield f"| {arm} / builtin, per round | " + " | ".join(
            ", ".join(f"{r:.3f}" for r in s[f"{arm}_vs_builtin"]["ratios"]) for s in shapes) + " |"
    yield "| output digests (every round, per arm) | " + " | ".join(
        "; ".join(f"{arm} {','.join(d)}" for arm, d in s["output_digests"].items()) for s in shapes) + " |"


def main() -> None:
    loaded = []
    for path in sys.argv[1:]:
        with open(path) as handle:
            loaded.append(json.load(handle))
    print("| SGLang | layers | aux | fc_norm | dialect | topk | steps/draft tokens | tree kernels | activation | "
          "starts | greedy vs non-speculative (8 prompts x 48 tokens) | verify steps / tokens | "
          "accept length | output digest |")
    print("|" + "---|" * 14)
    for results in loaded:
        for line in row_lines(results):
            print(line)
    for results in loaded:
        lines = list(speed_lines(results))
        if lines:
            print()
            print("\n".join(lines))
    print()
    for results in loaded:
        logs = dict.fromkeys(line for record in [*results["rows"], results.get("speed") or {}]
                             for line in record.get("plugin_log", []))
        print(f"Plugin log lines, SGLang {results['sglang']} ({results['device']}, {results['date']}, "
              f"commit {results['commit']}):")
        print()
        for line in logs:
            print(f"    {line}")
        print()


if __name__ == "__main__":
    main()
