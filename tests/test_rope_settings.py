"""A model's RoPE in the launch files primus writes and reads: the base, the share of each head it rotates and
Llama 3's frequency scaling.

They change no byte or step time, but Megatron-LM's defaults (megatron/training/arguments.py, core_v0.18.0
lines 2125-2134: --rotary-base 10000, --rotary-percent 1.0, no --use-rope-scaling) are not Llama 3.1's (HF
config.json rope_theta 500000.0, rope_scaling rope_type llama3 factor 8.0), so a line without them trains
another RoPE. Megatron-LM added --use-rope-scaling in core_v0.10.0 (arguments.py line 965) and
--rope-scaling-factor in core_v0.11.0 (line 1053).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from primus.catalog.models import resolve_model
from primus.launch import import_launch

HF = Path(__file__).parent / "data" / "hf"
LLAMA31: dict[str, Any] = {
    "model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192, "global_batch_size": 64,
    "precision": "bf16", "parallel": {"tp": 2, "pp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "selective",
                                      "sharding": "dist_opt"}}


def _lines(out: str) -> list[str]:
    return [line.strip().rstrip("\\").strip() for line in out.splitlines()]


def test_a_llama_3_1_line_states_its_rope_base_and_scaling(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("export", write_job(LLAMA31), "--to", "megatron")
    lines = _lines(out)
    assert code == 0 and "--rotary-base 500000" in lines and "--use-rope-scaling" in lines
    assert not any(line.startswith("--rope-scaling-factor") for line in lines)  # 8.0 is Megatron's default


def test_nemotron_rotates_half_of_each_head(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # NeMo nemotron.py NemotronConfig: rotary_percent 0.5, GPTConfig's rotary_base 10000
    job = {**LLAMA31, "model": "nemotron4-15b", "seq_len": 4096, "parallel": {**LLAMA31["parallel"], "tp": 4}}
    code, out, _ = run_cli("export", write_job(job), "--to", "megatron")
    assert code == 0 and {"--rotary-percent 0.5", "--rotary-base 10000"} <= set(_lines(out))


def test_a_model_that_does_not_state_its_base_is_exported_with_a_note(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    model = {"base": "llama3.1-8b", "name": "unstated", "rotary_base": None}
    code, out, err = run_cli("export", write_job({**LLAMA31, "model": model}), "--to", "megatron")
    assert code == 0 and not any(line.startswith("--rotary-base") for line in _lines(out))
    assert "--rotary-base not written: model unstated does not state its RoPE base" in err


def test_a_release_before_rope_scaling_refuses_a_llama_3_1_line(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("export", write_job({**LLAMA31, "stack": "megatron-lm@core_v0.9.0"}), "--to", "megatron")
    assert (code, out) == (2, "") and "model.rope_scaling_factor" in err and "--use-rope-scaling" in err


def test_the_line_primus_writes_imports_as_the_same_model_without_a_rope_note(run_cli, write_job, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "line.sh"
    path.write_text(run_cli("export", write_job(LLAMA31), "--to", "megatron")[1])
    config = import_launch("megatron", path)
    assert config.job["model"] == "llama3.1-8b" and not any("RoPE" in n for n in config.notes)
    assert not any("rotary" in u or "rope" in u for u in config.unmodelled)


def test_a_line_without_the_rope_options_keeps_the_model_and_says_what_it_trains(run_cli, write_job, tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = run_cli("export", write_job(LLAMA31), "--to", "megatron")[1]
    path = tmp_path / "line.sh"
    kept = [line for line in text.splitlines() if "rotary-base" not in line and "rope-scaling" not in line]
    path.write_text("\n".join(kept))
    config = import_launch("megatron", path)
    assert config.job["model"] == "llama3.1-8b"
    assert any("rotary_base 10000 (the model's 500000), rope_scaling_factor none (the model's 8)" in n
               for n in config.notes)


def test_a_rope_base_the_line_states_is_kept_and_exported_back(run_cli, write_job, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # review of the importers: a line stating --rotary-base 1000000 for a Llama 3 model (NVIDIA's
    # examples/llama/train_llama3_8b_h100_fp8.sh does) was exported with the catalog model's 500000, so the
    # exported line trained another RoPE than the one imported
    text = run_cli("export", write_job(LLAMA31), "--to", "megatron")[1].replace("--rotary-base 500000",
                                                                                 "--rotary-base 1000000")
    path = tmp_path / "line.sh"
    path.write_text(text)
    config = import_launch("megatron", path)
    assert config.job["model"] == {"base": "llama3.1-8b", "rotary_base": 1000000}
    job_file = tmp_path / "imported.yaml"
    code, _, err = run_cli("import", "--from", "megatron", str(path), "--out", str(job_file))
    assert code == 0, err
    code, out, _ = run_cli("export", str(job_file), "--to", "megatron")
    assert code == 0 and "--rotary-base 1000000" in _lines(out)


def test_hugging_face_configs_give_the_rope_settings() -> None:
    llama = resolve_model(str(HF / "llama-Llama-3.1-8B" / "config.json"), "t")
    assert (llama.rotary_base, llama.rope_scaling_factor, llama.rotary_percent) == (500000, 8.0, None)
    glm = resolve_model(str(HF / "glm4_moe-GLM-4.5" / "config.json"), "t")  # partial_rotary_factor 0.5
    assert (glm.rotary_base, glm.rotary_percent) == (1000000, 0.5)
    assert resolve_model(str(HF / "gpt_oss-gpt-oss-120b" / "config.json"), "t").rotary_base == 150000


def test_the_catalog_entries_agree_with_the_published_configs() -> None:
    for slug, fixture in (("llama3.1-8b", "llama-Llama-3.1-8B"), ("mistral-7b", "mistral-Mistral-7B-v0.1"),
                          ("mixtral-8x7b", "mixtral-Mixtral-8x7B-v0.1"), ("qwen3-30b-a3b", "qwen3_moe-Qwen3-30B-A3B"),
                          ("deepseek-v3", "deepseek_v3-DeepSeek-V3"),
                          ("deepseek-v2-lite", "deepseek_v2-DeepSeek-V2-Lite"),
                          ("gpt-oss-120b", "gpt_oss-gpt-oss-120b")):
        published = json.loads((HF / fixture / "config.json").read_text())
        model = resolve_model(slug, "t")
        assert model.rotary_base == published["rope_theta"], slug


def test_multi_latent_attention_keeps_its_yarn_as_the_published_configs_state_it() -> None:
    # DeepSeek's rope_scaling type yarn applies to MLA's rotary part; Megatron-LM writes it as --rotary-scaling-factor,
    # --mscale and --mscale-all-dim (MLA's default rope_type is yarn). Before, an exported DeepSeek-V3 line
    # trained Megatron-LM's defaults: factor 1.0 and, from core_v0.14.0, mscale_all_dim 0.0
    for slug, fixture in (("deepseek-v3", "deepseek_v3-DeepSeek-V3"),
                          ("deepseek-v2-lite", "deepseek_v2-DeepSeek-V2-Lite")):
        scaling = json.loads((HF / fixture / "config.json").read_text())["rope_scaling"]
        for model in (resolve_model(slug, "t"), resolve_model(str(HF / fixture / "config.json"), "t")):
            assert (model.mla_rotary_scaling_factor, model.mla_mscale, model.mla_mscale_all_dim) == \
                (scaling["factor"], scaling["mscale"], scaling["mscale_all_dim"]), slug


def test_a_deepseek_v3_line_states_its_yarn_and_reads_back_as_the_same_model(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    example = Path(__file__).resolve().parent.parent / "examples" / "deepseek-v3-h100-1024.yaml"
    code, out, _ = run_cli("export", str(example), "--to", "megatron", "--complete")
    lines = _lines(out)
    assert code == 0 and "--rotary-scaling-factor 40" in lines and "--mscale-all-dim 1.0" in lines
    line = tmp_path / "dsv3.sh"
    line.write_text(out)
    config = import_launch("megatron", line)
    assert config.job["model"] == "deepseek-v3" and not any("RoPE" in n for n in config.notes)
    line.write_text(out.replace("--rotary-scaling-factor 40", "").replace("--mscale-all-dim 1.0", ""))
    config = import_launch("megatron", line)
    assert config.job["model"] == "deepseek-v3"
    assert any("mla_rotary_scaling_factor 1 (the model's 40), mla_mscale_all_dim 0.0 (the model's 1)" in n
               for n in config.notes)


def test_kimi_k2_s_yarn_betas_are_noted_where_megatron_cannot_state_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # moonshotai/Kimi-K2-Instruct config.json: rope_scaling yarn factor 32.0, beta_fast 1.0, beta_slow 1.0
    data = json.loads((HF / "deepseek_v3-DeepSeek-V3" / "config.json").read_text())
    data["rope_scaling"] = {**data["rope_scaling"], "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    model = resolve_model(str(path), "t")
    assert model.mla_rotary_scaling_factor == 32.0
    assert resolve_model("kimi-k2", "t").mla_rotary_scaling_factor == 32


def test_a_rope_scaling_megatron_cannot_state_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # review of the model readers: Llama with rope_scaling linear factor 8 (and Gemma 3's published text_config)
    # lost its scaling with no word
    data = json.loads((HF / "llama-Llama-3.1-8B" / "config.json").read_text())
    data["rope_scaling"] = {"rope_type": "linear", "factor": 8.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    model = resolve_model(str(path), "t")
    assert model.rope_scaling_factor is None
    assert "rope_scaling linear not kept" in (model.notes or "")


def test_deepseek_v2_lite_s_mscales_need_no_argument_before_megatron_had_them(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # core_v0.10.0 MLATransformerConfig: mscale 0.707, mscale_all_dim 0.707 (transformer_config.py lines 633-636),
    # DeepSeek-V2-Lite's own; --mscale and --mscale-all-dim came in core_v0.11.0. Writing them refused the export
    job = {**LLAMA31, "model": "deepseek-v2-lite", "seq_len": 4096, "global_batch_size": 64,
           "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 1, "sp": False,
                        "recompute": "full", "sharding": "dist_opt"}}
    old = run_cli("export", write_job({**job, "stack": "megatron-lm@2025.02"}), "--to", "megatron")
    assert old[0] == 0, old[2]
    assert "--rotary-scaling-factor 40" in _lines(old[1]) and not any("mscale" in x for x in _lines(old[1]))
    new = run_cli("export", write_job({**job, "stack": "megatron-lm@2026.06"}), "--to", "megatron")
    assert new[0] == 0 and "--mscale 0.707" in _lines(new[1]) and "--mscale-all-dim 0.707" in _lines(new[1])
