"""The numbers of a summary: intervals for a pass rate and a difference, pass@k and pass^k.

Each is a few lines of textbook arithmetic, written here rather than taken
from statsmodels or scipy so the summaries need neither (both are large for
five formulas); tests check them against hand-computed values.

- A pass rate's interval is Wilson's score interval: unlike the normal
  ("Wald") interval it stays inside [0, 1] and keeps its coverage at 0 or n
  passes and at the small n of a notebook grid.
- A difference of two pass rates is Newcombe's hybrid score interval (his
  method 10, 1998), built from the two Wilson intervals: the same virtues
  for the question "is setting B better than A, and by how much?".
- pass@k is the chance that at least one of k tries passes, pass^k that all
  k do (tau-bench's measure of reliability); both are estimated without bias
  from n >= k tries with c passes: 1 - C(n-c, k)/C(n, k) and C(c, k)/C(n, k).
"""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["newcombe", "pass_at_k", "pass_hat_k", "wilson"]


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"experiments: confidence must be between 0 and 1, got {confidence!r}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(passes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for `passes` out of `n` (nan, nan when n is 0)."""
    if n < 0 or not 0 <= passes <= max(n, 0):
        raise ValueError(f"experiments: need 0 <= passes <= n, got passes={passes}, n={n}")
    if n == 0:
        return (math.nan, math.nan)
    z = _z(confidence)
    p = passes / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    low = 0.0 if passes == 0 else max(0.0, (centre - spread) / scale)
    high = 1.0 if passes == n else min(1.0, (centre + spread) / scale)
    return (low, high)


def newcombe(
    passes_a: int, n_a: int, passes_b: int, n_b: int, confidence: float = 0.95
) -> tuple[float, float, float]:
    """B's pass rate minus A's, with Newcombe's hybrid score interval: (diff, low, high)."""
    if n_a == 0 or n_b == 0:
        return (math.nan, math.nan, math.nan)
    p_a, p_b = passes_a / n_a, passes_b / n_b
    lo_a, hi_a = wilson(passes_a, n_a, confidence)
    lo_b, hi_b = wilson(passes_b, n_b, confidence)
    diff = p_b - p_a
    low = diff - math.sqrt((p_b - lo_b) ** 2 + (hi_a - p_a) ** 2)
    high = diff + math.sqrt((hi_b - p_b) ** 2 + (p_a - lo_a) ** 2)
    return (diff, max(-1.0, low), min(1.0, high))


def _check_k(n: int, c: int, k: int) -> None:
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(
            f"experiments: pass@k and pass^k need 1 <= k <= n tries and 0 <= c <= n passes, "
            f"got n={n}, c={c}, k={k}; run the experiment with k >= {k} repetitions"
        )


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of `k` tries passes, from `c` passes in `n` tries."""
    _check_k(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the chance that all `k` tries pass, from `c` passes in `n` tries."""
    _check_k(n, c, k)
    return math.comb(c, k) / math.comb(n, k)
