"""SGLang's ``TreeMaskMode`` values: how a verify tree's attention mask is laid out.

* ``FULL_MASK``: flat bool; request b's block starts at ``n*n*b + n*sum(seq_len[:b])`` and is
  ``[n rows, seq_len_b + n cols]`` row-major; the prefix columns belong to the caller (pre-filled
  True), column ``seq_len_b`` is the root, column ``seq_len_b + j`` is draft token j.
* ``QLEN_ONLY``: flat bool ``[bs*n*n]``; block b at ``n*n*b`` is ``[n, n]``; the prefix is implicit.
* ``QLEN_ONLY_BITPACKING``: row ``(b, t)`` is ``B`` bytes at byte ``(b*n + t)*B``
  (``B`` = 1, 2, 4 for n <= 8, 16, 32); bit j (little-endian) is column j.
"""

FULL_MASK = 0
QLEN_ONLY = 1
QLEN_ONLY_BITPACKING = 2


def bitpacked_bytes_per_row(draft_token_num: int) -> int:
    """Bytes per bit-packed mask row, as SGLang sizes them."""
    if draft_token_num > 32:
        raise ValueError(f"QLEN_ONLY_BITPACKING holds at most 32 draft tokens, got {draft_token_num}")
    return 1 if draft_token_num <= 8 else 2 if draft_token_num <= 16 else 4
