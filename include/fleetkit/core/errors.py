"""Exceptions shared by the domain library. Every message names the input that caused it."""


class FleetError(Exception):
    """Base class of every error the toolkit raises on purpose."""


class FleetConfigError(FleetError):
    """The fleet file is invalid. The message names the file and the field."""


class ClusterUnreachable(FleetError):
    """A cluster (Kafka or ZooKeeper) did not answer."""


class CollectionError(FleetError):
    """A collection could not complete; nothing was written."""


class LabError(FleetError):
    """The lab fleet could not be started, stopped or inspected."""
