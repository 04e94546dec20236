"""KV-cache link between a prompt machine and a token machine, per hardware type.

Bandwidth: the slower side's NICs, ``devices x per-GPU scale-out bandwidth x scale-out efficiency``
(each profile's ``scale_out`` figures), so a DGX-A100 pair (8 x 200 Gb/s HDR) and a DGX-H100 pair
(8 x 400 Gb/s NDR) differ by 2x, as in Splitwise's Table I.

Exposed time of a layer-wise transfer: Splitwise measured the part that does not overlap with the
prefill as a constant ~8 ms on DGX-A100 and ~5 ms on DGX-H100 (Sec. 6.1, Figs. 14-15; bundled in
``planner/data/kv_transfer.yaml``). Other hardware takes the line through those two points in
``1 / NIC bandwidth``: ``t = a + b / BW`` with ``b = (8 - 5) ms / (1/200 - 1/400) (Gb/s)^-1
= 1.2 s Gb/s`` and ``a = 8 ms - b / 200 = 2 ms`` (a fixed synchronisation part plus the last
layer's chunk, which scales with the link). A pair of different machines takes the slower side.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import yaml

from planner.catalog.hardware import HardwareProfile


@cache
def _measured() -> dict[str, tuple[float, float]]:
    """{hardware: (exposed seconds, NIC Gb/s)} from the bundled Splitwise measurements."""
    raw = yaml.safe_load(files("planner").joinpath("data/kv_transfer.yaml").read_text())
    return {k: (float(v["exposed_s"]["value"]), float(v["nic_gbps"]["value"])) for k, v in raw.items()}


def _fit() -> tuple[float, float]:
    """(a seconds, b seconds x Gb/s) of ``t = a + b / BW`` through the two measured machines."""
    (t1, bw1), (t2, bw2) = _measured()["a100-80g"], _measured()["h100-sxm"]
    b = (t1 - t2) / (1 / bw1 - 1 / bw2)
    return t1 - b / bw1, b


def nic_gbps(hw: HardwareProfile) -> float:
    """Per-GPU scale-out bandwidth per direction, Gb/s (the profile's datasheet figure)."""
    return hw.scale_out.bandwidth_per_direction.value * 8 / 1e9


def exposed_overhead_s(name: str, hw: HardwareProfile) -> float:
    """Non-overlapped seconds of a layer-wise KV transfer sent from or to machine ``name``."""
    known = _measured().get(name)
    if known is not None:
        return known[0]
    a, b = _fit()
    return a + b / nic_gbps(hw)


def pair_overhead_s(prompt: tuple[str, HardwareProfile], token: tuple[str, HardwareProfile]) -> float:
    """Exposed layer-wise cost of a prompt -> token pair: the slower side's."""
    return max(exposed_overhead_s(*prompt), exposed_overhead_s(*token))


def link_bytes_per_s(prompt_hw: HardwareProfile, prompt_devices: int, token_hw: HardwareProfile,
                     token_devices: int) -> float:
    """Bytes/s one prompt instance can push to one token instance: the slower side's NICs."""
    return min(hw.scale_out.bandwidth_per_direction.value * hw.efficiency.scale_out.value * n
               for hw, n in ((prompt_hw, prompt_devices), (token_hw, token_devices)))
