"""A host served from a notebook: the kernel keeps its interrupt, the host keeps serving.

Executed by nbclient in a real ipykernel (the `notebooks` extra, part of
`dev`). Jupyter interrupts a kernel with SIGINT (and a manager ends one with
SIGTERM); a host serving inside the kernel must leave both signals to the
kernel, or interrupting a hung cell stops the user's host instead.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernels import jupyter, own_kernel

pytestmark = pytest.mark.slow  # a real Jupyter kernel, interrupted

KERNEL = "coreagent-sdk-host-tests"

SERVE = """
import asyncio
from coreagent_sdk.host import AgentHost, Turn

async def echo(turn: Turn) -> None:
    await turn.say(f"echo: {turn.prompt}")

host = AgentHost("in-kernel", behavior=echo)
ready = asyncio.get_running_loop().create_future()
serving = asyncio.create_task(host.serve(on_ready=ready.set_result))
url = await asyncio.wait_for(ready, 20)
import gc
print("COLLECTOR", gc.get_threshold(), gc.get_freeze_count())
"""

HUNG = """
print("HUNG", flush=True)
await asyncio.sleep(30)
"""

AFTER = """
from coreagent_sdk import CallPeer, Peer, StaticDirectory

print("DRAINING", host.draining, "STOPPED", serving.done())
async with CallPeer(StaticDirectory([Peer("in-kernel", url)]), timeout=10) as tool:
    print("ANSWER", (await tool.acall(peer="in-kernel", prompt="still there?")).response)
host.stop()
await asyncio.wait_for(serving, 15)
print("STOPPED", serving.done())
"""


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kernelspec of our own that runs this interpreter, whatever else is installed."""
    with own_kernel(tmp_path_factory.mktemp("jupyter"), KERNEL) as name:
        yield name


def _printed(cell: object) -> str:
    return "".join(o.get("text", "") for o in cell.outputs)  # type: ignore[attr-defined]


def test_interrupting_a_cell_in_a_kernel_leaves_the_host_it_serves_running(
    kernel_name: str, tmp_path: Path
) -> None:
    nbformat, nbclient = jupyter()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(s) for s in (SERVE, HUNG, AFTER)]
    notebook.cells[1].metadata["tags"] = ["raises-exception"]  # the interrupted cell
    client = nbclient.NotebookClient(
        notebook,
        timeout=60,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    with client.setup_kernel():
        client.execute_cell(notebook.cells[0], 0)
        pid = client.km.provisioner.process.pid
        # Jupyter's interrupt button is a SIGINT to the kernel (interrupt_mode "signal").
        timer = threading.Timer(2.0, os.kill, (pid, signal.SIGINT))
        timer.start()
        try:
            client.execute_cell(notebook.cells[1], 1)
        finally:
            timer.cancel()
        client.execute_cell(notebook.cells[2], 2)
    # A kernel's heap is the user's work: serving there leaves the collector as it was.
    assert "COLLECTOR (700, 10, 10) 0" in _printed(notebook.cells[0])
    hung = notebook.cells[1]
    assert "HUNG" in _printed(hung)
    assert [o.output_type for o in hung.outputs].count("error") == 1  # the cell was stopped
    after = _printed(notebook.cells[2])
    assert "DRAINING False STOPPED False" in after, after
    assert "ANSWER echo: still there?" in after, after
    assert after.rstrip().endswith("STOPPED True"), after  # host.stop() still stops it
