"""Plot the Markdown table a benchmark printed as a horizontal bar chart (PNG).

The benchmarks print their comparison as a Markdown table; this turns the last table of a
saved output into a picture for docs/benchmarks.md, so the picture always shows what a run
printed.

Example:
    python benchmarks/loader.py > loader.txt
    python benchmarks/plot_table.py loader.txt --label batch method --value rows/s \
        --out docs/img/loader.png --title "Loader, one shuffled epoch"
"""

from __future__ import annotations

import argparse
import re
from typing import Sequence

_SUFFIX = {"K": 1e3, "M": 1e6, "G": 1e9}


def last_markdown_table(text: str) -> list[dict[str, str]]:
    """Rows of the last Markdown table in ``text`` as dicts keyed by the header."""
    blocks, current = [], []
    for line in text.splitlines():
        if line.strip().startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    if not blocks:
        raise ValueError("no Markdown table found")
    header, *rows = [r for r in blocks[-1] if not set("".join(r)) <= set("-: ")]
    return [dict(zip(header, row)) for row in rows]


def parse_number(cell: str) -> float | None:
    """``"3.44M"`` -> 3.44e6, ``"1,234"`` -> 1234, ``"2.5x"`` -> 2.5; None when not a number."""
    match = re.match(r"^\s*([-+]?[\d,]*\.?\d+)\s*([KMG]?)", cell)
    if not match:
        return None
    return float(match.group(1).replace(",", "")) * _SUFFIX.get(match.group(2), 1.0)


def human(value: float) -> str:
    """3440000 -> '3.44M'."""
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def plot(rows: list[dict[str, str]], label: Sequence[str], value: str, out: str, title: str,
         log: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [(" / ".join(r[c] for c in label), parse_number(r[value])) for r in rows]
    points = [(name, v) for name, v in points if v is not None]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(points) + 1.2))
    names = [p[0] for p in points][::-1]
    values = [p[1] for p in points][::-1]
    colors = ["tab:blue" if n.split(" / ")[-1].startswith("tabloader") else "tab:gray" for n in names]
    ax.barh(names, values, color=colors)
    ax.set_xlabel(value + (" (log scale)" if log else ""))
    if log:  # values spanning orders of magnitude: the small bars stay visible
        ax.set_xscale("log")
    ax.set_title(title, fontsize=10, loc="left")
    for y, v in enumerate(values):
        ax.text(v, y, f" {human(v)}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table_file")
    parser.add_argument("--label", nargs="+", required=True, help="columns naming a bar")
    parser.add_argument("--value", required=True, help="numeric column to plot")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("--log", action="store_true", help="logarithmic value axis")
    args = parser.parse_args()
    with open(args.table_file) as f:
        rows = last_markdown_table(f.read())
    plot(rows, args.label, args.value, args.out, args.title, args.log)


if __name__ == "__main__":
    main()
