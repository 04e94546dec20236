"""Numeric formats of weights, activations and KV cache."""

from __future__ import annotations

from enum import Enum


class DType(str, Enum):
    """A numeric format. The value is the catalog spelling; ``bytes`` is its storage size."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    fp6 = "fp6"      # OCP MXFP6 (E2M3/E3M2) weights: 6 bits
    fp4 = "fp4"
    int4 = "int4"

    @property
    def bytes(self) -> float:
        return _BYTES[self]


_BYTES = {
    DType.fp32: 4.0, DType.bf16: 2.0, DType.fp16: 2.0, DType.fp8: 1.0,
    DType.int8: 1.0, DType.fp6: 0.75, DType.fp4: 0.5, DType.int4: 0.5,
}
