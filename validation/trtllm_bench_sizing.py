"""The engine sizes trtllm-bench chose for each run of TensorRT-LLM's Performance Overview.

``trtllm-bench throughput`` does not run the engine defaults: before a run it sizes the engine's
``max_batch_size`` and ``max_num_tokens`` from the model, the parallel mapping and the dataset's
lengths (TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py``, ``calc_engine_setting`` and
``finetune_setting``, the PyTorch-backend version):

* KV bytes per token ``2 L max(tp, h_kv) d b_kv``; engine size ``params x b_w`` (FP8 1 byte,
  NVFP4 0.5); requests the KV cache holds: ``0.95 (GPU memory x tp x pp - engine) / (per token x
  (ISL + OSL))``;
* ``raw_bs = min(requests, 4096) / pp``, ``raw_tokens = min(raw_bs (1 + ISL/OSL), 32768)``;
* batch size rounded up, optimistically: below 256 to a multiple of 32 (at least 64), below 1,024
  to 128, else 256; tokens rounded up: below 4,096 to 256 (at least 2,048), below 8,192 to 512,
  else 1,024.

Those are facts of how each published point was run (not fitted), so the points carry them as
``max_num_seqs`` / ``max_batched_tokens``. GPU memory is the profile's (the driver's binary
capacity, as ``torch.cuda`` reports it). Run from the repository root:
``python validation/trtllm_bench_sizing.py`` rewrites the two fields of every trtllm-bench point
(``FILES``: the v1.0 page's in ``validation/measurements.yaml``, the v0.17 page's Mixtral rows, whose
C++-engine builds ran the same sizing); ``tests/test_validate.py`` checks the files agree.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

FILE = Path(__file__).resolve().parent / "measurements.yaml"
# the measurements files holding trtllm-bench runs, and their runs' source key
FILES = {FILE: "trtllm_perf_2025",
         Path(__file__).resolve().parent / "measurements" / "trtllm-perf-v017-mixtral.yaml": "trtllm_perf_v017"}
BYTES = {"fp8": 1.0, "fp4": 0.5, "bf16": 2.0, "fp16": 2.0}
GIB = 1024 ** 3


def sizing(model: str, hardware: str, tp: int, pp: int, weight_dtype: str, kv_dtype: str, isl: int,
           osl: int) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) as trtllm-bench sets them."""
    import planner
    from planner.perf.params import parameter_counts

    m, hw = planner.model(model), planner.hardware(hardware)
    per_token_gib = 2 * m.num_attention_layers * max(tp, m.num_kv_heads) * m.head_dim * BYTES[kv_dtype] / GIB
    engine_gib = parameter_counts(m)[0] * BYTES[weight_dtype] / GIB
    available_gib = hw.memory.capacity.value / GIB * tp * pp - engine_gib
    requests = 0.95 * available_gib / (per_token_gib * (isl + osl))
    raw_bs = min(requests, 4096) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return bs, tokens


_FIELD = re.compile(r"(\w+): ([^,}]+)")


def rewrite(text: str, source: str = "trtllm_perf_2025") -> str:
    """``text`` with every trtllm-bench point's (``source``) ``max_num_seqs`` / ``max_batched_tokens`` set."""
    out = []
    for line in text.splitlines(keepends=True):
        if f"source: {source}" in line and line.lstrip().startswith("- {id:"):
            f = dict(_FIELD.findall(line))
            line = re.sub(r" max_num_seqs: \d+, max_batched_tokens: \d+,", "", line)
            bs, tokens = sizing(f["model"], f["hardware"], int(f.get("tp", 1)), int(f.get("pp", 1)),
                                f["weight_dtype"], f["kv_dtype"], int(f["input_len"]), int(f["output_len"]))
            line = line.replace(" metric:", f" max_num_seqs: {bs}, max_batched_tokens: {tokens}, metric:", 1)
        out.append(line)
    return "".join(out)


if __name__ == "__main__":
    for path, key in FILES.items():
        path.write_text(rewrite(path.read_text(), key))
        print(f"rewrote {path}")
