"""Patch ``prompt-token-range`` (every release): a prompt given as token ids is not checked
against the vocabulary, so one id outside ``[0, vocab_size)`` (``/generate``'s ``input_ids``, or
``/v1/completions`` with a list of ints as the prompt) reaches the target's embedding in the
scheduler, which raises ``IndexError`` there and takes the server down (on a GPU, a device-side
assert). The tokenizer manager's per-request validation now rejects it as a bad request (HTTP
400) first.

Only ids the client gave are checked: after multimodal processing SGLang's own placeholder ids
may lie outside the vocabulary by design, so requests carrying image, video or audio data are
left to SGLang.
"""

from __future__ import annotations

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import Patch, Target, required_class, wrap_method

_MULTIMODAL_FIELDS = ("image_data", "video_data", "audio_data")
# the tokenizer manager's per-request check, called with the request and its token ids
VALIDATE_ONE_REQUEST = Target(releases.EVERY_RELEASE.releases, "sglang.srt.managers.tokenizer_manager",
                              "TokenizerManager", "_validate_one_request", params=("self", "obj", "input_ids"))


def out_of_vocabulary_message(input_ids, vocab_size: int) -> str | None:
    """Why a client's prompt token ids cannot be served, or None when all are in the vocabulary."""
    for position, token_id in enumerate(input_ids):
        if not 0 <= token_id < vocab_size:
            return (f"input_ids[{position}] = {token_id} is not a token of this model: token ids must lie "
                    f"in [0, {vocab_size})")
    return None


def patch_prompt_token_range(tokenizer_manager_cls) -> bool:
    """Before SGLang's own checks, reject a request whose client-given ids leave the vocabulary."""

    def make(original):
        def _validate_one_request(self, obj, input_ids, *args, **kwargs):
            given = getattr(obj, "input_ids", None)
            if given is not None and not any(getattr(obj, name, None) for name in _MULTIMODAL_FIELDS):
                problem = out_of_vocabulary_message(input_ids, self.model_config.vocab_size)
                if problem is not None:
                    raise ValueError(problem)  # SGLang answers a ValueError here with HTTP 400
            return original(self, obj, input_ids, *args, **kwargs)
        return _validate_one_request

    return wrap_method(tokenizer_manager_cls, VALIDATE_ONE_REQUEST.member, make)


def _apply(module) -> None:
    patch_prompt_token_range(required_class(module, VALIDATE_ONE_REQUEST.name, VALIDATE_ONE_REQUEST.member))


PATCH = Patch("prompt-token-range", VALIDATE_ONE_REQUEST.releases, VALIDATE_ONE_REQUEST.module, _apply,
              (VALIDATE_ONE_REQUEST,))
