"""The demo's comparison: the side-by-side table, the time each side takes to the baseline's final top-1, and the
plot of top-1 against training seconds."""

from __future__ import annotations

import math
from typing import Any

#: The table's rows: (label, key of a side's results, format, which way is better).
ROWS = (
    ("tuning (inside the wall time)", "tuning_s", "{:.1f} s", "lower"),
    ("wall time", "wall_time_s", "{:.1f} s", "lower"),
    ("time to baseline's final top-1", "time_to_target_s", "{:.1f} s", "lower"),
    ("training throughput", "images_per_s", "{:.1f} images/s", "higher"),
    ("waiting for data", "data_wait_share", "{:.1%} of step", "lower"),
    ("val top-1", "val_top1", "{:.1%}", "higher"),
    ("peak memory (RSS/CUDA)", "peak_memory_mb", "{:.0f} MiB", "lower"),
)


def time_to_top1(curve: list[tuple[float, float]], target: float) -> float:
    """Training seconds until the first validation with top-1 >= ``target`` (NaN if never); the resolution is
    one validation interval (an epoch)."""
    return next((t for t, top1 in curve if top1 >= target), math.nan)


def add_time_to_target(results: dict[str, dict[str, Any]]) -> None:
    """Set ``time_to_target_s`` on both sides: seconds to reach the baseline's final top-1 (its last validation)."""
    target = results["baseline"]["val_top1"]
    for side in results.values():
        side["time_to_target_s"] = time_to_top1(side.get("top1_curve", []), target)


def plot_curves(results: dict[str, dict[str, Any]], path: str, title: str) -> None:
    """Top-1 against wall-clock seconds for both sides, with the baseline's final top-1 as a line, to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for kind, style in (("baseline", "o-"), ("efficient", "s-")):
        pts = results[kind].get("top1_curve", [])
        if pts:
            ax.plot(
                [t for t, _ in pts], [100 * a for _, a in pts], style, label=f"{kind} ({results[kind]['precision']})"
            )
    ax.axhline(100 * results["baseline"]["val_top1"], color="grey", ls=":", lw=1, label="baseline's final top-1")
    ax.set_xlabel("training seconds (wall clock from the start, tuning included, validation excluded)")
    ax.set_ylabel("val top-1 (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """The side-by-side table: one row per figure, baseline | efficient | efficient/baseline (a ratio; for shares
    and top-1, the difference in percentage points)."""
    b, e = results["baseline"], results["efficient"]
    header = ("", f"baseline ({b['precision']})", f"efficient ({e['precision']})", "efficient/baseline")
    rows = [header]
    for label, key, fmt, _ in ROWS:
        vb, ve = b[key], e[key]
        known = vb is not None and ve is not None and not math.isnan(vb) and not math.isnan(ve)
        if "%" in fmt:  # a ratio of two percentages says little: the difference in points
            change = f"{100 * (ve - vb):+.1f} pt" if known else "n/a"
        else:
            change = f"{ve / vb:.2f}x" if known and vb else "n/a"
        text = lambda v, fmt=fmt: "not reached" if isinstance(v, float) and math.isnan(v) else fmt.format(v)  # noqa: E731
        rows.append((label, text(vb), text(ve), change))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    line = lambda r: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False))
    )
    sep = "-" * (sum(widths) + 6)
    return "\n".join([line(rows[0]), sep] + [line(r) for r in rows[1:]])
