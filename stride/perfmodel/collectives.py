"""Alpha-beta cost of collectives, per algorithm and per link level.

A `Link` is the bottleneck path of a process group: latency `alpha_s` per step and bandwidth
`bw` (bytes/s, one direction, per device). `group_link` picks it from where the group's ranks
sit: all inside one scale-up domain -> the scale-up link; spread over domains -> scale-out,
where the k ranks of a domain drive k NICs in parallel (NCCL's rings/trees cross each domain
through every rail), capped by the scale-up link that feeds them.

Closed forms (n ranks, S bytes of the full buffer):
  ring all-reduce       2(n-1) alpha + 2(n-1)/n S/bw
  ring reduce-scatter / all-gather   (n-1) alpha + (n-1)/n S/bw
  tree all-reduce (pipelined double binary tree)  2 ceil(log2 n) alpha + 2 S/bw
  point-to-point        alpha + S/bw
  all-to-all (S bytes held by each rank)   (n-1) alpha + max(inside-domain share / scale-up bw,
                                            other-domain share / the rank's own NIC)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stride.perfmodel.hardware import MESHES, Hardware

ALGORITHMS = ("ring", "tree")


@dataclass(frozen=True)
class Link:
    name: str  # "scale-up" | "scale-out" | "local"
    bw: float  # bytes/s per device, one direction
    alpha_s: float


def mesh_fraction(hw: Hardware, per_domain: int, stride: int) -> float:
    """Share of a device's scale-up bandwidth a group gets on `hw`'s mesh: the fewest links any member has to the
    other members of its group (every group of the board: the slowest sets the pace), over the links a device has,
    and at least one link's worth: a member with no link to the others (a group of 3, a pipeline hop from GPU 3 to
    GPU 4 of a DGX-1) reaches them through a GPU linked to both (NCCL's NVB path) or over PCIe (16 GB/s at Gen3 x16),
    assumed one link. 1.0 on a switch, or on a board size the mesh has no table for (a DGX-2's 16 V100s meet
    through NVSwitch)."""
    table = MESHES.get(hw.scaleup_mesh, {}).get(hw.scaleup_domain)
    if table is None or per_domain <= 1:
        return 1.0
    n = len(table)
    groups = (list(range(start, n, stride))[:per_domain]  # every group of the board, by its first rank
              for start in range(n) if start % (stride * per_domain) < stride)
    fewest = min(sum(table[i][j] for j in group if j != i) for group in groups for i in group)
    return max(fewest, 1) / sum(table[0])


def group_link(hw: Hardware, size: int, stride: int = 1, net_efficiency: float = 1.0) -> Link:
    """Bottleneck link of a group of `size` ranks spaced `stride` apart in rank order.

    Ranks are packed into scale-up domains of `hw.scaleup_domain` devices in order. Each level runs
    at the bus bandwidth NCCL reaches on it (the catalog's `*_busbw_fraction` of line rate) times the
    `network` efficiency factor (1.0 = as published); on a mesh (`scaleup_mesh`), a group's share of the
    scale-up links (`mesh_fraction`)."""
    if size <= 1:
        return Link("local", math.inf, 0.0)
    domain = hw.scaleup_domain
    per_domain = max(1, min(size, domain // stride)) if stride < domain else 1
    up_bw = hw.scaleup_bw_gbps * 1e9 * hw.scaleup_busbw_fraction * net_efficiency \
        * mesh_fraction(hw, per_domain, stride)
    if per_domain >= size:
        return Link("scale-up", up_bw, hw.scaleup_latency_us * 1e-6)
    out_bw = min(up_bw, per_domain * hw.scaleout_bw_gbps * 1e9 * hw.scaleout_busbw_fraction * net_efficiency)
    return Link("scale-out", out_bw, hw.scaleout_latency_us * 1e-6)


# What one NCCL channel (one CTA) moves, GB/s per direction, for a communicator whose CTAs a run caps (NCCL's
# per-communicator `max_ctas`, e.g. Megatron-Core's `nccl_communicator_config_path`; NCCL_MAX_CTAS globally).
# NCCL (NVIDIA/nccl 5067397c) models one NVLink link's effective bandwidth as SM70/SM80 20.0, SM90 20.6, SM100
# 40.1 GB/s (src/graph/topo.h:20-24) and sizes a send/recv to an NVLink peer in channels per link
# (src/graph/paths.cc:935-937); one channel is taken to move one link's worth (assumed: no published single-CTA
# figure was found). A send/recv over the network runs 14 GB/s per channel (NCCL_P2P_PER_CHANNEL_NET_BW default,
# src/graph/paths.cc:918). Parts NCCL does not run on (RCCL, TPU, Gaudi) have no entry: no cap applied.
NCCL_CHANNEL_GBPS = {"volta": 20.0, "ampere": 20.0, "ada": 20.0, "hopper": 20.6, "blackwell": 40.1}
NCCL_NET_CHANNEL_GBPS = 14.0


def channel_capped(link: Link, hw: Hardware, channels: int, net_efficiency: float = 1.0) -> Link:
    """`link` as a communicator limited to `channels` NCCL channels sees it (0: no cap, NCCL's own count)."""
    per = NCCL_CHANNEL_GBPS.get(hw.generation)
    if channels <= 0 or per is None or link.name == "local":
        return link
    if link.name == "scale-out":
        per = NCCL_NET_CHANNEL_GBPS
    return Link(link.name, min(link.bw, channels * per * 1e9 * net_efficiency), link.alpha_s)


def _check(n: int, nbytes: float) -> None:
    if n < 1:
        raise ValueError(f"group size must be >= 1, got {n}")
    if nbytes < 0:
        raise ValueError(f"bytes must be >= 0, got {nbytes}")


def all_reduce_time(nbytes: float, n: int, link: Link, algo: str = "ring") -> float:
    _check(n, nbytes)
    if n == 1 or nbytes == 0:
        return 0.0
    if algo == "ring":
        return 2 * (n - 1) * link.alpha_s + 2 * (n - 1) / n * nbytes / link.bw
    if algo == "tree":
        return 2 * math.ceil(math.log2(n)) * link.alpha_s + 2 * nbytes / link.bw
    raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algo!r}")


def reduce_scatter_time(nbytes: float, n: int, link: Link) -> float:
    """Ring reduce-scatter of an `nbytes` buffer (each rank ends with nbytes/n)."""
    _check(n, nbytes)
    if n == 1 or nbytes == 0:
        return 0.0
    return (n - 1) * link.alpha_s + (n - 1) / n * nbytes / link.bw


def all_gather_time(nbytes: float, n: int, link: Link) -> float:
    """Ring all-gather producing an `nbytes` buffer on every rank."""
    return reduce_scatter_time(nbytes, n, link)


def all_to_all_time(nbytes: float, n: int, hw: Hardware, stride: int = 1, net_efficiency: float = 1.0) -> float:
    """All-to-all over `n` ranks spaced `stride` apart: each holds `nbytes` and sends 1/n of it to every other rank
    (NCCL runs it as n - 1 concurrent send/recv pairs). Peers inside this rank's scale-up domain are reached over
    it; the share bound for other domains leaves through this rank's own NIC (one NIC a device, rail-optimised).
    Unlike a ring's traffic, which crosses a domain through all k of its NICs at once (`group_link`), every device
    sends its own share: the k NICs are not pooled. The two parts run at once; the slower decides."""
    _check(n, nbytes)
    if n == 1 or nbytes == 0:
        return 0.0
    domain = hw.scaleup_domain
    inside = max(1, min(n, domain // stride)) if stride < domain else 1
    up_bw = hw.scaleup_bw_gbps * 1e9 * hw.scaleup_busbw_fraction * net_efficiency
    t_up = (inside - 1) / n * nbytes / up_bw
    if inside >= n:
        return (n - 1) * hw.scaleup_latency_us * 1e-6 + t_up
    out_bw = min(up_bw, hw.scaleout_bw_gbps * 1e9 * hw.scaleout_busbw_fraction * net_efficiency)
    return (n - 1) * hw.scaleout_latency_us * 1e-6 + max(t_up, (n - inside) / n * nbytes / out_bw)


def p2p_time(nbytes: float, link: Link) -> float:
    _check(1, nbytes)
    if nbytes == 0 or link.name == "local":
        return 0.0
    return link.alpha_s + nbytes / link.bw


def best_all_reduce_time(nbytes: float, n: int, link: Link) -> tuple[float, str]:
    """What NCCL's tuner does in spirit: the cheaper of ring and tree for this size."""
    ring, tree = all_reduce_time(nbytes, n, link, "ring"), all_reduce_time(nbytes, n, link, "tree")
    return (ring, "ring") if ring <= tree else (tree, "tree")


def all_reduce_bytes_per_device(nbytes: float, n: int) -> float:
    """Bytes each device sends in a ring all-reduce (the communication volume per link)."""
    return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes
