"""Profiles as files people open: folded stacks ("f;g;h 12" lines, what py-spy records) to
speedscope's JSON (https://www.speedscope.app) or to a self-contained SVG flame graph. Pure:
text in, text out.
"""

from __future__ import annotations

import html
import json
import zlib
from dataclasses import dataclass, field

_WIDTH, _ROW, _FONT_PX = 1200, 17, 11
_MIN_WIDTH_PX = 0.5  # frames narrower than this are not drawn (they could not be seen)


def parse(folded: str) -> list[tuple[list[str], int]]:
    """[(frames root first, count)]; lines that do not end in a count are skipped."""
    stacks = []
    for line in folded.splitlines():
        head, _, count = line.rstrip().rpartition(" ")
        if not head or not count.isdigit():
            continue
        stacks.append((head.split(";"), int(count)))
    return stacks


def speedscope(folded: str, name: str) -> str:
    """The profile in speedscope's file format (one sampled profile, counts as weights)."""
    frames: dict[str, int] = {}
    samples, weights = [], []
    for stack, count in parse(folded):
        samples.append([frames.setdefault(f, len(frames)) for f in stack])
        weights.append(count)
    total = sum(weights)
    return json.dumps({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [{"name": f} for f in frames]},
        "profiles": [{"type": "sampled", "name": name, "unit": "none", "startValue": 0,
                      "endValue": total, "samples": samples, "weights": weights}],
        "name": name, "activeProfileIndex": 0, "exporter": "iris"})


@dataclass
class _Node:
    name: str
    count: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def _tree(folded: str) -> _Node:
    root = _Node("all")
    for stack, count in parse(folded):
        root.count += count
        node = root
        for frame in stack:
            node = node.children.setdefault(frame, _Node(frame))
            node.count += count
    return root


def svg(folded: str, title: str) -> str:
    """A flame graph (root at the bottom, callers below callees), one <rect> per frame with
    its name and share as a tooltip; opens in any browser, no script."""
    root = _tree(folded)
    rects: list[str] = []
    depth = _place(root, 0.0, 0, root.count or 1, rects)
    height = (depth + 2) * _ROW + 24
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
            f'font-family="monospace" font-size="{_FONT_PX}">'
            f'<text x="4" y="16" font-size="13">{html.escape(title)}</text>'
            f'<g transform="translate(0,{height - _ROW}) scale(1,-1)">{"".join(rects)}</g></svg>')


def _place(node: _Node, x: float, depth: int, total: int, out: list[str]) -> int:
    width = _WIDTH * node.count / total
    if width < _MIN_WIDTH_PX:
        return depth - 1
    share = 100.0 * node.count / total
    label = html.escape(f"{node.name} ({node.count} samples, {share:.1f}%)")
    hue = 20 + zlib.crc32(node.name.encode()) % 40  # warm, and the same for a frame each time
    text = html.escape(node.name)[: max(0, int(width / (_FONT_PX * 0.62)) - 1)]
    y = depth * _ROW
    out.append(f'<g><title>{label}</title><rect x="{x:.1f}" y="{y}" width="{width:.1f}" '
               f'height="{_ROW - 1}" fill="hsl({hue},90%,60%)"/>'
               + (f'<text x="{x + 3:.1f}" y="{-(y + 4)}" transform="scale(1,-1)">{text}</text>'
                  if text else "") + "</g>")
    deepest, offset = depth, x
    for child in sorted(node.children.values(), key=lambda c: c.name):
        deepest = max(deepest, _place(child, offset, depth + 1, total, out))
        offset += _WIDTH * child.count / total
    return deepest
