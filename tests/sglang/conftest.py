"""Fixtures for the SGLang integration tests (stock SGLang 0.5.23 on CPU, see tests/conftest.py)."""

import os

import pytest
import torch



@pytest.fixture(scope="session")
def sglang_dist():
    """SGLang's single-process (gloo, world size 1) distributed state, once per session."""
    from sglang.test.layer_ut_utils import init_single_process_dist

    init_single_process_dist(master_port=29000 + os.getpid() % 1000)
    yield


@pytest.fixture
def no_grad():
    """SGLang's layers write KV caches in place, which autograd forbids on leaf tensors."""
    with torch.no_grad():
        yield
