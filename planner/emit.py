"""Deployable output of a colocated plan (``planner plan ... --emit ENGINE DIR``): the engine launch
command with the layout and engine limits the planner assumed, or a Kubernetes Deployment, each
file headed by the predictions it rests on (so a reader can check the running system against them).

Flag names are the engines' documented ones (checked by ``tests/test_emit.py`` against these pages):

* vLLM ``vllm serve`` engine arguments: https://docs.vllm.ai/en/latest/models/engine_args.html
  (``--enable-expert-parallel`` makes EP span all TP x DP ranks of a stage).
* SGLang ``python -m sglang.launch_server``: https://docs.sglang.io/advanced_features/server_arguments.html
* TensorRT-LLM ``trtllm-serve``: https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve.html
* MindIE Service ``conf/config.json`` (BackendConfig: npuDeviceIds, ModelDeployConfig / ModelConfig,
  ScheduleConfig) and ``NPU_MEMORY_FRACTION``: Ascend/MindIE-LLM docs/en/user_guide/user_manual/
  service_parameter_configuration.md and environment_variable.md (@613aab54); the daemon and the
  config file at /usr/local/Ascend/mindie/latest/mindie-service/ (bin/mindieservice_daemon,
  conf/config.json), where MindIE's images install them.

What maps how (one engine process per instance; an instance is ``pp`` stages of ``max(tp, ep)``
devices, attention ``tp`` x data-parallel ``max(tp, ep) / tp``):

* parallelism: tp, pp, and ep (vLLM: ``--enable-expert-parallel`` with ``--data-parallel-size``;
  SGLang: ``--tp-size`` = every rank, ``--dp-size`` with ``--enable-dp-attention``), over ranks: one
  per die of a multi-die package (Ascend 910C), attention DP per die as the roofline times it;
* sequences and the iteration token budget as each engine counts them: vLLM per DP engine core
  (``--max-num-seqs``, ``--max-num-batched-tokens``: the instance's split over them), SGLang for the
  whole instance (``--max-running-requests``, ``--chunked-prefill-size``: it divides them by
  ``--dp-size``), TensorRT-LLM ``--max_batch_size`` / ``--max_num_tokens`` per attention replica;
* the memory the planner gave the engine (the framework's ``memory_policy`` of HBM) ->
  ``--gpu-memory-utilization`` / ``--mem-fraction-static``; TensorRT-LLM takes the KV pool as a
  fraction of the memory left after weights and workspace, derived here from the same pool;
* FP8 weights -> ``--quantization fp8`` (on-line FP8 of a 16-bit checkpoint); FP8 KV ->
  ``--kv-cache-dtype fp8`` (vLLM) / ``fp8_e4m3`` (SGLang). Other formats need a pre-quantized
  checkpoint, which the header says;
* on Ascend NPUs: SGLang's NPU backend (``--device npu --attention-backend ascend``) and, for the
  INT8/INT4 formats, the modelslim checkpoints each engine loads with its own switch: vllm-ascend
  ``--quantization ascend`` (vllm-ascend's W8A8 tutorials and nightly configs), SGLang
  ``--quantization modelslim`` (SGLang's "Best Practice on Ascend NPU" commands); a plan on the
  ``vllm-ascend-graph`` engine entry launches vLLM as that entry assumes:
  ``--compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}' --async-scheduling``.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path
from typing import Any

from planner.errors import InputError

ENGINES = ("vllm", "sglang", "trtllm", "mindie", "k8s")
# the engine each launch runs (Framework.family): a Kubernetes Deployment runs vLLM
LAUNCHED = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm", "mindie": "mindie", "k8s": "vllm"}
# device-plugin resource names per vendor (NVIDIA, AMD and Ascend Kubernetes device plugins)
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "huawei": "huawei.com/Ascend910"}
# vLLM's published image per vendor: vLLM's own CUDA image (docs.vllm.ai, "Using Docker": vllm/vllm-openai),
# AMD's ROCm build (rocm.docs.amd.com "vLLM inference and serving on ROCm": rocm/vllm:<tag>, whose Docker Hub
# tags include latest, ROCm/amdgpu-docs issue #88) and vllm-ascend's (its Quick Start:
# quay.io/ascend/vllm-ascend:<version>, with an -a3 suffix for Atlas A3 / Ascend 910C machines; no latest tag)
VLLM_IMAGE = {"nvidia": "vllm/vllm-openai:latest", "amd": "rocm/vllm:latest",
              "huawei": "quay.io/ascend/vllm-ascend:v0.23.0"}
NODE_DEVICES = 8          # devices of a typical 8-GPU/NPU server: larger instances span nodes


def check_emit(engine: str, directory: str | Path, design: str = "colocated") -> Path:
    """Before the run: a known engine, a colocated ``design`` (the one emitted) and a folder that
    exists (or whose parent does) and is writable."""
    import os

    _colocated(design)

    if engine not in ENGINES:
        from planner.errors import unknown_name

        raise unknown_name("--emit engine", engine, list(ENGINES))
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InputError(f"--emit {engine} {d}: is a file, expected a folder")
    parent = d if d.exists() else d.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InputError(f"--emit {engine} {d}: folder {parent} does not exist or is not writable")
    _refuse_foreign(engine, d, {name: None for name in FIXED_FILES.get(engine, ())})
    return d


def _colocated(design: str) -> None:
    if design != "colocated":
        raise InputError(f"--emit writes the chosen colocated deployment; the {design} design is not emitted yet")


# the files an engine's launch set always has (k8s names its manifest after the plan)
FIXED_FILES = {"vllm": ("vllm.sh",), "sglang": ("sglang.sh",), "trtllm": ("trtllm.sh",),
               "mindie": ("mindie-config.json", "mindie.sh")}


def _ours(path: Path, new_text: str | None) -> bool:
    """Whether existing ``path`` is a file ``emit`` wrote (its header names the plan; a JSON config,
    which has no comments, holds the keys the new one holds), so a rerun may replace it."""
    try:
        head = path.read_bytes()[:4096].decode("utf-8", "replace")
    except OSError:
        return False
    if "planner plan " in head:
        return True
    if path.suffix == ".json":
        import json

        try:
            old = json.loads(path.read_text())
        except (ValueError, OSError):
            return False
        return new_text is None or (isinstance(old, dict) and set(old) == set(json.loads(new_text)))
    return False


def _refuse_foreign(engine: str, d: Path, files: dict[str, str | None]) -> None:
    """An ``InputError`` if any of ``files`` exists in ``d`` and was not written by ``emit``: the
    user's own scripts and configs are never overwritten (nothing is written then)."""
    foreign = [n for n, text in files.items() if (d / n).exists() and not _ours(d / n, text)]
    if foreign:
        one = len(foreign) == 1
        raise InputError(f"--emit {engine} {d}: {', '.join(foreign)} {'exists' if one else 'exist'} and "
                         f"{'was' if one else 'were'} not written by planner, so nothing was written: choose another "
                         f"folder or move {'it' if one else 'them'} away")


def emit(result: Any, scn: Any, engine: str, directory: str | Path) -> list[Path]:
    """Write the ``engine`` files of ``result``'s chosen deployment into ``directory``."""
    _colocated(result.design)
    from planner.outputs import atomic_path

    plan = {**_engine_plan(result, scn), "launch": engine}
    files = {"vllm": lambda: {"vllm.sh": _script("vllm", plan)},
             "sglang": lambda: {"sglang.sh": _script("sglang", plan)},
             "trtllm": lambda: {"trtllm.sh": _script("trtllm", plan)},
             "mindie": lambda: _mindie(plan),
             "k8s": lambda: {f"{plan['name']}.yaml": _k8s(plan)}}[engine]()
    d = Path(directory)
    _refuse_foreign(engine, d, files)
    d.mkdir(exist_ok=True)
    written = []
    for name, text in files.items():
        with atomic_path(d / name) as tmp:
            tmp.write_text(text)
            if name.endswith(".sh"):
                tmp.chmod(0o755)
        written.append(d / name)
    return written


def k8s_name(text: str) -> str:
    """``text`` as a Kubernetes object name (an RFC 1123 label: lowercase letters, digits and '-',
    at most 63), which is also the k8s file's name: no path separator or '..' can reach it, so the
    file stays in the folder ``--emit`` names."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return label or "planner"


def modelled_engine(result: Any, scn: Any) -> tuple[Any, Any, Any]:
    """(profile, engine, framework entry) of ``result``'s chosen device as the plan ran it."""
    from planner.catalog.frameworks import engine_name, framework
    from planner.catalog.hardware import hardware

    profile = hardware(next(h for h in scn.search.hardware if hardware(h).name == result.best.hardware))
    engine = scn.engine.on(profile)
    return profile, engine, framework(engine_name(engine.framework, profile))


def other_engine(entry: Any, hw: Any, engine: str) -> str:
    """Why the launch ``engine`` writes may not reach the plan's figures ('' if it runs the engine
    the plan modelled, or the entry names none): another engine's scheduler, memory policy and
    kernels; the bundled entry of the launched engine on ``hw``'s vendor to plan with instead."""
    from planner.catalog.frameworks import family_entries

    launched = LAUNCHED[engine]
    if entry.family is None or entry.family == launched:
        return ""
    alt = family_entries(launched, hw)
    fix = (f"plan with engine.framework: {alt[0]} for figures this launch should reach" if alt else
           f"no bundled entry models {launched} on {hw.vendor} devices")
    return (f"the plan's figures are the {entry.name or 'custom'} entry's ({entry.family}); this file launches "
            f"{launched}, whose scheduler, memory policy and kernels differ: {fix}")


def launch_note(result: Any, scn: Any, engine: str) -> str:
    """``other_engine`` for ``result``'s chosen device: what the CLI says beside the files."""
    profile, _, entry = modelled_engine(result, scn)
    return other_engine(entry, profile, engine)


def _engine_plan(result: Any, scn: Any) -> dict:
    """Everything the launch files need, from the plan and the planner's own memory model."""
    import numpy as np

    from planner.catalog.model_catalog import model
    from planner.perf.estimate import resolve_dtypes
    from planner.perf.memory import (
        engine_fraction,
        free_kv_bytes_device,
        kv_bytes_per_token_device,
        pools_per_device,
        state_bytes_per_sequence_device,
        state_pool_split,
    )
    from planner.perf.parallel import Layout, on_dies

    b = result.best
    profile, engine, entry = modelled_engine(result, scn)
    m = engine.model_as_run(model(scn.model))
    hw = engine.profile_on(profile)
    lay = Layout.of(b.tp, b.ep, b.pp)
    dtypes = resolve_dtypes(m, b.weight_dtype, b.kv_dtype)
    kv = float(free_kv_bytes_device(m, hw, lay, dtypes, engine.speculation))
    # engine ranks: one per die (an Ascend 910C package runs as 2), as the roofline times them
    ranks = on_dies(hw, lay)[1]
    cap = hw.memory.capacity.value
    if hw.memory_policy.kind == "total_fraction":           # capacity - weights - workspace
        f = float(np.ravel(engine_fraction(hw, ranks, engine.speculation))[0])
        after_weights, mem_util = kv + (1 - f) * cap, f
    else:
        f = hw.memory_policy.fraction.value
        after_weights = kv / f
        mem_util = round(1 - (after_weights - kv) / cap, 3)
    stage = max(b.tp, b.ep)
    dp = stage // b.tp
    rank_tp, rank_dp, rank_ep = (int(x) for x in (ranks.tp, ranks.attention_dp, ranks.ep))
    # tokens one attention replica's pool holds by memory alone: what an engine's recurrent-state
    # slots leave of a device's cache memory (SGLang), over the pools the device holds a share of
    per_token = float(np.ravel(kv_bytes_per_token_device(m, lay, dtypes.kv, hw))[0])
    pools = float(np.ravel(pools_per_device(hw, lay))[0])
    state = state_bytes_per_sequence_device(m, lay, dtypes.kv, hw)
    kv_pool = float(np.ravel(state_pool_split(hw, max(kv, 0.0), state)[0])[0])
    memory_tokens = int(kv_pool / per_token / pools) if per_token > 0 else 0
    page = hw.memory_policy.page_tokens
    return dict(
        name=k8s_name(f"{scn.name}-{b.hardware}-tp{b.tp}"),
        model=m.name, hw=hw, framework=entry, b=b, scn=scn, result=result, stage=stage, dp=dp, devices=stage * b.pp,
        ranks=int(ranks.stage_devices), rank_tp=rank_tp, rank_dp=rank_dp, rank_ep=rank_ep,
        mem_util=mem_util, kv_free_fraction=round(kv / after_weights, 3), state=engine.state_dtype,
        max_num_seqs=b.max_num_seqs,
        # what the whole instance admits, as the planner assumed it (engine.limits_scope), over its
        # engine ranks (one per die)
        instance_seqs=b.max_num_seqs * rank_dp, instance_tokens=engine.instance_limits(rank_dp, hw)[1],
        chunked=engine.chunked_prefill, mixed=engine.mixed_prefill,
        delay_passes=engine.prefill_delay_passes,
        pool_cap=engine.kv_pool_tokens, memory_tokens=memory_tokens, page=int(page.value) if page else 1,
        longest=int(np.max(np.add(*scn.workload.joint_support()[:2]))))


def _no_pool_cap(p: dict, engine: str, where: str) -> None:
    """An engine whose launch this emitter writes has no flag for the plan's KV-pool cap."""
    if p["pool_cap"] is not None:
        raise InputError(f"{engine} takes a KV-pool token cap only {where}, which this emitter does not write; emit "
                         "vllm or sglang, or drop engine.kv_pool_tokens")


def _sglang_only(p: dict, engine: str) -> None:
    """vLLM and TensorRT-LLM have neither SGLang's prefill delayer nor its prompts-only iterations."""
    if p["delay_passes"] and p["rank_dp"] > 1:
        raise InputError(f"{engine} has no prefill delayer, which the plan assumed (engine.prefill_delay_passes: "
                         f"{p['delay_passes']}); emit sglang, or plan with prefill_delay_passes: 0")
    if p["chunked"] and not p["mixed"]:
        raise InputError(f"{engine} runs the decodes in the iterations of its prompt chunks, the plan assumed they "
                         f"wait (engine.mixed_prefill: false); emit sglang, or plan with mixed_prefill: true")


def vllm_args(p: dict) -> list[str]:
    b = p["b"]
    _sglang_only(p, "vLLM")
    args = ["--tensor-parallel-size", str(p["rank_tp"]), "--pipeline-parallel-size", str(b.pp)]
    if b.ep > 1:
        if b.ep != p["stage"]:
            raise InputError(f"vLLM's expert parallelism spans all {p['stage']} TP x DP ranks of a stage, the plan "
                             f"uses ep={b.ep}; emit sglang or trtllm (explicit EP size) instead")
        args += ["--data-parallel-size", str(p["rank_dp"]), "--enable-expert-parallel"]
    # each of vLLM's DP engine cores takes its own limits: the instance's split over them
    seqs, tokens = (-(-p[k] // p["rank_dp"]) for k in ("instance_seqs", "instance_tokens"))
    args += ["--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(tokens),
             "--gpu-memory-utilization", f"{p['mem_util']:g}",
             "--kv-cache-dtype", "fp8" if b.kv_dtype == "fp8" else "auto"]
    if p["state"]:                   # the recurrent-state format the plan assumed (engine.state_dtype)
        args += ["--mamba-ssm-cache-dtype", _TORCH_NAMES[p["state"]]]
    pool = p["memory_tokens"]
    if p["pool_cap"] is not None and p["pool_cap"] < p["memory_tokens"]:
        # vLLM replaces its profiled block count with this (above what memory holds it fails to
        # allocate), so it is written only where the cap is below memory's pool, as planned
        args += ["--num-gpu-blocks-override", str(-(-p["pool_cap"] // p["page"])), "--block-size", str(p["page"])]
        pool = p["pool_cap"]
    # vLLM refuses to start unless its pool holds one request of --max-model-len tokens (default: the
    # model's whole context; vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory): the
    # workload's longest request, rounded up to 256 tokens where the pool holds that
    if p["longest"] > pool:
        raise InputError(f"the workload's longest request ({p['longest']:,} tokens) does not fit in one vLLM KV pool "
                         f"of this plan ({pool:,} tokens), so vLLM would refuse to start; cap the request length or "
                         "plan with more devices per instance")
    args += ["--max-model-len", str(min(_tokens_up(p["longest"]), pool))]
    return args + _launch_args(p, "vllm") + _quantization(p, "ascend")


def _launch_args(p: dict, engine: str) -> list[str]:
    """The arguments of the launch the plan's engine entry was measured under, for ``engine``
    (``Framework.launch_args``: vllm-ascend-graph's full decode graphs and async scheduling)."""
    launch = p["framework"].launch_args.get(engine)
    return list(launch.args) if launch is not None else []


_TORCH_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _quantization(p: dict, ascend_name: str) -> list[str]:
    """The weight-format switch: on-line FP8, or on Ascend the engine's name for modelslim
    INT8/INT4 checkpoints (``ascend_name``)."""
    fmt = p["b"].weight_dtype
    if fmt == "fp8":
        return ["--quantization", "fp8"]
    if p["hw"].vendor == "huawei" and fmt in ("int8", "int4"):
        return ["--quantization", ascend_name]
    return []


def sglang_args(p: dict) -> list[str]:
    b = p["b"]
    if b.pp > 1:
        raise InputError("the SGLang launch file is emitted for pp = 1 only; emit vllm or trtllm for pipeline stages")
    # --tp-size counts every rank; with --enable-dp-attention SGLang splits attention into --dp-size
    # groups and divides --max-running-requests and --chunked-prefill-size among them (server_args.py),
    # so both are the instance's
    args = ["--tp-size", str(p["ranks"])]
    if p["hw"].vendor == "huawei":   # SGLang's NPU backend and its Ascend attention kernels
        args += ["--device", "npu", "--attention-backend", "ascend"]
    if p["rank_dp"] > 1:
        args += ["--dp-size", str(p["rank_dp"]), "--enable-dp-attention"]
        if p["delay_passes"]:        # the prefill delayer the plan assumed (engine.prefill_delay_passes)
            args += ["--enable-prefill-delayer", "--prefill-delayer-max-delay-passes", str(p["delay_passes"])]
    if b.ep > 1:
        args += ["--ep-size", str(p["rank_ep"])]
    args += ["--mem-fraction-static", f"{p['mem_util']:g}", "--max-running-requests", str(p["instance_seqs"])]
    if p["chunked"]:
        args += ["--chunked-prefill-size", str(p["instance_tokens"])]
        if p["mixed"]:               # decodes in the prompt iterations, as planned (engine.mixed_prefill)
            args += ["--enable-mixed-chunk"]
    if b.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    if p["state"]:
        args += ["--mamba-ssm-dtype", _TORCH_NAMES[p["state"]]]
    if p["pool_cap"] is not None:    # each DP rank's pool: the smaller of this and memory's (model runner)
        args += ["--max-total-tokens", str(p["pool_cap"])]
    return args + _launch_args(p, "sglang") + _quantization(p, "modelslim")


def trtllm_args(p: dict) -> list[str]:
    b = p["b"]
    if p["hw"].vendor != "nvidia":
        raise InputError(f"TensorRT-LLM runs on NVIDIA GPUs; the plan chose {p['hw'].name}: emit vllm or sglang"
                         + (" (or mindie)" if p["hw"].vendor == "huawei" else ""))
    _sglang_only(p, "TensorRT-LLM")
    _no_pool_cap(p, "trtllm-serve", "in an extra options file (kv_cache_config.max_tokens)")
    if p["state"]:
        raise InputError("trtllm-serve takes the recurrent-state format only in an extra options file "
                         "(kv_cache_config.mamba_ssm_cache_dtype), which this emitter does not write; emit vllm or "
                         "sglang, or drop engine.state_dtype")
    return ["--tp_size", str(p["stage"]), "--pp_size", str(b.pp), "--ep_size", str(b.ep),
            "--max_batch_size", str(p["max_num_seqs"]), "--max_num_tokens", str(-(-p["instance_tokens"] // p["dp"])),
            "--kv_cache_free_gpu_memory_fraction", f"{p['kv_free_fraction']:g}", *_launch_args(p, "trtllm")]


_LAUNCH = {"vllm": (["vllm", "serve", "$MODEL"], vllm_args),
           "sglang": (["python3", "-m", "sglang.launch_server", "--model-path", "$MODEL"], sglang_args),
           "trtllm": (["trtllm-serve", "$MODEL"], trtllm_args)}


def _header(p: dict, comment: str = "#") -> str:
    """The predictions the file rests on, one per line."""
    b, r, scn = p["b"], p["result"], p["scn"]
    lat = lambda d: " / ".join(f"{d[k] * 1e3:.0f} ms" for k in ("p50", "p90", "p99"))  # noqa: E731
    lines = [
        f"planner plan {scn.name}: {b.instances} x ({b.hardware} tp={b.tp} ep={b.ep} pp={b.pp}, {b.weight_dtype} "
        f"weights, {b.kv_dtype} KV) = {b.accelerators} accelerators for {r.rate:g} req/s of {p['model']}",
        f"each instance: {b.rate_per_instance:.3g} req/s of {b.max_rate_per_instance:.3g} max under the SLOs, mean "
        f"decode batch {b.decode_batch:.0f} (max_num_seqs {b.max_num_seqs} per attention replica)",
        f"predicted TTFT p50/p90/p99: {lat(b.ttft_s)}; TPOT: {lat(b.tpot_s)}; binding: {b.binding}",
        f"predicted cost ${b.usd_per_h:,.2f}/h, avg power {b.avg_power_w / 1e3:.1f} kW "
        f"(peak {b.peak_power_w / 1e3:.1f} kW)",
        f"memory: the engine may use {p['mem_util']:.0%} of each device's HBM (the planner's assumption)",
    ]
    if why := other_engine(p["framework"], p["hw"], p["launch"]):
        lines += textwrap.wrap(f"NOTE {why}", 110, subsequent_indent="  ")
    if p["pool_cap"] is not None:
        held = min(p["pool_cap"], p["memory_tokens"])
        lines.append(f"KV pool: {held:,} tokens per attention replica, the smaller of the launch's cap "
                     f"({p['pool_cap']:,}, engine.kv_pool_tokens) and what memory holds ({p['memory_tokens']:,})")
    if r.simulation is not None:
        s = r.simulation
        lines.append(f"simulator check: {s.instances} instances, TTFT p90 {s.ttft_s['p90'] * 1e3:.0f} ms, TPOT p90 "
                     f"{s.tpot_s['p90'] * 1e3:.0f} ms, meets SLOs: {'yes' if s.meets_slo else 'no'}")
    if b.weight_dtype not in ("bf16", "fp16", "fp8"):
        how = ("a modelslim checkpoint (the engine's --quantization switch for it is emitted)"
               if p["hw"].vendor == "huawei" and b.weight_dtype in ("int8", "int4") else "(no flag emitted)")
        lines.append(f"{b.weight_dtype} weights: serve a checkpoint quantized to {b.weight_dtype}, {how}")
    if p["devices"] > NODE_DEVICES:
        lines.append(f"one instance spans {p['devices']} devices: more than one {NODE_DEVICES}-device server")
    return "\n".join(f"{comment} {x}" for x in lines) + "\n"


def _script(engine: str, p: dict) -> str:
    base, args_of = _LAUNCH[engine]
    b = p["b"]
    lines = [" ".join('"$MODEL"' if a == "$MODEL" else a for a in base), *_flag_lines(args_of(p))]
    return (f"#!/usr/bin/env bash\n{_header(p)}"
            f"# run {b.instances} of these (one per instance, each on its own {p['devices']} devices) behind a "
            "load balancer\n"
            f"MODEL=${{MODEL:-{p['model']}}}   # set to the checkpoint's Hugging Face id or local path\n"
            "exec " + " \\\n  ".join(lines) + "\n")


MINDIE_HOME = "/usr/local/Ascend/mindie/latest/mindie-service"


def mindie_config(p: dict) -> dict:
    """The part of MindIE's ``conf/config.json`` the plan decides, nested as that file nests it:
    one instance on ``worldSize`` ranks (one per die), attention TP x DP and expert TP x EP over them
    (``tp``/``dp``/``moe_tp``/``moe_ep``, written where the plan splits attention or experts),
    ``maxBatchSize`` and ``maxPrefillTokens`` the instance's sequences and prompt tokens per
    iteration, lengths from the workload's request mix (MindIE rejects longer ones: truncation
    off), KV sized by MindIE itself from ``NPU_MEMORY_FRACTION`` (``npuMemSize`` -1)."""
    b = p["b"]
    if p["hw"].vendor != "huawei":
        raise InputError(f"MindIE serves on Ascend NPUs; the plan chose {p['hw'].name}: emit vllm, sglang or trtllm")
    if b.pp > 1:
        raise InputError("the MindIE config is emitted for pp = 1 only; emit vllm or trtllm for pipeline stages")
    if p["devices"] > NODE_DEVICES:
        raise InputError(f"one instance spans {p['devices']} devices, more than one server: MindIE's multi-node "
                         "launch (ranktable, multiNodesInferEnabled) is not emitted; plan with fewer devices per "
                         "instance or emit vllm / sglang")
    if p["delay_passes"] and p["rank_dp"] > 1:
        raise InputError(f"MindIE has no prefill delayer, which the plan assumed (engine.prefill_delay_passes: "
                         f"{p['delay_passes']}); plan with prefill_delay_passes: 0")
    if p["chunked"] and p["mixed"]:
        raise InputError("the plan runs decodes in its prompt iterations (engine.mixed_prefill: true); MindIE's "
                         "Standard template batches prompts apart: plan with engine.framework: mindie")
    _no_pool_cap(p, "MindIE", "as a KV size in GB per NPU (npuMemSize)")
    if p["state"]:
        raise InputError("MindIE's config has no recurrent-state format key, which the plan set (engine.state_dtype: "
                         f"{p['state']}); emit vllm or sglang, or drop engine.state_dtype")
    inp, out, _ = p["scn"].workload.joint_support()
    max_in, max_seq = _tokens_up(inp.max()), _tokens_up((inp + out).max())
    model_cfg: dict = {"modelName": p["model"], "modelWeightPath": "$MODEL_PATH", "worldSize": p["ranks"],
                       "npuMemSize": -1, "backendType": "atb"}
    if p["rank_dp"] > 1 or b.ep > 1:
        model_cfg |= {"tp": p["rank_tp"], "dp": p["rank_dp"], "moe_tp": p["ranks"] // p["rank_ep"],
                      "moe_ep": p["rank_ep"]}
    return {"BackendConfig": {
        "npuDeviceIds": [list(range(p["ranks"]))],
        "ModelDeployConfig": {"maxSeqLen": max_seq, "maxInputTokenLen": max_in, "truncation": False,
                              "ModelConfig": [model_cfg]},
        "ScheduleConfig": {"templateType": "Standard", "maxBatchSize": p["instance_seqs"],
                           "maxPrefillTokens": max(p["instance_tokens"], max_in),
                           "maxIterTimes": _tokens_up(out.max())}}}


def _tokens_up(x: float) -> int:
    """A multiple of 256 tokens at or above ``x``."""
    return int(-(-float(x) // 256) * 256)


_MERGE = """import json, os, shutil, sys
path, fragment, weights = sys.argv[1:4]
if not os.path.exists(path + ".orig"):            # the image's own config, kept once
    shutil.copy2(path, path + ".orig")
cfg = json.load(open(path + ".orig"))
def merge(into, new):
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        elif k == "ModelConfig":
            into[k] = [{**into.get(k, [{}])[0], **v[0]}]
        else:
            into[k] = v
merge(cfg, json.load(open(fragment)))
cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["modelWeightPath"] = weights
json.dump(cfg, open(path, "w"), indent=4)
"""


def _mindie(p: dict) -> dict[str, str]:
    """``mindie-config.json`` (the plan's keys) and ``mindie.sh``, which merges them into the image's
    config (kept as ``config.json.orig``), sets the memory fraction and starts the daemon."""
    import json

    b = p["b"]
    script = (f"#!/usr/bin/env bash\n{_header(p)}"
              f"# run {b.instances} of these (one per instance, each on its own {p['devices']} devices) behind a "
              "load balancer\n"
              "set -euo pipefail\n"
              f"MODEL_PATH=${{MODEL_PATH:?set MODEL_PATH to the checkpoint folder of {p['model']}}}\n"
              f"MINDIE_HOME=${{MINDIE_HOME:-{MINDIE_HOME}}}\n"
              f"export NPU_MEMORY_FRACTION={p['mem_util']:g}   # the HBM share the plan gave the engine\n"
              'python3 - "$MINDIE_HOME/conf/config.json" "$(dirname "$0")/mindie-config.json" "$MODEL_PATH" '
              "<<'EOF'\n" + _MERGE + "EOF\n"
              'cd "$MINDIE_HOME"\nexec ./bin/mindieservice_daemon\n')
    return {"mindie-config.json": json.dumps(mindie_config(p), indent=2) + "\n", "mindie.sh": script}


def _flag_lines(args: list[str]) -> list[str]:
    """One line per flag, with its value when it has one."""
    out: list[str] = []
    for a in args:
        if a.startswith("--") or not out:
            out.append(a)
        else:
            out[-1] += " " + shlex.quote(a)
    return out


def _vllm_image(hw: Any) -> str:
    """vLLM's container image for ``hw``'s vendor (``VLLM_IMAGE``), the A3 build on a 910C package."""
    image = VLLM_IMAGE[hw.vendor]
    return image + "-a3" if hw.vendor == "huawei" and "910c" in f"{hw.name} {hw.base or ''}" else image


def _k8s(p: dict) -> str:
    """One Deployment: ``replicas`` instances, each a pod with the instance's devices running vLLM."""
    import yaml

    b, hw = p["b"], p["hw"]
    if hw.vendor not in GPU_RESOURCE:
        raise InputError(f"no Kubernetes device-plugin resource known for vendor {hw.vendor!r}")
    args = ["serve", p["model"], *vllm_args(p)]
    doc = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": p["name"], "labels": {"app": p["name"]}},
        "spec": {
            "replicas": b.instances,
            "selector": {"matchLabels": {"app": p["name"]}},
            "template": {
                "metadata": {"labels": {"app": p["name"]}},
                "spec": {
                    "containers": [{
                        "name": "engine", "image": _vllm_image(hw), "command": ["vllm"], "args": args,
                        "ports": [{"containerPort": 8000}],
                        "resources": {"limits": {GPU_RESOURCE[hw.vendor]: p["devices"]}},
                        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    }],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                },
            },
        },
    }
    return (_header(p) + f"# set args[1] to the checkpoint's Hugging Face id ({p['model']} is the catalog name)\n"
            + yaml.safe_dump(doc, sort_keys=False))
