"""Sentences about direction, computed from the numbers they describe (never typed by hand)."""

from __future__ import annotations

from collections.abc import Sequence

TIE = 1e-9  # accuracies are ratios of image counts: equal means equal, not "close"


def trend(values: Sequence[float]) -> str:
    """How a sequence moves from each value to the next: "grows" (every step up), "shrinks" (every
    step down), "ties" (no step moves), or "moves both ways" (up at some steps, down at others);
    a step that does not move does not break "grows" or "shrinks"."""
    steps = [b - a for a, b in zip(values, values[1:])]
    up, down = any(s > TIE for s in steps), any(s < -TIE for s in steps)
    if up and down:
        return "moves both ways"
    return "grows" if up else "shrinks" if down else "ties"


def compare(a: float, b: float) -> str:
    """ "above", "below" or "tied with": a against b."""
    return "above" if a - b > TIE else "below" if b - a > TIE else "tied with"
