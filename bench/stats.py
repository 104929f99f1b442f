"""Figures: the runs of one measurement, summarised as median with its spread (min/max)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

__all__ = ["Figure", "percentile", "ratio", "rotation"]


@attrs.frozen
class Figure:
    """One measured quantity: every run's value, reported as the median and the min/max."""

    runs: tuple[float, ...]
    unit: str

    @classmethod
    def of(cls, values: Sequence[float], unit: str) -> Figure:
        if not values:
            raise ValueError(f"a figure needs at least one run, got none (unit {unit})")
        return cls(tuple(float(v) for v in values), unit)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def low(self) -> float:
        return min(self.runs)

    @property
    def high(self) -> float:
        return max(self.runs)

    def as_json(self) -> dict[str, Any]:
        return {
            "median": _round(self.median),
            "min": _round(self.low),
            "max": _round(self.high),
            "runs": [_round(v) for v in self.runs],
            "unit": self.unit,
        }

    def text(self) -> str:
        """``12,345 (11,900-12,800)``: the median, then the spread of the runs."""
        return f"{_fmt(self.median)} ({_fmt(self.low)}\N{EN DASH}{_fmt(self.high)})"


def ratio(numerator: Figure, denominator: Figure) -> Figure:
    """Run-by-run ratios (run i of each side ran back to back, so they shared the machine's mood)."""
    if len(numerator.runs) != len(denominator.runs):
        raise ValueError(
            f"a ratio pairs runs, got {len(numerator.runs)} and {len(denominator.runs)} runs"
        )
    return Figure.of(
        [n / d if d else math.nan for n, d in zip(numerator.runs, denominator.runs, strict=True)],
        "x",
    )


def rotation(names: Iterable[str], run: int) -> list[str]:
    """``names`` started at a different one on each run, so none always runs first or last."""
    order = list(names)
    shift = run % len(order) if order else 0
    return order[shift:] + order[:shift]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("a percentile of no values is undefined")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    below = math.floor(position)
    above = math.ceil(position)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _round(value: float) -> float:
    if math.isnan(value) or value == 0:
        return value
    digits = max(0, 4 - math.floor(math.log10(abs(value))))
    return round(value, digits)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
