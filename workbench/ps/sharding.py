"""Which server holds which parameter: whole tensors, balanced by size.

A tensor is never split (as in MXNet's kvstore for small keys and ps-lite's default), so a server's
shard is a list of whole parameters, flattened into one contiguous buffer for the wire. Placement
is longest-processing-time greedy: the largest tensors first, each to the server holding the fewest
elements so far. For S servers the heaviest shard is then at most 4/3 of the optimum (Graham), and
never more than the lightest plus one tensor.
"""
from __future__ import annotations

from typing import List, Sequence

import torch


def balance(sizes: Sequence[int], num_servers: int) -> List[List[int]]:
    """Indices of ``sizes`` held by each of ``num_servers`` servers (each list in index order).
    Ties go to the lower server, so every rank computes the same placement."""
    if num_servers < 1:
        raise ValueError(f"num_servers must be >= 1, got {num_servers}")
    load = [0] * num_servers
    owned: List[List[int]] = [[] for _ in range(num_servers)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        s = min(range(num_servers), key=lambda k: (load[k], k))
        owned[s].append(i)
        load[s] += sizes[i]
    return [sorted(o) for o in owned]


class ShardLayout:
    """The placement of a list of parameter shapes on ``num_servers`` servers, with the flatten /
    unflatten of each server's shard."""

    def __init__(self, shapes: Sequence[torch.Size], num_servers: int) -> None:
        self.shapes = [torch.Size(s) for s in shapes]
        self.sizes = [s.numel() for s in self.shapes]
        self.num_servers = num_servers
        self.owned = balance(self.sizes, num_servers)

    @classmethod
    def of(cls, params: Sequence[torch.Tensor], num_servers: int) -> "ShardLayout":
        return cls([p.shape for p in params], num_servers)

    def numel(self, server: int) -> int:
        return sum(self.sizes[i] for i in self.owned[server])

    def shard_shapes(self, server: int) -> List[torch.Size]:
        return [self.shapes[i] for i in self.owned[server]]

    def flatten(self, tensors: Sequence[torch.Tensor], server: int, out: torch.Tensor = None) -> torch.Tensor:
        """Server ``server``'s tensors, concatenated into one CPU float buffer (GPU tensors are
        staged through host memory here: the servers are CPU processes)."""
        parts = [tensors[i].detach().reshape(-1) for i in self.owned[server]]
        if out is None:
            out = torch.empty(self.numel(server), dtype=parts[0].dtype if parts else torch.float32)
        o = 0
        for p in parts:
            out[o:o + p.numel()].copy_(p)
            o += p.numel()
        return out

    def unflatten_into(self, flat: torch.Tensor, tensors: Sequence[torch.Tensor], server: int) -> None:
        """Copy a server's flat buffer back into the matching tensors (on any device)."""
        o = 0
        for i in self.owned[server]:
            n = self.sizes[i]
            tensors[i].data.copy_(flat[o:o + n].view(self.shapes[i]))
            o += n

    def views(self, flat: torch.Tensor, server: int) -> List[torch.Tensor]:
        """Views of a server's flat buffer shaped like its tensors (no copy)."""
        out, o = [], 0
        for shape in self.shard_shapes(server):
            n = shape.numel()
            out.append(flat[o:o + n].view(shape))
            o += n
        return out
