"""A Paddle trainer's first step, before its command: wait until every parameter server accepts connections, as
Paddle 2's trainers did themselves (Paddle 3.0's no longer do, and push their first weights to whichever has not
started yet). Runs in the replica, with whatever Python it has."""

import os
import socket
import time

endpoints = os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
print("waiting for the parameter servers at", ", ".join(endpoints), flush=True)
for endpoint in endpoints:
    host, _, port = endpoint.rpartition(":")
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            break
        except OSError:  # not listening yet, or its name not resolvable yet (a pod being made)
            time.sleep(0.2)
