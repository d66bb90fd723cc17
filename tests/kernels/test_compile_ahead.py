"""``compile_for_vocabulary`` compiles what a server's sampled verify then runs: each of its three launches has, by
Triton's own binder for a Hopper target, the specialisation of a serving call's launch of the same kernel, at
another batch size, drafting shape and filters, for the same vocabulary and logits dtype; a vocabulary of more
chunks (Qwen's) or another dtype would not share it. On a CPU: the launches are recorded, not run (the binder
needs no GPU)."""

import pytest
import torch

from sglang_eagle_ext.kernels.launch import Specialised
from sglang_eagle_ext.kernels.sampling import from_logits, plan
from tests.kernels.test_specialisation import binder_of


@pytest.fixture
def launches(monkeypatch):
    """Every launch of the fused sampler's kernels: (kernel, runtime arguments, compile-time keywords)."""
    recorded = []
    monkeypatch.setattr(Specialised, "_triton_launch", lambda self, grid, *args: recorded.append(
        (self.kernel, args, self.kwargs)))
    monkeypatch.setattr(Specialised, "_first_launch", Specialised._triton_launch)
    plan.plan_launches.cache_clear()  # plans made before hold their launches bound
    yield recorded
    plan.plan_launches.cache_clear()


def specialisations(recorded) -> dict:
    """Per kernel, Triton's specialisation of its recorded call."""
    result = {}
    for kernel, args, kwargs in recorded:
        binder, function = binder_of(kernel)
        names = [param.name for param in function.params]
        arguments = {**dict(zip(names, args)), **{key: value for key, value in kwargs.items() if key in names}}
        result[function.fn.__name__] = str(binder(**arguments)[1])
    return result


def serving_call(vocab: int, dtype: torch.dtype) -> None:
    """A sampled verify as SGLang makes one: 3 requests, a tree of 8 rows, mixed filters and temperatures."""
    generator = torch.Generator().manual_seed(5)
    bs, n = 3, 8
    candidates = torch.randint(0, vocab, (bs, n), generator=generator)
    next_token = torch.tensor([[1, 3, 4, -1, 6, -1, -1, -1]] * bs)
    next_sibling = torch.tensor([[-1, 2, -1, -1, 5, -1, 7, -1]] * bs)
    from_logits.tree_sampling_from_logits(
        torch.zeros(bs * n, dtype=torch.int32), torch.full((bs, 5), -1, dtype=torch.int32),
        torch.zeros(bs, dtype=torch.int32), candidates, torch.arange(bs * n).view(bs, n), next_token, next_sibling,
        torch.rand((bs, n), generator=generator), torch.rand(bs, generator=generator),
        torch.randn((bs * n, vocab), generator=generator).to(dtype), torch.tensor([[0.7], [1.0], [1.3]]),
        torch.tensor([50, 1 << 30, 7], dtype=torch.int32), torch.tensor([0.9, 1.0, 0.5]), strict_acceptance=True)


def test_compiling_ahead_gives_each_kernel_the_specialisation_serving_asks_for(launches):
    from_logits.compile_for_vocabulary(49152, torch.device("cpu"), torch.float32, strict_acceptance=True)
    ahead = specialisations(launches)
    assert set(ahead) == {"_chunk_pass_kernel", "_row_filter_kernel", "_walk_kernel"} and len(launches) == 3
    launches.clear()
    serving_call(49152, torch.float32)
    assert specialisations(launches) == ahead
    launches.clear()
    serving_call(151936, torch.float32)  # Qwen's vocabulary: 3 chunks of 65,536, not what was compiled
    assert specialisations(launches) != ahead
    launches.clear()
    serving_call(49152, torch.bfloat16)  # the dtype of the logits is part of it
    assert specialisations(launches) != ahead


def test_compiling_ahead_draws_no_random_numbers():
    """A sampled server's draws follow the generators' streams: compiling ahead must not move them."""
    torch.manual_seed(11)
    before = torch.get_rng_state()
    from_logits.compile_for_vocabulary(64, torch.device("cpu"), torch.float32, strict_acceptance=False)
    assert torch.equal(torch.get_rng_state(), before)
