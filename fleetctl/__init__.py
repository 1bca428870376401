"""fleetctl: the operator CLI (incident shell, the lab, triggering runs)."""
