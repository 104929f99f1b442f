"""The two pictures of ``docs/benchmarks.md``: throughput per setting, claim latency vs history.

matplotlib with the Agg backend (no display needed). Bars are medians; the whiskers span the runs'
min and max. ``python -m bench.plots [RESULTS_JSON] [DIRECTORY]`` redraws them from a results file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.stats import Figure

__all__ = ["draw"]


def _fig(tree: Mapping[str, Any], path: str) -> Figure | None:
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, Figure) else None


def _bars(  # noqa: PLR0913 - keyword-only drawing options
    ax: Any,  # noqa: ANN401
    x: float,
    figure: Figure | None,
    *,
    color: str,
    label: str | None,
    width: float = 0.8,
    number: str = ",.0f",
) -> None:
    """One bar at the median, the runs' range as its error bar, the median written above it."""
    if figure is None:
        return
    ax.bar(
        x,
        figure.median,
        width=width,
        color=color,
        label=label,
        yerr=[[figure.median - figure.low], [figure.high - figure.median]],
        capsize=3,
    )
    ax.annotate(
        f"{figure.median:{number}}",
        (x, figure.high),
        textcoords="offset points",
        xytext=(0, 3),
        ha="center",
        fontsize=8,
    )


def _throughput(results: Mapping[str, Any], path: Path, title: str) -> None:
    import matplotlib.pyplot as plt  # noqa: PLC0415 - matplotlib only with the bench extra

    colors = {
        "raw": "#999999",
        "strict": "#1f77b4",
        "in_flight": "#2ca02c",
        "grouped": "#9467bd",
        "pgq": "#d62728",
    }
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ticks: list[float] = []
    labels: list[str] = []
    seen: set[str] = set()

    def bar(x: float, figure: Figure | None, color: str, label: str) -> None:
        _bars(ax, x, figure, color=colors[color], label=None if label in seen else label)
        seen.add(label)

    x = 0.0
    for setting in ("1x10", "4x100"):
        base = f"dispatch.{setting}"
        bar(x, _fig(results, f"{base}.raw_rows_per_s"), "raw", "raw psycopg (per-row commit)")
        bar(x + 1, _fig(results, f"{base}.library_rows_per_s"), "strict", "library strict")
        bar(
            x + 2,
            _fig(results, f"{base}.library_grouped_rows_per_s"),
            "grouped",
            "library grouped (10 in flight)",
        )
        ticks.append(x + 1)
        labels.append(setting.replace("x", " \N{MULTIPLICATION SIGN} "))
        x += 4
    peers = results.get("peers")
    if isinstance(peers, Mapping) and "pgqueuer" in peers:
        bar(
            x,
            _fig(results, "peers.pgqueuer.rows_per_s"),
            "pgq",
            "pgqueuer (5 \N{MULTIPLICATION SIGN} 10)",
        )
        modes = peers.get("library", {}).get("modes", {})
        names = {
            "strict": "library strict",
            "in": "library in-flight",
            "grouped": "library grouped (10 in flight)",
        }
        for offset, mode in enumerate(modes, start=1):
            kind = mode.split("_", 1)[0]
            bar(
                x + offset,
                _fig(results, f"peers.library.modes.{mode}.rows_per_s"),
                {"in": "in_flight"}.get(kind, kind),
                names.get(kind, mode),
            )
        ticks.append(x + len(modes) / 2)
        labels.append(
            "vs pgqueuer\n("
            + ", ".join(m.replace("in_flight_", "").replace("grouped_", "g") for m in modes)
            + ")"
        )
    ax.set_xticks(ticks, labels)
    ax.set_ylabel("rows (jobs) per second, no-op send")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _latency(results: Mapping[str, Any], path: Path, title: str) -> None:
    import matplotlib.pyplot as plt  # noqa: PLC0415

    history = results.get("history")
    if not isinstance(history, Mapping):
        return
    # (label, key of p50, key of p99)
    cases: list[tuple[str, str, str]] = [
        (f"{label} sent", f"history.{label}.claim_p50_ms", f"history.{label}.claim_p99_ms")
        for label, entry in history.items()
        if isinstance(entry, Mapping) and "rows" in entry and label != "after_churn"
    ]
    churn = history.get("after_churn")
    if isinstance(churn, Mapping):
        base = "history.after_churn"
        cases.append(
            (
                f"after {churn.get('rows', 0):,}\nchurned, no VACUUM",
                f"{base}.claim_p50_ms",
                f"{base}.claim_p99_ms",
            )
        )
        cases.append(
            (
                "the same,\nafter VACUUM",
                f"{base}.after_vacuum_claim_p50_ms",
                f"{base}.after_vacuum_claim_p99_ms",
            )
        )
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for index, (_, p50, p99) in enumerate(cases):
        for offset, figure, color, name in (
            (-0.2, _fig(results, p50), "#1f77b4", "p50"),
            (0.2, _fig(results, p99), "#ff7f0e", "p99"),
        ):
            _bars(
                ax,
                index + offset,
                figure,
                color=color,
                label=name if index == 0 else None,
                width=0.4,
                number=".2f",
            )
    ax.set_xticks(range(len(cases)), [case[0] for case in cases])
    ax.set_ylabel("claim of 10 due rows, ms")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(results: Mapping[str, Any], directory: Path) -> list[Path]:
    """Write the plots this run has data for; returns their paths."""
    import matplotlib as mpl  # noqa: PLC0415

    mpl.use("Agg")
    directory.mkdir(parents=True, exist_ok=True)
    run = results.get("meta", {}).get("run", "?")
    written: list[Path] = []
    if "dispatch" in results or "peers" in results:
        path = directory / "throughput.png"
        _throughput(
            results, path, f"Dispatch throughput, no-op send ({run} run, median, min\N{EN DASH}max)"
        )
        written.append(path)
    if isinstance(results.get("history"), Mapping) and "error" not in results["history"]:
        path = directory / "claim_latency.png"
        _latency(results, path, f"Claim latency vs sent history ({run} run)")
        written.append(path)
    return written


def _figures(node: Any) -> Any:  # noqa: ANN401 - a JSON tree
    """A results tree read from JSON, with its figures turned back into :class:`Figure`."""
    if isinstance(node, Mapping):
        if {"median", "min", "max", "runs", "unit"} <= set(node):
            return Figure.of(node["runs"], node["unit"])
        return {key: _figures(value) for key, value in node.items()}
    return node


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    root = Path(__file__).resolve().parent.parent
    source = Path(args[0]) if args else root / "bench" / "results" / "latest.json"
    target = Path(args[1]) if len(args) > 1 else root / "docs" / "benchmarks"
    for path in draw(_figures(json.loads(source.read_text())), target):
        sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
