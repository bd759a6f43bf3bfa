"""One chart of a run's headline rows as an SVG file (no plotting library): for each row, a bar
of the store's median over its floor's (1.0 = as fast as raw redis-py), the fast path's and the
public path's side by side, the target drawn as a tick. Written by ``bench_store.py --paths
--chart FILE``; the README and the docs site show ``docs/img/figures.svg``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from pathlib import Path

from .timing import Row

WIDTH, LABEL, BAR, GAP, TOP = 760, 300, 13, 12, 44
SCALE = 3.0
"""The ratio at the right edge of the plot."""
COLOURS = {"fast": "#2b6cb0", "public": "#b7791f"}


def _group(rows: Sequence[Row]) -> list[tuple[str, dict[str, Row]]]:
    """The rows by case, ``fast`` and ``public`` side by side (in the rows' order)."""
    groups: dict[str, dict[str, Row]] = {}
    for row in rows:
        found = re.search(r", (fast|public)\b", row.case)
        if found is None:
            continue
        case = row.case[: found.start()] + row.case[found.end() :]
        case = re.sub(r" \(\d+ hits.*\)$| vs the raw script$", "", case)
        groups.setdefault(case, {})[found.group(1)] = row
    return list(groups.items())


def render(rows: Sequence[Row], title: str) -> str:
    """The SVG text of the chart of ``rows``."""
    groups = _group(rows)
    plot = WIDTH - LABEL - 70
    height = TOP + len(groups) * (2 * BAR + GAP) + 40

    def x(ratio: float) -> float:
        return LABEL + plot * min(ratio, SCALE) / SCALE

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for i, (path, colour) in enumerate(COLOURS.items()):
        parts.append(f'<rect x="{LABEL + 160 * i}" y="28" width="12" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{LABEL + 160 * i + 16}" y="37">{path} path</text>')
    for tick in (1.0, 1.5, 2.0, 2.5, 3.0):
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{TOP - 4}" x2="{x(tick):.1f}" y2="{height - 28}" '
            'stroke="#ddd"/>'
        )
        parts.append(
            f'<text x="{x(tick):.1f}" y="{height - 14}" text-anchor="middle">{tick:g}×</text>'
        )
    y = TOP
    for case, by_path in groups:
        parts.append(
            f'<text x="{LABEL - 8}" y="{y + BAR + 4}" text-anchor="end">{escape(case)}</text>'
        )
        for path, colour in COLOURS.items():
            row = by_path.get(path)
            if row is not None:
                parts.append(
                    f'<rect x="{LABEL}" y="{y}" width="{x(row.ratio) - LABEL:.1f}" '
                    f'height="{BAR - 1}" fill="{colour}"/>'
                )
                parts.append(
                    f'<text x="{x(row.ratio) + 4:.1f}" y="{y + BAR - 2}">{row.ratio:.2f}×</text>'
                )
                if row.target is not None:
                    parts.append(
                        f'<line x1="{x(row.target):.1f}" y1="{y - 1}" x2="{x(row.target):.1f}" '
                        f'y2="{y + BAR}" stroke="black" stroke-width="2"/>'
                    )
            y += BAR
        y += GAP
    parts.append(
        f'<text x="10" y="{height - 14}" fill="#555">ratio to the raw redis-py floor '
        "(median; black tick: the target)</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write(rows: Sequence[Row], path: Path, title: str) -> None:
    """Write the chart of ``rows`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(rows, title), encoding="utf-8")
