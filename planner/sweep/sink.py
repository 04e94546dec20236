"""Result files of a sweep, written row by row as variants finish.

CSV: each row is written and flushed when its variant finishes, so a crash or Ctrl-C loses no
finished row (a half-written last row is dropped on the next run, which says so). The header is
fixed by the first successful row (its design's headline columns); rows finished before it wait in
memory. A rerun appends to a file only if its columns are the sweep's (id, grid keys, status,
message, seconds, result.*, extra): another sweep's or tool's file is refused untouched.
Parquet (``pyarrow``, ``pip install "planner[parquet]"``): rows stream into a CSV journal beside
the file (``OUT.parquet.journal.csv``) and are folded into the Parquet file at the end of the run
(or of the next run, after a crash). A rerun skips every id already in the file or the journal.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, BinaryIO

from planner.errors import InputError

FIXED = ("id", "status", "message", "seconds")
FIELD_LIMIT = 2**31 - 1
"""Largest cell a resume reads (the csv module's default stops at 128 KiB; a message can be longer)."""


class CsvSink:
    def __init__(self, path: Path, param_keys: list[str]) -> None:
        self.path = path
        self.params = param_keys
        self.header: list[str] | None = None
        self.pending: list[dict] = []
        self.done: set[str] = set()
        self.notes: list[str] = []          # what resuming changed in the file, one line each
        if path.exists() and path.stat().st_size:
            self._read_existing()
        self.file = None

    def _read_existing(self) -> None:
        """The ids of the complete rows. A file this sweep did not write is refused untouched; an
        incomplete last row (a run stopped while writing it) is cut off, so its variant runs again."""
        limit = csv.field_size_limit(FIELD_LIMIT)
        try:
            with open(self.path, "rb") as f:
                lines = _Lines(self.path, f)
                reader = csv.reader(lines)
                try:
                    header = next(reader, [])
                    self._check_header(header)
                    key = header.index("id")
                    start, last = (0, 1, 0), ""     # the last record (byte offset, line, quotes before it), its id
                    while True:
                        at = (lines.pos, lines.n + 1, lines.quotes)
                        if (row := next(reader, None)) is None:
                            break
                        self.done.add(last)
                        start, last = at, row[key] if len(row) > key else ""
                except csv.Error as e:
                    raise InputError(f"{self.path}:{lines.n}: sweep result file is not readable as CSV: {e}") from None
        finally:
            csv.field_size_limit(limit)
        self.header = header
        if lines.last.endswith(b"\n") and (lines.quotes - start[2]) % 2 == 0:
            self.done.add(last)
        else:                                   # half-written: no newline yet, or inside an open quote
            with open(self.path, "rb+") as f:
                f.truncate(start[0])
            span = f"line {start[1]}" if start[1] == lines.n else f"lines {start[1]}-{lines.n}"
            self.notes.append(f"{self.path}: dropped {span}, an incomplete row a stopped run left" +
                              ("; its variant runs again" if start[0] else ""))
            if start[0] == 0:                   # the header itself: written again
                self.header = None
        self.done.discard("")

    def _check_header(self, header: list[str]) -> None:
        check_columns(f"{self.path}:1: header", header, self.params)

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
            self.file = open(self.path, "a", newline="", encoding="utf-8")
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


class _Lines:
    """The lines of a file open in binary, as UTF-8 text for ``csv.reader``, counting the bytes,
    lines and quote characters read so far (where each record starts, whether it is complete)."""

    def __init__(self, path: Path, f: BinaryIO) -> None:
        self.path, self.f = path, f
        self.pos = self.n = self.quotes = 0
        self.last = b""

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        raw = self.f.readline()
        if not raw:
            raise StopIteration
        self.n += 1
        try:
            text = raw.decode("utf-8-sig" if self.pos == 0 else "utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{self.path}:{self.n}: sweep result file is not UTF-8 text (byte 0x{raw[e.start]:02x})"
                             ) from None
        self.pos += len(raw)
        self.quotes += raw.count(b'"')
        self.last = raw
        return text


def check_columns(where: str, header: list[str], params: list[str]) -> None:
    """Refuse columns other than a sweep writes, or without its id and grid columns: another
    sweep's or tool's file, whose rows would lose the results (``where``: the file, and its line)."""
    if "id" not in header:
        raise InputError(f"{where}: not a sweep result file (no 'id' column); it is left as it is: "
                         "choose another --out")
    ours = ["id", *params, "status", "message", "seconds", "extra"]
    lacks = [c for c in ours[:1 + len(params)] if c not in header]
    other = [c for c in header if c not in ours and not c.startswith("result.")]
    if lacks or other:
        diff = " and ".join([f"has {_names(other)}"] * bool(other) + [f"lacks {_names(lacks)}"] * bool(lacks))
        raise InputError(f"{where}: not this sweep's result file: it {diff} (this sweep writes "
                         f"{', '.join(ours[:-1])}, result.*, extra); it is left as it is: choose another --out")


def _names(cols: list[str], most: int = 6) -> str:
    """``a, b, c`` (and how many more past ``most``)."""
    more = f" and {len(cols) - most} more" if len(cols) > most else ""
    return ", ".join(cols[:most]) + more


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
        self.notes = self.journal.notes
        if path.exists():
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                columns = pq.read_schema(path).names
                check_columns(str(path), columns, param_keys)
                self.done |= set(pq.read_table(path, columns=["id"]).column("id").to_pylist())
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0]}); it is left as it "
                                 "is: choose another --out") from None

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
    """The sink of ``path`` (by its suffix), its folder checked and its finished ids read, before
    any variant runs."""
    from planner.outputs import check_output

    path = Path(path)
    if path.suffix not in (".csv", ".parquet"):
        raise InputError(f"{path}: the sweep output must end in .csv or .parquet")
    check_output(path, "sweep output")
    return ParquetSink(path, param_keys) if path.suffix == ".parquet" else CsvSink(path, param_keys)
