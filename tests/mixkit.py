"""The one generator of random mixtures the interval and p_oom property tests draw from (issue #21, session 16:
test_uncertainty_one_distribution, test_trial15 and test_mixture each wrote their own copy of it).

A mixture is what facts/assume.py `mixture` builds: components (weight, total GiB, budget GiB or None), the
weights normalised to 1; the totals span 2-90 GiB, a 4090's share of a small LoRA to a full run on an 80 GB card.
"""

from __future__ import annotations

import random
from typing import Iterator

Comps = list[tuple[float, float, float | None]]


def random_mixture(rng: random.Random, most: int = 4, low: float = 2.0, high: float = 90.0) -> Comps:
    """1 to `most` components (weight, total GiB in [`low`, `high`], budget None), the weights summing to 1."""
    raw = [(rng.random() + 0.05, rng.uniform(low, high)) for _ in range(rng.randint(1, most))]
    tot = sum(w for w, _t in raw)
    return [(w / tot, t, None) for w, t in raw]


def random_mixtures(seed: int, count: int, **kw: float) -> Iterator[tuple[random.Random, Comps]]:
    """`count` draws of `random_mixture` from one seeded generator, each with the generator (for the draws a test
    makes beside it: a card, an error class, the widths)."""
    rng = random.Random(seed)
    for _ in range(count):
        yield rng, random_mixture(rng, **kw)
