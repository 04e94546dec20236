"""Result files of a sweep, written row by row as variants finish.

CSV: each row is written and flushed when its variant finishes, so a crash or Ctrl-C loses no
finished row (a half-written last line is dropped on the next run). The header is fixed by the
first successful row (its design's headline columns); rows finished before it wait in memory.
Parquet (``pyarrow``, ``pip install "planner[parquet]"``): rows stream into a CSV journal beside
the file (``OUT.parquet.journal.csv``) and are folded into the Parquet file at the end of the run
(or of the next run, after a crash). A rerun skips every id already in the file or the journal.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from planner.errors import InputError

FIXED = ("id", "status", "message", "seconds")


class CsvSink:
    def __init__(self, path: Path, param_keys: list[str]) -> None:
        self.path = path
        self.params = param_keys
        self.header: list[str] | None = None
        self.pending: list[dict] = []
        self.done: set[str] = set()
        if path.exists() and path.stat().st_size:
            self._read_existing()
        self.file = None

    def _read_existing(self) -> None:
        from planner.yamlio import read_text

        text = read_text(self.path, "sweep result file")      # (the file is read, not changed, until it is known)
        header = next(csv.reader([text.splitlines()[0]]), []) if text.strip() else []
        if "id" not in header:
            raise InputError(f"{self.path}:1: not a sweep result file (no 'id' column); it is left as it is: "
                             "choose another --out")
        if not text.endswith("\n"):                 # a sweep's half-written last line (a crash mid-write)
            with open(self.path, "rb+") as f:
                data = f.read()
                f.truncate(data.rfind(b"\n") + 1)
        with open(self.path, newline="") as f:
            reader = csv.DictReader(f)
            self.header = list(reader.fieldnames or [])
            self.done = {row["id"] for row in reader if row.get("id")}

    def write(self, row: dict[str, Any]) -> None:
        if self.header is None:
            self.pending.append(row)
            if row.get("status") != "ok":
                return
            self.header = ["id", *self.params, "status", "message", "seconds",
                           *(k for k in row if k not in FIXED and k not in self.params), "extra"]
            rows, self.pending = self.pending, []
        else:
            rows = [row]
        for r in rows:
            self._append(r)

    def _append(self, row: dict[str, Any]) -> None:
        if self.file is None:
            new = not (self.path.exists() and self.path.stat().st_size)
            self.file = open(self.path, "a", newline="")
            self.writer = csv.writer(self.file)
            if new:
                self.writer.writerow(self.header)
        extra = {k: v for k, v in row.items() if k not in self.header}
        self.writer.writerow([json.dumps(extra) if k == "extra" and extra else row.get(k, "") for k in self.header])
        self.file.flush()

    def close(self) -> None:
        if self.pending:          # no successful row at all: the fixed columns only
            self.header = ["id", *self.params, "status", "message", "seconds", "extra"]
            rows, self.pending = self.pending, []
            for r in rows:
                self._append(r)
        if self.file is not None:
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None


class ParquetSink:
    def __init__(self, path: Path, param_keys: list[str]) -> None:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError(f"{path}: writing Parquet needs pyarrow: pip install \"planner[parquet]\" "
                             "(or write .csv)") from None
        self.path = path
        self.journal = CsvSink(path.with_name(path.name + ".journal.csv"), param_keys)
        self.done = set(self.journal.done)
        if path.exists():
            import pyarrow.parquet as pq

            self.done |= set(pq.read_table(path, columns=["id"]).column("id").to_pylist())

    def write(self, row: dict[str, Any]) -> None:
        self.journal.write(row)

    def close(self) -> None:
        import pyarrow as pa
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        self.journal.close()
        jpath = self.journal.path
        if not (jpath.exists() and jpath.stat().st_size):
            return
        strings = pcsv.ConvertOptions(column_types={"id": pa.string(), "message": pa.string(),
                                                    "status": pa.string(), "extra": pa.string()})
        table = pcsv.read_csv(jpath, convert_options=strings)
        if self.path.exists():
            table = pa.concat_tables([pq.read_table(self.path), table], promote_options="permissive")
        tmp = self.path.with_name(self.path.name + ".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, self.path)            # atomic: the old file stays whole until the new one is
        jpath.unlink()


def open_sink(path: str | Path, param_keys: list[str]) -> CsvSink | ParquetSink:
    path = Path(path)
    if path.suffix == ".parquet":
        return ParquetSink(path, param_keys)
    if path.suffix == ".csv":
        return CsvSink(path, param_keys)
    raise InputError(f"{path}: the sweep output must end in .csv or .parquet")
