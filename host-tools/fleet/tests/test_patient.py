"""Checks of `sprout_fleet/patient.py`: Flower 1.42 revokes the token of a task whose
process has not sent a heartbeat 30 s after it was handed the task; patched, the task
keeps it for 120 s."""

from __future__ import annotations

import os
import sys
import unittest
from datetime import timedelta
from unittest import mock

from flwr.supercore.corestate import in_memory_corestate
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supernode.nodestate.nodestate_factory import NodeStateFactory

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sprout_fleet"))
import patient  # noqa: E402  (a script, run by path like the SuperLink and SuperNodes)

SETTINGS = ["HEARTBEAT_DEFAULT_INTERVAL", "HEARTBEAT_CALL_TIMEOUT"]


def token_alive_after(seconds: float) -> bool:
    """Whether a task's token, claimed now in a SuperNode's state, still authenticates
    `seconds` later without a heartbeat."""
    state = NodeStateFactory(ObjectStoreFactory()).state()
    task = state.create_task("clientapp", run_id=1)
    token = state.claim_task(task)
    assert token is not None
    later = in_memory_corestate.now() + timedelta(seconds=seconds)
    with mock.patch.object(in_memory_corestate, "now", return_value=later):
        return state.get_task_by_token(token) is not None


class Patience(unittest.TestCase):
    def setUp(self) -> None:
        from flwr.supercore import heartbeat
        from flwr.supercore.corestate import sql_corestate
        from flwr.supernode import fleet_http_client, fleet_http_connection

        modules = [heartbeat, in_memory_corestate, sql_corestate, fleet_http_client, fleet_http_connection]
        saved = [(m, name, getattr(m, name)) for m in modules for name in SETTINGS if hasattr(m, name)]
        self.addCleanup(lambda: [setattr(m, name, value) for m, name, value in saved])

    def test_a_slow_process_keeps_its_task(self) -> None:
        self.assertTrue(token_alive_after(25))
        self.assertFalse(token_alive_after(40), "Flower alone revokes the token after 30 s")
        patient.patch()
        self.assertTrue(token_alive_after(100))
        self.assertFalse(token_alive_after(130))

    def test_the_entry_point_must_be_named(self) -> None:
        with mock.patch("sys.stderr"):
            self.assertEqual(patient.main(["patient.py", "superexec"]), 2)


if __name__ == "__main__":
    unittest.main()
