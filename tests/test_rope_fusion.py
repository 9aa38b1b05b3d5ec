"""Which RoPE kernel runs, and gpt-oss's extra host round trip (issue 19, item 1).

Megatron-LM (megatron/training/arguments.py, core_v0.15.0 lines 1004-1005: `if args.position_embedding_type !=
'rope': args.apply_rope_fusion = False`) and Megatron-Bridge (gpt_provider.py `provide`, utils/fusions.py
`validate_rope_fusion_compatibility`, v0.2.0 to v0.6.0) run Transformer Engine's fused RoPE for position
embedding type 'rope' only; gpt-oss's YaRN (Megatron-Bridge GPTOSSProvider position_embedding_type 'yarn') and a
job with `--no-rope-fusion` run Megatron-Core's eager `_apply_rotary_pos_emb_bshd` (rope_utils.py lines 92-126).
Megatron-Core's fused quick-GeGLU builds `torch.tensor(linear_offset, device=...)` on every call
(fused_bias_geglu.py line 434, core_v0.15.0 to core_v0.18.0), a blocking copy: PyTorch's `copy_kernel_cuda`
synchronises the stream unless non_blocking (pytorch/pytorch issues 120996, 190217)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from primus.catalog.hf import model_from_hf_config
from primus.catalog.models import resolve_model
from primus.errors import InputError
from primus.job import job_from_mapping
from primus.memory.evaluate import pinned_layout
from primus.projection import Projector, load_profile
from primus.projection.cost import HOST
from primus.projection.ops import ACT, layer_block, rotary_op
from primus.projection.timer import MemoryCall

HF = Path(__file__).parent / "data" / "hf" / "gpt_oss-gpt-oss-120b" / "config.json"


def _job(model: Any, **extra: Any) -> Any:
    data: dict[str, Any] = {"model": model, "hardware": "gb200", "gpus": 64, "seq_len": 4096,
                            "global_batch_size": 1280, "precision": "bf16",
                            "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 64, "etp": 1, "mbs": 4,
                                         "recompute": "none", "sharding": "dist_opt"}}
    data.update(extra)
    return job_from_mapping(data, "job.yaml")


def _rotary(job: Any) -> Any:
    p = Projector(job, load_profile(job.cluster))
    ctx = p.context(pinned_layout(job))
    return next(op for op in layer_block(job.model, "moe", ctx).memops if op.name == "rotary")


def test_gpt_oss_is_yarn_scaled_by_32_in_the_catalog_and_from_its_hf_config() -> None:
    # openai/gpt-oss-120b config.json rope_scaling: rope_type yarn, factor 32.0
    for name in ("gpt-oss-120b", "gpt-oss-20b"):
        m = resolve_model(name, "test")
        assert (m.position_embedding_type, m.yarn_rotary_scaling_factor, m.rotary) == ("yarn", 32.0, True)
    data = json.loads(HF.read_text())
    m = model_from_hf_config(data, str(HF))
    assert (m.position_embedding_type, m.yarn_rotary_scaling_factor) == ("yarn", data["rope_scaling"]["factor"])


def test_a_gpt_oss_hf_config_with_another_rope_scaling_is_refused_by_key() -> None:
    data = json.loads(HF.read_text())
    data["rope_scaling"] = {"rope_type": "linear", "factor": 4.0}
    with pytest.raises(InputError, match=r"rope_scaling\.rope_type.*yarn"):
        model_from_hf_config(data, str(HF))
    data["rope_scaling"] = {"rope_type": "yarn"}
    with pytest.raises(InputError, match=r"rope_scaling\.factor.*required"):
        model_from_hf_config(data, str(HF))


def test_yarn_needs_its_scaling_factor_and_the_factor_needs_yarn() -> None:
    with pytest.raises(InputError, match="yarn_rotary_scaling_factor"):
        _job({"base": "gpt-oss-120b", "yarn_rotary_scaling_factor": None})
    with pytest.raises(InputError, match="yarn_rotary_scaling_factor"):
        _job({"base": "gpt-oss-120b", "position_embedding_type": "rope"})


def test_eager_rope_moves_six_times_the_fused_bytes_forward_and_seven_times_backward() -> None:
    # forward: t*cos, -x2, cat, *sin, +, cat with the empty pass-through: 6.5 reads + 5.5 writes per element;
    # backward: dy*sin, neg, the chunk's cat, dy*cos, the sum, slice_backward's zeros and their sum: 7.5 + 6.5;
    # the fused kernel reads and writes once
    n = 1000
    fused, eager = rotary_op(n, True), rotary_op(n, False)
    assert (fused.fwd_bytes, fused.bwd_bytes, fused.launches) == (2 * ACT * n, 2 * ACT * n, 1)
    assert (eager.fwd_bytes, eager.bwd_bytes) == (12 * ACT * n, 14 * ACT * n)
    assert (eager.launches, eager.bwd_launches) == (24, 14)  # q and k: 6 + 6 table kernels forward, 7 backward


def test_the_eager_rope_counts_are_the_aten_ops_autograd_runs() -> None:
    # the same formula as Megatron-Core's `_apply_rotary_pos_emb_bshd` (rotate-half, an empty pass-through part),
    # traced: every aten op that launches a kernel, and the elements each reads and writes
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    views = {"alias", "slice", "split", "detach", "view", "t", "expand"}

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.kernels: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            name = func.__name__.split(".")[0]
            if name not in views:
                self.kernels.append(name)
            return func(*args, **(kwargs or {}))

    t0 = torch.randn(8, 2, 4, 16, dtype=torch.bfloat16, requires_grad=True)
    freqs = torch.randn(8, 1, 1, 16)

    def eager(t: Any) -> Any:
        t, t_pass = t[..., :16], t[..., 16:]
        cos_, sin_ = (torch.cos(freqs) * 1.35).to(t.dtype), (torch.sin(freqs) * 1.35).to(t.dtype)
        x1, x2 = torch.chunk(t, 2, dim=-1)
        return torch.cat(((t * cos_) + (torch.cat((-x2, x1), dim=-1) * sin_), t_pass), dim=-1)

    with Count() as fwd:
        y = eager(t0)
    dy = torch.ones_like(y)
    with Count() as bwd:
        y.backward(dy)
    assert len(fwd.kernels) == 12  # 6 on the tensor, 6 on the cos/sin tables
    assert len(bwd.kernels) == 7


def test_yarn_runs_the_eager_rope_under_megatron_and_rope_the_fused_one() -> None:
    elements = 4 * 4096 * (64 + 8) * 64  # MBS 4 x seq 4096 tokens, 64 query and 8 key heads of 64
    assert _rotary(_job("gpt-oss-120b")).fwd_bytes == 12 * ACT * elements
    rope = {"base": "gpt-oss-120b", "position_embedding_type": "rope", "yarn_rotary_scaling_factor": None}
    assert _rotary(_job(rope)).fwd_bytes == 2 * ACT * elements
    # --no-rope-fusion: the same eager path for plain RoPE
    off = _job(rope, kernels={"rope_fusion": False})
    assert _rotary(off).fwd_bytes == 12 * ACT * elements


def test_the_eager_rope_makes_gpt_oss_slower_than_the_same_model_with_fused_rope() -> None:
    yarn = _job("gpt-oss-120b")
    rope = _job({"base": "gpt-oss-120b", "position_embedding_type": "rope", "yarn_rotary_scaling_factor": None})
    prof = load_profile(yarn.cluster)
    t_yarn = Projector(yarn, prof).project(pinned_layout(yarn)).step_time_s
    t_rope = Projector(rope, prof).project(pinned_layout(rope)).step_time_s
    assert t_yarn > t_rope


def test_the_clamped_glu_costs_one_host_round_trip_per_moe_layer_and_one_more_when_moe_act_is_recomputed() -> None:
    prof = load_profile(_job("gpt-oss-120b").cluster)
    sync = float(prof.host.moe_layer_us.value) * 1e-6
    plain = {"base": "gpt-oss-120b", "activation_func_clamp_value": None}
    cost = {}
    for name, model, modules in (("clamp", "gpt-oss-120b", None), ("plain", plain, None),
                                 ("recompute", "gpt-oss-120b", ["moe_act"])):
        parallel = {"tp": 1, "pp": 1, "cp": 1, "ep": 64, "etp": 1, "mbs": 4, "sharding": "dist_opt",
                    **({"recompute": "selective", "recompute_modules": modules} if modules else {"recompute": "none"})}
        job = _job(model, parallel=parallel)
        p = Projector(job, prof)
        layout = pinned_layout(job)
        cost[name] = p.block_cost("moe", layout, p.context(layout), p.groups(layout))
    assert cost["clamp"].fwd[HOST] - cost["plain"].fwd[HOST] == pytest.approx(sync, rel=1e-9)
    assert cost["clamp"].bwd[HOST] == pytest.approx(cost["plain"].bwd[HOST], rel=1e-9)
    # recomputing moe_act re-runs the clamped GLU in backward, and its round trip with it
    assert cost["recompute"].fwd[HOST] == pytest.approx(cost["clamp"].fwd[HOST], rel=1e-9)
    job = _job("gpt-oss-120b", parallel={"tp": 1, "pp": 1, "cp": 1, "ep": 64, "etp": 1, "mbs": 4,
                                         "sharding": "dist_opt", "recompute": "selective",
                                         "recompute_modules": ["moe_act"]})
    p = Projector(job, prof)
    ctx = p.context(pinned_layout(job))
    tagged = [op for op in p.block("moe", ctx).memops if op.module == "moe_act"]
    rerun = sum(p.timer.memory(MemoryCall(op.fwd_bytes))[0] for op in tagged)
    assert cost["recompute"].selective == pytest.approx(rerun + sync, rel=1e-12)

def _bridge_job(model: str, stack: str = "megatron-bridge@26.02", seq: int = 4096, **parallel: Any) -> Any:
    return job_from_mapping({"stack": stack, "model": model, "hardware": "b200", "gpus": 64, "seq_len": seq,
                             "global_batch_size": 512, "precision": "bf16",
                             "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 1, "sp": False,
                                          "recompute": "full", "sharding": "dist_opt", **parallel}}, "job.yaml")


def _without_header(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "primus-job" not in line)


def test_before_core_0_19_the_export_writes_yarn_as_megatron_lms_gpt_oss_example_does() -> None:
    # Megatron-LM core_v0.18.0 examples/gptoss/02_train.sh: --position-embedding-type rope --no-rope-fusion
    from primus.launch.megatron import export_megatron, import_megatron

    job = _bridge_job("gpt-oss-120b")
    out = export_megatron(job, pinned_layout(job))
    assert "--position-embedding-type rope" in out.text and "--no-rope-fusion" in out.text
    assert any("yarn" in n and "02_train.sh" in n for n in out.notes)
    # with its header the file comes back as the job it was written from: gpt-oss, YaRN, fusion at its default
    back = import_megatron(out.text, "exported.sh", hardware="b200", nodes=8)
    assert back.job["model"] == "gpt-oss-120b" and "rope_fusion" not in back.job["kernels"]
    # without it, the file's own words: RoPE that runs unfused, the same eager kernels the projection prices
    bare = import_megatron(_without_header(out.text), "exported.sh", hardware="b200", nodes=8)
    assert bare.job["model"]["position_embedding_type"] == "rope" and bare.job["kernels"]["rope_fusion"] is False


def test_from_core_0_19_the_export_writes_yarn_and_its_factor_and_import_reads_them() -> None:
    # core_v0.19.0 argument_utils.py `_apply_yarn_config_from_args`: --rotary-scaling-factor is YaRN's factor
    from primus.launch.megatron import export_megatron, import_megatron

    job = _bridge_job("gpt-oss-120b", stack="megatron-lm@core_v0.19.0")
    text = export_megatron(job, pinned_layout(job)).text
    assert "--position-embedding-type yarn" in text and "--rotary-scaling-factor 32.0" in text
    assert "--no-rope-fusion" not in text
    back = resolve_model(import_megatron(_without_header(text), "exported.sh", hardware="b200", nodes=8).job["model"],
                         "test")
    assert (back.position_embedding_type, back.yarn_rotary_scaling_factor) == ("yarn", 32.0)


def test_only_rope_models_state_rope_fusion_in_an_export() -> None:
    from primus.launch.megatron import export_megatron, import_megatron

    for model, fused in (("qwen3-30b-a3b", True), ("gpt3-175b", None)):
        job = _bridge_job(model, seq=2048, ep=8 if model.startswith("qwen") else 1)
        text = export_megatron(job, pinned_layout(job)).text
        assert "--no-rope-fusion" not in text
        kernels = import_megatron(text, "exported.sh", hardware="b200", nodes=8).job["kernels"]
        assert kernels.get("rope_fusion") is fused
    off = _bridge_job("qwen3-30b-a3b").with_spec(kernels={"rope_fusion": False})
    assert "--no-rope-fusion" in export_megatron(off, pinned_layout(off)).text


def test_a_gpt_oss_hf_config_with_null_rope_scaling_is_plain_rope_and_v5_rope_parameters_are_read() -> None:
    data = json.loads(HF.read_text())
    data["rope_scaling"] = None
    assert model_from_hf_config(data, str(HF)).position_embedding_type == "rope"
    data.pop("rope_scaling")
    data["rope_parameters"] = {"rope_type": "yarn", "factor": 16.0, "rope_theta": 150000.0}
    m = model_from_hf_config(data, str(HF))
    assert (m.position_embedding_type, m.yarn_rotary_scaling_factor) == ("yarn", 16.0)


@pytest.mark.parametrize("kind", ["megatron", "primus"])
def test_a_gpt_oss_job_exported_and_imported_with_its_header_is_the_same_job(kind: str, tmp_path: Path) -> None:
    from primus.launch import export_job, import_launch
    from primus.launch.api import launchable
    from primus.launch.arch import differences

    job = launchable(job_from_mapping({"model": "gpt-oss-120b", "hardware": "b200", "nodes": 8, "seq_len": 4096,
                                       "global_batch_size": 512,
                                       "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 8, "etp": 1, "dp": 64,
                                                    "mbs": 1, "sp": False, "recompute": "full",
                                                    "recompute_method": "uniform", "recompute_num_layers": 1,
                                                    "sharding": "dist_opt"}}, "job.yaml"), kind)[0]
    path = tmp_path / "gpt-oss.cfg"
    text = export_job(job, kind).text
    path.write_text(text)
    if kind == "primus":  # Primus's gpt_oss_120B.yaml (fd1eeab) sets a shared expert gpt-oss does not have
        assert "moe_shared_expert_intermediate_size: null" in text
    config = import_launch(kind, path)
    back = job_from_mapping(config.job, str(path))
    a, b = job.spec.model_dump(exclude={"stack"}), back.spec.model_dump(exclude={"stack"})
    assert {k: (a[k], b[k]) for k in a if a[k] != b[k]} == {}
    assert differences(back.model, job.model) == []
    assert back.model.position_embedding_type == "yarn"


def test_a_projection_says_when_rope_runs_eager() -> None:
    from primus.projection import project

    def said(job: Any) -> list[str]:
        return [a for a in project(job, pinned_layout(job)).assumptions if a.startswith("RoPE")]

    assert said(_job("gpt-oss-120b")) and "position_embedding_type rope only" in said(_job("gpt-oss-120b"))[0]
    qwen = "qwen3-30b-a3b"
    assert not said(_job(qwen))
    off = said(_job(qwen, kernels={"rope_fusion": False}))
    assert off and "kernels.rope_fusion is off" in off[0]


HF_DIR = Path(__file__).parent / "data" / "hf"


def test_an_hf_config_with_yarn_rope_scaling_is_yarn_unless_its_attention_is_multi_latent() -> None:
    # Megatron-Bridge v0.6.0 model_bridge.py: rope_type 'yarn' makes a GPT provider 'yarn', never an MLA one;
    # Qwen's model cards add rope_scaling {rope_type: yarn, factor: 4.0, original_max_position_embeddings: 32768}
    path = HF_DIR / "qwen3_moe-Qwen3-30B-A3B" / "config.json"
    data = json.loads(path.read_text())
    assert model_from_hf_config(data, str(path)).position_embedding_type == "rope"
    data["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    m = model_from_hf_config(data, str(path))
    assert (m.position_embedding_type, m.yarn_rotary_scaling_factor) == ("yarn", 4.0)
    dsv3 = HF_DIR / "deepseek_v3-DeepSeek-V3" / "config.json"
    v3 = json.loads(dsv3.read_text())
    assert v3["rope_scaling"]["type"] == "yarn"
    assert model_from_hf_config(v3, str(dsv3)).position_embedding_type == "rope"
    llama = HF_DIR / "llama-Llama-3.1-8B" / "config.json"  # rope_type llama3: the same fused kernel
    assert model_from_hf_config(json.loads(llama.read_text()), str(llama)).position_embedding_type == "rope"


def test_a_malformed_rope_scaling_is_refused_by_key() -> None:
    path = HF_DIR / "qwen3-Qwen3-8B" / "config.json"
    data = json.loads(path.read_text())
    data["rope_scaling"] = "yarn"
    with pytest.raises(InputError, match=r"rope_scaling.*mapping"):
        model_from_hf_config(data, str(path))
    data["rope_scaling"] = {"rope_type": "yarn"}
    with pytest.raises(InputError, match=r"rope_scaling\.factor.*required"):
        model_from_hf_config(data, str(path))
