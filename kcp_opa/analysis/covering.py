"""All-pairs covering arrays: every value of every dimension meets every value of every other.

A full product of a deployment's dimensions is millions of actions; a pairwise array is a few
hundred and still puts each pair of facts (an unknown unit with an external model, a missing
budget with a high amount) into at least one action. Greedy, seeded, deterministic.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence


def product_size(sizes: Sequence[int]) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


def full_product(sizes: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every combination, in order (for a space small enough to enumerate)."""
    return itertools.product(*(range(size) for size in sizes))


def all_pairs(sizes: Sequence[int], seed: int = 0) -> list[tuple[int, ...]]:
    """Rows (one value index per dimension) covering every pair of values of two dimensions.

    Each row starts from an uncovered pair and fills the other dimensions, in a seeded random
    order, with the value that covers the most still-uncovered pairs with the ones already set.
    """
    rng = random.Random(seed)  # noqa: S311 - a reproducible test plan, not a secret
    count = len(sizes)
    uncovered: set[tuple[int, int, int, int]] = {
        (i, a, j, b)
        for i, j in itertools.combinations(range(count), 2)
        for a in range(sizes[i])
        for b in range(sizes[j])
    }
    rows: list[tuple[int, ...]] = []
    if count < 2:
        return [(value,) for value in range(sizes[0])] if count == 1 else [()]
    while uncovered:
        i, a, j, b = min(uncovered)
        row: dict[int, int] = {i: a, j: b}
        others = [d for d in range(count) if d not in row]
        rng.shuffle(others)
        for dim in others:
            best, best_gain = 0, -1
            for value in range(sizes[dim]):
                gain = sum(1 for other, chosen in row.items() if _pair(other, chosen, dim, value) in uncovered)
                if gain > best_gain or (gain == best_gain and rng.random() < 0.5):
                    best, best_gain = value, gain
            row[dim] = best
        done = tuple(row[d] for d in range(count))
        for x, y in itertools.combinations(range(count), 2):
            uncovered.discard((x, done[x], y, done[y]))
        rows.append(done)
    return rows


def sampled(sizes: Sequence[int], count: int, seed: int) -> list[tuple[int, ...]]:
    """COUNT seeded uniform rows (fills a budget beyond the covering array)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible test plan, not a secret
    return [tuple(rng.randrange(size) for size in sizes) for _ in range(count)]


def _pair(d1: int, v1: int, d2: int, v2: int) -> tuple[int, int, int, int]:
    return (d1, v1, d2, v2) if d1 < d2 else (d2, v2, d1, v1)
