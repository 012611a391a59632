#!/usr/bin/env python3
"""penalty_ref.py - reference logits for the sampler's penalties, computed with PyTorch the way
the libraries that define them do, for tests/test_model_sampler.c.

    repetition  transformers' RepetitionPenaltyLogitsProcessor.__call__ (gather the scores of
                input_ids = prompt + generated, torch.where(score < 0, score * penalty,
                score / penalty), scatter back): an id is penalized once however often it occurs
    frequency,  OpenAI's formula as vLLM implements it: counts = bincount(generated);
    presence    logits -= frequency * counts; logits -= presence * (counts > 0)
    logit_bias  logits.index_add_(ids, biases): an id listed twice gets both biases

applied in that order. The C side computes the same by its own route (a hash of the seen ids),
so the two share only the definitions.

Writes OUT (little-endian):

    uint32 magic 0x4E50474B ("KGPN"), uint32 version 1, int32 n_cases
    per case:
      int32   V, n_prompt, n_gen, n_bias
      float32 presence, frequency, repetition
      int32   prompt[n_prompt], gen[n_gen], bias_id[n_bias]
      float32 bias[n_bias], logits[V], expected[V]

The logits hold ties, zeros, negatives, NaN and +-inf. Usage: penalty_ref.py OUT. Exits 0 when
written, 77 when torch or numpy is missing (the C test then skips this part).
"""

import struct
import sys

try:
    import numpy  # noqa: F401 (torch's .numpy() below)
    import torch
except ImportError as e:  # ctest's SKIP_RETURN_CODE
    print("SKIP: %s" % e)
    sys.exit(77)

MAGIC = 0x4E50474B
VERSION = 1


def repetition_hf(scores, input_ids, penalty):
    # transformers/generation/logits_process.py, RepetitionPenaltyLogitsProcessor.__call__
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(1, input_ids, score)


def reference(logits, prompt, gen, bias_id, bias, presence, frequency, repetition):
    V = logits.numel()
    x = logits.clone().unsqueeze(0)
    ids = torch.cat([prompt, gen]).unsqueeze(0)
    if ids.numel():
        x = repetition_hf(x, ids, torch.tensor(repetition, dtype=torch.float32))
    x = x.squeeze(0)
    counts = torch.bincount(gen, minlength=V).to(torch.float32)
    x = x - torch.tensor(frequency, dtype=torch.float32) * counts
    x = x - torch.tensor(presence, dtype=torch.float32) * (counts > 0).to(torch.float32)
    x = x.index_add(0, bias_id, bias)
    return x


def make_case(g, V, n_prompt, n_gen, n_bias, presence, frequency, repetition, hot=None):
    logits = (torch.randint(-40, 41, (V,), generator=g).to(torch.float32) * 0.25)  # ties, 0s
    special = torch.randperm(V, generator=g)[:3]
    if V >= 20:
        logits[special[0]] = float("nan")
        logits[special[1]] = float("inf")
        logits[special[2]] = float("-inf")
    # ids drawn from a small "hot" set too, so that ids repeat within and across prompt/gen
    hot = hot or max(4, V // 8)
    pick = lambda n: torch.where(torch.rand(n, generator=g) < 0.6,
                                 torch.randint(0, hot, (n,), generator=g),
                                 torch.randint(0, V, (n,), generator=g))
    prompt, gen = pick(n_prompt), pick(n_gen)
    if V >= 20 and n_gen:  # the non-finite logits among the seen ids
        gen[: min(3, n_gen)] = special[: min(3, n_gen)]
    bias_id = pick(n_bias)
    if n_bias >= 2:
        bias_id[1] = bias_id[0]  # a repeated id: the biases add
    bias = (torch.rand(n_bias, generator=g) * 200 - 100).to(torch.float32)
    if n_bias >= 4:
        bias[2], bias[3] = -100.0, 100.0
    expected = reference(logits, prompt, gen, bias_id, bias, presence, frequency, repetition)
    nan_ok = torch.isnan(expected) == torch.isnan(logits)
    assert bool(nan_ok.all()), "a penalty made a NaN"
    return dict(V=V, prompt=prompt, gen=gen, bias_id=bias_id, bias=bias, presence=presence,
                frequency=frequency, repetition=repetition, logits=logits, expected=expected)


CASES = [  # V, n_prompt, n_gen, n_bias, presence, frequency, repetition
    (8, 3, 5, 0, 0.0, 0.0, 1.3),
    (50, 10, 30, 6, 0.5, 0.7, 1.3),
    (50, 10, 30, 6, -2.0, -2.0, 0.5),  # negative penalties favour repeats
    (200, 40, 100, 20, 2.0, 2.0, 2.0),
    (200, 0, 60, 0, 1.0, 0.0, 1.0),  # presence only
    (200, 60, 0, 0, 0.0, 1.0, 1.2),  # nothing generated: repetition on the prompt only
    (1000, 100, 300, 50, 0.3, -1.1, 1e-3),  # extreme repetitions
    (1000, 100, 300, 50, -0.4, 1.9, 1e3),
    (51200, 300, 700, 300, 1.5, 0.25, 1.05),  # KoGPT2's vocabulary
]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    g = torch.Generator().manual_seed(15)
    cases = [make_case(g, *c) for c in CASES]
    changed = sum(int((c["expected"] != c["logits"]).sum()) for c in cases)
    assert changed > 100, "degenerate cases: the penalties change almost nothing"
    i32 = lambda t: t.to(torch.int32).numpy().astype("<i4").tobytes()
    f32 = lambda t: t.to(torch.float32).numpy().astype("<f4").tobytes()
    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<IIi", MAGIC, VERSION, len(cases)))
        for c in cases:
            f.write(struct.pack("<iiii", c["V"], len(c["prompt"]), len(c["gen"]),
                                len(c["bias_id"])))
            f.write(struct.pack("<fff", c["presence"], c["frequency"], c["repetition"]))
            for t in (c["prompt"], c["gen"], c["bias_id"]):
                f.write(i32(t))
            for t in (c["bias"], c["logits"], c["expected"]):
                f.write(f32(t))


if __name__ == "__main__":
    main()
