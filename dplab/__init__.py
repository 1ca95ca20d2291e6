"""dplab: the lab kit of the data-parallel training book.

`dplab.cluster` holds the plumbing (settings, launchers, engine side, watch); the modules beside
it (data, models, timing, plots, hardware, traffic, localcomm) are what the book's pages use.
"""
from .cluster.errors import BackendError, ClusterError, PortInUseError
from .cluster.flight import analyze as analyze_flight_records
from .cluster.handle import Cluster
from .cluster.start import start_cluster
from .cluster.watch import RankDiedError, StuckRanksError

__all__ = ["BackendError", "Cluster", "ClusterError", "PortInUseError", "RankDiedError", "StuckRanksError",
           "analyze_flight_records", "start_cluster"]
