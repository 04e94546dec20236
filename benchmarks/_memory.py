"""Memory a process tree costs the machine, from Linux's /proc (benchmarks only).

RSS counts every page a process maps, so summing it over a parent and its forked workers counts
the pages they share copy-on-write (imported modules, the catalog) once per process. PSS
(proportional set size) splits each shared page between the processes that map it: summed over
the tree, it is what the tree costs. File-backed pages (libpython, numpy's libraries) are split
with every other process on the machine mapping them too, so ``pss_anon`` (heap, arrays,
Python objects: shared only inside the tree) is reported beside it.
"""

from __future__ import annotations

import os
import subprocess
import time


def rollup(pid: int) -> dict[str, int]:
    """``rss``, ``pss``, ``pss_anon`` of a live process in bytes (``/proc/PID/smaps_rollup``);
    an empty dict once it has exited."""
    wanted = {"Rss:": "rss", "Pss:": "pss", "Pss_Anon:": "pss_anon"}
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, value, *_ = line.split()
                if key in wanted:
                    out[wanted[key]] = int(value) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return {}
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return pids


def run_sampled(cmd: list[str], every_s: float = 0.05) -> tuple[str, dict[str, float]]:
    """Run ``cmd`` and return its stdout and the peaks, over the run, of its process tree's summed
    ``rss``, ``pss`` and ``pss_anon`` (bytes) and of ``processes`` (sampled every ``every_s``:
    a peak shorter than that can be missed)."""
    peak = {"rss": 0.0, "pss": 0.0, "pss_anon": 0.0, "processes": 0.0}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
        while proc.poll() is None:
            pids = tree(proc.pid)
            total = {"rss": 0, "pss": 0, "pss_anon": 0}
            for p in pids:
                for k, v in rollup(p).items():
                    total[k] += v
            for k, v in total.items():
                peak[k] = max(peak[k], v)
            peak["processes"] = max(peak["processes"], len(pids))
            time.sleep(every_s)
        out = proc.stdout.read()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd, out)
    return out, peak
