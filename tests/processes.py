"""Host processes the tests start with `python -m coreagent_sdk.host`, and how they end."""

from __future__ import annotations

import asyncio
import signal
import subprocess


async def stop_with_sigterm(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then the process must exit 0 within 10 s; killed and its pipes closed anyway."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(asyncio.to_thread(proc.wait), 10)
        assert code == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
