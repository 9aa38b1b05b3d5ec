"""Specification of `{base: MODEL, num_layers: N}` for MoE models: the MoE layer rule follows the depth.

The README's override of `num_layers` builds a shallower (or deeper) copy of a model. An MoE model's
layer pattern is kept by its rule — the first k layers dense (DeepSeek's `first_k_dense_replace`),
every n-th layer MoE (Qwen's `decoder_sparse_step`, Llama 4's `interleave_moe_layer_step`) — and the
model's notes say the pattern was re-derived; a pattern without such a rule is refused with one line
that says to override `moe_layer_freq` as well. The published layer rules cited per case are the
models' Hugging Face config.json values (the fixtures under tests/data/hf).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.catalog.models import resolve_model
from primus.cli.main import cli
from primus.errors import InputError
from primus.specs.model import ModelSpec

HF = Path(__file__).parent / "data" / "hf"
QWEN3_30B_A3B = HF / "qwen3_moe-Qwen3-30B-A3B" / "config.json"
MAVERICK = HF / "llama4-Llama-4-Maverick-17B-128E" / "config.json"
DEEPSEEK_V3 = HF / "deepseek_v3-DeepSeek-V3" / "config.json"


def override(base: str | Path, **fields: object) -> ModelSpec:
    return resolve_model({"base": str(base), **fields}, "test")


def moe_layer_indices(spec: ModelSpec) -> list[int]:
    return [i for i, moe in enumerate(spec.moe_layers) if moe]


def test_deepseek_v3_at_8_layers_keeps_its_first_3_dense_layers() -> None:
    # deepseek-ai/DeepSeek-V3 config.json: first_k_dense_replace 3 of num_hidden_layers 61
    spec = override("deepseek-v3", num_layers=8)
    assert spec.moe_layers == (False, False, False, True, True, True, True, True)


def test_the_re_derived_pattern_is_written_in_megatrons_spelling() -> None:
    # Megatron-LM's DeepSeek-V3 recipes pass --moe-layer-freq "([0]*3+[1]*58)"; at 8 layers: 3 + 5
    assert override("deepseek-v3", num_layers=8).moe_layer_freq == "([0]*3+[1]*5)"


def test_the_models_notes_say_the_pattern_was_re_derived() -> None:
    notes = override("deepseek-v3", num_layers=8).notes or ""
    assert "num_layers 8 (the base has 61): moe_layer_freq re-derived by its rule" in notes
    assert "the first 3 dense, then every layer MoE): 5 MoE and 3 dense layers" in notes


def test_a_deeper_override_extends_the_rule() -> None:
    spec = override("deepseek-v3", num_layers=64)
    assert (spec.num_dense_layers, spec.num_moe_layers) == (3, 61)


@pytest.mark.parametrize(("slug", "layers", "dense"), [
    ("kimi-k2", 9, 1),            # moonshotai/Kimi-K2-Instruct config.json: first_k_dense_replace 1 of 61
    ("deepseek-v2-lite", 9, 1),   # deepseek-ai/DeepSeek-V2-Lite config.json: first_k_dense_replace 1 of 27
])
def test_first_k_dense_catalog_models_follow_an_override(slug: str, layers: int, dense: int) -> None:
    spec = override(slug, num_layers=layers)
    assert (spec.num_dense_layers, spec.num_moe_layers) == (dense, layers - dense)


def test_an_hf_qwen3_moe_config_at_24_layers_is_moe_on_every_layer() -> None:
    # Qwen/Qwen3-30B-A3B config.json: decoder_sparse_step 1, mlp_only_layers [] (every layer MoE)
    spec = override(QWEN3_30B_A3B, num_layers=24)
    assert spec.num_moe_layers == 24 and spec.moe_layer_freq == 1


def test_an_hf_deepseek_v3_config_follows_an_override_as_the_catalog_entry_does() -> None:
    assert override(DEEPSEEK_V3, num_layers=8).moe_layers == override("deepseek-v3", num_layers=8).moe_layers


def test_llama4_maverick_keeps_moe_on_every_second_layer_from_layer_1() -> None:
    # meta-llama/Llama-4-Maverick-17B-128E config.json: interleave_moe_layer_step 2, moe_layers [1, 3, ..., 47]
    spec = override(MAVERICK, num_layers=12)
    assert moe_layer_indices(spec) == [1, 3, 5, 7, 9, 11]
    assert "every 2-th layer MoE from layer 1" in (spec.notes or "")


def test_a_pattern_without_a_rule_is_refused_naming_moe_layer_freq() -> None:
    # dense layers 2 and 5 inside MoE layers: neither first-k-dense nor every n-th
    pattern = [1, 1, 0, 1, 1, 0, 1, 1, 1, 1]
    base = {"base": "mixtral-8x7b", "num_layers": 10, "moe_layer_freq": pattern, "ffn_hidden_size": 14336}
    with pytest.raises(InputError) as err:
        resolve_model({"base": base, "num_layers": 6}, "job.yaml")
    assert err.value.field == "model.num_layers"
    assert "moe_layer_freq is a per-layer pattern of 10 layers with no first-k-dense or every-n-th rule" \
        in err.value.reason
    assert "override moe_layer_freq too (an int N (every N-th layer from layer 0), a 0/1 list of num_layers" \
        " entries, or '([0]*k+[1]*n)')" in err.value.reason


def test_an_override_no_deeper_than_the_dense_first_layers_is_refused() -> None:
    with pytest.raises(InputError) as err:
        override("deepseek-v3", num_layers=3)
    assert "keeps the first 3 layers dense, so num_layers 3 leaves no MoE layer" in err.value.reason


def test_a_pattern_given_with_the_override_is_taken_as_written() -> None:
    spec = override("deepseek-v3", num_layers=4, moe_layer_freq=[0, 1, 1, 1])
    assert spec.moe_layer_freq == (0, 1, 1, 1) and "re-derived" not in (spec.notes or "")


def test_an_every_nth_int_needs_no_re_derivation_and_no_note() -> None:
    spec = override("mixtral-8x7b", num_layers=16)
    assert spec.moe_layer_freq == 1 and "re-derived" not in (spec.notes or "")


def test_the_readme_override_of_deepseek_v3_runs_memory(tmp_path: Path) -> None:
    job = {"model": {"base": "deepseek-v3", "num_layers": 8}, "hardware": "h100-80gb", "nodes": 1,
           "seq_len": 4096, "global_batch_size": 64, "precision": "bf16",
           "parallel": {"tp": 2, "ep": 1, "etp": 1, "pp": 1, "cp": 1, "mbs": 1, "sp": True,
                        "recompute": "selective", "sharding": "dist_opt"}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    result = CliRunner().invoke(cli, ["job", "show", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "moe_layer_freq re-derived" in json.loads(result.output)["model_notes"]
