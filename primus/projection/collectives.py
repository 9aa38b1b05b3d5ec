"""Alpha-beta cost of one collective on a group whose placement is known.

Links (all figures from the hardware entry, per GPU and per direction):

- inside a scale-up domain: a switch (NVSwitch) gives every GPU its full `bandwidth_gb_s` to any
  peer; a full mesh (Infinity Fabric) gives one link of `bandwidth_gb_s / links_per_gpu` per peer, so
  a group of k GPUs on the mesh can use k − 1 links and a point-to-point transfer uses one;
- across domains: each GPU's share of its node's NICs, `nics_per_node × nic_bandwidth_gb_s /
  gpus_per_node` (every GPU of a node runs the same collective at the same time, so they share).

Algorithms (bandwidth terms; the textbook ring costs NCCL's tuning model also uses):

- all-gather / reduce-scatter of an S-byte (full) tensor over N ranks: every rank moves (N−1)/N·S.
  A ring spanning domains with k members per domain crosses each domain boundary once per ring and
  NCCL runs one ring per NIC, so the k members' NIC shares carry it: bandwidth min(intra, k × NIC);
- all-reduce: a reduce-scatter then an all-gather (NCCL's ring), each at its own efficiency, or, with
  in-switch reduction (NVLink SHARP) inside one domain, the faster of that and S each way (each GPU sends
  its buffer to the switch once and reads the sum once) at the all-reduce efficiency, which is measured
  for that algorithm (NCCL's tuner picks the fastest: the ring wins for 2 GPUs);
- all-to-all of S bytes per rank: (k−1)/N·S stays in the domain, (N−k)/N·S leaves it over the NIC share;
- "dispatch" (a deduplicating token dispatcher such as DeepEP, Megatron's `flex`): S bytes of unique
  tokens per rank, each routed to `fanout` (top-k) experts spread uniformly over the group's D domains,
  crosses to each distinct remote domain it needs once — on average (D−1)·(1 − (1 − 1/D)^fanout) times
  — over the NIC share, and fans out to its experts inside a domain over the scale-up links
  (fanout·(k−1)/k·S); it uses the all-to-all efficiencies. Inside a domain this is the per-copy
  volume an all-to-all moves, not DeepEP's: DeepEP's dispatch layout (`is_token_in_rank`) sends a token
  once to each distinct rank, (N − D)·(1 − (1 − 1/N)^fanout)·S per rank, 26% less on one 8-GPU node at
  top-6. Priced that way at the all-to-all efficiency, every flex row of the dev set and of AMD's runs
  reads faster (the single-node EP 8 ones by 7–15 points, most already over-projected); no DeepEP
  bandwidth per accelerator was found, so the per-copy volume stands in (docs/accuracy.md, AMD section);
- point-to-point of S bytes: one message over one path.

Latency (alpha): one `latency_us` of the tier per algorithm step: k − 1 ring steps inside a domain,
plus ⌈log2(domains)⌉ steps across (NCCL switches to tree/PAT algorithms of logarithmic depth at scale),
doubled for an all-reduce; one step for all-to-all (its point-to-point transfers are issued together)
and for point-to-point. Each bandwidth term is divided by the profile's efficiency for that collective
and tier: the achieved fraction of the wire rate (NCCL-tests bus bandwidth / link bandwidth).
"""

from __future__ import annotations

import math

from primus.projection.placement import GroupShape
from primus.projection.profile import Profile
from primus.specs.hardware import ClusterSpec

GB = 1e9


class LinkModel:
    """Bandwidths and latencies of one cluster, with the profile's per-collective efficiencies."""

    def __init__(self, cluster: ClusterSpec, profile: Profile) -> None:
        su, so = cluster.scaleup, cluster.scaleout
        self.switched = su.topology == "switched"
        self.bw_up = su.bandwidth_gb_s * GB
        self.bw_link = su.bandwidth_gb_s * GB / su.links_per_gpu
        self.in_switch = su.in_switch_reduction and self.switched
        self.bw_nic = so.nics_per_node * so.nic_bandwidth_gb_s * GB / cluster.gpus_per_node
        self.alpha_up = su.latency_us * 1e-6
        self.alpha_out = so.latency_us * 1e-6
        self.eff = {kind: (float(getattr(profile.collectives, kind).scaleup.value),
                           float(getattr(profile.collectives, kind).scaleout.value))
                    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")}
        self.eff["dispatch"] = self.eff["all_to_all"]

    def intra_bw(self, k: int) -> float:
        """Bandwidth one GPU can drive to the other k − 1 members of its group inside a domain."""
        return self.bw_up if self.switched else self.bw_link * (k - 1)

    def time(self, kind: str, nbytes: float, group: GroupShape, fanout: int = 1) -> float:
        """Seconds for one `kind` collective of `nbytes` (see the module docstring for its meaning)."""
        if kind not in self.eff:
            raise ValueError(f"unknown collective {kind!r}")
        n = group.size
        if n <= 1 or nbytes <= 0:
            return 0.0
        k = group.per_domain
        doms = group.domains
        e_up, e_out = self.eff[kind]
        cross = doms > 1
        inter_steps = math.ceil(math.log2(doms)) if cross else 0
        if kind == "p2p":
            if cross:
                return self.alpha_out + nbytes / (self.bw_nic * e_out)
            bw = self.bw_up if self.switched else self.bw_link
            return self.alpha_up + nbytes / (bw * e_up)
        if kind == "dispatch":
            hit = (doms - 1) * (1 - (1 - 1 / doms) ** fanout)
            t_in = fanout * (k - 1) / k * nbytes / (self.intra_bw(k) * e_up) if k > 1 else 0.0
            t_out = hit * nbytes / (self.bw_nic * e_out) if cross else 0.0
            return (self.alpha_out if cross else self.alpha_up) + max(t_in, t_out)
        if kind == "all_to_all":
            t_in = (k - 1) / n * nbytes / (self.intra_bw(k) * e_up) if k > 1 else 0.0
            t_out = (n - k) / n * nbytes / (self.bw_nic * e_out) if cross else 0.0
            return (self.alpha_out if cross else self.alpha_up) + max(t_in, t_out)
        ring = (n - 1) / n * nbytes
        steps_up = k - 1
        if kind == "all_reduce":
            # NCCL's ring: a reduce-scatter then an all-gather, twice the volume and the steps, its in-domain
            # part at the rate a ring runs there (the reduce-scatter's efficiency) and its scale-out part at
            # the all-reduce's own; with in-switch reduction inside one domain NCCL's tuner takes NVLS, S each
            # way at the all-reduce's scale-up efficiency (measured for that algorithm), where it is faster
            # (above 2 GPUs at the shipped efficiencies)
            ring *= 2
            steps_up *= 2
            inter_steps *= 2
            nvls = 2 * self.alpha_up + nbytes / (self.bw_up * e_up) if self.in_switch and not cross else math.inf
            e_up = self.eff["reduce_scatter"][0]
            t_in = ring / (self.intra_bw(k) * e_up) if k > 1 else 0.0
            t_out = ring / (k * self.bw_nic * e_out) if cross else 0.0
            return min(nvls, steps_up * self.alpha_up + inter_steps * self.alpha_out + max(t_in, t_out))
        t_in = ring / (self.intra_bw(k) * e_up) if k > 1 else 0.0
        t_out = ring / (k * self.bw_nic * e_out) if cross else 0.0
        return steps_up * self.alpha_up + inter_steps * self.alpha_out + max(t_in, t_out)
