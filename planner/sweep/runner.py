"""Run a sweep: validate every variant, skip those already in the output, run the rest on the
chosen executor, stream each row into the output as it finishes, and show progress with an ETA
on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from planner.errors import InputError
from planner.sweep import executors
from planner.sweep.sink import open_sink
from planner.sweep.spec import Sweep, Variant
from planner.sweep.task import validate


@dataclass(frozen=True)
class SweepSummary:
    total: int
    skipped: int          # already in the output (resumed)
    ran: int
    failed: int           # infeasible or error rows among those run
    seconds: float


class Progress:
    """``done/total, rate, ETA`` on one stderr line (redrawn at most 4 times a second on a
    terminal; a new line every 10% otherwise)."""

    def __init__(self, total: int, stream=None) -> None:
        self.total, self.done, self.t0 = total, 0, time.perf_counter()
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.last = 0.0

    def update(self) -> None:
        self.done += 1
        now = time.perf_counter()
        tenth = max(self.total // 10, 1)
        if (self.tty and now - self.last < 0.25 and self.done < self.total) or \
                (not self.tty and self.done % tenth and self.done < self.total):
            return
        self.last = now
        rate = self.done / max(now - self.t0, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        line = f"sweep: {self.done}/{self.total} ({self.done / max(self.total, 1):.0%}), {rate:.2f}/s, " \
               f"ETA {_clock(eta)}"
        self.stream.write(("\r" + line + " " * 8) if self.tty else line + "\n")
        if self.tty and self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def _clock(s: float) -> str:
    if s == float("inf"):
        return "?"
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def check(sweep: Sweep) -> None:
    """Validate every variant before running any; the first bad one is an ``InputError``."""
    for v in sweep.variants:
        try:
            validate(v.scenario, str(sweep.base_dir))
        except ValidationError as e:
            from planner.scenario import Scenario
            from planner.yamlio import validation_error

            # the scenario's own message (union tags dropped, unknown keys matched), located at the variant
            msg = str(validation_error("", e, {}, Scenario)).strip()
            raise InputError(f"{sweep.path}: variant {v.params}: {msg}") from None


def run_sweep(sweep: Sweep, out: str | Path, workers: int = 1, scheduler: str | None = None,
              progress: bool = True, executor: Callable[[list[Variant], str], Iterator[dict]] | None = None
              ) -> SweepSummary:
    """Run the variants not yet in ``out``; ``executor`` overrides the choice made by ``workers``
    and ``scheduler`` (in process, local processes, Dask)."""
    sink = open_sink(out, sweep.keys)           # first: a bad output path or file is found at once
    for note in sink.notes:
        print(note, file=sys.stderr)
    check(sweep)
    t0 = time.perf_counter()
    todo = [v for v in sweep.variants if v.id not in sink.done]
    base = str(sweep.base_dir)
    if executor is not None:
        rows = executor(todo, base)
    elif scheduler:
        rows = executors.dask(todo, base, scheduler)
    elif workers > 1:
        rows = executors.local_processes(todo, base, workers)
    else:
        rows = executors.in_process(todo, base)
    bar = Progress(len(todo)) if progress and todo else None
    ran = failed = 0
    try:
        for row in rows:
            sink.write(row)
            ran += 1
            failed += row.get("status") != "ok"
            if bar:
                bar.update()
    finally:
        close = getattr(rows, "close", None)
        if close:
            close()
        sink.close()
    return SweepSummary(len(sweep.variants), len(sweep.variants) - len(todo), ran, failed, time.perf_counter() - t0)
