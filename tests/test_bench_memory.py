"""The benchmarks' memory reader: PSS of a live process is positive and at most its RSS (a
page's share is at most the page), and the process tree of a parent includes its children."""

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _memory import rollup, run_sampled, tree  # noqa: E402


def test_pss_of_this_process_is_positive_and_below_rss():
    m = rollup(os.getpid())
    assert 0 < m["pss_anon"] < m["pss"] <= m["rss"]
    assert rollup(2**22 + 7) == {}               # no such process (above the kernel's pid_max)


def test_tree_holds_the_children_and_sampling_sees_them():
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as child:
        try:
            assert child.pid in tree(os.getpid()) and tree(child.pid) == [child.pid]
        finally:
            child.kill()
    # a child that allocates 200 MB and touches it: the sampled peak sees it (and its own PSS)
    code = "import time; b = b'x' * 200_000_000; time.sleep(0.5); print('done')"
    out, peak = run_sampled([sys.executable, "-c", code])
    assert out.strip() == "done" and peak["processes"] == 1
    assert 200e6 < peak["pss_anon"] <= peak["pss"] <= peak["rss"] < 300e6
