"""The report's SVG charts (issue 9): valid XML, non-empty drawings, escaped text, deterministic bytes,
binned above a threshold, and the pipeline timeline read off the projection's own simulation."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from primus.job import job_from_mapping
from primus.parallel import Layout, normalise
from primus.projection import Projector
from primus.report import charts
from primus.report.pipeline import simulate, timeline_data
from primus.report.svg import nice_ticks

NS = "{http://www.w3.org/2000/svg}"
DRAWING = ("rect", "path", "circle", "line")


def drawing(svg: str) -> dict[str, int]:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    counts = {k: len(root.findall(f".//{NS}{k}")) for k in DRAWING}
    assert root.find(f"{NS}title") is not None and root.find(f"{NS}desc") is not None
    return counts


def test_memory_chart_stacks_every_kind_under_a_capacity_line():
    stages = [("stage 0", {"weights": 10 << 30, "gradients": 5 << 30, "optimizer": 8 << 30, "activations": 40 << 30,
                           "other": 1 << 30}),
              ("stage 1", {"weights": 10 << 30, "gradients": 5 << 30, "optimizer": 8 << 30, "activations": 20 << 30,
                           "other": 0})]
    svg = charts.memory_chart(stages, 70 << 30, 80 << 30)
    counts = drawing(svg)
    assert counts["rect"] >= 9 + 5 + 1  # 9 non-zero segments, 5 legend swatches, background
    assert "capacity 70.0 GiB" in svg and "stage 1: activations 20.00 GiB" in svg
    assert svg == charts.memory_chart(stages, 70 << 30, 80 << 30)


def test_text_is_escaped():
    svg = charts.memory_chart([("<script>alert(1)</script> & co", {"weights": 1 << 30})], 2 << 30, 3 << 30)
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    drawing(svg)


def test_scatter_draws_every_point_when_few_and_bins_when_many():
    few = [(float(i % 7), 100.0 + i) for i in range(50)]
    marks = [charts.Mark(3.0, 150.0, "best", "best"), charts.Mark(1.0, 120.0, "reference", "ref"),
             charts.Mark(2.0, 110.0, "llm", "llm")]
    svg = charts.scatter_chart(few, marks, lambda i: f"p{i}")
    assert drawing(svg)["circle"] >= 50 and "all 50 scored candidates" in svg
    many = [(float(i % 97) / 3, 1000.0 + (i * 7919) % 5000) for i in range(charts.BIN_ABOVE + 1000)]
    svg = charts.scatter_chart(many, marks, str)
    counts = drawing(svg)
    assert counts["circle"] < 200 and counts["path"] >= 2  # bins are paths, the Pareto front a few points
    assert f"{len(many):,} candidates binned" in svg
    assert len(svg) < 120_000


def test_pareto_keeps_only_undominated_points():
    pts = [(0.0, 10.0), (1.0, 9.0), (1.0, 5.0), (2.0, 4.0), (0.5, 3.0), (2.0, 4.0)]
    assert sorted(charts.pareto(pts)) == [0, 1, 3]


def test_progress_chart_is_a_step_line_with_investigations():
    svg = charts.progress_chart([(1, 10.0), (5, 20.0), (40, 25.0)], 100, [(30, "LLM")])
    counts = drawing(svg)
    assert counts["path"] >= 1 and counts["circle"] == 3 and counts["line"] >= 1
    assert ">LLM<" in svg


@pytest.mark.parametrize(("pp", "vp", "mbs"), [(2, 1, 1), (4, 2, 1), (1, 1, 2)])
def test_the_timeline_is_the_projections_own_simulation(pp: int, vp: int, mbs: int):
    job = job_from_mapping({"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096,
                            "global_batch_size": 16}, "t")
    layout = normalise(Layout(tp=2, pp=pp, vp=vp, cp=1, ep=1, etp=1, dp=8 // (2 * pp), mbs=mbs, sp=True,
                              recompute="none", sharding="dist_opt"), is_moe=False)
    projector = Projector(job)
    p, timing = simulate(projector, layout, None)
    assert p == projector.project(layout, "simulate")  # recording changes nothing
    data = timeline_data(timing, p.step_time_s)
    m = layout.num_microbatches(16)
    assert len(data.ops) == pp and sum(len(r) for r in data.ops) == 2 * pp * vp * m
    assert max(data.pipeline_ends) <= p.step_time_s
    if pp > 1:
        assert data.transfers
    counts = drawing(charts.timeline_chart(data, "t"))
    assert counts["rect"] >= 2 * pp * vp * m // 2


def test_a_long_timeline_stays_small():
    m, pp = 2000, 4
    ops = tuple(tuple((k * 0.001 + r * 0.001, k * 0.001 + r * 0.001 + 0.0009, "FB"[k % 2], 0, k // 2)
                      for k in range(2 * m)) for r in range(pp))
    transfers = tuple((r, k * 0.001, k * 0.001 + 0.0002) for r in range(1, pp) for k in range(2 * m))
    data = charts.TimelineData(ops, transfers, tuple(4.0 + r * 0.001 for r in range(pp)), 4.1)
    svg = charts.timeline_chart(data, "long")
    counts = drawing(svg)
    assert 0 < counts["rect"] < 6_000 and len(svg) < 600_000
    assert "F+B (merged at this scale)" in svg


def test_nice_ticks_are_round():
    assert nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(0, 7.3, 8) == [0, 1, 2, 3, 4, 5, 6, 7]
