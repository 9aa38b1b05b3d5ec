"""What JAX keeps for the backward pass of a Llama-2-shaped decoder layer under MaxText's remat policies,
beside what the ledger says (`primus.memory.activations.maxtext_remat`).

The layer is written here in the shape of MaxText's llama2 decoder layer (RMSNorm, q/k/v projections
with grouped kv heads, softmax attention, output projection, residual, RMSNorm, SwiGLU MLP, residual),
each tensor named with MaxText's checkpoint names (decoder_layer_input, query_proj, key_proj,
value_proj, out_proj, mlpwi_0, mlpwi_1, mlpwo), and checkpointed with
`jax.checkpoint_policies.save_only_these_names` over each policy's names (MaxText/layers/models.py,
AI-Hypercomputer/maxtext 02a8f5c), alone and scanned over layers as MaxText does; `--sandwich` adds a
norm after the MLP. `jax.ad_checkpoint.print_saved_residuals` lists what JAX saves; the script prints
both lists (element counts per layer), and the matmuls the backward re-runs (dot_generals in the
gradient's program beyond those with everything saved) beside the projection's, and exits 1 when any
differ.

Needs jax (not a primus dependency): `pip install jax`, then
`PYTHONPATH=. python benchmarks/maxtext_remat_residuals.py`.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from typing import Any

B, S, H, HEADS, KV, D, F = 2, 16, 64, 8, 2, 8, 160
POLICIES = {"save_dot_except_mlp": ("query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj"),
            "save_dot_except_mlpwi": ("query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj", "mlpwo")}


def _layer(sandwich: bool) -> Any:
    """The decoder layer as a scan step (x, params) -> (x, None)."""
    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    def rms(x: Any, w: Any) -> Any:
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5) * w

    def layer(x: Any, p: dict[str, Any]) -> tuple[Any, None]:
        x = checkpoint_name(x, "decoder_layer_input")
        h = rms(x, p["n1"])
        q = checkpoint_name(jnp.einsum("bsh,hnd->bsnd", h, p["wq"]), "query_proj")
        k = checkpoint_name(jnp.einsum("bsh,hnd->bsnd", h, p["wk"]), "key_proj")
        v = checkpoint_name(jnp.einsum("bsh,hnd->bsnd", h, p["wv"]), "value_proj")
        k, v = (jnp.repeat(t, HEADS // KV, axis=2) for t in (k, v))
        probs = jax.nn.softmax(jnp.einsum("bqnd,bknd->bnqk", q, k) / D ** 0.5, -1)
        out = checkpoint_name(jnp.einsum("bnqk,bknd,ndh->bqh", probs, v, p["wo"]), "out_proj")
        r = x + out
        h2 = rms(r, p["n2"])
        gate = checkpoint_name(h2 @ p["w0"], "mlpwi_0")
        up = checkpoint_name(h2 @ p["w1"], "mlpwi_1")
        mlp = checkpoint_name((jax.nn.silu(gate) * up) @ p["w2"], "mlpwo")
        return r + (rms(mlp, p["n3"]) if sandwich else mlp), None

    return layer


def _inputs(layers: int) -> tuple[Any, dict[str, Any]]:
    import jax
    import jax.numpy as jnp

    keys = iter(jax.random.split(jax.random.PRNGKey(0), 8))
    shapes = {"wq": (H, HEADS, D), "wk": (H, KV, D), "wv": (H, KV, D), "wo": (HEADS, D, H), "w0": (H, F),
              "w1": (H, F), "w2": (F, H)}
    params = {k: 0.02 * jax.random.normal(next(keys), (layers, *s)) for k, s in shapes.items()}
    params.update({n: jnp.ones((layers, H)) for n in ("n1", "n2", "n3")})
    return jax.random.normal(next(keys), (B, S, H)), params


def jax_saved(policy: str, sandwich: bool, layers: int) -> list[int]:
    """Element counts per layer of every residual JAX keeps that is not a parameter, sorted."""
    import jax
    from jax.ad_checkpoint import print_saved_residuals

    step = jax.checkpoint(_layer(sandwich), policy=jax.checkpoint_policies.save_only_these_names(*POLICIES[policy]))
    x, params = _inputs(layers)
    text = io.StringIO()  # jax's public report of the residuals: "f32[3,2,16,64] output of scan from ..."
    with contextlib.redirect_stdout(text):
        print_saved_residuals(lambda x, p: jax.lax.scan(step, x, p)[0], x, params)
    counts = []
    for line in text.getvalue().splitlines():
        m = re.match(r"^\w+\[([\d,]*)\] (.*)$", line.strip())
        if m is None or "argument p" in m.group(2):  # parameters are kept anyway
            continue
        per_layer = 1
        for n in m.group(1).split(",")[1:]:  # scan stacks each layer's residual on a leading axis
            per_layer *= int(n)
        counts.append(per_layer)
    return sorted(counts)


def jax_rerun_matmuls(policy: str) -> int:
    """Matmuls the backward of one layer re-runs: dot_generals in the gradient's program under the policy,
    less those with every value saved."""
    import jax
    import jax.numpy as jnp

    x, params = _inputs(1)
    one = {k: v[0] for k, v in params.items()}

    def dots(pol: Any) -> int:
        step = jax.checkpoint(_layer(False), policy=pol)
        grad = jax.grad(lambda p, x: jnp.sum(jnp.sin(step(x, p)[0])))
        return str(jax.make_jaxpr(grad)(one, x)).count("dot_general")

    named = jax.checkpoint_policies.save_only_these_names(*POLICIES[policy])
    return dots(named) - dots(jax.checkpoint_policies.everything_saveable)


def ledger_saved(policy: str, sandwich: bool) -> list[int]:
    from primus.job import job_from_mapping
    from primus.memory.activations import ActContext, maxtext_remat
    from primus.memory.numerics import numerics_for

    model = {"base": "llama2-7b", "num_layers": 2, "hidden_size": H, "ffn_hidden_size": F,
             "num_attention_heads": HEADS, "num_query_groups": KV, "kv_channels": D,
             "norm_placement": "sandwich" if sandwich else "pre"}
    spec = job_from_mapping({"model": model, "hardware": "h100-80gb", "gpus": 8, "seq_len": S,
                             "global_batch_size": 8 * B}, "maxtext_remat_residuals").model
    ctx = ActContext(seq_len=S, mbs=B, tp=1, cp=1, sp=False, etp=1, numerics=numerics_for("bf16", None),
                     selective=policy)
    return sorted(s.elements for s in maxtext_remat(spec, ctx, policy))


def main() -> int:
    try:
        import jax
    except ImportError:
        print("maxtext_remat_residuals: needs jax (pip install jax)", file=sys.stderr)
        return 2
    ok = True
    print(f"jax {jax.__version__}; one layer of B={B} S={S} h={H} heads={HEADS} kv={KV} d={D} ffn={F}")
    for policy in POLICIES:
        for sandwich in (False, True):
            want = ledger_saved(policy, sandwich)
            for layers in (1, 3):
                got = jax_saved(policy, sandwich, layers)
                same = got == want
                ok &= same
                print(f"{policy:22s} sandwich={sandwich!s:5s} layers={layers}: jax {got} ledger {want} "
                      f"{'same' if same else 'DIFFERENT'}")
        # the projection re-runs the attention kernel (scores and context: 2) and FC1 (gate and up: 2)
        # and no projection nor FC2 (primus.projection.cost.MAXTEXT_REMAT_GEMMS)
        rerun = jax_rerun_matmuls(policy)
        ok &= rerun == 4
        print(f"{policy:22s} matmuls re-run in backward: jax {rerun}, projection 4 (attention 2, FC1 2)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
