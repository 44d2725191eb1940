"""How often each candidate 95 % interval of a mean covers the true mean, at the sample sizes labelled runs
have: the percentile bootstrap (the method before issue 38), BCa, and Student's t, over normal, exponential,
lognormal and uniform draws at n = 2 ... 30. The figures behind the choice in bag/scores/intervals.py.
    ./run exec python bench/interval_coverage.py [--trials 2000]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np

from cosmos_reasoner_ros.bag.scores.student_t import t_quantile

DISTRIBUTIONS: dict[str, tuple[Callable[[np.random.Generator, tuple[int, int]], np.ndarray], float]] = {
    "normal": (lambda g, s: g.normal(3.0, 2.0, s), 3.0),
    "exponential": (lambda g, s: g.exponential(2.0, s), 2.0),
    "lognormal": (lambda g, s: g.lognormal(0.0, 1.0, s), math.exp(0.5)),
    "uniform": (lambda g, s: g.uniform(0.0, 1.0, s), 0.5),
}


def t_interval(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[1]
    half = t_quantile(0.975, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return x.mean(axis=1) - half, x.mean(axis=1) + half


def percentile(x: np.ndarray, g: np.random.Generator, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[1]
    picks = g.integers(0, n, (rounds, n))
    means = x[:, picks].mean(axis=2)  # trials x rounds
    return np.quantile(means, 0.025, axis=1), np.quantile(means, 0.975, axis=1)


def bca(x: np.ndarray, g: np.random.Generator, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[1]
    picks = g.integers(0, n, (rounds, n))
    means = x[:, picks].mean(axis=2)
    theta = x.mean(axis=1)
    nd = NormalDist()
    share = np.clip((means < theta[:, None]).mean(axis=1), 1e-6, 1 - 1e-6)
    z0 = np.array([nd.inv_cdf(float(s)) for s in share])
    jack = (x.sum(axis=1)[:, None] - x) / (n - 1)
    d = jack.mean(axis=1)[:, None] - jack
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.nan_to_num((d**3).sum(axis=1) / (6.0 * (d**2).sum(axis=1) ** 1.5))
    out = []
    for q in (0.025, 0.975):
        z = nd.inv_cdf(q)
        adj = np.array([nd.cdf(float(v)) for v in z0 + (z0 + z) / (1 - acc * (z0 + z))])
        out.append(np.array([np.quantile(m, a) for m, a in zip(means, adj, strict=True)]))
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args()
    g = np.random.default_rng(0)
    table: dict[str, dict[str, dict[int, float]]] = {}
    for name, (draw, truth) in DISTRIBUTIONS.items():
        for n in (2, 3, 5, 8, 10, 20, 30):
            x = draw(g, (args.trials, n))
            for method, (low, high) in {
                "t": t_interval(x),
                "percentile": percentile(x, g, args.rounds),
                "bca": bca(x, g, args.rounds),
            }.items():
                cover = float(np.mean((low <= truth) & (truth <= high)))
                table.setdefault(method, {}).setdefault(name, {})[n] = round(cover, 3)
    for method, rows in table.items():
        for name, row in rows.items():
            print(f"{method:10s} {name:12s} " + " ".join(f"n={n}:{c:.3f}" for n, c in row.items()))
    print(json.dumps(table))


if __name__ == "__main__":
    main()
