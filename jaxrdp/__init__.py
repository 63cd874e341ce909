"""jaxrdp: exact, vectorised Rényi-DP accounting of the Sampled Gaussian Mechanism in JAX.

Layers, each a public module: :mod:`jaxrdp.kernels` (log A_α and per-step RDP) →
:mod:`jaxrdp.conversions` (RDP → (ε, δ), composition) and :mod:`jaxrdp.zcdp` /
:mod:`jaxrdp.bounds` (Bun–Steinke zCDP, closed-form bounds) → :mod:`jaxrdp.accountant`
(pytree state usable inside ``jit``) → :mod:`jaxrdp.sweep` (vectorised calibration) →
:mod:`jaxrdp.cli` (the ``jaxrdp`` command).
"""

from jaxrdp import accountant as accountant
from jaxrdp import bounds as bounds
from jaxrdp import conversions as conversions
from jaxrdp import kernels as kernels
from jaxrdp import profile as profile
from jaxrdp import sweep as sweep
from jaxrdp import zcdp as zcdp
from jaxrdp.accountant import RdpAccountant as RdpAccountant
from jaxrdp.accountant import RdpState as RdpState
from jaxrdp.bounds import theorem11_rdp as theorem11_rdp
from jaxrdp.conversions import DeltaResult as DeltaResult
from jaxrdp.conversions import EpsilonResult as EpsilonResult
from jaxrdp.conversions import OrderAtEdgeWarning as OrderAtEdgeWarning
from jaxrdp.conversions import compose_rdp as compose_rdp
from jaxrdp.conversions import delta as delta
from jaxrdp.conversions import delta_from_rdp as delta_from_rdp
from jaxrdp.conversions import epsilon as epsilon
from jaxrdp.conversions import epsilon_from_rdp as epsilon_from_rdp
from jaxrdp.kernels import DEFAULT_ORDERS as DEFAULT_ORDERS
from jaxrdp.kernels import log_a as log_a
from jaxrdp.kernels import rdp as rdp
from jaxrdp.zcdp import delta_from_zcdp as delta_from_zcdp
from jaxrdp.zcdp import epsilon_from_zcdp as epsilon_from_zcdp
from jaxrdp.zcdp import gaussian_rho as gaussian_rho

__all__ = [
    "DEFAULT_ORDERS",
    "DeltaResult",
    "EpsilonResult",
    "OrderAtEdgeWarning",
    "RdpAccountant",
    "RdpState",
    "accountant",
    "bounds",
    "compose_rdp",
    "conversions",
    "delta",
    "delta_from_rdp",
    "delta_from_zcdp",
    "epsilon",
    "epsilon_from_rdp",
    "epsilon_from_zcdp",
    "gaussian_rho",
    "kernels",
    "log_a",
    "profile",
    "rdp",
    "sweep",
    "theorem11_rdp",
    "zcdp",
]
__version__ = "0.1.0"
