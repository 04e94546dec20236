import os
from pathlib import Path

import pytest
from hypothesis import settings

# Every property test draws the same cases on every run, so CI is reproducible (a red CI means a
# change broke something, not an unlucky draw); PLANNER_FUZZ_RANDOM=1 draws new ones, as it does
# for tests/test_fuzz.py. A test's own @settings(...) keeps this unless it sets derandomize itself.
settings.register_profile("planner", derandomize=not os.environ.get("PLANNER_FUZZ_RANDOM"))
settings.load_profile("planner")

DATA = Path(__file__).parent / "data"


@pytest.fixture
def hf_configs() -> Path:
    return DATA / "hf_configs"
