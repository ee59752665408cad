"""Error feedback as a wrapper around any one-round compressor (``compressor.error_feedback=true``).

Per bucket it keeps the residual ``e`` of what compression dropped: the compressor is given
``x + e`` and afterwards ``e <- (x + e) - local(payload)``, so what is sent plus the new residual
always equals the input plus the old residual (Seide et al. 2014; Karimireddy et al. 2019). The
residuals are per bucket and part of :meth:`state_dict` (checkpoints)."""
from __future__ import annotations

from typing import Dict

import torch

from workbench.compress.base import Compressor


class ErrorFeedback(Compressor):
    def __init__(self, inner: Compressor) -> None:
        super().__init__(inner.cfg, inner.rank, inner.world, inner.seed)
        self.inner = inner
        self.name = inner.name
        self.collective = inner.collective
        self.category = inner.category
        self.carries, self.point_to_point = inner.carries, inner.point_to_point
        self.errors: Dict[int, torch.Tensor] = {}

    def encode(self, x, info):
        e = self.errors.get(info.index)
        corrected = x + e if e is not None and e.shape == x.shape else x.clone()
        payload, ctx = self.inner.encode(corrected, info)
        self.errors[info.index] = corrected.sub_(self.inner.local(payload, ctx, info))
        return payload, ctx

    def decode(self, received, ctx, info):
        return self.inner.decode(received, ctx, info)

    def local(self, payload, ctx, info):
        return self.inner.local(payload, ctx, info)

    def receive(self, payload, n, info):
        return self.inner.receive(payload, n, info)

    def p2p_context(self, n):
        return self.inner.p2p_context(n)

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "errors": {k: v.detach().cpu().clone() for k, v in self.errors.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state.get("inner", {}))
        self.errors = {int(k): v.clone() for k, v in state.get("errors", {}).items()}
