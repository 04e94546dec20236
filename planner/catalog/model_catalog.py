"""The bundled model catalog: one YAML per model under ``catalog/models/``, each holding the
model's public HuggingFace ``config.json`` fields and their source. Every entry goes through
the same parser as a user's ``config.json`` (``hf_config.spec_from_hf_dict``)."""

from __future__ import annotations

from pathlib import Path

from planner.catalog.hf_config import model_from_hf_config, spec_from_hf_dict
from planner.catalog.model import ModelSpec
from planner.checks import is_dir, is_file
from planner.errors import InputError, unknown_name
from planner.yamlio import load_yaml

MODELS_DIR = Path(__file__).resolve().parent / "models"
_CACHE: dict[str, ModelSpec] = {}


_ALL_LOADED = False


def _load_file(path: Path) -> None:
    data, _ = load_yaml(path)
    if not isinstance(data, dict) or not {"name", "source", "config"} <= set(data):
        raise InputError(f"{path}:1: a catalog entry needs 'name', 'source' and 'config'")
    _CACHE[data["name"]] = spec_from_hf_dict(data["config"], name=data["name"], source=data["source"],
                                             origin=str(path))


def _load_bundled() -> None:
    global _ALL_LOADED
    if _ALL_LOADED:
        return
    for path in sorted(MODELS_DIR.glob("*.yaml")):
        _load_file(path)
    _ALL_LOADED = True


def list_models() -> list[str]:
    """Names of the bundled models."""
    _load_bundled()
    return sorted(_CACHE)


def model(name: str | ModelSpec) -> ModelSpec:
    """A model by catalog name (``llama-3.1-70b``), by a local ``config.json`` path, or passed through."""
    if isinstance(name, ModelSpec):
        return name
    if str(name).endswith(".json") or is_dir(str(name)):
        return model_from_hf_config(name)
    key = str(name).lower()
    if key not in _CACHE and is_file(MODELS_DIR / f"{key}.yaml"):
        _load_file(MODELS_DIR / f"{key}.yaml")      # one file for one lookup (fast CLI start)
    if key not in _CACHE:
        _load_bundled()
    if key not in _CACHE:
        raise unknown_name("model", str(name), sorted(_CACHE))
    return _CACHE[key]
