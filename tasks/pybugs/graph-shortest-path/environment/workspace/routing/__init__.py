"""Route planning on weighted graphs."""

from .graph import Graph
from .planner import NoRouteError, distances_from, shortest_path

__all__ = ["Graph", "NoRouteError", "distances_from", "shortest_path"]
__version__ = "0.3.1"
