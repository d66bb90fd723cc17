"""The fused verify inside a running SGLang server (GPU): one EAGLE3 engine with stock verify and
one with ``SGLANG_EAGLE_EXT_FUSED_VERIFY=1``, the same tiny target, drafter and ``random_seed``;
the same requests sent one at a time (so that both engines consume the same random stream), at
temperature 0 and with sampling (T 0.8 with top-p 0.9, and T 0.8 with top-k 50). With identical
coins the sampled outputs must be identical, as must the greedy ones.

The target is the e2e rows' tiny Llama with a softer lm_head (std 1.0), so that sampling has
choices to make; the drafter is row 1's (2 layers, 4 aux, tree 4/3/8).

With ``FUSED_VERIFY_TP=2`` both engines run with tensor parallelism over two GPUs: the fused
sampler draws on rank 0 and broadcasts, as stock's sampled arm does, so identical outputs also mean
the ranks agreed (a rank walking its own draws would desynchronise its KV cache).

usage (repository root, SGLang and this package installed): python3 benchmarks/gpu/fused_verify_server.py OUTDIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import e2e_sglang
from results_file import save_json

SAMPLED = {"greedy": {"temperature": 0},
           "T0.8 top-p0.9": {"temperature": 0.8, "top_p": 0.9},
           "T0.8 top-k50": {"temperature": 0.8, "top_k": 50}}
ARMS = {"stock": "0", "fused": "1"}
SEED = 1234


ROW = e2e_sglang.ROWS[int(os.environ.get("FUSED_VERIFY_ROW", "1"))]
TP_SIZE = int(os.environ.get("FUSED_VERIFY_TP", "1"))


def serve(out: str, arm: str) -> dict:
    row = ROW
    target = os.path.join(out, "models", "target")
    drafter = os.path.join(out, "models", "drafter")
    engine = e2e_sglang.start_engine(target, drafter, row, random_seed=SEED, tp_size=TP_SIZE)
    record = {}
    for label, params in SAMPLED.items():
        outputs = []
        for prompt in e2e_sglang.PROMPTS:  # one at a time: the same batches, the same random stream
            outputs += engine.generate(prompt=[prompt], sampling_params={
                **params, "max_new_tokens": e2e_sglang.MAX_NEW_TOKENS, "ignore_eos": True})
        record[label] = {"output_ids": [o["output_ids"] for o in outputs], **e2e_sglang.acceptance(outputs)}
    engine.shutdown()
    return record


def main(out: str) -> int:
    import torch

    from sglang_eagle_ext.demo.tiny_target import TinyTargetSettings, build_tiny_target
    from tests.kit.matched_drafter import build_matched_drafter

    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    target = os.path.join(out, "models", "target")
    build_tiny_target(target, TinyTargetSettings(num_layers=8, hidden_size=256, num_attention_heads=4,
                                                 num_key_value_heads=2, intermediate_size=512, lm_head_std=1.0))
    row = ROW
    build_matched_drafter(os.path.join(out, "models", "drafter"), target, layers=row.layers, num_aux=row.num_aux,
                          fc_norm=row.fc_norm, dialect=row.dialect, seed=row.seed)
    import sglang

    results = {"sglang": sglang.__version__, "device": torch.cuda.get_device_name(0),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "commit": os.environ.get("E2E_COMMIT", "unknown"), "row": row.__dict__, "tp_size": TP_SIZE}
    for arm, switch in ARMS.items():
        log = os.path.join(out, "logs", f"{arm}.log")
        with open(log, "w") as handle:
            code = subprocess.run([sys.executable, __file__, out, "--arm", arm], stdout=handle,
                                  stderr=subprocess.STDOUT, timeout=300,
                                  env={**os.environ, "SGLANG_EAGLE_EXT_FUSED_VERIFY": switch}).returncode
        path = os.path.join(out, f"{arm}.json")
        results[arm] = json.load(open(path)) if code == 0 and os.path.exists(path) else {"error": f"exit {code}"}
        results[arm]["plugin_log"] = [line.strip() for line in open(log, errors="replace")
                                      if "sglang-eagle-ext:" in line and "verif" in line]
    for label in SAMPLED:
        stock, fused = (results[arm].get(label, {}).get("output_ids") for arm in ARMS)
        results.setdefault("identical", {})[label] = (
            None if stock is None or fused is None else sum(a == b for a, b in zip(stock, fused)))
    save_json(os.path.join(out, "results.json"), results)
    print(json.dumps({"identical": results["identical"],
                      "accept": {arm: {k: v.get("accept_length")
                                       for k, v in results[arm].items() if isinstance(v, dict)}
                                 for arm in ARMS},
                      "plugin_log": {arm: results[arm]["plugin_log"][:3] for arm in ARMS}}, indent=1))
    return 0


if __name__ == "__main__":
    if "--arm" in sys.argv:
        directory, arm = sys.argv[1], sys.argv[sys.argv.index("--arm") + 1]
        record = serve(directory, arm)
        save_json(os.path.join(directory, f"{arm}.json"), record)
        sys.exit(0)
    sys.exit(main(sys.argv[1]))
