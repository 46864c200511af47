"""Host the TCPStore of an elastic training's c10d rendezvous in a process of its own (the JobSet's `rendezvous` pod).

With `--rdzv-backend c10d` the store that holds the rendezvous state lives in whichever torchrun agent hosts it
(torch 2.13 c10d_rendezvous_backend.py L139-163: `is_host` from `--rdzv-conf`, else the agent whose hostname matches
the endpoint); every agent reads and writes the state there. If that agent's pod is lost, the rendezvous is lost
with it and every other agent fails (RendezvousConnectionError, L113-118): losing exactly that node would end the
run instead of shrinking it. So the agents all run with `is_host=false` and this process, on no GPU node, hosts
the store; losing any number of training pods leaves the rendezvous standing.

    python programs/rendezvous.py [--port 29400]

Prints one JSON line `{"event": "listening", "port": P}` once clients can connect, then serves until SIGTERM or
SIGINT (exit 0).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from datetime import timedelta

from torch.distributed import TCPStore

DEFAULT_PORT = 29400  # the c10d backend's default port (c10d_rendezvous_backend.py L32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # wait_for_workers=False: agents come and go; the server never waits for a fixed number of them.
    store = TCPStore(
        "0.0.0.0", args.port, is_master=True, wait_for_workers=False, multi_tenant=True, timeout=timedelta(seconds=60)
    )
    print(json.dumps({"event": "listening", "port": store.port}), flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
