"""The vocabulary a launch config leaves to its tokenizer.

Megatron-LM takes the vocabulary from the tokenizer it builds (``--tokenizer-type``, and
``--tokenizer-model`` for a Hugging Face id) when ``--vocab-size`` is not given, then pads it to a
multiple of ``make_vocab_size_divisible_by × TP`` (``_vocab_size_with_padding`` in
``megatron/training/tokenizer``); primus's ledger applies the same padding to a model's
``vocab_size``. So a tokenizer's own size is what the job needs, and the padding follows.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Final

from primus.catalog.models import catalog_models, resolve_model

#: Tokenizer types with a fixed vocabulary: size and source.
TOKENIZER_TYPES: Final[dict[str, tuple[int, str]]] = {
    "GPT2BPETokenizer": (50257, "GPT-2's BPE vocabulary (openai/gpt-2 encoder.json: 50,257 tokens)"),
}
_CONFIG = "vocab_size of the model's Hugging Face config.json (the checkpoint's embedding rows)"
#: Hugging Face tokenizer ids (lower-cased, exact or ending in ``*``) of models outside the catalog, with
#: the vocabulary of the published checkpoint. Megatron pads the tokenizer's own length, which can be a
#: few hundred rows shorter (Qwen2.5-7B: 151,665 tokens in a 152,064-row embedding): an upper bound.
HF_TOKENIZERS: Final[dict[str, tuple[int, str]]] = {
    "qwen/qwen2.5-0.5b*": (151936, _CONFIG), "qwen/qwen2.5-1.5b*": (151936, _CONFIG),
    "qwen/qwen2.5-3b*": (151936, _CONFIG), "qwen/qwen2.5-7b*": (152064, _CONFIG),
    "qwen/qwen2.5-14b*": (152064, _CONFIG), "qwen/qwen2.5-32b*": (152064, _CONFIG),
    "qwen/qwen2.5-72b*": (152064, _CONFIG), "qwen/qwen3-*": (151936, _CONFIG),
    "meta-llama/llama-3.2-*": (128256, _CONFIG), "meta-llama/meta-llama-3.2-*": (128256, _CONFIG),
    "meta-llama/llama-3.3-70b*": (128256, _CONFIG),
    "nvidia/llama-3.1-70b-instruct-fp8": (128256, _CONFIG), "meta-llama/llama-4-*": (202048, _CONFIG),
    "deepseek-ai/deepseek-v2": (102400, _CONFIG), "deepseek-ai/deepseek-v2-lite": (102400, _CONFIG),
    "deepseek-ai/deepseek-r1": (129280, _CONFIG), "openai/gpt-oss-*": (201088, _CONFIG),
    "deepseek-ai/deepseek-r1-distill-qwen-1.5b": (151936, _CONFIG),
    "deepseek-ai/deepseek-r1-distill-qwen-7b": (152064, _CONFIG),
    "deepseek-ai/deepseek-r1-distill-qwen-14b": (152064, _CONFIG),
    "deepseek-ai/deepseek-r1-distill-qwen-32b": (152064, _CONFIG),
    "thudm/glm-4-9b": (151552, "padded_vocab_size of THUDM/glm-4-9b's config.json"),
    "nvidia/nemotron-mini-4b-instruct": (256000, _CONFIG + " (huggingface.co/nvidia/Nemotron-Mini-4B-Instruct, "
                                         "Hugging Face revision b4d4a52)"),
    "nvidia/minitron-4b-base": (256000, _CONFIG + " (huggingface.co/nvidia/Minitron-4B-Base)"),
    "minimaxai/minimax-m2*": (200064, _CONFIG + " (huggingface.co/MiniMaxAI/MiniMax-M2, "
                                      "Hugging Face revision 35c5c79; M2.1 and M2.5 the same)"),
}
_HF = re.compile(r"huggingface\.co/([\w.-]+/[\w.-]+)")


@cache
def _hf_ids() -> dict[str, str]:
    """Hugging Face model ids named in the catalog's sources (lower-cased) → catalog slug."""
    out: dict[str, str] = {}
    for slug in catalog_models():
        for match in _HF.finditer(resolve_model(slug, "catalog").source or ""):
            out.setdefault(match.group(1).lower(), slug)
    return out


def vocab_from_tokenizer(tokenizer_type: str | None, tokenizer_model: str | None) -> tuple[int, str] | None:
    """The vocabulary size a named tokenizer gives, and where it comes from; None when unknown."""
    if tokenizer_type in TOKENIZER_TYPES:
        return TOKENIZER_TYPES[tokenizer_type]
    if tokenizer_model:
        key = tokenizer_model.strip().rstrip("/").lower()
        slug = _hf_ids().get(key)
        if slug is not None:
            size = resolve_model(slug, "catalog").vocab_size
            return size, f"the tokenizer of {tokenizer_model} (catalog model {slug})"
        for pattern, (size, source) in HF_TOKENIZERS.items():
            if key == pattern or (pattern.endswith("*") and key.startswith(pattern[:-1])):
                return size, f"the tokenizer of {tokenizer_model} ({source})"
    return None
