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


class AuthenticationFailed(FleetError):
    """A broker refused the login: "authentication failed for <user> on <cluster>: <reason>"."""


class TlsHandshakeFailed(FleetError):
    """The TLS handshake with a broker failed (certificate not trusted, wrong host name, ...)."""


class NotAuthorized(FleetError):
    """A broker refused an operation on a resource to a principal (a missing ACL), in one line."""

    def __init__(self, operation: str, resource: str, principal: str, cluster: str | None = None,
                 error: str | None = None):
        self.operation, self.resource, self.principal, self.cluster = operation, resource, principal, cluster
        on = f" on cluster {cluster!r}" if cluster else ""
        why = f" ({error})" if error else ""
        super().__init__(f"not authorized: {operation} on {resource} for {principal}{on}{why}")


class ZooKeeperNotAuthorized(NotAuthorized):
    """ZooKeeper refused an operation on a znode to the connection's identity (NoAuth: the znode's
    ACL), in one line: "ZooKeeper refused <operation> on znode <path> for <identity> on cluster
    <name> (NoAuth: ...)". The identity is digest:<user>, sasl:<user> or anonymous, never a password."""

    def __init__(self, operation: str, znode: str, identity: str, cluster: str | None = None):
        self.operation, self.resource, self.principal, self.cluster = operation, znode, identity, cluster
        self.error = "NoAuth"
        on = f" on cluster {cluster!r}" if cluster else ""
        FleetError.__init__(self, f"ZooKeeper refused {operation} on {znode} for {identity}{on} "
                                  "(NoAuth: the znode's ACL does not grant it)")
