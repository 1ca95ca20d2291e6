"""dplab: the lab kit of the data-parallel training book."""
from .backend import BackendError, PortInUseError
from .cluster import Cluster, ClusterError, start_cluster
from .failures import StuckRanksError

__all__ = ["BackendError", "Cluster", "ClusterError", "PortInUseError", "StuckRanksError", "start_cluster"]
