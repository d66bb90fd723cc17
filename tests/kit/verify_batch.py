"""The inputs of SGLang's verify branch for a bare process (tests and GPU benchmarks): the verify
input, sampling info and batch that ``eagle_sample`` (and the v2 worker's ``sample``) read, with
no scheduler behind them."""

from __future__ import annotations

from types import SimpleNamespace

import torch

TOP_K_ALL = 1 << 30  # SGLang's "no top-k"


def verify_input(tokens: torch.Tensor, num_draft_tokens: int, steps: int, topk: int, retrieve_index: torch.Tensor,
                 retrieve_next_token: torch.Tensor, retrieve_next_sibling: torch.Tensor):
    """An ``EagleVerifyInput`` holding one verify tree (``tokens``: ``[bs * n]``)."""
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    made = EagleVerifyInput.__new__(EagleVerifyInput)  # its constructor wants a live draft step
    for name, value in dict(draft_token=tokens, draft_token_num=num_draft_tokens, spec_steps=steps, topk=topk,
                            retrieve_index=retrieve_index, retrieve_next_token=retrieve_next_token,
                            retrieve_next_sibling=retrieve_next_sibling).items():
        setattr(made, name, value)
    return made


def sampling_info(temperatures: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor,
                  logit_bias: torch.Tensor | None = None) -> SimpleNamespace:
    """Per-request sampling as SGLang holds it (``temperatures`` ``[bs, 1]``; greedy rows as T 1,
    top-k 1), no penalties, no seed."""
    return SimpleNamespace(acc_additive_penalties=None, acc_scaling_penalties=None, logit_bias=logit_bias,
                           has_watermark_candidates=False, is_all_greedy=False, sampling_seed=None,
                           temperatures=temperatures, top_ks=top_ks, top_ps=top_ps,
                           need_top_k_sampling=bool((top_ks != TOP_K_ALL).any()),
                           need_top_p_sampling=bool((top_ps != 1.0).any()), need_min_p_sampling=False)


def batch(info: SimpleNamespace, seq_lens: torch.Tensor, input_ids: torch.Tensor) -> SimpleNamespace:
    """A decode batch carrying ``info``."""
    return SimpleNamespace(device=input_ids.device, forward_mode=SimpleNamespace(is_idle=lambda: False),
                           input_ids=input_ids, seq_lens=seq_lens, sampling_info=info, return_logprob=False)
