"""`python loopback_torchrun.py ARGS` is `torchrun ARGS` whose TCP stores listen on 127.0.0.1 alone.

torch's TCPStore server listens on every interface of its port, whatever host it is given (the c10d
rendezvous store, and the store the launcher of rank 0 hands the workers). It also takes a listening
socket instead (`master_listen_fd`); this launcher binds that socket to 127.0.0.1, so that a test run
can be reached from this machine only. Gloo's own sockets follow GLOO_SOCKET_IFNAME=lo.
"""

from __future__ import annotations

import runpy
import socket

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

_TCPStore = dist.TCPStore
_listeners: list[socket.socket] = []  # kept open for the life of the stores


def loopback_store(host_name: str, port: int, world_size: int | None = None, is_master: bool = False, **options):
    if is_master and "master_listen_fd" not in options:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", port))
        except OSError as error:  # as TCPStore fails: torchrun then joins the store another launcher hosts
            listener.close()
            raise dist.DistNetworkError(f"127.0.0.1:{port}: {error.strerror.lower()}") from None
        listener.listen(128)
        _listeners.append(listener)
        options["master_listen_fd"] = listener.fileno()
    return _TCPStore(host_name, port, world_size, is_master, **options)


dist.TCPStore = loopback_store
c10d_rendezvous_backend.TCPStore = loopback_store  # imported by name there

if __name__ == "__main__":
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
