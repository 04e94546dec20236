"""Microbenchmark sweeps replayed through the roofline, so each hardware profile's factors can be
checked against the public measurements they were fitted on (``validation/microbenchmarks/``).

``gemm_sweeps()`` times every GEMM shape sweep with ``op_time`` and the device's profile (its
``gemm`` plateau and ``kernel_latency``). A sweep file may state a per-call floor of its harness
(``# harness_floor_us: X`` with the evidence beside it): shapes timed within 10% of it measure the
harness, not the kernel, and are listed, not scored; ``decode_attention_sweeps()`` times batched
paged decode-attention calls the same way (the profile's decode HBM fraction, its context term
and the kernel latency). ``allreduce_sweeps()`` fits the alpha-beta
form to all-reduce bus-bandwidth sweeps; ``attention_sweep()`` fits Hockney's form to a
FlashAttention sequence-length sweep.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from planner.catalog.dtypes import DType
from planner.catalog.frameworks import _frameworks, framework
from planner.catalog.hardware import hardware, microbenchmarks_dir, sweep_columns


def _stated(path: Path, key: str) -> float | None:
    """The number a sweep file states in a ``# key: X (why)`` comment line, if it states one
    (``harness_floor_us``: its harness's per-call floor; ``half_keys``: the attention half length
    a sweep of long sequences cannot fix)."""
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}:"):
            return float(line.split(":", 1)[1].split()[0])
    return None


def _above_floor(path: Path, time_s: np.ndarray) -> np.ndarray:
    """Which timed calls of the sweep in ``path`` measure the kernel: those more than 10% above the
    per-call floor its harness states (``harness_floor_us``; none stated: every call)."""
    return time_s > 1.1 * (_stated(path, "harness_floor_us") or 0.0) * 1e-6


def _as_timed(profile: str, label: str):
    """Profile ``profile`` as the sweep's calls saw it: through the framework entry its file label
    names where it names one (the sweep timed that engine's path), else the bare profile."""
    hw = hardware(profile)
    return framework(label).apply(hw) if label in _frameworks() else hw


def gemm_sweep(path: Path) -> dict:
    """Predicted vs measured throughput of the GEMM shapes in ``path`` (``<profile>-gemm-<dtype>.csv``,
    or ``<profile>-gemm-<dtype>-<label>.csv`` for a second source of the same format, with columns
    m, n, k, tflops), each shape timed by ``op_time`` as one kernel; a label that names a framework
    entry (``b200-gemm-fp4-vllm.csv``) replays the shapes through that entry. An optional fifth
    column, groups, makes a row one grouped (MoE) GEMM: m tokens in all over that many experts of k x
    n weights each, at the profile's grouped share of the plateau. Shapes whose measured time is
    within 10% of the file's stated harness floor are not scored."""
    from planner.perf.ops import DTypes, Op, OpKind
    from planner.perf.roofline import op_time

    profile, _, dtype = path.stem.partition("-gemm-")
    dtype, _, label = dtype.partition("-")
    hw, dt = _as_timed(profile, label), DType(dtype)
    columns = sweep_columns(path)
    m, n, k, measured = columns[:4]
    groups = columns[4] if len(columns) > 4 else np.ones_like(m)
    flops = 2.0 * m * n * k
    op = Op("gemm", OpKind.gemm, 1, flops=flops, weight_bytes=groups * k * n * dt.bytes,
            act_bytes=m * (k + n) * dt.bytes, grouped=len(columns) > 4)
    predicted = flops / op_time(hw, op, DTypes(weight=dt, kv=dt, act=dt)).time_s / 1e12
    scored = _above_floor(path, flops / (measured * 1e12))
    err = np.abs(predicted / measured - 1.0)[scored]
    return {"hardware": profile, "dtype": dtype, "label": label, "shapes": int(scored.sum()),
            "floor_bound": int((~scored).sum()),
            "median_abs_rel_error": float(np.median(err)), "p90_abs_rel_error": float(np.quantile(err, 0.9)),
            "predicted_tflops": predicted, "measured_tflops": measured}


def gemm_sweeps() -> list[dict]:
    return [gemm_sweep(p) for p in sorted(microbenchmarks_dir().glob("*-gemm-*.csv"))]


def allreduce_sweep(path: Path) -> dict:
    """An all-reduce bus-bandwidth sweep (``<profile>-allreduce<n>-nccl.csv``: size_bytes,
    busbw_gbs) against the alpha-beta form of ``comm.py``: the best-fitting (busbw, latency) pair
    (least squares on log time) and how well that form describes the curve, plus the profile's own
    large-message bus bandwidth against the measured plateau. The profile's latency is that of an
    engine's one-shot all-reduce kernel, not NCCL's, so it is not compared with the fitted one."""
    from scipy.optimize import least_squares

    profile, _, rest = path.stem.partition("-allreduce")
    n = int(rest.split("-")[0])
    hw = hardware(profile)
    size, busbw = sweep_columns(path)
    factor = 2.0 * (n - 1) / n
    t = factor * size / (busbw * 1e9)

    def model(p):
        return factor * size / (p[0] * 1e9) + p[1] * 1e-6

    fit = least_squares(lambda p: np.log(model(p) / t), [busbw.max(), 20.0], bounds=([1, 0], [1e4, 1e4]))
    err = np.abs(model(fit.x) / t - 1.0)
    profile_busbw = hw.scale_up.bandwidth_per_direction.value * hw.efficiency.scale_up.value / 1e9
    return {"hardware": profile, "devices": n, "sizes": int(size.size),
            "fitted_busbw_gbs": float(fit.x[0]), "fitted_latency_us": float(fit.x[1]),
            "median_abs_rel_error": float(np.median(err)), "p90_abs_rel_error": float(np.quantile(err, 0.9)),
            "measured_plateau_gbs": float(busbw.max()), "profile_busbw_gbs": profile_busbw}


def allreduce_sweeps() -> list[dict]:
    return [allreduce_sweep(p) for p in sorted(microbenchmarks_dir().glob("*-allreduce*-nccl.csv"))]


def attention_sweep(path: Path | None = None) -> dict:
    """Fit Hockney's form ``r(L) = r_inf L / (L + L_half)`` to a FlashAttention sequence-length
    sweep (``<profile>-attention-*.csv``: seq_len, tflops): the plateau fraction of one die's BF16
    peak and the half length that ``Efficiency.attention`` holds. Log-error least squares on a grid
    of L_half (the best r_inf for each is the geometric mean of r / x); a file that states its
    ``half_keys`` (long sequences only) fits the plateau alone."""
    path = path or next(microbenchmarks_dir().glob("h100-sxm-attention-fa3-bf16.csv"))
    length, tflops = sweep_columns(path)
    rate = tflops * 1e12
    hw = hardware(path.name.split("-attention-")[0])
    stated = _stated(path, "half_keys")
    best = None
    for half in np.arange(1.0, 2048.0, 1.0) if stated is None else (stated,):
        x = length / (length + half)
        r_inf = float(np.exp(np.mean(np.log(rate / x))))
        err = float(np.mean(np.abs(np.log(r_inf * x / rate))))
        if best is None or err < best[0]:
            best = (err, half, r_inf)
    assert best is not None
    err, half, r_inf = best
    pred = r_inf * length / (length + half)
    return {"hardware": hw.name, "file": path.name, "points": int(length.size),
            "plateau": r_inf / hw.per_die().peak_flops_per_s(DType.bf16), "half_keys": float(half),
            "half_keys_fitted": stated is None, "median_abs_rel_error": float(np.median(np.abs(pred / rate - 1)))}


def attention_sweeps() -> list[dict]:
    return [attention_sweep(p) for p in sorted(microbenchmarks_dir().glob("*-attention-*.csv"))
            if "-decode-attention-" not in p.name]          # prefill (FlashAttention) sweeps only


def ridge_fit(path: Path | None = None, powers=tuple(np.round(np.arange(1.0, 4.01, 0.05), 2))) -> dict:
    """How a GEMM's compute and streaming times combine near its ridge (``roofline.RIDGE_P``), from
    M-sweeps at fixed LLM-shaped N, K (``gemm-ridge-sweeps.csv``). Each sweep's streaming rate is its
    smallest-M row's (weights + activations over its time), its compute rate its own rows at M >= 4,096
    or the file's stated plateau: only the shape of the transition is fitted. Scored over the rows within
    4x of the ridge (compute / streaming in 0.25..4): the RMS log error of ``(c^p + m^p)^(1/p)`` for
    each p of ``powers``, the best p, and the bare maximum's RMS (the roofline's own form)."""
    path = path or microbenchmarks_dir() / "gemm-ridge-sweeps.csv"
    lines = [ln.split(",") for ln in path.read_text().splitlines() if ln and not ln.startswith(("#", "sweep,"))]
    sweeps: dict[str, list] = {}
    for name, *vals in lines:
        sweeps.setdefault(name, []).append([float(v) if v else np.nan for v in vals])
    parts = []
    for rows in sweeps.values():
        n, k, wb, m, t_us, plateau = np.array(rows).T
        t = t_us * 1e-6
        moved = n * k * wb + m * (n + k) * 2.0            # weights + BF16 activations in and out
        first = np.argmin(m)
        stream = moved[first] / t[first]
        big = m >= 4096
        rate = float(np.mean(2 * m[big] * n[big] * k[big] / t[big])) if big.any() else float(plateau[0]) * 1e12
        c, s = 2 * m * n * k / rate, moved / stream
        near = (c / s > 0.25) & (c / s < 4)
        parts.append((c[near], s[near], t[near]))
    c, s, t = (np.concatenate(x) for x in zip(*parts, strict=True))
    hi, lo = np.maximum(c, s), np.minimum(c, s)
    rms = {float(p): float(np.sqrt(np.mean(np.log(hi * (1 + (lo / hi) ** p) ** (1 / p) / t) ** 2))) for p in powers}
    best = min(rms, key=rms.get)
    return {"sweeps": len(sweeps), "ridge_rows": int(t.size), "rms_by_p": rms, "best_p": best,
            "rms_max": float(np.sqrt(np.mean(np.log(hi / t) ** 2)))}


def decode_attention_sweep(path: Path) -> dict:
    """Predicted vs measured time of a batched paged-decode attention sweep
    (``<profile>-decode-attention-<kernel>.csv``: batch, ctx, q_heads, kv_heads, head_dim, kv_bytes
    per element, time_us): each row one kernel call, timed by ``op_time`` as the attention operator
    of a decode step (its K and V read at the profile's decode HBM fraction x ctx / (ctx +
    decode_half_ctx), plus the kernel latency). A ``<kernel>`` label that names a framework entry
    replays the calls through that entry (its own decode kernel's fraction: ``attention_decode``).
    Calls timed within 10% of the file's stated harness floor (``# harness_floor_us: X``: host
    dispatch of eager calls) are not scored."""
    from planner.perf.ops import DTypes, Op, OpKind
    from planner.perf.roofline import op_time

    hw = _as_timed(*path.stem.split("-decode-attention-", 1))
    batch, ctx, qh, kvh, hd, eb, t_us = sweep_columns(path)
    kv = batch * ctx * kvh * hd * 2 * eb
    op = Op("attention", OpKind.attention, 1, flops=4.0 * batch * qh * hd * ctx, kv_bytes=kv,
            act_bytes=batch * qh * hd * 2 * 2.0, keys=ctx)
    dt = DType.fp8 if float(eb[0]) == 1 else DType.bf16
    predicted = np.asarray(op_time(hw, op, DTypes(weight=DType.bf16, kv=dt, act=DType.bf16)).time_s) * 1e6
    return _timed_calls(hw, path, predicted, t_us)


def _timed_calls(hw, path: Path, predicted_us: np.ndarray, measured_us: np.ndarray) -> dict:
    """The summary of a kernel-call sweep replayed through ``op_time``: calls scored (those above
    the file's stated harness floor, ``_above_floor``), their median and worst time error."""
    scored = _above_floor(path, measured_us * 1e-6)
    err = (predicted_us / measured_us - 1.0)[scored]
    return {"hardware": hw.name, "file": path.name, "points": int(scored.sum()), "floor_bound": int((~scored).sum()),
            "predicted_us": predicted_us, "measured_us": measured_us,
            "median_abs_rel_error": float(np.median(np.abs(err))), "max_abs_rel_error": float(np.max(np.abs(err))),
            "median_rel_error": float(np.median(err))}


def decode_attention_sweeps() -> list[dict]:
    return [decode_attention_sweep(p) for p in sorted(microbenchmarks_dir().glob("*-decode-attention-*.csv"))]


def linear_decode_sweep(path: Path) -> dict:
    """Predicted vs measured time of a Gated DeltaNet decode-core sweep (``<profile>-gdn-decode-
    <kernel>.csv``: batch, key_heads, value_heads, head_dim, time_us; one token per sequence, BF16
    state and activations): each row one call, timed by ``op_time`` as the recurrent linear-attention
    operator of a decode step (its state read and written, q/k/v in and the output out, at the
    profile's ``linear_decode`` figure)."""
    from planner.perf.ops import DTypes, Op, OpKind
    from planner.perf.roofline import op_time

    hw = hardware(path.name.split("-gdn-decode-")[0])
    batch, kh, vh, hd, t_us = sweep_columns(path)
    state = 2 * batch * vh * hd * hd * 2.0                      # BF16 state read and written
    act = batch * (2 * kh * hd + 2 * vh * hd) * 2.0             # q, k, v in and the output out
    op = Op("linear_attention", OpKind.attention, 1, flops=8.0 * batch * vh * hd * hd, act_bytes=act,
            kv_bytes=state, linear=True, recurrent=True)
    return _timed_calls(hw, path, np.asarray(op_time(hw, op, DTypes()).time_s) * 1e6, t_us)


def linear_decode_sweeps() -> list[dict]:
    return [linear_decode_sweep(p) for p in sorted(microbenchmarks_dir().glob("*-gdn-decode-*.csv"))]


def _moe_mlp_rows(path: Path):
    """The calls of an expert-MLP sweep (``<profile>-moe-mlp-<label>.csv``: tokens, hidden, inter,
    experts, topk, local_experts, weight_bytes, time_us), each as the roofline's ``experts``
    operator of one layer on one die: the tokens' routed rows its local experts take, the
    expected local experts with a row under uniform routing (the weights read: gate, up and down),
    two FLOPs per weight per row, and each row's hidden vector in and out and its intermediate
    (as ``perf.ops`` counts them), in BF16 activations."""
    from planner.perf.ops import Op, OpKind

    tokens, hidden, inter, experts, topk, local, width, t_us = sweep_columns(path)
    rows = tokens * topk * local / experts
    hit = local * (1.0 - (1.0 - 1.0 / local) ** rows)
    per_expert = 3.0 * hidden * inter
    ops = {}
    for nbytes, dt in ((2, DType.bf16), (1, DType.int8)):
        m = width == nbytes
        if np.any(m):
            ops[dt] = (m, Op("experts", OpKind.gemm, 1, flops=2.0 * rows[m] * per_expert[m],
                             weight_bytes=hit[m] * per_expert[m] * nbytes,
                             act_bytes=rows[m] * (2 * hidden[m] + 3 * inter[m]) * 2.0, grouped=True))
    return tokens, t_us, ops


def moe_mlp_sweep(path: Path) -> list[dict]:
    """Predicted vs measured time of an expert-MLP sweep, per weight format: every call timed by
    ``op_time`` as the ``experts`` operator (``_moe_mlp_rows``) through the engine entry the file's
    label names (its kernels per operator and, where it states them, its expert chain's weight
    streaming and fixed time: ``grouped_memory_by_format`` / ``grouped_fixed_by_format``)."""
    from planner.perf.ops import DTypes
    from planner.perf.roofline import op_time

    hw = _as_timed(*path.stem.split("-moe-mlp-", 1))
    _, t_us, ops = _moe_mlp_rows(path)
    out = []
    for dt, (m, op) in ops.items():
        pred = np.asarray(op_time(hw, op, DTypes(weight=dt, kv=DType.bf16, act=DType.bf16)).time_s) * 1e6
        out.append({**_timed_calls(hw, path, pred, t_us[m]), "format": dt.value})
    return out


def moe_mlp_sweeps() -> list[dict]:
    return [s for p in sorted(microbenchmarks_dir().glob("*-moe-mlp-*.csv")) for s in moe_mlp_sweep(p)]


def moe_chain_fit(path: Path, fmt: DType = DType.int8, tokens=(128, 256, 512)) -> dict:
    """The expert chain of ``fmt`` an expert-MLP sweep measures, through its entry's other figures:
    the HBM fraction its weights stream at and its fixed time per layer, least squares in relative
    error over the calls of ``tokens`` (every local expert has rows there, and the calls are
    memory-bound: checked), with the entry's kernel latency and activation streaming held. Each
    call is ``fixed + latency + activations / (bw x memory) + weights / (bw x fraction)``: linear in
    the fixed time and 1 / fraction."""
    from planner.perf.ops import DTypes
    from planner.perf.roofline import op_time

    hw = _as_timed(*path.stem.split("-moe-mlp-", 1))
    eff = hw.efficiency
    hw = hw.model_copy(update={"efficiency": eff.model_copy(update={
        "grouped_memory_by_format": {k: v for k, v in eff.grouped_memory_by_format.items() if k is not fmt},
        "grouped_fixed_by_format": {k: v for k, v in eff.grouped_fixed_by_format.items() if k is not fmt}})})
    n, t_us, ops = _moe_mlp_rows(path)
    m, op = ops[fmt]
    keep = np.isin(n[m], tokens)
    dtypes = DTypes(weight=fmt, kv=DType.bf16, act=DType.bf16)
    bare = op_time(hw, replace(op, weight_bytes=0.0, flops=0.0), dtypes)
    base = (np.asarray(bare.memory_s) + np.asarray(bare.fixed_s)) * 1e6          # latency + activations
    bw = hw.memory.bandwidth.value
    w_us = np.asarray(op.weight_bytes) / bw * 1e6                                  # weights at the full HBM rate
    t, a, w = t_us[m][keep], base[keep], w_us[keep]
    (fixed_us, inv), *_ = np.linalg.lstsq(np.c_[1.0 / t, w / t], (t - a) / t, rcond=None)
    pred = a + fixed_us + w * inv
    compute_us = (np.asarray(op_time(hw, op, dtypes).compute_s) * 1e6)[keep]
    return {"hardware": hw.name, "file": path.name, "format": fmt.value, "points": int(keep.sum()),
            "memory_fraction": float(1.0 / inv), "fixed_us": float(fixed_us),
            "memory_bound": bool(np.all(compute_us < pred - a - fixed_us + 1e-9)),
            "median_abs_rel_error": float(np.median(np.abs(pred / t - 1.0)))}
