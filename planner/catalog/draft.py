"""EAGLE-3 draft models for speculative decoding (Li et al., "EAGLE-3", arXiv:2503.01840).

Without a draft model a speculative step runs the target's own multi-token-prediction module
(``perf.ops.mtp_draft_ops``: a block like the target's last layer and the target's LM head). An
EAGLE-3 draft is a separate, small network (sglang ``models/llama_eagle3.py``, SpecForge
``modeling/draft/llama3_eagle.py``):

* ``fc``: one ``3H -> h`` projection of three of the target's hidden states (its low, middle and
  high layers), applied once per decode step to the hidden states the target just verified;
* one Llama decoder layer whose q/k/v projections read ``2h`` (the token's embedding next to the
  hidden state), with its own KV cache, and a dense SwiGLU MLP of ``intermediate_size``;
* an LM head over a reduced vocabulary (``draft_vocab_size``, typically 32,000, mapped back to the
  target's ids by a table); the embedding is the target's (``set_embed``), not stored again.

Drafts run unquantized (SGLang's ``--speculative-draft-model-quantization unquant``; their
checkpoints are BF16/FP16). A draft comes from the bundled catalog (``catalog/drafts/*.yaml``, each
a public EAGLE-3 ``config.json`` with its source) or a local ``config.json`` whose ``architectures``
name an Eagle3 class. Drafts that are themselves MoE or MLA layers (SpecForge's
``DeepseekV3ForCausalLMEagle3``, ``GptOssForCausalLMEagle3``) are refused: only the Llama-style
layer is modelled.
"""

from __future__ import annotations

import json
from pathlib import Path

from planner.catalog.dtypes import DType
from planner.catalog.hf_config import spec_from_hf_dict
from planner.catalog.model import ModelSpec
from planner.checks import is_dir, is_file
from planner.errors import InputError, unknown_name
from planner.frozen import Frozen
from planner.yamlio import load_yaml

DRAFTS_DIR = Path(__file__).resolve().parent / "drafts"
_CACHE: dict[str, DraftSpec] = {}


class DraftSpec(Frozen):
    """An EAGLE-3 draft: ``layer`` is its decoder layer(s) as a model whose ``vocab_size`` is the
    draft vocabulary (the LM head's rows); ``fc`` reads ``aux_layers`` of the target's hidden
    states, ``target_hidden`` wide each."""

    name: str
    source: str
    layer: ModelSpec
    target_hidden: int
    aux_layers: int = 3
    weight_dtype: DType = DType.bf16

    @property
    def fused_hidden(self) -> int:
        """Width of ``fc``'s input."""
        return self.aux_layers * self.target_hidden

    @property
    def params(self) -> int:
        """Parameters it stores beside the target's (the embedding is the target's; norms left out):
        fc, q/k/v over ``2h``, o, the SwiGLU MLP and the draft-vocabulary head, per layer."""
        m = self.layer
        h, q = m.hidden_size, m.num_heads * m.head_dim
        per_layer = 2 * h * (q + 2 * m.num_kv_heads * m.head_dim) + q * h + 3 * h * m.intermediate_size
        return self.fused_hidden * h + m.num_layers * per_layer + h * m.vocab_size

    def check_target(self, model: ModelSpec) -> None:
        """An ``InputError`` unless ``model``'s hidden states are the ones this draft reads."""
        if model.hidden_size != self.target_hidden:
            raise InputError(f"draft {self.name} reads hidden states {self.target_hidden} wide; model {model.name}'s "
                             f"are {model.hidden_size}: it is a draft for another model")


def draft_from_config(data: object, *, name: str, source: str, origin: str) -> DraftSpec:
    """A DraftSpec from a parsed EAGLE-3 ``config.json`` mapping."""
    if not isinstance(data, dict):
        raise InputError(f"{origin}: a draft config.json must hold a JSON object")
    archs = data.get("architectures") or []
    if not isinstance(archs, list):
        raise InputError(f"{origin}: field 'architectures' must be a list of class names, got {archs!r}")
    if not any(isinstance(a, str) and "eagle3" in a.lower() for a in archs):
        raise InputError(f"{origin}: field 'architectures' is {archs!r}; expected an EAGLE-3 draft "
                         "(e.g. LlamaForCausalLMEagle3). A model's own MTP module needs no draft: give the "
                         "draft tokens alone")
    if any("llama" not in a.lower() for a in archs if isinstance(a, str)) or data.get("model_type") != "llama":
        raise InputError(f"{origin}: {archs[0]} (model_type {data.get('model_type')!r}) is not a Llama-style "
                         "EAGLE-3 layer; only those (one dense decoder layer) are modelled")
    vocab = data.get("draft_vocab_size") or data.get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab <= 0:
        raise InputError(f"{origin}: field 'draft_vocab_size' must be a positive integer, got {vocab!r}")
    layer = spec_from_hf_dict(data | {"vocab_size": vocab, "tie_word_embeddings": False}, name=name,
                              source=source, origin=origin)
    target_hidden = data.get("target_hidden_size") or layer.hidden_size
    if isinstance(target_hidden, bool) or not isinstance(target_hidden, int) or target_hidden <= 0:
        raise InputError(f"{origin}: field 'target_hidden_size' must be a positive integer, got {target_hidden!r}")
    aux = (data.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") if isinstance(
        data.get("eagle_config"), dict) else None
    return DraftSpec(name=name, source=source, layer=layer, target_hidden=target_hidden,
                     aux_layers=len(aux) if isinstance(aux, list) and aux else 3)


def _load_file(path: Path) -> DraftSpec:
    data, _ = load_yaml(path)
    if not isinstance(data, dict) or not {"name", "source", "config"} <= set(data):
        raise InputError(f"{path}:1: a draft catalog entry needs 'name', 'source' and 'config'")
    return draft_from_config(data["config"], name=data["name"], source=data["source"], origin=str(path))


def list_drafts() -> list[str]:
    """Names of the bundled drafts."""
    return sorted(p.stem for p in DRAFTS_DIR.glob("*.yaml"))


def draft(name: str | DraftSpec | None) -> DraftSpec | None:
    """A draft by catalog name (``qwen3-235b-a22b-eagle3``), by a local EAGLE-3 ``config.json``
    path (file or directory), or passed through; None stays None (the target's MTP module)."""
    if name is None or isinstance(name, DraftSpec):
        return name
    text = str(name)
    if not text.strip():
        raise InputError(f"an empty draft name; give a bundled draft ({', '.join(list_drafts())}) or an EAGLE-3 "
                         "config.json")
    folder = is_dir(text)
    if text.endswith(".json") or folder:
        path = Path(text) / "config.json" if folder else Path(text)
        if str(path) in _CACHE:          # an engine asks for its draft at every evaluation: read once
            return _CACHE[str(path)]
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(f"draft config {path} not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"draft config {path}: not readable JSON ({e})") from None
        name = path.parent.name if path.name == "config.json" else path.stem
        _CACHE[str(path)] = draft_from_config(data, name=name, source=f"local file {path}", origin=str(path))
        return _CACHE[str(path)]
    key = text.lower()
    if key not in _CACHE:
        path = DRAFTS_DIR / f"{key}.yaml"
        if not is_file(path):
            raise unknown_name("draft", text, list_drafts())
        _CACHE[key] = _load_file(path)
    return _CACHE[key]
