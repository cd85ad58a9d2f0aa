"""Starts a Flower 1.42 SuperLink or SuperNode that waits longer for slow processes, so a
federation survives a loaded machine.

Flower gives a process it hands a task (a ClientApp, the ServerApp) 30 s from the hand-over
to its first heartbeat, and a running one twice that between heartbeats; after that it
revokes the task's token, and the process's next request fails with "Runtime task-token
authentication failed" (then 401). A SuperNode's heartbeat to the SuperLink gets 5 s before
the SuperNode gives up on it (the SuperLink logs `ClientDisconnect`), and the SuperLink
counts a node as gone after two missed 30 s intervals. On two cores at load 20 a Python app
process needs more than 30 s just to import Flower, so every round's tasks were refused
over and over and the federation never finished round 1. Flower 1.42 has no option for
these times; this module sets them (for the state the process keeps and the heartbeats it
sends) and then runs the ordinary entry point:

    python sprout_fleet/patient.py supernode --insecure --superlink 127.0.0.1:9092 ...
    python sprout_fleet/patient.py superlink --insecure ...

It checks that Flower still has each setting where 1.42 has it and stops otherwise.
"""

from __future__ import annotations

import sys

# Seconds between heartbeats (Flower: 30). A task then has this long from its hand-over
# to its first heartbeat, and twice this between heartbeats; a node twice this.
HEARTBEAT_INTERVAL = 120
# Seconds one heartbeat request may take (Flower: 5).
HEARTBEAT_CALL_TIMEOUT = 30


def patch() -> None:
    """Sets the heartbeat interval and call timeout everywhere Flower 1.42 reads them."""
    import flwr
    from flwr.supercore import heartbeat
    from flwr.supercore.corestate import in_memory_corestate, sql_corestate
    from flwr.supernode import fleet_http_client, fleet_http_connection

    if flwr.__version__ != "1.42.0":
        raise SystemExit(f"sprout_fleet.patient knows Flower 1.42.0, not {flwr.__version__}")
    settings = {
        "HEARTBEAT_DEFAULT_INTERVAL": (HEARTBEAT_INTERVAL, [heartbeat, in_memory_corestate, sql_corestate, fleet_http_connection]),
        "HEARTBEAT_CALL_TIMEOUT": (HEARTBEAT_CALL_TIMEOUT, [heartbeat, fleet_http_client]),
    }
    for name, (value, modules) in settings.items():
        for module in modules:
            if not hasattr(module, name):
                raise SystemExit(f"sprout_fleet.patient: {module.__name__} has no {name}")
            setattr(module, name, value)


def main(argv: list[str]) -> int:
    entry_points = {"superlink": "flwr.superlink.cli:flower_superlink", "supernode": "flwr.supernode.cli:flower_supernode"}
    if len(argv) < 2 or argv[1] not in entry_points:
        print(f"usage: {argv[0]} superlink|supernode [ARGS...]", file=sys.stderr)
        return 2
    patch()
    module, function = entry_points[argv[1]].split(":")
    sys.argv = [f"flower-{argv[1]}", *argv[2:]]
    start = getattr(__import__(module, fromlist=[function]), function)
    return start()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
