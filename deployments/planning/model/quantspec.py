"""``QuantSpec``: how a quantized checkpoint stores one linear weight once vLLM has loaded it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """How one quantized linear weight is stored per element, plus its per-group extras."""

    method: str
    weight_bits: int
    group_size: int  # -1: one scale per output channel; 0: one per tensor
    scale_bytes: int
    zero_bits: int  # bits of a zero point per group (0: symmetric)
    experts_only: bool = False  # mxfp4: only MoE experts are quantized
    block: tuple[int, int] | None = None  # fp8 block-wise scales
    tensor_scale_bytes: int = 0  # per-tensor fp32 scales (modelopt weight_scale_2, input_scale)
    attention_quantized: bool = True  # False: the checkpoint keeps attention in 16 bits
    kv_cache_dtype: str = ""  # KV dtype the checkpoint asks for when --kv-cache-dtype is auto
    float_weights: bool = False  # fp4/fp8 element format (MXFP4, NVFP4), not integers (AWQ, NF4)
    warning: str = ""  # set when the method is unknown and the bytes are a best estimate

    @property
    def fp4(self) -> bool:
        """4-bit floating-point weights (MXFP4, NVFP4 from ModelOpt or compressed-tensors),
        whatever the method is called: a ModelOpt FP8 checkpoint is not FP4, an int4 one neither."""
        return self.float_weights and self.weight_bits == 4

    def linear_bytes(self, in_features: int, out_features: int) -> int:
        """Bytes of a quantized ``in_features × out_features`` weight with its scales/zeros."""
        weight = in_features * out_features * self.weight_bits // 8
        groups = self._groups(in_features, out_features)
        extras = groups * self.scale_bytes + groups * self.zero_bits // 8
        return weight + extras + self.tensor_scale_bytes

    def _groups(self, in_features: int, out_features: int) -> int:
        if self.block is not None:
            return -(-out_features // self.block[0]) * -(-in_features // self.block[1])
        if self.group_size == 0:
            return 1
        if self.group_size < 0:
            return out_features
        return -(-in_features // self.group_size) * out_features
