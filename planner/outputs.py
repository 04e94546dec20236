"""Output files that never clobber: paths checked before a run, writes that land whole or not at all.

``check_output`` runs before the (possibly long) planning, so a typo in ``--csv``/``--plot`` costs
nothing; ``atomic_path`` gives a writer a temporary name in the target's folder and renames it
over the target only when the writer finished (``os.replace`` is atomic on POSIX and Windows).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from planner.errors import InputError

# the formats matplotlib's Agg, PDF, PS and SVG backends write
IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")


def check_output(path: str | Path, option: str, inputs: Iterable[str | Path] = (),
                 suffixes: tuple[str, ...] | None = None) -> Path:
    """``path`` if it can be written: its folder exists and is writable, it is not a folder, not
    one of ``inputs``, and (for ``suffixes``) has a known suffix. Else an ``InputError``."""
    p = Path(path)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise InputError(f"{option} {path}: unknown file type {p.suffix or '(no suffix)'!r}; "
                         f"use one of {', '.join(suffixes)}")
    folder = p.parent if str(p.parent) else Path(".")
    try:
        if not folder.is_dir():
            raise InputError(f"{option} {path}: folder {folder} does not exist")
        if p.is_dir():
            raise InputError(f"{option} {path}: is a folder, expected a file name")
        if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise InputError(f"{option} {path}: not writable")
    except InputError:
        raise
    except (OSError, ValueError) as e:       # a name the system cannot hold (too long, a NUL byte)
        raise InputError(f"{option} {str(path)[:80]}...: not a usable file name ({getattr(e, 'strerror', None) or e})"
                         ) from None
    for src in inputs:
        try:
            same = Path(src).exists() and p.exists() and p.resolve() == Path(src).resolve()
        except OSError:
            same = False
        if same:
            raise InputError(f"{option} {path}: is one of the input files; writing it would destroy the input")
    return p


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix, so writers infer the format); renamed to
    ``path`` when the block succeeds, deleted when it raises. The file gets the permissions a file
    created by ``open`` would (0666 less the umask: mkstemp's are 0600, owner-only), keeping an
    executable bit a writer set (launch scripts)."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=p.suffix, dir=p.parent if str(p.parent) else ".")
    os.close(fd)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        executable = os.stat(tmp).st_mode & 0o100
        os.chmod(tmp, (0o777 if executable else 0o666) & ~umask)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
