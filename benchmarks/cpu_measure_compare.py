"""Hybrid measurement, proved on the machine we have: measure on CPU, project, train, compare.

    python benchmarks/cpu_measure_compare.py                  # table on stdout (about 5 minutes on 2 cores)
    python benchmarks/cpu_measure_compare.py --write-docs     # and between the markers in the docs

A small Llama-like model (hidden 512, 8 heads, FFN 1408 SwiGLU, 4 layers, vocab 8192, RMSNorm, RoPE,
untied output, no dropout) is given to primus as a Hugging Face config and, for the training, built in
torch from the same `ModelSpec`, in float32 (bf16 matrix products are emulated on this CPU). Three
jobs on the `cpu` hardware entry (one "GPU" = one process with one thread), seq 512, micro-batch 1:

- single: 1 process, 4 microbatches per step (gradient accumulation);
- ddp:    2 processes, data parallel (torch DDP over gloo), 4 microbatches each, global batch 8;
- pp:     2 processes, a 2-stage pipeline (hand-written 1F1B with isend/irecv, activations and their
          gradients sent in bf16 as a bf16 run would), 4 microbatches, global batch 4.

Steps: (1) `primus measure` the three jobs into one profile in one campaign (kernels in one process
with one thread, shapes the jobs share measured once; collectives across 2 gloo processes), repeated
`--repeats` times into fresh profiles to show the measurement noise; (2) project each job
with each profile (and with the analytic `cpu` profile for reference); (3) train each job in torch
for `--steps` timed steps after one warm-up step, `--repeats` runs each, to show the run noise;
(4) print the table: projected against measured step time, error, and both noises.

Every step of a training run is timed on rank 0 between two barriers (the step ends when the slowest
rank does). Adam (foreach, fp32) is the optimizer, as the profile's optimizer recipe times it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MARK_START, MARK_END = "<!-- measured:start -->", "<!-- measured:end -->"
TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512, "intermediate_size": 1408,
    "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 4, "vocab_size": 8192,
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "rope_theta": 10000.0,
}
SEQ = 512
JOBS: dict[str, dict[str, Any]] = {
    "single": {"gpus": 1, "global_batch_size": 4, "parallel": {"tp": 1, "pp": 1, "cp": 1}},
    "ddp": {"gpus": 2, "global_batch_size": 8, "parallel": {"tp": 1, "pp": 1, "cp": 1}},
    "pp": {"gpus": 2, "global_batch_size": 4, "parallel": {"tp": 1, "pp": 2, "vp": 1, "cp": 1}},
}
DESCRIBE = {"single": "1 process, 4 microbatches", "ddp": "DDP, 2 processes (gloo), 4 microbatches each",
            "pp": "2-stage pipeline, 1F1B, 4 microbatches"}


# ---- the jobs ------------------------------------------------------------------------------------

def write_jobs(folder: Path) -> dict[str, Path]:
    import yaml

    (folder / "tiny-llama.json").write_text(json.dumps(TINY))
    out = {}
    for name, extra in JOBS.items():
        job = {"model": "tiny-llama.json", "hardware": "cpu", "seq_len": SEQ, **extra}
        job["parallel"] = {**extra["parallel"], "mbs": 1, "recompute": "none", "sharding": "none"}
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(job, sort_keys=False))
        out[name] = path
    return out


# ---- the torch model, built from primus's ModelSpec -------------------------------------------------

def build_model(spec: Any) -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn

    h, heads, groups, d = spec.hidden_size, spec.num_attention_heads, spec.query_groups, spec.head_dim
    ffn, vocab = spec.ffn_hidden_size, spec.padded_vocab_size(1)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
            self.qkv = nn.Linear(h, (heads + 2 * groups) * d, bias=False)
            self.proj = nn.Linear(heads * d, h, bias=False)
            self.fc1 = nn.Linear(h, 2 * ffn, bias=False)
            self.fc2 = nn.Linear(ffn, h, bias=False)

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(F.rms_norm(x, (h,), self.ln1, 1e-5)).split([heads * d, groups * d, groups * d], -1)
            q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k, v))

            def rope(t: Any) -> Any:
                rot = torch.cat((-t[..., d // 2:], t[..., : d // 2]), dim=-1)
                return t * cos + rot * sin

            o = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True, enable_gqa=groups != heads)
            x = x + self.proj(o.transpose(1, 2).reshape(b, s, heads * d))
            a, g = self.fc1(F.rms_norm(x, (h,), self.ln2, 1e-5)).chunk(2, -1)
            return x + self.fc2(F.silu(a) * g)

    class Model(nn.Module):
        """`first`/`last` select the pipeline stage's ends; `layers` its decoder layers."""

        def __init__(self, layers: range, first: bool, last: bool) -> None:
            super().__init__()
            self.first, self.last = first, last
            self.embed = nn.Embedding(vocab, h) if first else None
            self.layers = nn.ModuleList(Layer() for _ in layers)
            self.norm = nn.Parameter(torch.ones(h)) if last else None
            self.out = nn.Linear(h, vocab, bias=False) if last else None
            inv = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
            ang = torch.outer(torch.arange(SEQ, dtype=torch.float32), inv)
            ang = torch.cat((ang, ang), -1)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, x: Any, labels: Any = None) -> Any:
            if self.embed is not None:
                x = self.embed(x)
            for layer in self.layers:
                x = layer(x, self.cos, self.sin)
            if self.out is None:
                return x
            logits = self.out(F.rms_norm(x, (h,), self.norm, 1e-5))
            return F.cross_entropy(logits.float().view(-1, vocab), labels.view(-1))

    return Model


# ---- training workers ------------------------------------------------------------------------------

def worker(mode: str, rank: int, world: int, port: int, steps: int, job_path: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from primus.job import load_job

    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = load_job(job_path).model
    model_cls = build_model(spec)
    micro = 4
    vocab = spec.padded_vocab_size(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=300))
    layers = spec.num_layers
    if mode == "pp":
        half = layers // 2
        model = model_cls(range(half) if rank == 0 else range(half, layers), rank == 0, rank == 1)
    else:
        model = model_cls(range(layers), True, True)
    data = torch.randint(0, vocab, (micro, 1, SEQ + 1), generator=torch.Generator().manual_seed(rank))
    params = list(model.parameters())
    net: Any = model
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model)
    opt = torch.optim.Adam(params, lr=1e-4, foreach=True)

    def step_plain() -> None:
        for i in range(micro):
            ctx = net.no_sync() if mode == "ddp" and i < micro - 1 else _null()
            with ctx:
                loss = net(data[i, :, :-1], data[i, :, 1:]) / micro
                loss.backward()

    def step_pp() -> None:
        """1F1B on 2 stages: stage 0 runs one warm-up forward, then forward/backward pairs, then the last
        backward; stage 1 runs forward+backward per microbatch. Sends are asynchronous (isend)."""
        shape = (1, SEQ, spec.hidden_size)
        pending: list[Any] = []
        if rank == 0:
            acts: list[Any] = []

            def fwd(i: int) -> None:
                y = model(data[i, :, :-1])
                acts.append(y)
                pending.append(dist.isend(y.detach().to(torch.bfloat16), 1))

            def bwd() -> None:
                g = torch.empty(shape, dtype=torch.bfloat16)
                dist.recv(g, 1)
                acts.pop(0).backward(g.float())

            fwd(0)
            for i in range(1, micro):
                fwd(i)
                bwd()
            bwd()
        else:
            for i in range(micro):
                x = torch.empty(shape, dtype=torch.bfloat16)
                dist.recv(x, 0)
                x = x.float().requires_grad_()
                loss = model(x, data[i, :, 1:]) / micro
                loss.backward()
                pending.append(dist.isend(x.grad.to(torch.bfloat16), 0))
        for w in pending:
            w.wait()

    times = []
    for s in range(steps + 1):  # step 0 warms up (allocator, kernel selection, gloo connections)
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        step_pp() if mode == "pp" else step_plain()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if world > 1:
            dist.barrier()
        if s:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    if world > 1:
        dist.destroy_process_group()


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def train(mode: str, job: Path, steps: int, folder: Path) -> list[float]:
    world = JOBS[mode]["gpus"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = folder / f"train-{mode}-{time.monotonic_ns()}.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", mode, str(r), str(world), str(port), str(steps),
                               str(job), str(out)], env=env) for r in range(world)]
    for p in procs:
        if p.wait(timeout=900):
            raise RuntimeError(f"{mode} training rank failed with exit {p.returncode}")
    return list(json.loads(out.read_text()))


# ---- measure, project, compare ----------------------------------------------------------------------

def spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:.3f} ({min(values):.3f}–{max(values):.3f})" if len(values) > 1 else f"{med:.3f}"


def noise(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med * 100 if med else 0.0


def run(args: argparse.Namespace) -> str:
    """Repeat (measure a fresh profile, project, train each job once): a profile and the training runs
    it is compared with are taken minutes apart, under the same background load."""
    from primus.job import load_job
    from primus.measure.campaign import MeasureOptions, run_measure
    from primus.measure.measured_profile import resolve_profile_option
    from primus.memory.evaluate import pinned_layout
    from primus.projection import load_profile, project

    loads = [os.getloadavg()[0]]
    folder = Path(tempfile.mkdtemp(prefix="primus-cpu-compare-"))
    paths = write_jobs(folder)
    jobs = {k: load_job(p) for k, p in paths.items()}
    projected: dict[str, list[float]] = {k: [] for k in jobs}
    trained: dict[str, list[float]] = {k: [] for k in jobs}
    sources: dict[str, str] = {}
    for r in range(args.repeats):
        prof = folder / f"profile-{r}.json"
        t0 = time.monotonic()
        # one campaign for the three jobs: kernels timed in one process with one thread (shapes the jobs
        # share measured once), collectives across 2 gloo processes (one start of the processes)
        targets = [(jobs[name], pinned_layout(jobs[name])) for name in ("ddp", "pp", "single")]
        run_measure(*targets[0], prof, MeasureOptions(device="cpu", procs=2, budget_s=args.budget_s,
                                                      memory_check=False, colocate=args.colocate),
                    also=targets[1:])
        print(f"profile {r + 1}/{args.repeats} measured in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        for name, job in jobs.items():
            calib, timer, _ = resolve_profile_option(job.cluster, str(prof))
            p = project(job, pinned_layout(job), calib, timer=timer)
            projected[name].append(p.step_time_s)
            sources[name] = ", ".join(k for k, v in p.sources.items() if v == "measured")
            t0 = time.monotonic()
            times = train(name, paths[name], args.steps, folder)
            trained[name].append(statistics.median(times))
            print(f"{name} run {r + 1}/{args.repeats}: projected {p.step_time_s:.3f} s, trained steps "
                  f"{', '.join(f'{t:.3f}' for t in times)} s ({time.monotonic() - t0:.1f} s)", file=sys.stderr)
        loads.append(os.getloadavg()[0])
    analytic = {k: project(j, pinned_layout(j), load_profile(j.cluster)).step_time_s for k, j in jobs.items()}
    lines = [
        "| job | projected, measured profile (s) | trained in torch (s) | error, measured profile "
        "| projected, analytic `cpu` profile (s) | error, analytic | noise: profiles / runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in jobs:
        proj, real = statistics.median(projected[name]), statistics.median(trained[name])
        paired = [(a - b) / b * 100 for a, b in zip(projected[name], trained[name], strict=True)]
        pair = f" (runs {min(paired):+.0f}% to {max(paired):+.0f}%)" if len(paired) > 1 else ""
        lines.append(f"| {name}: {DESCRIBE[name]} | {spread(projected[name])} | {spread(trained[name])} | "
                     f"{(proj - real) / real * 100:+.1f}%{pair} | {analytic[name]:.3f} | "
                     f"{(analytic[name] - real) / real * 100:+.1f}% | {noise(projected[name]):.1f}% / "
                     f"{noise(trained[name]):.1f}% |")
    import torch

    lines.append("")
    lines.append(f"Step time in seconds, median (min–max) over {args.repeats} repeats of: measure a fresh profile, "
                 f"project, train each job for {args.steps} timed steps after one warm-up step (the step time of a "
                 "run is its median step). Error = (projected − trained) / trained, of the medians (in brackets: "
                 "each repeat's profile against the runs that followed it); noise = (max − min) / median. "
                 f"{_cpu_name()} ({os.cpu_count()} logical CPUs, a shared virtual machine), torch "
                 f"{torch.__version__}, float32, one thread per process, {time.strftime('%Y-%m-%d')}; 1-minute load "
                 f"average {', '.join(f'{x:.1f}' for x in loads)} before each repeat and at the end (2 would mean "
                 f"both cores busy with other work); niceness {os.nice(0)} (the script asks for −10 so that other "
                 "work on a shared machine yields the cores; that needs root). Terms from the measured profile: "
                 f"{sources['ddp']} (ddp); the 1F1B bubble of the pipeline is simulated. The analytic `cpu` profile "
                 "is the shipped spec-derived one (hardware/profiles/cpu.yaml), for reference.")
    return "\n".join(lines)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            return next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "CPU")
    except OSError:
        return "CPU"


def replace_between_markers(path: Path, text: str) -> bool:
    """Replace only what lies between the markers; False (and nothing written) when they are absent."""
    if not path.exists():
        return False
    doc = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(MARK_START) + r".*?" + re.escape(MARK_END), re.S)
    if not pattern.search(doc):
        return False
    path.write_text(pattern.sub(lambda _: f"{MARK_START}\n{text}\n{MARK_END}", doc, count=1), encoding="utf-8")
    return True


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, rank, world, port, steps, job, out = sys.argv[2:9]
        worker(mode, int(rank), int(world), int(port), int(steps), job, out)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="profiles measured and training runs per job")
    ap.add_argument("--steps", type=int, default=2, help="timed training steps per run (after one warm-up)")
    ap.add_argument("--budget-s", type=float, default=60.0, help="budget of each primus measure")
    ap.add_argument("--colocate", action="store_true", help="time kernels in both processes at once")
    ap.add_argument("--write-docs", action="store_true",
                    help="replace the table between the measured markers in docs/measurement.md and docs/accuracy.md")
    args = ap.parse_args()
    try:
        os.nice(-10)  # other work on a shared machine yields the cores to this comparison (needs root)
    except PermissionError:
        print("running at normal priority (raising it needs root)", file=sys.stderr)
    table = run(args)
    print(table)
    if args.write_docs:
        for doc in (REPO / "docs" / "measurement.md", REPO / "docs" / "accuracy.md"):
            done = replace_between_markers(doc, table)
            what = "table written" if done else f"markers {MARK_START} / {MARK_END} absent, skipped"
            print(f"{doc.relative_to(REPO)}: {what}", file=sys.stderr)


if __name__ == "__main__":
    main()
