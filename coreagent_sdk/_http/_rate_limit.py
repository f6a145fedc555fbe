"""Waiting out a daemon's session rate limit, only when asked and only within the deadline.

A core-agent daemon limits `POST /sessions` per caller (burst 5, then 10 a
minute by default) and answers 429 with `Retry-After`. Every delegation opens
a session, so a parent that delegates quickly to one peer meets it. The rule
this module holds: a wait never outlives the call's deadline. A `Retry-After`
that does not fit in what is left of it is not waited for at all (the 429 is
raised at once, typed, with `retry_after`), and the waits per call are few.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from email.utils import parsedate_to_datetime
from typing import TypeVar

from ..errors import RateLimitedError

__all__ = ["MAX_RATE_LIMIT_WAITS", "retry_after_seconds", "waiting_out_rate_limits"]

MAX_RATE_LIMIT_WAITS = 3  # per call: a daemon that keeps saying "later" is not waited on forever
_MAX_DELTA_DIGITS = 9  # over 30 years: anything longer is not a delay worth reading

T = TypeVar("T")


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` in seconds (delta-seconds or an HTTP date); None when absent or unusable."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text) if len(text) <= _MAX_DELTA_DIGITS else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a zone-less one is not an HTTP date
        return None
    delay = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, math.ceil(delay)) if math.isfinite(delay) else None


async def waiting_out_rate_limits(
    attempt: Callable[[], Awaitable[T]],
    *,
    wait: bool,
    time_left: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
) -> T:
    """`attempt()`, retried after each 429 whose `Retry-After` fits in `time_left()`.

    Without ``wait`` the first 429 is raised as is.
    """
    waits = 0
    while True:
        try:
            return await attempt()
        except RateLimitedError as exc:
            delay = exc.retry_after
            if not wait or delay is None or waits >= MAX_RATE_LIMIT_WAITS or delay >= time_left():
                raise
            waits += 1
        await sleep(delay)
