"""Prefill-as-a-Service (Qin et al., arXiv 2604.15039, 2026): a local prefill/decode (PD) cluster plus
a compute-dense remote prefill cluster joined only by an Ethernet link. Requests whose uncached
prompt exceeds a threshold ``t`` are prefilled remotely and their KV cache (for hybrid models: a
few full-attention layers per token plus a constant linear-attention state) is shipped back.

Throughput model (the paper's Eqs. 3-8, with every term from the roofline engine):

* ``Theta_prfaas = min(N_remote / E[T_remote(l) | l > t], B_link x u_max / E[S_kv(l) | l > t])``
  (requests/s of long prompts; bandwidth-aware admission keeps the link below ``u_max``);
* ``Theta_pd_p = N_p / E[T_local(l) | l <= t]``;
* ``Theta_pd_d = N_d x BS_max / (T_decode x L_out)``, ``BS_max`` the largest decode batch whose TPOT
  meets the per-request decode rate and whose KV fits;
* ``Lambda = min(Theta_prfaas / p, Theta_pd_p / (1 - p), Theta_pd_d)``, ``p = P(l > t)``;
  ``t`` and the local prefill/decode split are chosen by grid search.

TTFT of a request is its prefill on the site that serves it, plus (remote) the KV transfer and one
RTT; mean and P90 are over the length distribution, without queueing (as the paper's Table 6),
and with queueing at a stated load (prefill G/G/c per site, M/G/1 link).
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.dtypes import DType
from planner.catalog.frameworks import with_framework
from planner.catalog.hardware import hardware as get_hardware
from planner.catalog.model import ModelSpec
from planner.catalog.model_catalog import model as get_model
from planner.checks import Degree
from planner.designs.kv_cache import CacheReport
from planner.errors import InfeasibleError
from planner.frozen import Frozen
from planner.perf.cost import device_rate
from planner.perf.memory import kv_cache_bytes_per_token, state_bytes_per_sequence_device
from planner.perf.ops import DTypes, engine_state_dtype
from planner.perf.parallel import Layout, check_layout, dp_ranks
from planner.serving.batching import Engine, prompt_alone_s
from planner.serving.queueing import multi_server_wait, serving_curve
from planner.serving.workload import Workload, length_stats, weighted_quantile


class Site(Frozen):
    hardware: str
    tp: Degree = 8
    ep: Degree = 1
    instances: int = Field(ge=1, le=10_000, description="instances at the site")
    prefix_hit: float | None = Field(None, ge=0, lt=1, description="fraction of prompt tokens cached at this site "
                                     "(default: the workload's prefix_hit, which a session workload derives)")
    prefill_fixed_s: float = Field(0.0, ge=0, le=60, description="time each prefill holds one of this site's "
                                   "instances beyond its roofline, per request, where the profile you plan against "
                                   "measured one (a PD prefill server's per-request bootstrap and KV hand-off, a "
                                   "benchmark's front end): it adds to TTFT and lowers the site's prefill rate")


class Link(Frozen):
    bandwidth_gbps: float = Field(ge=1e-3, description="inter-datacenter bandwidth, Gb/s (at least 1 Mb/s)")
    rtt_s: float = Field(0.01, ge=0)
    efficiency: float = Field(0.9, ge=0.01, le=1, description="goodput / line rate")
    bandwidth_cv: float = Field(0.0, ge=0, le=10, description="coefficient of variation of the available "
                                "bandwidth (a share of the line rate: above 10 it no longer describes one)")

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8 * self.efficiency


class PrfaasSpec(Frozen):
    type: Literal["prfaas"] = "prfaas"
    weight_dtype: DType = DType.fp8
    kv_dtype: DType = DType.bf16
    local: Site
    remote: Site
    link: Link
    baseline_instances: int = Field(ge=2, le=10_000, description="instances of the homogeneous PD baseline "
                                    "(local hardware)")
    threshold_tokens: int | None = Field(None, ge=1, description="fixed offload threshold (default: optimized)")
    decode_tokens_per_s: float = Field(40.0, gt=0, description="per-request decode rate SLO")
    max_link_utilization: float = Field(0.8, gt=0, le=1)
    queue_load: float = Field(0.8, gt=0, lt=1, description="load (fraction of each system's max) for queued TTFT")
    bandwidth_sweep_gbps: list[Annotated[float, Field(ge=1e-3)]] = Field(
        [], description="link bandwidths (Gb/s, each at least 1 Mb/s) to re-plan the system at")
    counterfactual_model: str | None = Field(None, description="a dense model to run the same setup with")
    simulate_requests: int = Field(0, ge=0, description="simulate the PrfaaS system at queue_load (0: skip)")
    max_link_wait_s: float = Field(5.0, ge=0, description="admission: fall back to local beyond this link backlog")


class PrfaasSimCheck(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    rate: float
    requests: int
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    requests_per_s: float
    offload_fraction: float
    fallback_fraction: float
    link_gbps: float
    analytic_ttft_queued_s: dict[str, float]


class SystemMetrics(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    name: str
    threshold_tokens: float | None
    prefill_instances: int
    decode_instances: int
    remote_instances: int
    max_rate: float                     # Lambda_max, requests/s
    throughput_parts: dict[str, float]  # Theta terms
    offload_fraction: float
    link_gbps: float                    # egress at Lambda_max
    link_utilization: float
    ttft_s: dict[str, float]            # mean / p50 / p90, no queueing
    ttft_queued_s: dict[str, float]     # mean / p50 / p90 at queue_load x Lambda_max
    tpot_s: float                       # decode iteration time at the largest SLO-meeting batch
    accelerators: int
    usd_per_h: float


class PrfaasResult(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    scenario: str
    design: Literal["prfaas"] = "prfaas"
    model: str
    kv_bytes_per_token: int
    state_bytes_per_request: float
    systems: list[SystemMetrics]
    gains: dict[str, float]             # throughput, P90 TTFT reduction, equal-cost gain
    bandwidth_sweep: list[dict] = []
    counterfactual: dict | None = None
    simulation: PrfaasSimCheck | None = None
    notes: list[str] = []
    certainty: dict | None = None      # sizes at P50 and at the scenario's confidence (planner.confidence)
    cache: CacheReport | None = None   # a session workload's prefix cache at the local site, per tier


def _state_bytes(model: ModelSpec, spec: PrfaasSpec) -> float:
    """A request's linear-attention state (and windowed KV) as the remote site hands it over: in
    the format its engine keeps it in."""
    state = engine_state_dtype(model, with_framework(get_hardware(spec.remote.hardware)).efficiency)
    return float(np.ravel(state_bytes_per_sequence_device(model, Layout.of(1, 1, 1), spec.kv_dtype,
                                                          state_dtype=state))[0])


def _layout(model: ModelSpec, site: Site) -> Layout:
    """The site's layout; expert parallelism only applies to MoE models (the dense counterfactual)."""
    return Layout.of(site.tp, site.ep if model.moe is not None else 1, 1)


def _site_replicas(model, site: Site) -> int:
    """Prompts one instance of the site prefills side by side: one per attention data-parallel
    replica, each prompt on its own (``perf.ops._prompt_skew``); 1 without replicas."""
    return dp_ranks(with_framework(get_hardware(site.hardware)), _layout(model, site))


def _site_prefill_s(model, site: Site, dtypes, lengths) -> np.ndarray:
    hw = with_framework(get_hardware(site.hardware))
    lay = _layout(model, site)
    check_layout(model, lay, hw)
    tokens = np.maximum(np.round(lengths * (1 - site.prefix_hit)), 1)
    return prompt_alone_s(model, hw, lay, dtypes, tokens) + site.prefill_fixed_s


def _decode_capacity(model, site: Site, dtypes, workload: Workload, tpot_bound: float) -> tuple[float, float]:
    """(largest decode batch per instance meeting the TPOT bound and KV memory, its TPOT)."""
    hw = with_framework(get_hardware(site.hardware))
    lay = _layout(model, site)
    stats = length_stats(workload)
    dstats = stats.model_copy(update={"mean_prefill": 1e-9, "second_prefill": 1e-18})
    c = serving_curve(model, hw, lay, dtypes, Engine(max_num_seqs=4096, max_batched_tokens=1 << 20), dstats)
    ok = np.isfinite(c.tpot["mean"][0]) & (c.tpot["mean"][0] <= tpot_bound)
    if not ok.any():
        tpot = c.tpot["mean"][0]
        if not np.isfinite(tpot).any():
            raise InfeasibleError(f"a {site.hardware} tp{site.tp} decode instance of {model.name} cannot hold one "
                                  "request's KV cache beside the weights: give the local site a larger tp or a lower "
                                  "weight_dtype")
        fastest = 1 / float(np.nanmin(np.where(np.isfinite(tpot), tpot, np.nan)))
        raise InfeasibleError(f"a {site.hardware} tp{site.tp} decode instance of {model.name} cannot meet "
                              f"{1 / tpot_bound:.0f} tokens/s per request even alone: it decodes at most "
                              f"{fastest:.0f} tokens/s per "
                              f"request; set design.decode_tokens_per_s to {np.floor(fastest):.0f} or less, or "
                              "decode on faster hardware")
    j = int(np.flatnonzero(ok)[-1])
    return float(c.n[0, j]), float(c.tpot["mean"][0, j])


def _price(site: Site, usd_per_h: dict[str, float]) -> float:
    hw = get_hardware(site.hardware)
    return site.tp * device_rate(usd_per_h, site.hardware, hw)


def plan_prfaas(model: ModelSpec, spec: PrfaasSpec, workload: Workload, usd_per_h: dict[str, float],
                name: str) -> PrfaasResult:
    dtypes = DTypes(weight=spec.weight_dtype, kv=spec.kv_dtype)
    notes = []
    spec = spec.model_copy(update={s: getattr(spec, s).model_copy(update={"prefix_hit": workload.prefix_hit})
                                   for s in ("local", "remote") if getattr(spec, s).prefix_hit is None})
    fixed = [f"{s}: {getattr(spec, s).prefill_fixed_s:g} s" for s in ("local", "remote")
             if getattr(spec, s).prefill_fixed_s]
    if fixed:
        notes.append(f"each prefill holds its instance {', '.join(fixed)} beyond the roofline (prefill_fixed_s, "
                     "as given in the scenario)")
    sys_, parts = _evaluate(model, spec, workload, dtypes, usd_per_h, spec.link)
    prfaas, homog, naive = sys_
    gains = {
        "throughput": prfaas.max_rate / homog.max_rate,
        "p90_ttft_reduction": 1 - prfaas.ttft_s["p90"] / homog.ttft_s["p90"],
        "mean_ttft_reduction": 1 - prfaas.ttft_s["mean"] / homog.ttft_s["mean"],
        "vs_naive_heterogeneous": prfaas.max_rate / naive.max_rate if naive.max_rate > 0 else float("inf"),
    }
    if np.isfinite(prfaas.usd_per_h) and np.isfinite(homog.usd_per_h):
        # the homogeneous cluster that costs as much as the PrfaaS system scales linearly in instances
        same_cost = homog.max_rate * (prfaas.usd_per_h / homog.usd_per_h)
        gains["equal_cost_throughput"] = prfaas.max_rate / same_cost
    else:
        notes.append("no prices for the hardware: equal-cost gain not computed (set cost.prices: {<hardware>: "
                     "<US$/h>}, or a cost.purchase model priced in hardware_profiles/prices.yaml)")
    if spec.threshold_tokens is not None and prfaas.offload_fraction == 0:
        notes.append(f"no request is longer than threshold_tokens={spec.threshold_tokens}: nothing is offloaded, "
                     "PrfaaS runs as a local PD cluster")
    sweep = [_sweep_point(model, spec, workload, dtypes, usd_per_h, bw) for bw in spec.bandwidth_sweep_gbps]
    counter = None
    if spec.counterfactual_model is not None:
        dense = get_model(spec.counterfactual_model)
        try:
            counter = {"model": dense.name, "kv_bytes_per_token": kv_cache_bytes_per_token(dense, spec.kv_dtype),
                       "bandwidth_sweep": [_sweep_point(dense, spec, workload, dtypes, usd_per_h, bw)
                                           for bw in spec.bandwidth_sweep_gbps]}
            counter["break_even_gbps"] = _break_even(counter["bandwidth_sweep"])
        except InfeasibleError as e:        # the comparison model cannot run here: the plan stands without it
            counter = None
            notes.append(f"counterfactual_model {dense.name} not evaluated: {e}")
    sim = simulate_prfaas(model, spec, workload, dtypes, prfaas) if spec.simulate_requests else None
    return PrfaasResult(scenario=name, model=model.name, kv_bytes_per_token=kv_cache_bytes_per_token(
        model, spec.kv_dtype), state_bytes_per_request=_state_bytes(model, spec), systems=list(sys_),
        gains=gains, bandwidth_sweep=sweep, counterfactual=counter, simulation=sim, notes=notes)


def simulate_prfaas(model, spec: PrfaasSpec, workload: Workload, dtypes, system: SystemMetrics) -> PrfaasSimCheck:
    """Run the discrete-event simulator on the chosen PrfaaS system at ``queue_load`` x its max rate."""
    from planner.serving.simulate import simulate_remote_prefill
    from planner.serving.slo import percentiles

    rate = spec.queue_load * system.max_rate
    a, i, o = workload.with_rate(rate).sample(spec.simulate_requests, 7)
    kv = kv_cache_bytes_per_token(model, spec.kv_dtype) * np.round(i * (1 - spec.remote.prefix_hit)) \
        + _state_bytes(model, spec)
    site = lambda s, n: (with_framework(get_hardware(s.hardware)), _layout(model, s), n)  # noqa: E731
    r, link = simulate_remote_prefill(
        model, site(spec.local, system.prefill_instances), site(spec.remote, system.remote_instances),
        site(spec.local, system.decode_instances), dtypes, Engine(max_num_seqs=4096, max_batched_tokens=1 << 20),
        a, i, o, threshold=system.threshold_tokens if system.threshold_tokens is not None else np.inf,
        kv_bytes=kv, link_bytes_per_s=spec.link.bytes_per_s, rtt_s=spec.link.rtt_s,
        bandwidth_cv=spec.link.bandwidth_cv, max_link_wait_s=spec.max_link_wait_s,
        local_hit=spec.local.prefix_hit, remote_hit=spec.remote.prefix_hit,
        prefill_fixed_s=(spec.local.prefill_fixed_s, spec.remote.prefill_fixed_s), seed=7)
    tt, tp = percentiles(r.ttft_s), percentiles(r.tpot_s[r.output_len > 1])
    return PrfaasSimCheck(rate=rate, requests=spec.simulate_requests, ttft_s=tt, tpot_s=tp,
                          requests_per_s=r.requests_per_s, offload_fraction=link["offload_fraction"],
                          fallback_fraction=link["fallback_fraction"], link_gbps=link["link_gbps"],
                          analytic_ttft_queued_s=system.ttft_queued_s)


def _break_even(sweep: list[dict]) -> float | None:
    """Lowest swept bandwidth at which offloading beats the homogeneous cluster."""
    paying = [p["bandwidth_gbps"] for p in sweep if p["throughput_gain"] > 1.0 + 1e-9]
    return min(paying) if paying else None


def _sweep_point(model, spec: PrfaasSpec, workload, dtypes, usd_per_h, bw: float) -> dict:
    link = spec.link.model_copy(update={"bandwidth_gbps": bw})
    (pr, homog, _), _ = _evaluate(model, spec, workload, dtypes, usd_per_h, link)
    return {"bandwidth_gbps": bw, "max_rate": pr.max_rate, "baseline_rate": homog.max_rate,
            "throughput_gain": pr.max_rate / homog.max_rate, "threshold_tokens": pr.threshold_tokens,
            "offload_fraction": pr.offload_fraction, "link_utilization": pr.link_utilization,
            "p90_ttft_s": pr.ttft_s["p90"]}


def _evaluate(model, spec: PrfaasSpec, workload: Workload, dtypes, usd_per_h, link: Link):
    i, o, w = workload.joint_support()
    order = np.argsort(i)
    i, o, w = i[order], o[order], w[order] / w.sum()
    out_len = float(w @ o)
    t_local = _site_prefill_s(model, spec.local, dtypes, i)
    t_remote = _site_prefill_s(model, spec.remote, dtypes, i)
    kv = kv_cache_bytes_per_token(model, spec.kv_dtype) * np.round(i * (1 - spec.remote.prefix_hit)) \
        + _state_bytes(model, spec)
    bw = link.bytes_per_s
    xfer = kv / bw + link.rtt_s
    bs_max, t_dec = _decode_capacity(model, spec.local, dtypes, workload, 1 / spec.decode_tokens_per_s)
    theta_d_inst = bs_max / (t_dec * out_len)
    # thresholds: every distinct length (and "offload nothing"); p = P(l > t)
    thresholds = np.concatenate([i, [i[-1]]]) if spec.threshold_tokens is None else np.array(
        [float(spec.threshold_tokens)])
    above = i[None, :] > thresholds[:, None]                        # (T, L)
    p = (above * w).sum(1)
    mean_long = lambda x: np.where(p > 0, (above * w * x).sum(1) / np.maximum(p, 1e-300), 0.0)  # noqa: E731
    mean_short = lambda x: np.where(p < 1, (~above * w * x).sum(1) / np.maximum(1 - p, 1e-300), 0.0)  # noqa: E731
    n_loc = spec.local.instances
    r_loc, r_rem = _site_replicas(model, spec.local), _site_replicas(model, spec.remote)
    n_p = np.arange(1, n_loc)[None, :]                                # local prefill instances
    th_remote = np.minimum(spec.remote.instances * r_rem / np.maximum(mean_long(t_remote), 1e-12),
                           bw * spec.max_link_utilization / np.maximum(mean_long(kv), 1e-12))[:, None]
    th_p = n_p * r_loc / np.maximum(mean_short(t_local), 1e-12)[:, None]
    th_d = (n_loc - n_p) * theta_d_inst
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.minimum(np.minimum(np.where(p[:, None] > 0, th_remote / p[:, None], np.inf),
                                    np.where(p[:, None] < 1, th_p / (1 - p[:, None]), np.inf)), th_d)
    k = np.unravel_index(np.nanargmax(lam), lam.shape)
    ti, npi = int(k[0]), int(k[1])
    best_t, n_prefill = float(thresholds[ti]), npi + 1
    prfaas = _metrics("PrfaaS-PD", spec, model, dtypes, workload, i, w, t_local, t_remote, xfer, kv, link, best_t,
                      n_prefill, n_loc - n_prefill, spec.remote.instances, float(lam[k]),
                      {"prfaas": float(th_remote[ti, 0]), "pd_prefill": float(th_p[ti, npi]),
                       "pd_decode": float(th_d[0, npi])}, usd_per_h, t_dec, (r_loc, r_rem))
    # homogeneous PD baseline: the same local hardware, no remote cluster
    nb = spec.baseline_instances
    nbp = np.arange(1, nb)
    lam_h = np.minimum(nbp * r_loc / float(w @ t_local), (nb - nbp) * theta_d_inst)
    j = int(np.argmax(lam_h))
    homog = _metrics("homogeneous PD", spec, model, dtypes, workload, i, w, t_local, t_remote, xfer, kv, link,
                     None, j + 1, nb - j - 1, 0, float(lam_h[j]),
                     {"pd_prefill": float((j + 1) * r_loc / (w @ t_local)),
                      "pd_decode": float((nb - j - 1) * theta_d_inst)},
                     usd_per_h, t_dec, (r_loc, r_rem))
    # naive heterogeneous: every prefill remote, all local instances decode
    th_all = min(spec.remote.instances * r_rem / float(w @ t_remote), bw * spec.max_link_utilization / float(w @ kv))
    naive = _metrics("naive heterogeneous PD", spec, model, dtypes, workload, i, w, t_local, t_remote, xfer, kv,
                     link, 0.0, 0, n_loc, spec.remote.instances, min(th_all, n_loc * theta_d_inst),
                     {"prfaas": th_all, "pd_decode": n_loc * theta_d_inst}, usd_per_h, t_dec, (r_loc, r_rem))
    return (prfaas, homog, naive), {"bs_max": bs_max, "t_decode": t_dec}


def _metrics(name, spec: PrfaasSpec, model, dtypes, workload, i, w, t_local, t_remote, xfer, kv, link: Link,
             threshold, n_p, n_d, n_r, lam, parts, usd_per_h, tpot: float,
             replicas: tuple[int, int]) -> SystemMetrics:
    """``replicas``: attention data-parallel replicas per local and per remote instance (``_site_replicas``)."""
    remote = (i > threshold) if threshold is not None else np.zeros(len(i), dtype=bool)
    p = float(w @ remote)
    ttft = np.where(remote, t_remote + xfer, t_local)
    q90 = float(weighted_quantile(ttft, w, 0.9))
    # queued TTFT at queue_load x Lambda: G/G/c at each prefill site, M/G/1 on the link
    rate = spec.queue_load * lam
    ca2 = workload.arrival.scv
    queued = ttft.copy()
    # every attention data-parallel replica of an instance is a server of its own
    servers_p, servers_r = n_p * replicas[0], n_r * replicas[1]
    for mask, servers, times in ((~remote, servers_p, t_local), (remote, servers_r, t_remote)):
        share = float(w @ mask)
        if share > 0 and servers > 0:
            es = float((w * mask) @ times / share)
            es2 = float((w * mask) @ times**2 / share)
            wait, _ = multi_server_wait(rate * share, servers, es, es2 / es**2 - 1, ca2)
            queued = np.where(mask, queued + float(wait), queued)
    link_rate = rate * p
    link_util = float(lam * p * float(w @ (kv * remote)) / max(p, 1e-300) / link.bytes_per_s) if p > 0 else 0.0
    if p > 0:
        s_link = (kv / link.bytes_per_s)[remote]
        es, es2 = float((w[remote] @ s_link) / p), float((w[remote] @ s_link**2) / p)
        cs2 = es2 / es**2 - 1 + link.bandwidth_cv**2
        lw, _ = multi_server_wait(link_rate, 1, es, cs2, ca2)
        queued = np.where(remote, queued + float(lw), queued)
    egress = lam * float((w * remote) @ kv) * 8 / 1e9
    acc = (n_p + n_d) * spec.local.tp + n_r * spec.remote.tp
    usd = (n_p + n_d) * _price(spec.local, usd_per_h) + n_r * _price(spec.remote, usd_per_h)
    return SystemMetrics(
        name=name, threshold_tokens=threshold, prefill_instances=n_p, decode_instances=n_d, remote_instances=n_r,
        max_rate=lam, throughput_parts=parts, offload_fraction=p, link_gbps=egress, link_utilization=link_util,
        ttft_s={"mean": float(w @ ttft), "p50": float(weighted_quantile(ttft, w, 0.5)), "p90": q90},
        ttft_queued_s={"mean": float(w @ queued), "p50": float(weighted_quantile(queued, w, 0.5)),
                       "p90": float(weighted_quantile(queued, w, 0.9))}, tpot_s=tpot,
        accelerators=int(acc), usd_per_h=float(usd))

