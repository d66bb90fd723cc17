"""Patch ``first-stop-string`` (SGLang 0.5.14 and later): when one verify step accepts several
tokens and more than one of the request's stop strings lies in them, SGLang ends the request at the
stop string listed first in ``stop``, not at the one the text reaches first, and its detokenizer
trims the text at that one (``trim_matched_stop``, "TODO: handle the case where multiple stop strs
are hit"). The output then keeps the earlier stop string and the tokens after it: with
``stop=[" river", "."]`` a step accepting ``". The river"`` returns ``". The"``. Decoding one token
at a time never meets this, so it is speculative decoding's bug, and ours to fix.

The request now ends at the first token after which any stop string appears (what decoding one
token at a time gives), and, where several complete at that token, at the one whose text ends
first, then starts first; the detokenizer's trim at that string's first occurrence then removes
every stop string. Releases before 0.5.14 look for stop strings only in the last few tokens of a
step and cannot be fixed here (use 0.5.14 or later with stop strings and speculative decoding).
"""

from __future__ import annotations

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import Patch, Target, require, required_class, wrap_method

_SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"
_RELEASES = releases.STOP_STRINGS_IN_STEP.releases
# the check the scheduler runs after each step; it sets finished_reason and finished_len
CHECK = Target(_RELEASES, _SCHEDULE_BATCH, "Req", "_check_str_based_finish", params=("self", "new_accepted_len"),
               reads=("stop_strs", "FINISH_MATCHED_STR", "finished_len"))
# the text of the step's tokens and the stop strings' window before them
TAIL_STR = Target(_RELEASES, _SCHEDULE_BATCH, "Req", "tail_str", params=("self", "new_accepted_len"))
# the output length (in tokens) at which a stop string found in the step's tokens first appears
LOCATE = Target(_RELEASES, _SCHEDULE_BATCH, "Req", "_locate_str_stop_finished_len",
                params=("self", "new_accepted_len"), keywords=("stop_str",), absent_elsewhere=True)
FINISH_MATCHED_STR = Target(_RELEASES, _SCHEDULE_BATCH, "FINISH_MATCHED_STR")
# the detokenizer cuts the text at the first occurrence of the matched string
TRIM = Target(_RELEASES, "sglang.srt.managers.detokenizer_manager", "DetokenizerManager", "trim_matched_stop",
              params=("self", "output", "finished_reason", "no_stop_trim"), reads=("matched",))


def first_stop_string(tail: str, hits: dict[str, int]) -> str:
    """Of the stop strings found in ``tail`` (``hits``: each with the output length at which it
    appears), the one the output reaches first: fewest tokens, then its text ends first, then
    starts first."""
    def reached(stop: str) -> tuple[int, int, int]:
        start = tail.find(stop)
        return hits[stop], start + len(stop), start
    return min(hits, key=reached)


def patch_first_stop_string(req_cls, finish_matched_str) -> bool:
    """After SGLang's check has ended a request at a stop string found in the step's tokens, end
    it at the stop string reached first instead."""

    def make(original):
        def _check_str_based_finish(self, new_accepted_len: int = 1):
            if not original(self, new_accepted_len):
                return False
            if new_accepted_len < 2 or not isinstance(self.finished_reason, finish_matched_str):
                return True
            matched = self.finished_reason.matched
            tail = self.tail_str(new_accepted_len)
            stops = [stop for stop in self.sampling_params.stop_strs if stop and stop in tail]
            if matched not in stops or len(stops) < 2:  # matched in earlier text, or alone: SGLang's answer stands
                return True
            hits = {stop: self._locate_str_stop_finished_len(new_accepted_len, stop_str=stop) for stop in stops}
            first = first_stop_string(tail, hits)
            if first != matched:
                self.finished_reason = finish_matched_str(matched=first)
                self.finished_len = hits[first]
            return True
        return _check_str_based_finish

    return wrap_method(req_cls, CHECK.member, make)


def _apply(module) -> None:
    req_cls = required_class(module, CHECK.name, CHECK.member)
    for target in (TAIL_STR, LOCATE):
        require(hasattr(req_cls, target.member), target.qualname)
    finish_matched_str = getattr(module, FINISH_MATCHED_STR.name, None)
    require(finish_matched_str is not None, FINISH_MATCHED_STR.path)
    patch_first_stop_string(req_cls, finish_matched_str)


PATCH = Patch("first-stop-string", _RELEASES, _SCHEDULE_BATCH, _apply,
              (CHECK, TAIL_STR, LOCATE, FINISH_MATCHED_STR, TRIM))
