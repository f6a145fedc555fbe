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
- Two settings asked the same cases are compared **paired** (each case
  against itself), which removes the cases' own spread from the
  comparison: for pass/fail, McNemar's exact test (a binomial test on the
  discordant pairs) and Newcombe's interval for paired proportions (his
  method 10, 1998b, with the correlation term as Altman's "Statistics with
  confidence" gives it); for numbers, the t interval of the per-case
  differences. Independent settings: Newcombe's unpaired interval, and
  Welch's t interval for numbers.
- A mean's interval is Student's t (the t quantile from the regularized
  incomplete beta function by its continued fraction, then bisection).
- Many settings against one baseline: Holm's step-down adjustment of the
  p-values, and Bonferroni's for the intervals (each at 1 - alpha/m).
- pass@k is the chance that at least one of k tries passes, pass^k that all
  k do (tau-bench's measure of reliability); both are estimated without bias
  from n >= k tries with c passes: 1 - C(n-c, k)/C(n, k) and C(c, k)/C(n, k).
"""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = [
    "holm",
    "mcnemar_exact",
    "mean_interval",
    "newcombe",
    "newcombe_paired",
    "pass_at_k",
    "pass_hat_k",
    "t_quantile",
    "welch",
    "wilson",
]


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


def newcombe_paired(
    both: int, only_a: int, only_b: int, neither: int, confidence: float = 0.95
) -> tuple[float, float, float]:
    """B's pass rate minus A's on the same cases: (diff, low, high), Newcombe's method 10.

    ``only_a``: cases A passed and B failed; ``only_b`` the other way round.
    """
    n = both + only_a + only_b + neither
    if n == 0:
        return (math.nan, math.nan, math.nan)
    p_a, p_b = (both + only_a) / n, (both + only_b) / n
    lo_a, hi_a = wilson(both + only_a, n, confidence)
    lo_b, hi_b = wilson(both + only_b, n, confidence)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    cross = both * neither - only_a * only_b
    corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = corrected / math.sqrt(margins) if margins else 0.0
    diff = p_b - p_a
    low = diff - math.sqrt(max(0.0, (p_b - lo_b) ** 2 - 2 * phi * (p_b - lo_b) * (hi_a - p_a)
                                + (hi_a - p_a) ** 2))  # fmt: skip
    high = diff + math.sqrt(max(0.0, (hi_b - p_b) ** 2 - 2 * phi * (hi_b - p_b) * (p_a - lo_a)
                                 + (p_a - lo_a) ** 2))  # fmt: skip
    return (diff, max(-1.0, low), min(1.0, high))


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """McNemar's exact two-sided p-value from the discordant pairs (1.0 when there are none)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    # P(X <= k) for X ~ Binomial(n, 1/2) is I_(1/2)(n - k, k + 1): exact to float precision
    # and as quick for 50,000 discordant pairs as for 10 (a sum of C(n, i) / 2^n is not).
    k = min(only_a, only_b)
    return min(1.0, 2 * _incomplete_beta(n - k, k + 1, 0.5))


def _beta_fraction(a: float, b: float, x: float) -> float:
    # The continued fraction of the incomplete beta function, by the modified Lentz method.
    tiny, front = 1e-300, 1.0
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * result


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with `df` degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(probability: float, df: float) -> float:
    """The `probability` quantile of Student's t with `df` (> 0, maybe fractional) degrees."""
    if not 0 < probability < 1 or not df > 0:
        raise ValueError(f"experiments: need 0 < p < 1 and df > 0, got p={probability}, df={df}")
    if probability < 0.5:
        return -t_quantile(1 - probability, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < probability:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if t_cdf(middle, df) < probability:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def _moments(values: list[float]) -> tuple[int, float, float]:
    n = len(values)
    mean = math.fsum(values) / n if n else math.nan
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else math.nan
    return n, mean, var


def mean_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The mean of `values` with its t interval: (mean, low, high); nan bounds below 2 values."""
    _z(confidence)
    n, mean, var = _moments(values)
    if n < 2:
        return (mean, math.nan, math.nan)
    half = t_quantile(0.5 + confidence / 2, n - 1) * math.sqrt(var / n)
    return (mean, mean - half, mean + half)


def t_test_p(statistic: float, df: float) -> float:
    """The two-sided p-value of a t statistic."""
    if math.isnan(statistic) or math.isnan(df):
        return math.nan
    if math.isinf(statistic):
        return 0.0
    return min(1.0, 2 * (1 - t_cdf(abs(statistic), df)))


def paired_difference(
    a: list[float], b: list[float], confidence: float = 0.95
) -> tuple[float, float, float, float]:
    """Mean of b - a over pairs, its t interval and p-value: (diff, low, high, p)."""
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    mean, low, high = mean_interval(diffs, confidence)
    n, _, var = _moments(diffs)
    if n < 2:
        return (mean, math.nan, math.nan, math.nan)
    if var == 0:
        return (mean, mean, mean, 1.0 if mean == 0 else 0.0)
    return (mean, low, high, t_test_p(mean / math.sqrt(var / n), n - 1))


def welch(
    a: list[float], b: list[float], confidence: float = 0.95
) -> tuple[float, float, float, float]:
    """Mean of b minus mean of a, Welch's t interval and p-value: (diff, low, high, p)."""
    _z(confidence)
    n_a, m_a, v_a = _moments(a)
    n_b, m_b, v_b = _moments(b)
    diff = m_b - m_a
    if n_a < 2 or n_b < 2:
        return (diff, math.nan, math.nan, math.nan)
    se2 = v_a / n_a + v_b / n_b
    if se2 == 0:
        return (diff, diff, diff, 1.0 if diff == 0 else 0.0)
    df = se2**2 / ((v_a / n_a) ** 2 / (n_a - 1) + (v_b / n_b) ** 2 / (n_b - 1))
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(se2)
    return (diff, diff - half, diff + half, t_test_p(diff / math.sqrt(se2), df))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (nan stays nan)."""
    indexed = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(indexed)
    adjusted = list(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted
