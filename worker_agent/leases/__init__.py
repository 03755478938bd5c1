"""Attempt leases: the agent renews an attempt's lease only with a heartbeat the server recorded, and a
watchdog on the host kills the attempt when its lease runs out (docs/reliability.md, "Leases")."""
