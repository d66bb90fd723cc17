"""The soak's request kinds (``benchmarks/soak.py``): each sends one request as a user's ``openai``
client (or, for malformed bodies, plain HTTP) and judges the answer by itself, returning an
:class:`Outcome`.

Kinds: ``greedy`` (a fixed prompt set whose sequential outputs are the reference), ``sampled``
(T 0.7 with top-p, top-k and min-p), ``stop`` (stop strings), ``json`` (JSON-schema-constrained
output), ``logprobs``, ``aborted_stream`` (a stream closed after its first chunks) and
``malformed`` (bodies every server must refuse with a 4xx).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

import httpx
import jsonschema
import openai

PROMPTS = ["The old sailor counts", "A curious child waits for", "Under the bridge the river",
           "Every morning the baker", "She opened the letter and", "The small town was quiet until",
           "In the garden behind the house", "When the bell rang again"]
STOP_STRINGS = [" river", "."]
SAMPLING = [  # (OpenAI parameters, SGLang's extra ones)
    ({"temperature": 0.7, "top_p": 0.9}, {}),
    ({"temperature": 0.7}, {"top_k": 50}),
    ({"temperature": 0.7, "top_p": 0.9}, {"top_k": 50, "min_p": 0.05}),
]
# A finite grammar: with SGLang's --constrained-json-disable-any-whitespace every conforming output
# ends within JSON_MAX_TOKENS tokens, so a truncated one is a failure, never bad luck.
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["color", "ok", "size"],
          "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
                         "size": {"type": "integer", "minimum": 0, "maximum": 9}}}
JSON_MAX_TOKENS = 64
STREAM_CHUNKS_READ = 2
LOGPROBS = 3
OUT_OF_VOCAB_ID = 10_000_000  # above any vocabulary


@dataclass
class Outcome:
    kind: str
    error: str | None = None  # None: served as expected; else the error's kind
    tokens: int = 0  # completion tokens
    verify_steps: int = 0  # SGLang's spec_verify_ct, when it reports one
    detail: str = ""
    greedy_case: int | None = None
    text: str = ""
    seconds: float = 0.0  # from sending to the answer (or the error)


def log_uniform_tokens(rng: random.Random, cap: int) -> int:
    """max_tokens from 1 to ``cap``, as many short as long requests."""
    return min(cap, max(1, int(math.exp(rng.uniform(0, math.log(cap + 1))))))


def greedy_cases(cap: int, count: int) -> list[tuple[str, int]]:
    """(prompt, max_tokens) for the first ``count`` prompts, max_tokens spread geometrically from 1 to
    ``cap`` (``cap`` alone for one prompt)."""
    if count == 1:
        return [(PROMPTS[0], cap)]
    return [(prompt, max(1, round(cap ** (index / (count - 1))))) for index, prompt in enumerate(PROMPTS[:count])]


def error_kind(error: Exception) -> str:
    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}"
    return type(error).__name__


def spec_fields(completion) -> tuple[int, int]:
    """(completion tokens, verify steps) of a completion; SGLang reports the steps under ``sglext``."""
    details = ((completion.model_extra or {}).get("sglext") or {}).get("spec_tokens_details") or {}
    return completion.usage.completion_tokens, int(details.get("spec_verify_ct") or 0)


def length_problem(choice, tokens: int, max_tokens: int) -> str:
    """Why a finished choice's length is wrong, or ''."""
    if tokens > max_tokens:
        return f"{tokens} tokens for max_tokens {max_tokens}"
    if choice.finish_reason == "length" and tokens != max_tokens:
        return f"finish_reason length after {tokens} of {max_tokens} tokens"
    if choice.finish_reason not in ("stop", "length"):
        return f"finish_reason {choice.finish_reason!r}"
    return ""


def complete(client: openai.OpenAI, model: str, kind: str, prompt: str, max_tokens: int, judge,
             extra_body: dict | None = None, **params) -> Outcome:
    """One completion; ``judge(choice, tokens)`` says what is wrong with the answer, or ''."""
    try:
        completion = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                               extra_body={"return_spec_tokens_details": True, **(extra_body or {})},
                                               **params)
    except Exception as error:  # every failure is a result here: its kind is counted
        return Outcome(kind, error_kind(error), detail=str(error)[:300])
    tokens, steps = spec_fields(completion)
    choice = completion.choices[0]
    problem = length_problem(choice, tokens, max_tokens) or judge(choice, tokens)
    return Outcome(kind, "invalid answer" if problem else None, tokens, steps, problem, text=choice.text)


def no_problem(_choice, _tokens) -> str:
    return ""


def greedy(client, model, rng, cap, cases) -> Outcome:
    index = rng.randrange(len(cases))
    prompt, max_tokens = cases[index]
    outcome = complete(client, model, "greedy", prompt, max_tokens, no_problem, temperature=0)
    outcome.greedy_case = index
    return outcome


def sampled(client, model, rng, cap, _cases) -> Outcome:
    params, extra = SAMPLING[rng.randrange(len(SAMPLING))]
    return complete(client, model, "sampled", rng.choice(PROMPTS), log_uniform_tokens(rng, cap), no_problem,
                    extra, **params)


def stop_judge(choice, _tokens) -> str:
    """A stop string must end the output where it first appears, and never be returned."""
    found = [stop for stop in STOP_STRINGS if stop in choice.text]
    return f"stop string {found[0]!r} in the output" if found else ""


def stop(client, model, rng, cap, _cases) -> Outcome:
    params, extra = SAMPLING[rng.randrange(len(SAMPLING))]
    return complete(client, model, "stop", rng.choice(PROMPTS), log_uniform_tokens(rng, cap), stop_judge,
                    extra, stop=STOP_STRINGS, **params)


def json_judge(choice, _tokens) -> str:
    if choice.finish_reason != "stop":
        return f"constrained output not finished ({choice.finish_reason}): {choice.text[:80]!r}"
    try:
        jsonschema.validate(json.loads(choice.text), SCHEMA)
    except (ValueError, jsonschema.ValidationError) as error:
        return f"{type(error).__name__}: {str(error)[:120]} in {choice.text[:80]!r}"
    return ""


def constrained(client, model, rng, _cap, _cases) -> Outcome:
    params, extra = SAMPLING[rng.randrange(len(SAMPLING))]
    response_format = {"type": "json_schema", "json_schema": {"name": "soak", "schema": SCHEMA}}
    return complete(client, model, "json", rng.choice(PROMPTS), JSON_MAX_TOKENS, json_judge,
                    {**extra, "response_format": response_format}, **params)


def logprobs_judge(choice, tokens) -> str:
    """One log-probability per token, each finite and <= 0, with at most LOGPROBS alternatives whose
    best is at least the token's own."""
    got = choice.logprobs
    if got is None or len(got.token_logprobs or []) != tokens or len(got.top_logprobs or []) != tokens:
        return f"logprobs for {0 if got is None else len(got.token_logprobs or [])} of {tokens} tokens"
    for position, (value, top) in enumerate(zip(got.token_logprobs, got.top_logprobs)):
        if not (math.isfinite(value) and value <= 1e-6):
            return f"token {position}: log-probability {value}"
        if not 0 < len(top) <= LOGPROBS or value > max(top.values()) + 1e-4:
            return f"token {position}: top log-probabilities {top} for a token of {value}"
    return ""


def with_logprobs(client, model, rng, cap, _cases) -> Outcome:
    params, extra = SAMPLING[rng.randrange(len(SAMPLING))]
    return complete(client, model, "logprobs", rng.choice(PROMPTS), log_uniform_tokens(rng, cap), logprobs_judge,
                    extra, logprobs=LOGPROBS, **params)


def aborted_stream(client, model, rng, cap, _cases) -> Outcome:
    """A stream the client walks away from after its first chunks: the server must free the request."""
    params, extra = SAMPLING[rng.randrange(len(SAMPLING))]
    try:
        stream = client.completions.create(model=model, prompt=rng.choice(PROMPTS), max_tokens=cap, stream=True,
                                           extra_body=extra, **params)
        read = 0
        for _chunk in stream:
            read += 1
            if read == STREAM_CHUNKS_READ:
                break
        stream.close()
    except Exception as error:  # every failure is a result here: its kind is counted
        return Outcome("aborted_stream", error_kind(error), detail=str(error)[:300])
    return Outcome("aborted_stream", None if read else "empty stream", detail=f"{read} chunks read")


def malformed_bodies(model: str, context_length: int) -> dict[str, bytes]:
    """name -> a /v1/completions body the server must refuse with a 4xx."""
    def body(**fields) -> bytes:
        return json.dumps({"model": model, "prompt": PROMPTS[0], "max_tokens": 4, **fields}).encode()

    return {"bad JSON": b'{"model": "' + model.encode() + b'", "prompt": "hi", ',
            "top_p 7": body(top_p=7), "max_tokens -1": body(max_tokens=-1),
            "token id out of vocabulary": body(prompt=[5, OUT_OF_VOCAB_ID]),
            "negative token id": body(prompt=[-3, 5]),
            "oversized prompt": body(prompt=" ".join(["river"] * (context_length + 1)))}


def malformed(http: httpx.Client, rng: random.Random, bodies: dict[str, bytes]) -> Outcome:
    name = rng.choice(sorted(bodies))
    try:
        answer = http.post("/v1/completions", content=bodies[name], headers={"Content-Type": "application/json"})
    except Exception as error:  # every failure is a result here: its kind is counted
        return Outcome("malformed", error_kind(error), detail=f"{name}: {str(error)[:200]}")
    if 400 <= answer.status_code < 500:
        return Outcome("malformed", detail=name)
    return Outcome("malformed", f"HTTP {answer.status_code} to a malformed request",
                   detail=f"{name}: {answer.text[:200]}")


SENDERS = {"greedy": greedy, "sampled": sampled, "stop": stop, "json": constrained, "logprobs": with_logprobs,
           "aborted_stream": aborted_stream}
KINDS = (*SENDERS, "malformed")
# the mix under load: relative frequency of each kind
WEIGHTS = {"greedy": 3, "sampled": 3, "stop": 2, "json": 2, "logprobs": 2, "aborted_stream": 1, "malformed": 1}


def sequential_reference(client: openai.OpenAI, model: str, cases: list[tuple[str, int]]) -> list[dict]:
    """Each greedy case alone on the server: its text, tokens and top-1 / top-2 margins."""
    references = []
    for prompt, max_tokens in cases:
        completion = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                               logprobs=2)
        logprobs = completion.choices[0].logprobs
        margins = []
        for top in logprobs.top_logprobs:
            best = sorted(top.values(), reverse=True)
            # two ids that read as one string share a key: their margin is not known, so not a tie
            margins.append(best[0] - best[1] if len(best) > 1 else None)
        references.append({"prompt": prompt, "max_tokens": max_tokens, "text": completion.choices[0].text,
                           "tokens": list(logprobs.tokens), "margins": margins})
    return references
