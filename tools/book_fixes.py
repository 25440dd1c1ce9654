"""Sphinx extension loaded by _config.yml (``sphinx.local_extensions``): two fixes for the book build.

1. Bound a rare stall while notebooks execute.
   Symptom (NOTES.md): in a few builds out of a hundred, after a notebook's last cell the build
   waited exactly ``execute.timeout`` seconds, then went on as if nothing had happened.
   Where the wait is: myst-nb runs notebooks with nbclient, which waits for each kernel reply with
   ``await socket.poll(timeout)`` on a pyzmq *asyncio* socket (jupyter_client's
   ``AsyncZMQSocketChannel.get_msg``). Only when that poll's timer fires does pyzmq poll once more
   without waiting, and that final poll finds the reply: so a wake-up that was lost leaves the build
   waiting for the whole timeout, then it succeeds. The same symptom is reported upstream for
   notebooks with widgets (nbclient issue 312: "execute cell will sometimes block", where the
   maintainers point at ``shell_channel.get_msg`` returning only at its timeout) and for asyncio
   ZeroMQ polls in general (pyzmq issue 1558: the event is returned after the timeout; ZeroMQ
   signals readiness through an edge-triggered descriptor). We did not reproduce it here: 0 stalls
   in 169 executions of the quick start and of a small notebook with widgets (timeout 20 s, two
   busy cores), so this is the one code path that explains "exactly the timeout, then success",
   not an observed trace. While waiting for output (``timeout=None``) the same loss would last
   until nbclient's 4 s ``iopub_timeout`` and drop the cell's output.
   Fix: wait in slices of at most ``SLICE_S`` seconds. Each slice ends with that non-waiting poll,
   so a lost wake-up costs at most one slice; the total wait and the ``Empty`` at the deadline are
   unchanged. nbval (``make test``) uses jupyter_client's blocking client and is not affected.

2. Drop duplicate <script> tags. Scripts added by extensions during the build (sphinx-thebe's
   configuration, sphinx-togglebutton's selector) are emitted twice by Sphinx 7.4; the second copy
   of sphinx-thebe's ``const THEBE_JS_URL`` throws a SyntaxError on every page.
"""
from __future__ import annotations

import time
from queue import Empty

from jupyter_client.channels import AsyncZMQSocketChannel

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


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """Keep the first of identical script entries (same file, same attributes and inline body)."""
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, kept = set(), []
    for js in scripts:
        key = (str(getattr(js, "filename", js) or ""),  # None and "" both mean an inline script
               tuple(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def setup(app):
    AsyncZMQSocketChannel.get_msg = get_msg
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
