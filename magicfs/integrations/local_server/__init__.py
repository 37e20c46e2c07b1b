"""What every local S3 server of magicfs shares: credentials, client options, the child
process that runs it, and the name of the S3 operation a request asks for.

Three servers run on 127.0.0.1 for the demo, the tests and the benchmarks: the embedded
moto server (:mod:`magicfs.integrations.embedded_s3`), the benchmarks' stub
(``benchmarks/stub_s3.py``) and the tests' fault front (``tests/helpers/fault_front.py``).
Each runs in a child process, so that it has its own interpreter lock: a client and a
server in one process would measure the GIL, not the protocol. They share one way to
start and stop that child (:class:`ChildServer` in the parent, :func:`announce_ready` and
:func:`watch_parent` in the child):

* the child binds a free loopback port and prints one line, ``<TAG> <value>`` (its port
  or its endpoint), which the parent waits for;
* the parent holds the child's stdin open; the child stops when it reaches end-of-file,
  which happens when the parent closes it *or dies* (even by SIGKILL: the kernel closes
  the pipe), so a crashed run never leaves a server behind;
* the parent stops the child by its PID: it closes the stdin, waits, then terminates and
  at last kills it should it linger.

Programs of another kind (Azurite, the GCS emulator, Ceph) run under a watchdog that
stops them the same way (:class:`SupervisedServer`). The modules: ``s3_clients``
(credentials, s3fs and boto3 options), ``child`` (a Python server in a child process),
``supervised`` and ``watchdog`` (another program under the watchdog), ``s3_operations``
(the name of a request's S3 operation). They import the standard library only (boto3
when a client is asked for).
"""

from __future__ import annotations

from .child import ChildServer, announce_ready, watch_parent
from .s3_clients import (
    ACCESS_KEY,
    CREDENTIALS,
    LOOPBACK,
    REGION,
    SECRET_KEY,
    S3Endpoint,
    s3_boto3_client,
    s3_storage_options,
)
from .s3_operations import OPERATIONS, s3_operation
from .supervised import (
    ServerStartError,
    SupervisedServer,
    accepts_connections,
    free_port,
    stop_supervised,
    supervise,
)

__all__ = [
    "ACCESS_KEY",
    "CREDENTIALS",
    "LOOPBACK",
    "OPERATIONS",
    "REGION",
    "SECRET_KEY",
    "ChildServer",
    "S3Endpoint",
    "ServerStartError",
    "SupervisedServer",
    "accepts_connections",
    "announce_ready",
    "free_port",
    "s3_boto3_client",
    "s3_operation",
    "s3_storage_options",
    "stop_supervised",
    "supervise",
    "watch_parent",
]
