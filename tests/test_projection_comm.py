"""Specification of rank placement and the alpha-beta collective costs."""

from __future__ import annotations

import pytest

from primus.catalog.hardware import resolve_hardware
from primus.parallel import Layout
from primus.projection.collectives import LinkModel
from primus.projection.placement import GroupShape, Placement
from primus.projection.profile import load_profile


def lay(tp: int = 1, pp: int = 1, cp: int = 1, dp: int = 1, ep: int = 1, etp: int = 1) -> Layout:
    return Layout(tp=tp, pp=pp, vp=1, cp=cp, ep=ep, etp=etp, dp=dp, mbs=1, sp=tp > 1, recompute="none",
                  sharding="dist_opt")


def links(hw: str) -> LinkModel:
    cluster = resolve_hardware(hw, "test")
    return LinkModel(cluster, load_profile(cluster))


def test_megatron_order_puts_tp_inside_the_node_and_pp_outside() -> None:
    g = Placement(lay(tp=8, pp=4, dp=4), 8).groups()
    assert g["tp"] == GroupShape(8, 8)
    assert g["dp_cp"] == GroupShape(4, 1)
    assert g["pp"] == GroupShape(2, 1)
    g = Placement(lay(tp=2, cp=2, dp=4, pp=2), 8).groups()
    assert g["tp"] == GroupShape(2, 2)
    assert g["cp_group"] == GroupShape(2, 2)
    assert g["dp_cp"] == GroupShape(8, 4)  # CP then DP: 4 of the 8 in each node


def test_expert_mesh_folds_etp_and_ep_first() -> None:
    g = Placement(lay(tp=4, dp=16, ep=8, etp=1), 8).groups()
    assert g["ep"] == GroupShape(8, 8)
    assert g["edp"] == GroupShape(8, 1)
    assert g["etp"] == GroupShape(1, 1)


def test_the_order_is_a_parameter() -> None:
    dp_first = Placement(lay(tp=2, dp=4), 8, order=("dp", "tp", "cp", "ep", "pp")).groups()
    assert dp_first["dp_cp"] == GroupShape(4, 4)
    assert dp_first["tp"] == GroupShape(2, 2)
    nvl72 = Placement(lay(tp=4, dp=32, pp=2), 72).groups()
    assert nvl72["dp_cp"].per_domain == 18  # the 72-GPU NVLink domain spans 18 trays


def test_full_mesh_group_uses_g_minus_1_of_n_minus_1_links() -> None:
    mi = links("mi300x")
    per_link = 448e9 / 7
    assert mi.intra_bw(8) == pytest.approx(448e9)
    assert mi.intra_bw(2) == pytest.approx(per_link)
    assert mi.intra_bw(4) == pytest.approx(3 * per_link)
    big = 1e10
    t4 = mi.time("all_gather", big, GroupShape(4, 4))
    t8 = mi.time("all_gather", big, GroupShape(8, 8))
    assert t4 > t8  # fewer links for a smaller group on the mesh
    p2p = mi.time("p2p", big, GroupShape(2, 2))
    assert p2p == pytest.approx(mi.alpha_up + big / (per_link * mi.eff["p2p"][0]))


def test_switch_gives_every_group_the_full_bandwidth_and_reduces_in_switch() -> None:
    h = links("h100-80gb")
    s = 1e9
    assert h.intra_bw(2) == h.intra_bw(8) == pytest.approx(450e9)
    ar = h.time("all_reduce", s, GroupShape(8, 8))
    assert ar == pytest.approx(2 * h.alpha_up + s / (450e9 * h.eff["all_reduce"][0]))
    a100 = links("a100-80gb")  # no in-switch reduction: ring, twice the reduce-scatter traffic
    ring = a100.time("all_reduce", s, GroupShape(8, 8))
    assert ring == pytest.approx(14 * a100.alpha_up + 2 * 7 / 8 * s / (300e9 * a100.eff["reduce_scatter"][0]))


def test_an_all_reduce_is_the_faster_of_nvls_and_the_ring_at_the_rings_own_rate() -> None:
    # review of the projection: H100's all-reduce efficiency (0.6) is NVLS's, S / bandwidth ("480 x 8/14 = 274 GB/s"
    # in its profile), but it was also charged to ring all-reduces, 2 (n-1)/n S: a 2-GPU TP all-reduce cost 1.33x a
    # reduce-scatter plus an all-gather, which is what NCCL's ring is. NCCL's tuner takes the faster algorithm
    h = links("h100-80gb")
    s = 1e9
    pair = GroupShape(2, 2)
    assert h.time("all_reduce", s, pair) == pytest.approx(h.time("reduce_scatter", s, pair)
                                                          + h.time("all_gather", s, pair))
    assert h.time("all_reduce", s, pair) < 2 * h.alpha_up + s / (450e9 * h.eff["all_reduce"][0])
    node = GroupShape(8, 8)  # NVLS is the faster at 8 GPUs
    assert h.time("all_reduce", s, node) == pytest.approx(2 * h.alpha_up + s / (450e9 * h.eff["all_reduce"][0]))
    # across nodes the ring's NVLink part runs at the ring's rate, its NIC part at the all-reduce's scale-out one
    span = GroupShape(16, 8)
    ring = 2 * 15 / 16 * s
    bw = max(ring / (450e9 * h.eff["reduce_scatter"][0]), ring / (8 * 50e9 * h.eff["all_reduce"][1]))
    assert h.time("all_reduce", s, span) == pytest.approx(14 * h.alpha_up + 2 * h.alpha_out + bw)


def test_across_domains_each_member_brings_its_nic_share() -> None:
    h = links("h100-80gb")
    s = 1e10
    one_per_node = h.time("reduce_scatter", s, GroupShape(8, 1))
    full_nodes = h.time("reduce_scatter", s, GroupShape(64, 8))
    nic = 8 * 50e9 / 8
    e = h.eff["reduce_scatter"][1]
    assert one_per_node == pytest.approx(3 * h.alpha_out + 7 / 8 * s / (nic * e))
    ring = 63 / 64 * s  # full nodes: the ring runs at the slower of NVLink and 8 NIC shares
    bw_term = max(ring / (450e9 * h.eff["reduce_scatter"][0]), ring / (8 * nic * e))
    assert full_nodes == pytest.approx(7 * h.alpha_up + 3 * h.alpha_out + bw_term)
    a2a = h.time("all_to_all", s, GroupShape(16, 8))
    assert a2a == pytest.approx(h.alpha_out + 8 / 16 * s / (nic * h.eff["all_to_all"][1]))


def test_single_rank_groups_cost_nothing() -> None:
    h = links("h100-80gb")
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"):
        assert h.time(kind, 1e9, GroupShape(1, 1)) == 0.0
    with pytest.raises(ValueError):
        h.time("broadcast", 1e9, GroupShape(2, 2))


def test_deduplicating_dispatch_sends_each_token_once_per_remote_domain() -> None:
    h = links("h100-80gb")
    unique = 1e8  # bytes of this rank's distinct tokens
    group = GroupShape(16, 8)  # EP 16 over two nodes
    flex = h.time("dispatch", unique, group, fanout=8)
    hit = 1 - (1 - 1 / 2) ** 8  # the chance a token needs the other node at all
    nic = 50e9 * h.eff["all_to_all"][1]
    assert flex >= hit * unique / nic
    plain = h.time("all_to_all", unique * 8, group)  # the same tokens as top-k copies
    assert flex < plain / 3
    assert h.time("dispatch", unique, GroupShape(8, 8), fanout=8) == pytest.approx(
        h.alpha_up + 8 * 7 / 8 * unique / (450e9 * h.eff["all_to_all"][0]))
