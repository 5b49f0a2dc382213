"""rlvr.models: decoder in flax.nnx for the Llama, Qwen2/3, Mistral, Gemma 2/3, Qwen3-MoE and
Mixtral families, value model, HF import/export, token scoring and tokenizers (docs/architecture.md §3, docs/algorithms.md §7,
docs/algorithms.md §7; docs/architecture.md §2)."""

from rlvr.models.config import ModelConfig
from rlvr.models.transformer import KVCache, Transformer
from rlvr.models.value import ValueModel
from rlvr.models.hf import from_pretrained, save_pretrained

__all__ = ["ModelConfig", "Transformer", "ValueModel", "KVCache", "from_pretrained",
           "save_pretrained"]
