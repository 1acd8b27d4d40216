"""nn.Linear with its weight in oneDNN's packed layout (esp.models.cpu_kernels decides where it is used)."""
from __future__ import annotations

import copy
import functools

import torch

DTYPES = (torch.float32, torch.bfloat16)  # the dtypes oneDNN's packed linear takes


@functools.cache
def packing_op(dtype: torch.dtype = torch.float32):
    """oneDNN's (reorder, linear) ops for weights in `dtype`, inductor's internal ones, or None where this torch
    lacks them, or this CPU cannot pack that dtype (bfloat16 needs AVX512-BW/VL/DQ or AVX-NE-CONVERT: an AVX2-only
    CPU refuses it), or their first call, on a packed weight or a plain one, does not answer as F.linear does
    (checked once a process per dtype)."""
    ops = torch.ops.mkldnn
    if dtype not in DTYPES or not torch.backends.mkldnn.is_available() or not hasattr(ops, "_linear_pointwise"):
        return None
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    try:
        a, w = torch.randn(3, 8).to(dtype), torch.randn(5, 8).to(dtype)
        want = a.float() @ w.float().T
        ok = all(torch.allclose(ops._linear_pointwise(a, weight, None, "none", [], "").float(), want, atol=tol, rtol=tol)
                 for weight in (w, ops._reorder_linear_weight(w)))
    except RuntimeError:
        ok = False
    return (ops._reorder_linear_weight, ops._linear_pointwise) if ok else None


class PackedLinear(torch.nn.Linear):
    """An nn.Linear whose weight is kept in oneDNN's packed layout, for inference on the CPU. Its dense weight is
    kept only when another module shares it (a head tied to the embeddings); else the packed copy replaces it.
    A move or a cast (`.to`, `.half`, ...) first turns it back into a dense linear, and a deep copy is dense."""

    def __init__(self, linear: torch.nn.Linear, keep_dense: bool):
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        reorder, self._linear = packing_op(linear.weight.dtype)
        self.packed = reorder(linear.weight.detach())
        self.register_parameter("weight", linear.weight if keep_dense else None)
        self.register_parameter("bias", linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:  # moved or cast since (`_apply`)
            return torch.nn.functional.linear(x, self.dense(), self.bias)
        return self._linear(x, self.packed, self.bias, "none", [], "")

    def dense(self) -> torch.Tensor:
        """The weight as an ordinary tensor (the packed one read back exactly when it was not kept)."""
        return self.weight if self.weight is not None else self.packed.to_dense()

    def _apply(self, fn, recurse: bool = True):
        if self.packed is not None:  # moved or cast: a dense linear from here on
            self.weight = torch.nn.Parameter(self.dense(), requires_grad=False)
            self.packed = None
        return super()._apply(fn, recurse)

    def __deepcopy__(self, memo: dict) -> torch.nn.Linear:
        copy_ = torch.nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        copy_.weight = copy.deepcopy(self.weight, memo) if self.weight is not None else \
            torch.nn.Parameter(self.dense().clone(), requires_grad=False)
        if self.bias is not None:
            copy_.bias = torch.nn.Parameter(self.bias.detach().clone(), requires_grad=False)
        memo[id(self)] = copy_
        return copy_

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "weight"] = self.dense()
