"""Sweeps: a grid of scenario variants (``planner sweep SWEEP.yaml``) run on an executor, results
streamed to one CSV or Parquet file as they finish, resumable."""
