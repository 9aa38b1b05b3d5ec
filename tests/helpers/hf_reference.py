"""The reference parameter count of a Hugging Face config: `transformers`' own causal-LM model, built from
the config on torch's meta device (no weights, no network), with its parameters summed.

`parameters()` yields a tied weight once, as training holds it. Multimodal configs (`gemma3`, `llama4`)
are counted as their text decoder (`Gemma3ForCausalLM`, `Llama4ForCausalLM` on `text_config`), which is
what primus reads.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.utils import logging as hf_logging

#: multimodal model_type -> the text decoder's model_type (its *ForCausalLM takes the text config)
TEXT_DECODER = {"gemma3": "gemma3_text", "llama4": "llama4_text"}


def _causal_lm(data: Mapping[str, Any]) -> torch.nn.Module:
    fields = dict(data)
    model_type = fields.pop("model_type")
    if model_type in TEXT_DECODER:
        fields = dict(fields["text_config"])
        fields.pop("model_type", None)
        model_type = TEXT_DECODER[model_type]
    config = AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def transformers_param_count(data: Mapping[str, Any]) -> int:
    """Parameters of the `transformers` model of this config (tied weights once)."""
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _causal_lm(data)
    return sum(p.numel() for p in model.parameters())
