"""A Paddle trainer's first step, before its command: wait until every parameter server accepts connections, as
Paddle 2's trainers did themselves (Paddle 3.0's no longer do, and push their first weights to whichever has not
started yet). Runs in the replica, with whatever Python it has; gives up, failing the trainer with the servers it
did not reach, after DISTRAIN_PSERVERS_WAIT_SECONDS (default 900: time for a server's pod to pull its image)."""

import os
import socket
import sys
import time

endpoints = os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
patience = float(os.environ.get("DISTRAIN_PSERVERS_WAIT_SECONDS") or 900)
deadline = time.monotonic() + patience
print("waiting for the parameter servers at", ", ".join(endpoints), flush=True)
for at, endpoint in enumerate(endpoints):
    host, _, port = endpoint.rpartition(":")
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            break
        except OSError:  # not listening yet, or its name not resolvable yet (a pod being made)
            if time.monotonic() > deadline:
                sys.exit(f"the parameter servers at {', '.join(endpoints[at:])} did not accept connections within "
                         f"{patience:g} s: see their logs")
            time.sleep(0.2)
