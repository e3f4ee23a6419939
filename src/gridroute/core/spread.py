"""A two-way split that keeps its proportions over a stream: error diffusion.

Two equal, lightly loaded sites should split a gateway's requests evenly. With each
request drawn on its own, the split of N requests wanders by about 0.5 / sqrt(N) (a
point and a half at 1,000 requests, run to run), and under light load rho moves too
little to pull it back. Error diffusion (a fraction carried from one pick to the next,
as in smooth weighted round robin) takes the first site exactly when the carried
fraction passes one whole, so after N picks its count is within one of `share x N`
whatever the shares were along the way. The carry starts at a random phase per gateway,
so gateways do not pick in step.
"""

from __future__ import annotations

from random import Random

MAX_PAIRS = 1024
"""(model, pair) carries kept (a catch-all candidate can serve any model name: bounded)."""


class Spread:
    """Per model and pair of candidates, the fraction carried between two-site picks
    (per model: two models arriving in turn on one carry would each land on one site).
    Owned by one `GridState` (so by one gateway) and shared by its snapshots; not
    thread-safe."""

    __slots__ = ("_carry", "_phase")

    def __init__(self, rng: Random | None = None) -> None:
        self._phase = 0.5 if rng is None else rng.random()
        self._carry: dict[tuple[str, str, str], float] = {}

    def first(self, pair: tuple[str, str, str], share: float) -> bool:
        """Whether this pick takes the first of `pair` (model, first key, second key),
        which is due `share` of the picks."""
        carry = self._carry.get(pair)
        if carry is None:
            if len(self._carry) >= MAX_PAIRS:
                self._carry.clear()
            carry = self._phase
        carry += share
        if carry >= 1.0:
            self._carry[pair] = carry - 1.0
            return True
        self._carry[pair] = carry
        return False

    def __len__(self) -> int:
        return len(self._carry)
