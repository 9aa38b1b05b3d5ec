"""A small, deterministic robust fitter: Gauss-Newton on log errors with Huber weights and a prior.

The unknowns are log-multipliers θ_g of groups of profile parameters (a group moves together, e.g.
the forward and backward attention efficiencies). The residual of a run is r = log(predicted /
measured). The loss is

    Σ_runs huber(r / δ) + Σ_groups ½ (θ_g / σ)²

Huber (quadratic inside δ, linear outside) keeps a few odd runs from dragging every parameter; the
Gaussian prior keeps a parameter the runs cannot identify at its spec-derived value. Each iteration
takes a finite-difference Jacobian (one projection pass per group), solves the iteratively-reweighted
normal equations with numpy, and halves the step until the loss falls. No randomness, no scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

HUBER_DELTA = 0.20  # residuals within ±20% (the p90 target) count quadratically, beyond it linearly
PRIOR_SIGMA = 0.5  # a factor e^0.5 ≈ 1.65 away from the spec value costs as much as one run 20% off
FD_STEP = 0.04
MAX_ITER = 8
TOL = 1e-4


def huber(x: float) -> float:
    a = abs(x)
    return 0.5 * a * a if a <= 1.0 else a - 0.5


@dataclass(frozen=True)
class FitOutcome:
    theta: tuple[float, ...]
    loss: float
    residuals: tuple[float, ...]
    iterations: int


def loss_of(residuals: Sequence[float] | np.ndarray, theta: Sequence[float] | np.ndarray,
            delta: float = HUBER_DELTA, sigma: float = PRIOR_SIGMA) -> float:
    data = sum(huber(float(r) / delta) for r in residuals)
    prior = sum(0.5 * (float(t) / sigma) ** 2 for t in theta)
    return data + prior


def robust_fit(residuals_at: Callable[[Sequence[float]], Sequence[float]], n: int,
               limits: Sequence[tuple[float, float]], *, delta: float = HUBER_DELTA, sigma: float = PRIOR_SIGMA,
               max_iter: int = MAX_ITER) -> FitOutcome:
    """Minimise the loss over θ ∈ Π limits (log-multipliers, 0 = spec value). `residuals_at(θ)` returns
    log(predicted / measured) for every run; non-finite residuals are treated as huge (linear) ones."""
    theta = np.zeros(n)
    r = np.asarray(residuals_at(tuple(theta)), dtype=float)
    best = loss_of(r, theta, delta, sigma)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        jac = np.zeros((len(r), n))
        for g in range(n):
            step = FD_STEP if theta[g] + FD_STEP <= limits[g][1] else -FD_STEP
            probe = theta.copy()
            probe[g] += step
            jac[:, g] = (np.asarray(residuals_at(tuple(probe)), dtype=float) - r) / step
        a = np.abs(r) / delta
        w = np.where(a <= 1.0, 1.0, 1.0 / np.maximum(a, 1e-12)) / delta**2
        lhs = jac.T @ (w[:, None] * jac) + np.eye(n) / sigma**2
        rhs = -(jac.T @ (w * r) + theta / sigma**2)
        try:
            delta_theta = np.linalg.solve(lhs, rhs)
        except np.linalg.LinAlgError:
            delta_theta = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
        lo_b = np.array([lo for lo, _ in limits])
        hi_b = np.array([hi for _, hi in limits])
        # a step that leaves the box is clipped; once clipped it may no longer descend, so after the
        # joint step fails, each coordinate is tried alone (same halving)
        directions = [delta_theta] + [np.where(np.arange(n) == g, delta_theta, 0.0) for g in range(n)]
        improved = False
        moved = 0.0
        for direction in directions:
            scale = 1.0
            for _ in range(5):
                cand = np.clip(theta + scale * direction, lo_b, hi_b)
                if np.allclose(cand, theta):
                    break
                rc = np.asarray(residuals_at(tuple(cand)), dtype=float)
                lc = loss_of(rc, cand, delta, sigma)
                if lc < best - 1e-12:
                    moved = float(np.max(np.abs(cand - theta)))
                    theta, r, best, improved = cand, rc, lc, True
                    break
                scale *= 0.5
            if improved:
                break
        if not improved or moved < TOL:
            break
    return FitOutcome(tuple(float(t) for t in theta), float(best), tuple(float(x) for x in r), it)


def safe_log_ratio(predicted: float, measured: float) -> float:
    """log(predicted / measured), capped so that a broken projection reads as a very bad (not NaN) run."""
    if not (predicted > 0 and math.isfinite(predicted)):
        return 5.0
    return max(-5.0, min(5.0, math.log(predicted / measured)))
