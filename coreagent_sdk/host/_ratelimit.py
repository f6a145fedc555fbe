"""The daemon's per-caller limit on `POST /sessions`: a token bucket per identity.

Invariant: a caller never opens more than `burst` sessions at once, nor more
than `per_minute` a minute after that, and every anonymous caller shares one
bucket (an empty identity is nobody in particular, so it must not mint fresh
buckets). Time comes from the daemon's clock, so tests advance it instead of
sleeping. Mirrors core-agent `pkg/attach/rate_limit.go` (`costRateLimiter`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs

from coreagent_sdk import Clock

__all__ = ["DEFAULT_BURST", "DEFAULT_PER_MINUTE", "SessionRateLimit", "SessionRateLimiter"]

DEFAULT_PER_MINUTE = 10
DEFAULT_BURST = 5
_ANONYMOUS = "anonymous"
# A map of buckets is swept of long-idle callers only once it grows this big,
# as the daemon does; an evicted caller starts over with a full burst.
_PRUNE_THRESHOLD = 1024
_IDLE_AFTER = 3600.0


def _positive(name: str) -> Callable[[object, object, object], None]:
    def check(_: object, __: object, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(
                f"host: SessionRateLimit.{name} must be a positive number, got {value!r}; "
                f"the daemon's defaults are per_minute={DEFAULT_PER_MINUTE}, "
                f"burst={DEFAULT_BURST}"
            )

    return check


@attrs.frozen
class SessionRateLimit:
    """How fast one caller may open sessions; the defaults are the daemon's (5, then 10/min).

    Attributes:
        per_minute: Sessions a caller may open per minute, once its burst is spent.
        burst: Sessions a caller may open at once before the rate applies.
    """

    per_minute: float = attrs.field(default=DEFAULT_PER_MINUTE, validator=_positive("per_minute"))
    burst: int = attrs.field(default=DEFAULT_BURST, validator=_positive("burst"))


@attrs.define
class _Bucket:
    tokens: float
    refilled: float
    seen: float


class SessionRateLimiter:
    """Token buckets per caller identity, refilled continuously on `clock`."""

    def __init__(self, limit: SessionRateLimit, clock: Clock) -> None:
        self.limit = limit
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def __repr__(self) -> str:
        return f"SessionRateLimiter({self.limit!r}, callers={len(self._buckets)})"

    def allow(self, identity: str) -> tuple[bool, int]:
        """Take one token for `identity`: (True, 0), or (False, whole seconds to wait, >= 1)."""
        identity = identity or _ANONYMOUS
        now = self.clock.now()
        rate = self.limit.per_minute / 60.0
        if len(self._buckets) > _PRUNE_THRESHOLD:
            for key in [k for k, b in self._buckets.items() if b.seen < now - _IDLE_AFTER]:
                del self._buckets[key]
        bucket = self._buckets.get(identity)
        if bucket is None:
            bucket = self._buckets[identity] = _Bucket(float(self.limit.burst), now, now)
        elif now > bucket.refilled:  # a clock that stalls (or steps back) does not refill
            refill = (now - bucket.refilled) * rate
            bucket.tokens = min(float(self.limit.burst), bucket.tokens + refill)
            bucket.refilled = now
        bucket.seen = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return True, 0
        return False, max(1, math.ceil((1 - bucket.tokens) / rate))
