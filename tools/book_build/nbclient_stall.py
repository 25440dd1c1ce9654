"""Fix 1: bound a rare stall while notebooks execute (the book's build, and tools/perturb.py's runs).

Symptom (seen in about 5 builds of 90 on our machines): in a few builds out of a hundred, after a notebook's last cell
the build waited exactly ``execute.timeout`` seconds, then went on as if nothing had happened.

Where the wait is: myst-nb runs notebooks with nbclient, which waits for each kernel reply with
``await socket.poll(timeout)`` on a pyzmq *asyncio* socket (jupyter_client's ``AsyncZMQSocketChannel.get_msg``). Only
when that poll's timer fires does pyzmq poll once more without waiting, and that final poll finds the reply: so a
wake-up that was lost leaves the build waiting for the whole timeout, then it succeeds. The same symptom is reported
upstream for notebooks with widgets (nbclient issue 312: "execute cell will sometimes block", where the maintainers
point at ``shell_channel.get_msg`` returning only at its timeout) and for asyncio ZeroMQ polls in general (pyzmq issue
1558: the event is returned after the timeout; ZeroMQ signals readiness through an edge-triggered descriptor). We did
not reproduce it here: 0 stalls in 169 executions of the quick start and of a small notebook with widgets (timeout
20 s, two busy cores), so this is the one code path that explains "exactly the timeout, then success", not an
observed trace. While waiting for output (``timeout=None``) the same loss would last until nbclient's 4 s
``iopub_timeout`` and drop the cell's output.

Fix: wait in slices of at most ``SLICE_S`` seconds. Each slice ends with that non-waiting poll, so a lost wake-up costs
at most one slice; the total wait and the ``Empty`` at the deadline are unchanged. nbval (``make test``) uses
jupyter_client's blocking client and is not affected.
"""

from __future__ import annotations

import time
from queue import Empty

SLICE_S = 0.5


async def get_msg(self, timeout: float | None = None) -> dict:
    """``AsyncZMQSocketChannel.get_msg`` that polls in slices of at most ``SLICE_S`` (same contract)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        wait = SLICE_S if remaining is None else min(SLICE_S, remaining)
        if await self.socket.poll(int(wait * 1000)):
            return await self._recv()
        if remaining is not None and remaining <= wait:
            raise Empty


def install() -> None:
    """Every asyncio channel of jupyter_client (so every kernel myst-nb or nbclient runs in this process) polls in
    slices."""
    from jupyter_client.channels import AsyncZMQSocketChannel

    # A patch of jupyter_client, not a hook: no public one reaches this wait. myst-nb builds nbclient's
    # NotebookClient itself (inline, or through jupyter-cache's executor) and passes on no client or kernel-manager
    # class (its `nb_execution_*` options are timeouts, modes and paths); jupyter_client picks the channel class
    # from a traitlet that is not configurable (`AsyncKernelClient.shell_channel_class = Type(AsyncZMQSocketChannel)`,
    # without `config=True`). So the method is replaced on the class, for the whole process.
    AsyncZMQSocketChannel.get_msg = get_msg


def setup(app) -> None:
    install()
