"""Where sweep variants run. Each executor takes the variants to do and yields result rows as they
finish (not in submission order):

* ``in_process``: one after another in this process (no extra dependency);
* ``local_processes``: a pool of N local worker processes (``concurrent.futures``);
* ``dask``: a Dask distributed cluster at a scheduler address (``pip install "planner[dask]"``);
  every worker needs the same planner installed.
"""

from __future__ import annotations

from collections.abc import Iterator

from planner.errors import InputError
from planner.sweep.spec import Variant
from planner.sweep.task import run_variant


def in_process(todo: list[Variant], base_dir: str) -> Iterator[dict]:
    for v in todo:
        yield run_variant(v.id, v.params, v.scenario, base_dir)


def local_processes(todo: list[Variant], base_dir: str, workers: int) -> Iterator[dict]:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        futures = [pool.submit(run_variant, v.id, v.params, v.scenario, base_dir) for v in todo]
        for f in as_completed(futures):
            yield f.result()
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
        futures = [client.submit(run_variant, v.id, v.params, v.scenario, base_dir, key=f"planner-sweep-{v.id}",
                                 pure=False) for v in todo]
        for f in as_completed(futures):
            yield f.result()
    finally:
        client.close()
