"""Hub drafters: inspect, serve and eval take a hub id, fetch it through huggingface_hub and check
it exactly like a local directory. Offline (HF_HUB_OFFLINE=1) against a local cache built here."""

import json
import os
import shutil
import subprocess
import sys

from tests.kit import fixtures

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(root, repo_id: str, source: str) -> str:
    """A Hugging Face cache holding ``source`` as the snapshot of ``repo_id``'s main branch."""
    repo = os.path.join(root, "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as handle:
        handle.write(COMMIT)
    shutil.copytree(source, os.path.join(repo, "snapshots", COMMIT))
    return os.path.join(repo, "snapshots", COMMIT)


def run_cli(env, *argv):
    return subprocess.run([sys.executable, "-c", "import sys; from sglang_eagle_ext.cli import main; "
                           "sys.exit(main())", *argv], capture_output=True, text=True, env=env, timeout=600)


def cli(cache, *argv):
    """The CLI offline, against the hub cache ``cache``."""
    return run_cli(dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1"), *argv)


def test_inspect_and_serve_a_hub_drafter_offline(tmp_path):
    cache = tmp_path / "hub"
    snapshot = hub_cache(cache, "org/tiny-eagle3", fixtures.build("F8-speculators-4-aux", str(tmp_path / "d")))
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(fixtures.target_config()))

    inspected = cli(cache, "inspect", "--no-stock-check", "org/tiny-eagle3", "--target", str(target), "--json")
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    assert report["status"] == "ok" and report["description"]["num_aux_hidden_states"] == 4
    assert report["capture"]["hidden_state_indices"] == [2, 5, 9, 11]

    served = cli(cache, "serve", "--target", str(target), "--draft", "org/tiny-eagle3", "--print-only")
    assert served.returncode == 0, served.stderr
    assert f"--speculative-draft-model-path {snapshot}" in served.stdout  # the plugin reads it as local
    assert "target capture: [1, 4, 8, 10]" in served.stdout


def test_inspect_takes_the_target_as_a_hub_id(tmp_path):
    """``inspect --target org/name`` reads the target's config from the hub cache, as serve does."""
    cache = tmp_path / "hub"
    drafter = fixtures.build("F1-specforge", str(tmp_path / "d"), seed=2)  # no ids: the default taps
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(fixtures.target_config(layers=16)))
    hub_cache(cache, "org/tiny-target", str(target))

    inspected = cli(cache, "inspect", "--no-stock-check", drafter, "--target", "org/tiny-target", "--json")
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    assert report["target"]["num_layers"] == 16 and report["target"]["source"].startswith(str(cache))
    assert report["capture"]["hidden_state_indices"] == [2, 8, 13]  # [2, N//2, N-3] of a 16-layer target

    missing = cli(cache, "inspect", "--no-stock-check", drafter, "--target", "org/not-cached")
    assert missing.returncode == 0 and "Traceback" not in missing.stderr
    assert "target org/not-cached: config.json not fetched" in missing.stderr


def test_a_hub_drafter_is_checked_like_a_local_one(tmp_path):
    cache = tmp_path / "hub"
    source = fixtures.build("F3-modelopt", str(tmp_path / "d"))
    config = json.load(open(os.path.join(source, "config.json")))
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 5, 5]
    json.dump(config, open(os.path.join(source, "config.json"), "w"))
    hub_cache(cache, "org/broken-eagle3", source)
    result = cli(cache, "inspect", "--no-stock-check", "org/broken-eagle3")
    assert result.returncode == 1 and "duplicate aux layer ids" in result.stdout


def test_an_uncached_hub_id_offline_says_so(tmp_path):
    result = cli(tmp_path / "empty-cache", "inspect", "org/not-downloaded")
    assert result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
    assert "not in the local Hugging Face cache and HF_HUB_OFFLINE is set" in result.stdout


def test_eval_a_hub_drafter_offline(tmp_path, shared_target, shared_drafter):
    cache = tmp_path / "hub"
    hub_cache(cache, "org/demo-drafter", shared_drafter)
    result = cli(cache, "eval", "--target", shared_target, "--draft", "org/demo-drafter", "--num-prompts", "1",
                 "--max-new-tokens", "6", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert rows["chain greedy"]["accept_length"] > 1.0


def _online(hub, cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="0", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_XET="1", HF_TOKEN="")
    return env


def _inspect(env, *argv):
    return run_cli(env, "inspect", *argv, "--json")


def test_inspect_checks_a_hub_drafter_from_headers_without_downloading_its_weights(tmp_path):
    from safetensors import safe_open

    from tests.cli.fake_hub import FakeHub

    source = fixtures.build("F8-speculators-4-aux", str(tmp_path / "d"))
    weights = os.path.join(source, "model.safetensors")
    for other in ("training_args.bin", "optimizer.pt"):  # pickles of a training run, beside the weights
        with open(os.path.join(source, other), "wb") as handle:
            handle.write(os.urandom(4096))
    local = _inspect(dict(os.environ), source)
    assert local.returncode == 0, local.stderr
    with FakeHub("org/tiny-eagle3", source, COMMIT) as hub:
        result = _inspect(_online(hub, tmp_path / "cache"), "org/tiny-eagle3")
        sent = dict(hub.sent)
    assert result.returncode == 0, result.stderr + result.stdout
    report, expected = json.loads(result.stdout), json.loads(local.stdout)
    ignore = ("path", "files")
    assert ({k: v for k, v in report["description"].items() if k not in ignore}
            == {k: v for k, v in expected["description"].items() if k not in ignore})
    assert report["capture"] == expected["capture"]
    assert [os.path.basename(p) for p in report["read_by_range"]] == ["model.safetensors"]
    # What came over the wire of the weights: the header, then the vocabulary map's bytes (d2t, t2d).
    header = 8 + int.from_bytes(open(weights, "rb").read(8), "little")
    with safe_open(weights, framework="pt") as handle:
        vocab_map = sum(handle.get_tensor(n).numel() * handle.get_tensor(n).element_size() for n in ("d2t", "t2d"))
    assert sent["model.safetensors"] == header + vocab_map < os.path.getsize(weights) / 4
    assert sent["config.json"] == os.path.getsize(os.path.join(source, "config.json"))
    assert "training_args.bin" not in sent and "optimizer.pt" not in sent  # the reader never opens them
    assert not os.path.exists(os.path.join(tmp_path, "cache", "models--org--tiny-eagle3", "snapshots", COMMIT,
                                           "model.safetensors"))
    # the cache now has the config only
    offline = cli(tmp_path / "cache", "inspect", "--no-stock-check", "org/tiny-eagle3")
    assert offline.returncode == 1 and "Traceback" not in offline.stderr
    assert "its config is in the local Hugging Face cache but its weights are not and HF_HUB_OFFLINE is set" \
        in offline.stdout


def test_a_hub_drafter_read_by_range_is_checked_like_a_local_one(tmp_path):
    from tests.cli.fake_hub import FakeHub

    source = fixtures.build("F8-speculators-4-aux", str(tmp_path / "d"))
    weights = os.path.join(source, "model.safetensors")
    with open(weights, "r+b") as handle:  # truncate the data: the header now claims more than the file holds
        handle.truncate(os.path.getsize(weights) - 64)
    with FakeHub("org/cut-eagle3", source, COMMIT) as hub:
        result = _inspect(_online(hub, tmp_path / "cache"), "org/cut-eagle3")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    problems = json.loads(result.stdout)["problems"]
    assert problems[0]["field"] == "<safetensors header>" and "truncated" in problems[0]["message"]
