"""The fuzzer's strategies, drawn two ways: by hypothesis (the slice in `make test`, which shrinks a
divergence to a small example) or straight from a seeded ``random.Random`` (`make fuzz`).

The generators (differential.py, gatecounts.py, hostile.py) are written once against this
module, which offers the subset of ``hypothesis.strategies`` they use under the same names.
``Strategy.hyp()`` gives the hypothesis strategy; ``Strategy.sample(rng)`` draws one value
without hypothesis's engine, which cost about a quarter of every `make fuzz` decision (each
action takes ~50 draws, each with hypothesis's bookkeeping). The same seed gives the same
values, so a `make fuzz` report reproduces; what it loses is hypothesis's search heuristics, which
the generators replace by drawing each declared bound and its neighbours explicitly.
"""

from __future__ import annotations

import random
import sys
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as hst

Draw = Callable[["Strategy"], Any]


class Strategy:
    """A value generator with a hypothesis twin."""

    _hyp: Any = None

    def sample(self, rng: random.Random) -> Any:
        raise NotImplementedError

    def _build(self) -> Any:
        raise NotImplementedError

    def hyp(self) -> Any:
        if self._hyp is None:
            self._hyp = self._build()
        return self._hyp

    def __or__(self, other: Strategy) -> Strategy:
        return one_of(self, other)

    def map(self, function: Callable[[Any], Any]) -> Strategy:
        return _Mapped(self, function)


class _Sampled(Strategy):
    def __init__(self, values: Sequence[Any]) -> None:
        self.values = list(values)

    def sample(self, rng: random.Random) -> Any:
        return self.values[rng.randrange(len(self.values))]

    def _build(self) -> Any:
        return hst.sampled_from(self.values)


class _Integers(Strategy):
    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def sample(self, rng: random.Random) -> Any:
        # hypothesis favours the bounds; so do we, a tenth of the time
        if rng.random() < 0.1:
            return self.low if rng.random() < 0.5 else self.high
        return rng.randint(self.low, self.high)

    def _build(self) -> Any:
        return hst.integers(self.low, self.high)


class _Just(Strategy):
    def __init__(self, value: Any) -> None:
        self.value = value

    def sample(self, rng: random.Random) -> Any:
        return self.value

    def _build(self) -> Any:
        return hst.just(self.value)


class _OneOf(Strategy):
    def __init__(self, options: Sequence[Strategy]) -> None:
        self.options = list(options)

    def sample(self, rng: random.Random) -> Any:
        return self.options[rng.randrange(len(self.options))].sample(rng)

    def _build(self) -> Any:
        return hst.one_of(*(option.hyp() for option in self.options))


class _Lists(Strategy):
    def __init__(self, element: Strategy, min_size: int, max_size: int, unique: bool) -> None:
        self.element, self.min_size, self.max_size, self.unique = element, min_size, max_size, unique

    def sample(self, rng: random.Random) -> Any:
        size = rng.randint(self.min_size, self.max_size)
        out: list[Any] = []
        for _ in range(size * 4 if self.unique else size):  # bounded retries for unique lists
            if len(out) == size:
                break
            value = self.element.sample(rng)
            if not self.unique or value not in out:
                out.append(value)
        return out

    def _build(self) -> Any:
        return hst.lists(self.element.hyp(), min_size=self.min_size, max_size=self.max_size, unique=self.unique)


def _short(rng: random.Random, high: int) -> int:
    """A length up to ``high``, mostly short (mean ~2.5), as hypothesis's are."""
    return min(high, int(rng.expovariate(0.4)))


class _Text(Strategy):
    def __init__(self, alphabet: str | Strategy, max_size: int) -> None:
        self.alphabet, self.max_size = alphabet, max_size

    def sample(self, rng: random.Random) -> Any:
        size = _short(rng, self.max_size)
        if isinstance(self.alphabet, str):
            return "".join(rng.choice(self.alphabet) for _ in range(size))
        return "".join(self.alphabet.sample(rng) for _ in range(size))

    def _build(self) -> Any:
        alphabet = self.alphabet if isinstance(self.alphabet, str) else self.alphabet.hyp()
        return hst.text(alphabet=alphabet, max_size=self.max_size)


class _Characters(Strategy):
    def __init__(self, blacklist_categories: Sequence[str]) -> None:
        self.blacklist = tuple(blacklist_categories)

    def sample(self, rng: random.Random) -> Any:
        while True:  # mostly the planes text lives in, as hypothesis draws
            code = rng.randrange(0x80) if rng.random() < 0.5 else rng.randrange(sys.maxunicode + 1)
            character = chr(code)
            if unicodedata.category(character) not in self.blacklist:
                return character

    def _build(self) -> Any:
        return hst.characters(blacklist_categories=self.blacklist)


class _Builds(Strategy):
    def __init__(self, target: Callable[..., Any], arguments: Sequence[Strategy]) -> None:
        self.target, self.arguments = target, list(arguments)

    def sample(self, rng: random.Random) -> Any:
        return self.target(*(argument.sample(rng) for argument in self.arguments))

    def _build(self) -> Any:
        return hst.builds(self.target, *(argument.hyp() for argument in self.arguments))


class _Mapped(Strategy):
    def __init__(self, base: Strategy, function: Callable[[Any], Any]) -> None:
        self.base, self.function = base, function

    def sample(self, rng: random.Random) -> Any:
        return self.function(self.base.sample(rng))

    def _build(self) -> Any:
        return self.base.hyp().map(self.function)


class _Identifier(Strategy):
    """``[a-z][a-z0-9_.:/-]{0,12}``."""

    FIRST = "abcdefghijklmnopqrstuvwxyz"
    REST = FIRST + "0123456789_.:/-"

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.FIRST) + "".join(rng.choice(self.REST) for _ in range(_short(rng, 12)))

    def _build(self) -> Any:
        return hst.from_regex(r"[a-z][a-z0-9_.:/-]{0,12}", fullmatch=True)


class _Composite(Strategy):
    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.function, self.args, self.kwargs = function, args, kwargs

    def sample(self, rng: random.Random) -> Any:
        return self.function(lambda strategy: strategy.sample(rng), *self.args, **self.kwargs)

    def _build(self) -> Any:
        @hst.composite
        def drawn(draw: Any) -> Any:
            return self.function(lambda strategy: draw(strategy.hyp()), *self.args, **self.kwargs)

        return drawn()


def sampled_from(values: Sequence[Any]) -> Strategy:
    return _Sampled(values)


def integers(low: int, high: int) -> Strategy:
    return _Integers(low, high)


def booleans() -> Strategy:
    return _Sampled([False, True])


def just(value: Any) -> Strategy:
    return _Just(value)


def one_of(*options: Strategy) -> Strategy:
    return _OneOf(options)


def lists(element: Strategy, *, min_size: int = 0, max_size: int = 10, unique: bool = False) -> Strategy:
    return _Lists(element, min_size, max_size, unique)


def text(*, alphabet: str | Strategy, max_size: int) -> Strategy:
    return _Text(alphabet, max_size)


def characters(*, blacklist_categories: Sequence[str]) -> Strategy:
    return _Characters(blacklist_categories)


def builds(target: Callable[..., Any], *arguments: Strategy) -> Strategy:
    return _Builds(target, arguments)


def identifier() -> Strategy:
    return _Identifier()


def composite(function: Callable[..., Any]) -> Callable[..., Strategy]:
    """As hypothesis's: ``function(draw, *args)`` becomes ``f(*args) -> Strategy``."""

    def strategy(*args: Any, **kwargs: Any) -> Strategy:
        return _Composite(function, args, kwargs)

    return strategy
