"""Render results.json files of ``e2e_sglang.py`` as the Markdown table of
``benchmarks/results/sglang_e2e.md``:  python benchmarks/gpu/e2e_table.py RESULTS.json..."""

import json
import sys

NEAR_TIE = 1.0  # nats, as in e2e_sglang.py


def rows(results: dict):
    for record in results["rows"]:
        row = record["row"]
        head = (f"| {results['sglang']} | {row['layers']} | {row['num_aux']} | "
                f"{'on' if row['fc_norm'] else 'off'} | {row['dialect']} | {row['topk']} | "
                f"{row['steps']}/{row['draft_tokens']} |")
        if "error" in record:
            yield head + f" no ({record['error']}) | | | |"
            continue
        # margins of at most two bf16 steps (1.0 nat here) are near-ties; runs made with an older
        # threshold listed those above 0.5 separately, so they are re-read here
        ties = record["near_tie"] + sum(m["margin"] <= NEAR_TIE for m in record["mismatch"])
        other = [f"p{m['prompt']}@{m['position']} ({m['margin']})"
                 for m in record["mismatch"] if m["margin"] > NEAR_TIE]
        agree = (f"{record['exact']} identical + {ties} identical up to a near-tie "
                 f"= {record['exact'] + ties}/{record['prompts']}")
        if other:
            agree += "; diverged elsewhere: " + ", ".join(other)
        yield (head + f" yes ({record['start_s']} s) | {agree} | "
               f"{record['spec_verify_ct']} / {record['completion_tokens']} | "
               f"{record['accept_length']} | {record.get('output_digest', '')} |")


def main() -> None:
    print("| SGLang | layers | aux | fc_norm | dialect | topk | steps/draft tokens | starts | "
          "greedy vs non-speculative (8 prompts x 48 tokens) | verify steps / tokens | "
          "accept length | output digest |")
    print("|" + "---|" * 12)
    for path in sys.argv[1:]:
        with open(path) as handle:
            for line in rows(json.load(handle)):
                print(line)


if __name__ == "__main__":
    main()
