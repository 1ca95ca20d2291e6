"""dplab: the lab kit of the data-parallel training book."""
from .backend import BackendError, PortInUseError
from .cluster import Cluster, ClusterError, start_cluster

__all__ = ["BackendError", "Cluster", "ClusterError", "PortInUseError", "start_cluster"]
