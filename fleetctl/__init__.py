"""fleetctl: the operator CLI for incident shells (outside Airflow); the lab has its own command, fleetlab."""
