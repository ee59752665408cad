"""The kernel client ``workbench.report`` runs notebooks with: its shell and IOPub channels wait for a
message in bounded polls, so a reply already queued on the socket is read even when the poll that
should have woken for it did not (jupyter/nbclient#312), and an unbounded wait still never returns
empty-handed. Real ZMQ sockets; the README tour runs the client on a real kernel."""
import asyncio

import zmq
import zmq.asyncio
from jupyter_client.session import Session

from workbench import notebook_client as nc


def test_the_kernel_manager_hands_out_the_bounded_poll_client():
    kc = nc.KernelManager().client()
    assert isinstance(kc, nc.KernelClient)
    assert kc.shell_channel_class is nc.BoundedPollChannel and kc.iopub_channel_class is nc.BoundedPollChannel


def test_an_unbounded_get_msg_waits_across_polls_and_returns_the_message():
    async def run():
        ctx = zmq.asyncio.Context()
        router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        session = Session()
        channel = nc.BoundedPollChannel(dealer, session)
        try:
            waiting = asyncio.ensure_future(channel.get_msg())
            await asyncio.sleep(2.5 * nc.POLL_S)  # two bounded polls came back empty meanwhile
            assert not waiting.done()
            session.send(dealer, "kernel_info_request")  # the client's request, so the router knows it
            ident, *_ = await router.recv_multipart()
            session.send(router, "kernel_info_reply", {"status": "ok"}, ident=ident)
            msg = await asyncio.wait_for(waiting, 10)
            assert msg["msg_type"] == "kernel_info_reply" and msg["content"] == {"status": "ok"}
            session.send(router, "status", {"execution_state": "idle"}, ident=ident)
            assert (await channel.get_msg(timeout=5))["msg_type"] == "status"  # a bounded wait is unchanged
        finally:
            router.close(0)
            dealer.close(0)
            ctx.term()
    asyncio.run(run())
