"""A papermill/nbclient kernel client that cannot wait forever for a message already sent.

nbclient waits for a cell's ``execute_reply`` (shell channel) and its outputs (IOPub channel) with
``get_msg(timeout=None)``: one unbounded ``zmq.asyncio`` poll. After a cell that opens many widget
comms (the dashboard's explorers), that poll can sleep through a message the kernel has already
sent, and the run then waits with the kernel idle (jupyter/nbclient#312; the fix proposed there,
nbclient PR #311, bounds the same wait). Here every unbounded wait is a loop of bounded polls, so a
message that is already queued is read at the next poll, at most ``POLL_S`` later. Waits with a
timeout are unchanged, and so are the cell timeout and the dead-kernel check.

    papermill.execute_notebook(src, dst, kernel_manager_class=KernelManager, ...)
"""
from __future__ import annotations

from queue import Empty
from typing import Any, Dict, Optional

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

POLL_S = 1.0


class BoundedPollChannel(AsyncZMQSocketChannel):
    """``get_msg(timeout=None)`` as bounded polls of ``POLL_S`` seconds until a message comes."""

    async def get_msg(self, timeout: Optional[float] = None) -> Dict[str, Any]:  # type: ignore[override]
        if timeout is not None:
            return await super().get_msg(timeout)
        while True:
            try:
                return await super().get_msg(POLL_S)
            except Empty:
                continue


class KernelClient(AsyncKernelClient):
    shell_channel_class = Type(BoundedPollChannel)
    iopub_channel_class = Type(BoundedPollChannel)


class KernelManager(AsyncKernelManager):
    """nbclient's default kernel manager, handing out :class:`KernelClient` (``AsyncKernelManager``
    builds its client from ``client_factory``; ``client_class`` names the same class)."""
    client_class = DottedObjectName("workbench.notebook_client.KernelClient")
    client_factory = Type(KernelClient)
