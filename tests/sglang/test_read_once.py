"""A drafter is read from disk once per process, whoever in SGLang asks for it: the config loads
of the target runner and the draft worker, the capture ids, the model class and its weights."""

import json
import os
import time
from types import SimpleNamespace

from sglang_eagle_ext.drafter import reader
from tests.kit import fixtures


def test_one_read_per_drafter_per_process(tmp_path, monkeypatch, sglang_dist, no_grad):
    from sglang.srt.configs import model_config
    from transformers import LlamaConfig

    from sglang_eagle_ext.sglang.compat import config_loading
    from sglang_eagle_ext.sglang.model import LlamaForCausalLMEagle3

    reads = []
    read = reader._read
    monkeypatch.setattr(reader, "_read", lambda directory: reads.append(directory) or read(directory))
    config_loading.PATCH.apply(model_config)
    directory = fixtures.build("F7-speculators-2-layers", str(tmp_path / "drafter"), seed=7)

    # SGLang's scheduler builds the draft's model config more than once (target runner, draft worker)
    configs = [model_config.ModelConfig(model_path=directory, is_draft_model=True) for _ in range(3)]
    runner = SimpleNamespace(server_args=SimpleNamespace(speculative_draft_model_path=directory),
                             model_config=SimpleNamespace(hf_config=LlamaConfig(**fixtures.target_config())))
    assert config_loading.normalised_capture_ids(runner) == (True, [1, 5, 8])  # default taps, N = 12
    model = LlamaForCausalLMEagle3(configs[-1].hf_config)
    model.load_weights(iter(()))
    assert reads == [os.path.abspath(directory)]

    # a changed file is read again, once
    config_file = os.path.join(directory, "config.json")
    with open(config_file) as handle:
        text = handle.read()
    time.sleep(0.01)
    with open(config_file, "w") as handle:
        handle.write(json.dumps(json.loads(text), indent=1))
    for _ in range(2):
        model_config.ModelConfig(model_path=directory, is_draft_model=True)
    assert reads == [os.path.abspath(directory)] * 2
