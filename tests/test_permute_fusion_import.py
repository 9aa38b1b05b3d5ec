"""Megatron's --moe-permute-fusion on the user's path: an imported launch says whether the permutation
runs fused (Megatron-LM's argument defaults to False), Primus's sync-free MoE stage turns it on, an
export writes it, and the host round trips of the unfused permutation follow the stack's Megatron-Core
release (masked_select from core_v0.10 to core_v0.16; an argsort of fixed shape before and after)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.errors import InputError
from primus.job import Job, job_from_mapping, load_job
from primus.launch import import_launch
from primus.launch.common import LaunchConfig
from primus.launch.megatron import export_megatron
from primus.launch.primus_yaml import export_primus
from primus.memory.evaluate import pinned_layout
from primus.projection.profile import load_profile
from primus.projection.project import Projector

LAUNCH = Path(__file__).resolve().parent / "data" / "launch"
MIXTRAL = LAUNCH / "primus_checkout" / "examples" / "megatron" / "configs" / "MI355X" / \
    "mixtral_8x22B_v0.1-BF16-pretrain.yaml"

# Mixtral 8x7B on 8 H100: the architecture spelled out, EP 8, MBS 1, GBS 64
MEGATRON = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
            "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
            "--vocab-size 32000 --swiglu --normalization RMSNorm --disable-bias-linear "
            "--position-embedding-type rope --untie-embeddings-and-output-weights --num-experts 8 "
            "--moe-router-topk 2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --seq-length 4096 "
            "--max-position-embeddings 32768 --micro-batch-size 1 --global-batch-size 64 --bf16 "
            "--expert-model-parallel-size 8 --use-distributed-optimizer")


def _megatron(tmp_path: Path, extra: str = "") -> dict[str, Any]:
    path = tmp_path / "train.sh"
    path.write_text(MEGATRON + extra + "\n")
    return import_launch("megatron", path, hardware="h100-80gb", gpus=8).job


def _primus_config(tmp_path: Path, overrides: str) -> LaunchConfig:
    text = MIXTRAL.read_text().replace("      cross_entropy_loss_fusion: true\n",
                                       "      cross_entropy_loss_fusion: true\n" + overrides)
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return import_launch("primus", path, hardware="mi355x", nodes=4)


def _primus(tmp_path: Path, overrides: str) -> dict[str, Any]:
    return _primus_config(tmp_path, overrides).job


def test_a_megatron_launch_without_the_flag_permutes_unfused(tmp_path: Path) -> None:
    # NVIDIA/Megatron-LM d98e8a6 transformer_config.py line 941: moe_permute_fusion = False
    assert _megatron(tmp_path)["moe"]["permute_fusion"] is False


def test_a_megatron_launch_with_the_flag_permutes_fused(tmp_path: Path) -> None:
    assert _megatron(tmp_path, " --moe-permute-fusion")["moe"]["permute_fusion"] is True


def test_primus_sync_free_stage_1_turns_the_fused_permutation_on(tmp_path: Path) -> None:
    # Primus fd1eeab rocm_arg_validation.py _get_sync_free_moe_options: stage 1 sets moe_permute_fusion
    moe = _primus(tmp_path, "      turbo_sync_free_moe_stage: 1\n")["moe"]
    assert moe["permute_fusion"] is True and "sync_free" not in moe


def test_primus_sync_free_stage_2_keeps_the_token_counts_on_the_device(tmp_path: Path) -> None:
    moe = _primus(tmp_path, "      turbo_sync_free_moe_stage: 2\n")["moe"]
    assert moe["permute_fusion"] is True and moe["sync_free"] is True


def test_primus_without_the_stage_permutes_unfused(tmp_path: Path) -> None:
    # language_model.yaml line 144: moe_permute_fusion: false
    assert _primus(tmp_path, "")["moe"]["permute_fusion"] is False


@pytest.mark.parametrize("value", ["5", "-1", "true", "'1'", "x"])
def test_a_sync_free_stage_that_is_not_an_integer_from_0_to_3_is_bad_input(tmp_path: Path, value: str) -> None:
    # Primus raises on a stage outside 0-3 and compares it with > 0, which a string or a bool does not pass
    with pytest.raises(InputError) as exc:
        _primus(tmp_path, f"      turbo_sync_free_moe_stage: {value}\n")
    assert exc.value.field == "modules.pre_trainer.overrides.turbo_sync_free_moe_stage"
    assert "0 to 3" in exc.value.reason


def test_a_substituted_sync_free_stage_is_read_as_its_default(tmp_path: Path) -> None:
    moe = _primus(tmp_path, "      turbo_sync_free_moe_stage: ${SYNC_FREE:2}\n")["moe"]
    assert moe["sync_free"] is True


def test_what_the_stage_turns_on_and_primus_does_not_model_is_listed(tmp_path: Path) -> None:
    config = _primus_config(tmp_path, "      turbo_sync_free_moe_stage: 2\n      moe_permute_fusion: false\n")
    listed = [u for u in config.unmodelled if u.startswith("turbo_sync_free_moe_stage: 2")]
    assert len(listed) == 1 and "use_turbo_grouped_gemm" in listed[0] and "fused_router" in listed[0]
    assert config.job["moe"]["token_dispatcher"] == "flex"  # stage 2 turns Primus-Turbo's DeepEP on
    assert any("moe_permute_fusion false is overridden" in n for n in config.notes)
    # rocm_arg_validation.py: sync-free MoE asserts enable_primus_turbo and, from stage 2, Turbo's grouped GEMM
    assert any("requires enable_primus_turbo: true" in n for n in config.notes)
    assert any("requires use_turbo_grouped_gemm: true" in n for n in config.notes)


def _job(tmp_path: Path, stack: str, fused: bool) -> Job:
    path = tmp_path / f"{stack.replace('@', '_')}_{fused}.yaml"
    path.write_text(f"model: mixtral-8x7b\nhardware: h100-80gb\ngpus: 8\nseq_len: 4096\nglobal_batch_size: 64\n"
                    f"stack: {stack}\nparallel: {{tp: 1, pp: 1, cp: 1, ep: 8, etp: 1, mbs: 1, sharding: dist_opt, "
                    "recompute: none}\n"
                    f"moe: {{permute_fusion: {str(fused).lower()}}}\n")
    return load_job(path)


@pytest.mark.parametrize(("stack", "syncs"), [
    ("megatron-lm@core_v0.8.0", 0), ("megatron-lm@core_v0.10.0", 1), ("megatron-lm@core_v0.14.0", 1),
    ("megatron-lm@core_v0.16.1", 1), ("megatron-lm@core_v0.17.0", 0), ("megatron-lm@2026.06", 0),
    ("megatron-bridge@26.06", 0), ("torchtitan", 0), ("primus", 1)])
def test_the_stacks_release_says_how_often_the_unfused_permutation_waits(tmp_path: Path, stack: str,
                                                                         syncs: int) -> None:
    # masked_select from ac0474d26e (2024-10-29) until e19fbe2e1d (2026-03-06, core_v0.17.0); Primus fd1eeab
    # pins Megatron-LM d3528a2130, which still has it
    assert _job(tmp_path, stack, fused=False).spec.moe.unfused_permute_syncs == syncs


def test_each_unfused_round_trip_costs_one_host_moe_layer_us_per_moe_layer_forward(tmp_path: Path) -> None:
    hosts = {}
    for stack in ("megatron-lm@2026.06", "primus"):
        job = _job(tmp_path, stack, fused=False)
        profile = load_profile(job.cluster)
        projection = Projector(job, profile).project(pinned_layout(job), "fast")
        hosts[stack] = projection.breakdown["host"]
    # 32 MoE layers x 8 microbatches (GBS 64 / DP 8 / MBS 1) x one more round trip on the primus stack
    per_trip = float(profile.host.moe_layer_us.value) * 1e-6
    assert hosts["primus"] - hosts["megatron-lm@2026.06"] == pytest.approx(32 * 8 * per_trip, rel=1e-9)


@pytest.mark.parametrize("fused", [True, False])
def test_an_export_to_megatron_writes_the_permutation_and_reads_back_the_same(tmp_path: Path, fused: bool) -> None:
    job = _job(tmp_path, "megatron-lm@2026.06", fused=fused)
    text = export_megatron(job, pinned_layout(job)).text
    assert ("--moe-permute-fusion" in text) is fused
    path = tmp_path / "exported.sh"
    path.write_text(text)
    assert import_launch("megatron", path).job["moe"]["permute_fusion"] is fused


def test_an_export_to_primus_writes_the_permutation(tmp_path: Path) -> None:
    job = _job(tmp_path, "primus", fused=True)
    assert "moe_permute_fusion: true" in export_primus(job, pinned_layout(job)).text


def test_primus_turbo_deepep_makes_the_dispatcher_flex(tmp_path: Path) -> None:
    # Primus fd1eeab patches/turbo/moe_dispatcher_patches.py: moe_enable_deepep, moe_token_dispatcher_type flex
    config = _primus_config(tmp_path, "      use_turbo_deepep: true\n      enable_primus_turbo: true\n")
    assert config.job["moe"]["token_dispatcher"] == "flex"
    assert not any(u.startswith("use_turbo_deepep") for u in config.unmodelled)


def test_a_turbo_deepep_switch_that_is_not_true_or_false_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        _primus(tmp_path, "      use_turbo_deepep: maybe\n")
    assert exc.value.field == "modules.pre_trainer.overrides.use_turbo_deepep"


def test_an_export_to_megatron_asks_for_grouped_expert_gemms(tmp_path: Path) -> None:
    # without --moe-grouped-gemm Megatron-LM builds SequentialMLP (d98e8a6 moe_module_specs.py; the config
    # default moe_grouped_gemm = False, transformer_config.py line 850); grouped_gemm te is TEGroupedMLP
    job = _job(tmp_path, "megatron-lm@2026.06", fused=True)
    assert "--moe-grouped-gemm" in export_megatron(job, pinned_layout(job)).text


def test_a_megatron_launch_without_grouped_gemm_runs_sequential_experts_and_exports_back(tmp_path: Path) -> None:
    path = tmp_path / "seq.sh"
    path.write_text(MEGATRON.replace(" --moe-grouped-gemm", "") + "\n")
    config = import_launch("megatron", path, hardware="h100-80gb", gpus=8)
    assert config.job["moe"]["grouped_gemm"] == "sequential"
    assert any("SequentialMLP" in n for n in config.notes)
    job = job_from_mapping(config.job, str(path), tmp_path)
    assert "--moe-grouped-gemm" not in export_megatron(job, pinned_layout(job)).text
    path.write_text(MEGATRON + "\n")
    assert "grouped_gemm" not in import_launch("megatron", path, hardware="h100-80gb", gpus=8).job["moe"]


def test_a_sequential_job_round_trips_through_a_primus_experiment(tmp_path: Path) -> None:
    path = tmp_path / "seq.yaml"
    path.write_text("model: mixtral-8x7b\nhardware: h100-80gb\ngpus: 8\nseq_len: 4096\nglobal_batch_size: 64\n"
                    "stack: primus\nparallel: {tp: 1, pp: 1, vp: 1, cp: 1, ep: 2, etp: 1, mbs: 1, sp: false, "
                    "sharding: dist_opt, recompute: full}\nmoe: {grouped_gemm: sequential}\n")
    job = load_job(path)
    text = export_primus(job, pinned_layout(job)).text
    assert "moe_grouped_gemm: false" in text
    exp = tmp_path / "exp.yaml"
    exp.write_text(text)
    config = import_launch("primus", exp)
    assert config.job["moe"]["grouped_gemm"] == "sequential"
    assert any("moe_grouped_gemm false: Megatron-LM runs the experts as SequentialMLP" in n for n in config.notes)


def _flex_job(tmp_path: Path, ep: int, extra: str = "") -> Job:
    path = tmp_path / f"flex{ep}.yaml"
    path.write_text(f"model: deepseek-v2-lite\nhardware: h100-80gb\ngpus: 8\nseq_len: 4096\nglobal_batch_size: 64\n"
                    f"parallel: {{tp: 1, pp: 1, cp: 1, ep: {ep}, etp: 1, mbs: 1, sharding: dist_opt, "
                    f"recompute: none}}\nmoe: {{token_dispatcher: flex{extra}}}\n")
    return load_job(path)


def test_the_flex_dispatcher_needs_more_than_one_rank_in_tp_x_ep(tmp_path: Path) -> None:
    # d98e8a6 token_dispatcher.py line 1836: assert tp_size * ep_size > 1, "DeepEP dispatcher requires TPxEP > 1"
    from primus.solver.api import Question
    from primus.solver.fit import fit

    result = fit(Question(_flex_job(tmp_path, ep=1)))
    assert not result.fits and any("flex-needs-tp-ep" in r for r in (*result.violated_rules, *result.request_breaks))
    assert fit(Question(_flex_job(tmp_path, ep=8))).fits


def test_a_flex_export_enables_deepep_and_drops_at_capacity_unpadded(tmp_path: Path) -> None:
    # core_v0.14.0 token_dispatcher.py asserts --moe-enable-deepep for flex; transformer_config.py refuses
    # moe_pad_expert_input_to_capacity with flex
    job = _flex_job(tmp_path, ep=8, extra=", capacity_factor: 1.25")
    exported = export_megatron(job, pinned_layout(job))
    assert "--moe-enable-deepep" in exported.text and "--moe-pad-expert-input-to-capacity" not in exported.text
    assert any("moe_pad_expert_input_to_capacity not written" in n for n in exported.notes)
    path = tmp_path / "flex.sh"
    path.write_text(exported.text)
    moe = import_launch("megatron", path).job["moe"]
    assert (moe["token_dispatcher"], moe["capacity_factor"]) == ("flex", 1.25)
    primus_text = export_primus(job, pinned_layout(job)).text
    assert "use_turbo_deepep: true" in primus_text and "enable_primus_turbo: true" in primus_text


def test_deepep_without_the_flex_dispatcher_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        _megatron(tmp_path, " --moe-enable-deepep")
    assert exc.value.field == "--moe-enable-deepep" and "flex" in exc.value.reason


def test_a_sync_free_export_to_megatron_permutes_fused_and_says_what_it_cannot_write(tmp_path: Path) -> None:
    # a sync-free job permutes fused whatever its own permute_fusion says (Primus's stage 1 turns it on,
    # rocm_arg_validation.py _get_sync_free_moe_options); Megatron-LM has the fused permutation but no
    # sync-free MoE, so the flag is written and the rest is a note (the header keeps the key)
    job = _flex_job(tmp_path, ep=8, extra=", sync_free: true, permute_fusion: false")
    exported = export_megatron(job, pinned_layout(job))
    assert "--moe-permute-fusion" in exported.text
    assert any(n.startswith("moe.sync_free not written") for n in exported.notes)
    path = tmp_path / "sync_free.sh"
    path.write_text(exported.text)
    moe = import_launch("megatron", path).job["moe"]
    assert (moe["sync_free"], moe["permute_fusion"], moe["token_dispatcher"]) == (True, True, "flex")


def test_a_sync_free_export_to_primus_writes_stage_2_and_what_primus_requires_beside_it(tmp_path: Path) -> None:
    # Primus fd1eeab rocm_arg_validation.py: any stage needs enable_primus_turbo, stage 2 use_turbo_grouped_gemm
    job = _flex_job(tmp_path, ep=8, extra=", sync_free: true")
    exported = export_primus(job, pinned_layout(job))
    for line in ("turbo_sync_free_moe_stage: 2", "enable_primus_turbo: true", "use_turbo_grouped_gemm: true",
                 "use_turbo_deepep: true"):
        assert line in exported.text
    assert "sync_free" not in exported.text.split("# primus-job:", 1)[-1].splitlines()[0]  # written, not carried
    path = tmp_path / "sync_free.yaml"
    path.write_text(exported.text)
    config = import_launch("primus", path)
    assert config.job["moe"]["sync_free"] is True and config.job["moe"]["token_dispatcher"] == "flex"
    assert not any("Primus requires" in n for n in config.notes)


def test_a_sync_free_job_without_deepep_is_not_written_as_a_primus_stage(tmp_path: Path) -> None:
    # stage 2 would also switch the dispatcher to flex: another job, so the key stays in the header only
    path = tmp_path / "a2a.yaml"
    path.write_text("model: deepseek-v2-lite\nhardware: mi355x\ngpus: 8\nseq_len: 4096\nglobal_batch_size: 64\n"
                    "parallel: {tp: 1, pp: 1, cp: 1, ep: 8, etp: 1, mbs: 1, sharding: dist_opt, recompute: none}\n"
                    "moe: {token_dispatcher: alltoall, sync_free: true}\n")
    job = load_job(path)
    exported = export_primus(job, pinned_layout(job))
    overrides = yaml.safe_load(exported.text)["modules"]["pre_trainer"]["overrides"]
    assert "turbo_sync_free_moe_stage" not in overrides and "sync_free" in exported.text  # in the header
    assert any("makes the dispatcher flex" in n for n in exported.notes)
