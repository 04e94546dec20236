"""Where sweep variants run. Each executor takes the variants to do and yields result rows as they
finish (not in submission order):

* ``in_process``: one after another in this process (no extra dependency);
* ``local_processes``: a pool of N local worker processes (``concurrent.futures``);
* ``dask``: a Dask distributed cluster at a scheduler address (``pip install "planner[dask]"``);
  every worker needs the same planner installed.

The two pools get variants in small batches (``batches``): one task per variant costs a round
trip each, which dominates when a variant takes tens of milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator

from planner.errors import InputError
from planner.sweep.spec import Variant
from planner.sweep.task import run_variant, run_variants


def batches(todo: list[Variant], slots: int, most: int = 16) -> list[list[tuple[str, dict, dict]]]:
    """Variants grouped into tasks: about 4 tasks per worker slot (so the slots stay busy to the
    end), at most ``most`` variants per task (so rows still arrive as the sweep goes)."""
    size = max(1, min(most, len(todo) // max(4 * slots, 1)))
    items = [(v.id, v.params, v.scenario) for v in todo]
    return [items[k:k + size] for k in range(0, len(items), size)]


def in_process(todo: list[Variant], base_dir: str) -> Iterator[dict]:
    for v in todo:
        yield run_variant(v.id, v.params, v.scenario, base_dir)


def local_processes(todo: list[Variant], base_dir: str, workers: int) -> Iterator[dict]:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        futures = [pool.submit(run_variants, b, base_dir) for b in batches(todo, workers)]
        for f in as_completed(futures):
            yield from f.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def dask(todo: list[Variant], base_dir: str, scheduler: str) -> Iterator[dict]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise InputError("--scheduler needs dask.distributed: pip install \"planner[dask]\"") from None
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as e:
        raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
    try:
        slots = sum(client.nthreads().values()) or 1
        futures = [client.submit(run_variants, b, base_dir, key=f"planner-sweep-{b[0][0]}-{len(b)}", pure=False)
                   for b in batches(todo, slots)]
        for f in as_completed(futures):
            yield from f.result()
    finally:
        client.close()
