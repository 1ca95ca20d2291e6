"""dplab: the lab kit of the data-parallel training book."""
from .backend import BackendError, PortInUseError, choose_backend, free_port
from .cluster import Cluster, ClusterError, start_cluster

__all__ = [
    "BackendError",
    "Cluster",
    "ClusterError",
    "PortInUseError",
    "choose_backend",
    "free_port",
    "start_cluster",
]
