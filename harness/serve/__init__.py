"""Server lifecycle: one engine server started and stopped (`server.py`), servers draftbench did not start
(`existing.py`), servers left running and adopted (`kept.py`, `adopt.py`, `left_running.py`), and the TUI's
long-lived fleets (`fleet.py`, `fleet_nodes.py`). The benchmark pipeline (harness.bench) builds on it."""
