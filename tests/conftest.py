from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def hf_configs() -> Path:
    return DATA / "hf_configs"
