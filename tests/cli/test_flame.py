"""Profiles written as files people open: folded stacks to speedscope's JSON and to an SVG
flame graph (pure)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from iris.cli import flame

FOLDED = ("process 7:\"python train.py\";<module> (train.py:9);step (train.py:5) 30\n"
          "process 7:\"python train.py\";<module> (train.py:9);load (data.py:2) 10\n"
          "not a line\n")


def test_speedscope_file_has_every_frame_and_the_samples_as_weights():
    doc = json.loads(flame.speedscope(FOLDED, "job/0"))
    names = [f["name"] for f in doc["shared"]["frames"]]
    assert names == ['process 7:"python train.py"', "<module> (train.py:9)",
                     "step (train.py:5)", "load (data.py:2)"]
    [profile] = doc["profiles"]
    assert profile["weights"] == [30, 10] and profile["endValue"] == 40
    assert [[names[i] for i in s][-1] for s in profile["samples"]] == ["step (train.py:5)",
                                                                       "load (data.py:2)"]


def test_svg_flame_graph_is_well_formed_and_sizes_frames_by_samples():
    svg = flame.svg(FOLDED, "job/0 <task>")
    root = ET.fromstring(svg)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert "step (train.py:5) (30 samples, 75.0%)" in titles
    assert "load (data.py:2) (10 samples, 25.0%)" in titles
    widths = {t.text.split(" (")[0]: float(r.get("width")) for g in
              root.iter("{http://www.w3.org/2000/svg}g") for t, r in [_title_rect(g)] if t is not None}
    assert widths["step"] == 3 * widths["load"]
    assert flame.svg("", "empty").startswith("<svg")


def _title_rect(g):
    title = g.find("{http://www.w3.org/2000/svg}title")
    rect = g.find("{http://www.w3.org/2000/svg}rect")
    return (title, rect) if title is not None and rect is not None else (None, None)
