"""jaxrdp: Rényi-DP accounting of the Sampled Gaussian Mechanism in JAX."""

from jaxrdp.kernels import DEFAULT_ORDERS as DEFAULT_ORDERS
from jaxrdp.kernels import log_a as log_a
from jaxrdp.kernels import rdp as rdp

__all__ = ["DEFAULT_ORDERS", "log_a", "rdp"]
__version__ = "0.1.0"
