"""SGLang's own ``eagle_sample`` (the installed release) with the fused verify wired in, run on the
CPU (the kernels in Triton's interpreter) against the float64 reference; prints one JSON object
for ``test_fused_verify``. Run as ``python -m tests.sglang.fused_verify_case SEED``."""

import json
import sys
from types import SimpleNamespace

import torch

from sglang_eagle_ext.sglang.compat import fused_verify, installed_release
from sglang_eagle_ext.sglang.compat.releases import STRICT_ACCEPTANCE
from tests.kit import kernel_reference as reference
from tests.kit import verify_batch
from tests.kernels.tree_fixtures import built_tree, favour_children


class RecordingGroup:
    """A two-rank TP group that records what is broadcast."""

    world_size = 2

    def __init__(self):
        self.broadcasts = []

    def broadcast(self, tensor, src):
        self.broadcasts.append((tensor.data_ptr(), src))


class GrammarMask:
    """Forbids ``tokens`` in the rows of request 0, in place, as SGLang's grammar mask does."""

    def __init__(self, n, tokens):
        self.n, self.tokens = n, tokens

    def apply(self, logits):
        logits[: self.n, self.tokens] = float("-inf")


def main(seed: int) -> None:
    import sglang.srt.runtime_context as runtime_context
    import sglang.srt.speculative.eagle_utils as eagle_utils

    settings = SimpleNamespace(speculative_use_rejection_sampling=False, speculative_accept_threshold_single=1.0,
                               speculative_accept_threshold_acc=1.0)
    group = RecordingGroup()
    runtime_context.get_spec = eagle_utils.get_spec = lambda: settings  # no server published here
    runtime_context.get_parallel = lambda: SimpleNamespace(tp_group=group, attn_tp_group=group)
    release = installed_release()
    sites = fused_verify.apply(release, devices=("cuda", "cpu"))

    bs, topk, steps, n, vocab = 3, 2, 3, 6, 384
    candidates, retrive_index, next_token, next_sibling, gen = built_tree(seed, bs, topk, steps, n, vocab=vocab)
    logits = torch.randn(bs * n, vocab, generator=gen) * 2.5
    logits = favour_children(logits, candidates, next_token, gen, boost=14.0)
    raw = logits.clone()
    verify_input = verify_batch.verify_input(candidates.reshape(-1), n, steps, topk, retrive_index, next_token,
                                             next_sibling)
    bias = torch.zeros(bs, vocab)
    bias[2, 7] = 6.0  # request 2 favours token 7 through logit_bias
    # a mixed batch: request 1 is greedy (SGLang rewrites it to T 1, top-k 1)
    info = verify_batch.sampling_info(torch.tensor([[0.7], [1.0], [0.9]]),
                                      torch.tensor([50, 1, verify_batch.TOP_K_ALL], dtype=torch.int32),
                                      torch.tensor([0.9, 1.0, 0.8]), logit_bias=bias)
    batch = verify_batch.batch(info, torch.tensor([11, 17, 23]), candidates.reshape(-1))
    grammar = GrammarMask(n, torch.arange(0, vocab, 3))

    adjusted = logits.clone() + bias.repeat_interleave(n, dim=0)
    grammar.apply(adjusted)
    torch.manual_seed(seed)
    coins = torch.rand_like(candidates, dtype=torch.float32)  # the release's draw order
    final_coins = torch.rand((bs,), dtype=torch.float32)
    expected = (torch.zeros(bs * n, dtype=torch.int32), torch.full((bs, steps + 1), -1, dtype=torch.int32),
                torch.empty(bs, dtype=torch.int32))
    reference.fused_tree_sampling_reference(*expected, candidates, retrive_index, next_token, next_sibling, coins,
                                            final_coins, adjusted, info.temperatures.reshape(-1), info.top_ks,
                                            info.top_ps, 1.0, 1.0, strict_acceptance=STRICT_ACCEPTANCE.holds(release))

    logits_output = SimpleNamespace(next_token_logits=logits)
    torch.manual_seed(seed)
    predict, accept_lens, accept_index = eagle_utils.eagle_sample(verify_input, batch, logits_output, grammar)
    restored = info.is_all_greedy is False
    fused = dict(predict=predict.tolist(), accept_lens=accept_lens.tolist(), accept_index=accept_index.tolist())
    want = dict(predict=expected[0].tolist(), accept_lens=(expected[2] + 1).tolist(),
                accept_index=expected[1].tolist())

    info.is_all_greedy = True  # an all-greedy batch: stock greedy verify
    greedy = [x.tolist() for x in eagle_utils.eagle_sample(verify_input, batch,
                                                            SimpleNamespace(next_token_logits=raw), grammar)]
    greedy_want = (torch.zeros(bs * n, dtype=torch.int32), torch.full((bs, steps + 1), -1, dtype=torch.int32),
                   torch.empty(bs, dtype=torch.int32))
    reference.verify_tree_greedy_reference(*greedy_want, candidates, retrive_index, next_token, next_sibling,
                                           adjusted.argmax(-1).reshape(bs, n))
    print(json.dumps(dict(
        sites=sites, fused=fused, want=want, logits_untouched=bool(torch.equal(logits, adjusted)),
        is_all_greedy_restored=restored, broadcasts=[[ptr == t.data_ptr(), src] for (ptr, src), t in
                                                 zip(group.broadcasts, (predict, accept_index))],
        broadcast_count=len(group.broadcasts),
        greedy=greedy, greedy_want=[greedy_want[0].tolist(), (greedy_want[2] + 1).tolist(), greedy_want[1].tolist()],
        accepted=sum(fused["accept_lens"]))))


if __name__ == "__main__":
    main(int(sys.argv[1]))
