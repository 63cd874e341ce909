# %% [markdown]
# # Where other accountants fail, and who is right
#
# Side by side: Google's `dp_accounting` (0.6), Opacus (when installed), jaxrdp, and an
# independent high-precision reference computed here with **mpmath**: the definition
# $A_\alpha = \mathbb E_{z\sim\mathcal N(0,\sigma^2)}\bigl[((1-q) + q e^{(2z-1)/2\sigma^2})^\alpha\bigr]$
# (Mironov, Talwar, Zhang 2019, Sec. 3), integrated at 40 significant digits, RDP
# $= \log A_\alpha / (\alpha - 1)$. A privacy accountant may be loose, but it must never
# report *less* than the truth.

# %%
import logging
import math

import mpmath as mp
import numpy as np
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt

import jaxrdp

try:
    from absl import logging as absl_logging
    from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
    import dp_accounting
    HAVE_DPA = True
except ImportError:
    HAVE_DPA = False
    print("dp_accounting is not installed: its columns are skipped")


def mp_rdp(q, sigma, alpha, dps=40):
    # Reference RDP of the SGM by quadrature of the definition, in mpmath.
    # Integrates A - 1 = E[(1+x)^alpha - 1 - alpha*x] with x = q*expm1((2z-1)/(2 sigma^2))
    # (E[x] = 0), so tiny values keep their relative precision.
    with mp.workdps(dps):
        q, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)
        def integrand(z):
            x = q * mp.expm1((2 * z - 1) / (2 * s * s))
            return mp.npdf(z, 0, s) * ((1 + x) ** a - 1 - a * x)
        z1 = mp.mpf(0.5) + s * s * mp.log(1 / q - 1)  # where (1-q) and q*e^(...) cross (Sec. 3.3)
        cuts = sorted({-mp.inf, -12 * s, -6 * s, mp.mpf(0), mp.mpf(0.5), z1, a - 6 * s, a, a + 6 * s, a + 12 * s, mp.inf})
        return float(mp.log1p(mp.quad(integrand, cuts)) / (a - 1))


def mp_rdp_integer(q, sigma, alpha, dps=40):
    # Integer orders: the exact binomial sum (Sec. 3.3, Case I), A - 1 = sum_k>=2 C(a,k) q^k (1-q)^(a-k) expm1(k(k-1)/2s^2).
    with mp.workdps(dps):
        q, s = mp.mpf(q), mp.mpf(sigma)
        am1 = mp.fsum(mp.binomial(alpha, k) * q**k * (1 - q) ** (alpha - k) * mp.expm1(mp.mpf(k * (k - 1)) / (2 * s * s))
                      for k in range(2, alpha + 1))
        return float(mp.log1p(am1) / (alpha - 1))


# The quadrature reference agrees with the exact binomial sum at integer orders.
for args in [(0.01, 4.0, 32), (0.5, 2.0, 10), (1e-4, 8.0, 3)]:
    a, b = mp_rdp(*args), mp_rdp_integer(*args)
    assert abs(a - b) <= 1e-13 * b, (args, a, b)


def exact_rdp(q, sigma, alphas, pad=32):
    # jaxrdp.rdp, elementwise, padded to one fixed length so that every table below
    # reuses a single compiled program.
    alphas = np.atleast_1d(np.asarray(alphas, dtype=float))
    n = alphas.size
    def full(v, filler):
        return np.concatenate([np.broadcast_to(np.asarray(v, float), (n,)), np.full(pad - n, filler)])
    return np.asarray(jaxrdp.rdp(full(q, 0.5), full(sigma, 1.0), full(alphas, 2.0)))[:n]


def dpa(q, sigma, alphas):
    return np.asarray(dpa_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, list(alphas)), dtype=float)


# %% [markdown]
# ## 1. Fractional orders give up: +inf, "failed to converge"
#
# For fractional α, dp_accounting sums the two series of Sec. 3.3 term by term and stops
# after 1000 terms. Near α = 1 the terms decay only polynomially, the cap is hit, and
# the order is **excluded** (RDP = +inf) with a logged warning. At $q = 0.1$, $\sigma = 0.8$:

# %%
Q1, S1 = 0.1, 0.8
A1 = np.round(np.arange(1.1, 2.01, 0.1), 1)
ex1 = exact_rdp(Q1, S1, A1)
ref1 = np.array([mp_rdp(Q1, S1, a) for a in A1])
assert np.allclose(ex1, ref1, rtol=1e-10, atol=0)

if HAVE_DPA:
    messages = []
    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())
    handler, absl_logger = Collect(), absl_logging.get_absl_logger()
    absl_logger.addHandler(handler)
    absl_logger.propagate = False  # collect the warnings instead of printing them
    absl_logging.set_verbosity(absl_logging.WARNING)
    try:
        d1 = dpa(Q1, S1, A1)
    finally:
        absl_logger.removeHandler(handler)
        absl_logger.propagate = True
        absl_logging.set_verbosity(absl_logging.ERROR)
    print(f"dp_accounting logged {len(messages)} warnings, e.g.:\n  {messages[0]}\n")
    assert np.all(np.isinf(d1[A1 <= 1.6]))
else:
    d1 = np.full(A1.shape, np.nan)

print(f"q={Q1}, sigma={S1}:   alpha   dp_accounting      jaxrdp          mpmath")
for a, d, e, r in zip(A1, d1, ex1, ref1):
    print(f"{'':22}{a:5.1f}   {d:13.6g}   {e:13.10f}   {r:13.10f}")

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.plot(A1, ex1, "-", lw=2, label="jaxrdp (exact)")
ax.plot(A1, ref1, "k.", label="mpmath reference")
if HAVE_DPA:
    fin = np.isfinite(d1)
    ax.plot(A1[fin], d1[fin], "s", mfc="none", color="C3", label="dp_accounting")
    ax.plot(A1[~fin], np.full((~fin).sum(), ex1.max() * 1.05), "x", color="C3", ms=9,
            label="dp_accounting: +inf (order excluded)")
ax.set(xlabel="Rényi order α", ylabel="RDP of one step",
       title=f"Fractional orders near 1: q = {Q1}, σ = {S1}")
ax.legend(fontsize=8)
fig.tight_layout()

# %% [markdown]
# ## 2. Fractional orders are loose: |binomial coefficients|
#
# dp_accounting's `_log_comb(α, k)` uses `gammaln`, i.e. $\log|\binom{\alpha}{k}|$: the
# signs of the binomial coefficients of a fractional α (e.g. $\binom{1.1}{3} < 0$) are
# dropped, which turns an alternating series into an upper bound that can be far from
# the truth. Ratio dp_accounting / exact at α = 1.1 (`inf`: order excluded):

# %%
QL = np.array([0.05, 0.1, 0.2, 0.3, 0.5])
SL = np.array([5.0, 10.0, 20.0])
ql, sl = (v.ravel() for v in np.meshgrid(QL, SL, indexing="ij"))
exl = exact_rdp(ql, sl, np.full(ql.shape, 1.1))
if HAVE_DPA:
    absl_logging.set_verbosity(absl_logging.ERROR)
    dl = np.array([dpa(a, b, [1.1])[0] for a, b in zip(ql, sl)])
    ratio = (dl / exl).reshape(QL.size, SL.size)
    print("alpha = 1.1   " + "".join(f"sigma={s:<8g}" for s in SL))
    for qq, row in zip(QL, ratio):
        print(f"q = {qq:<8g}  " + "".join(f"{r:<14.3g}" for r in row))

for qq, ss in [(0.3, 20.0), (0.5, 20.0)]:
    ref = mp_rdp(qq, ss, 1.1)
    mine = float(exact_rdp(qq, ss, [1.1])[0])
    assert abs(mine - ref) <= 1e-10 * ref
    line = f"q={qq}, sigma={ss}, alpha=1.1: mpmath {ref:.6e}, jaxrdp {mine:.6e}"
    if HAVE_DPA:
        d = dpa(qq, ss, [1.1])[0]
        line += f", dp_accounting {d:.4g} ({d / ref:.3g}x)"
        assert d >= ref  # loose or excluded, but never below here
    print(line)

# %% [markdown]
# ## 3. Silent zeros: NaN noise and negative RDP become ε = 0
#
# dp_accounting accepts σ = NaN (its check `noise_multiplier < 0` is False for NaN),
# propagates NaN into the RDP, and its conversion returns `max(0, nan) = 0`: a run with
# undefined noise is reported as perfectly private. It also maps any *negative* RDP
# (a numerical failure upstream, e.g. Opacus's −0.70 below) to ε = 0. jaxrdp raises a
# `ValueError` naming the argument; under `jit`, where no exception can be raised, it
# returns NaN ("undefined"), never 0.

# %%
nan = float("nan")
if HAVE_DPA:
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(nan)), 1000)
    eps_nan = acc.get_epsilon(1e-5)
    eps_neg = dpa_rdp.compute_epsilon([45.5], [-0.70], 1e-5)[0]
    print(f"dp_accounting, sigma = NaN:        epsilon = {eps_nan}")
    print(f"dp_accounting, RDP = -0.70 at 45.5: epsilon = {eps_neg}")
    assert eps_nan == 0 and eps_neg == 0

for what, call in [("sigma = NaN", lambda: jaxrdp.epsilon(0.01, nan, 1000, 1e-5)),
                   ("RDP = -0.70", lambda: jaxrdp.epsilon_from_rdp(np.array([-0.70]), np.array([45.5]), 1e-5))]:
    try:
        call()
    except ValueError as err:
        print(f"jaxrdp, {what}: ValueError: {err}")
    else:
        raise AssertionError("jaxrdp accepted an invalid input")

eps_jit = jax.jit(lambda s: jaxrdp.epsilon(0.01, s, 1000, 1e-5)[0])(jnp.float32(nan))
print("jaxrdp under jit, sigma = NaN: epsilon =", eps_jit)
assert np.isnan(eps_jit)

# %% [markdown]
# ## 4. Tiny values: slightly *below* the exact value
#
# With small $q$, $A_\alpha = 1 + O(q^2)$. Summing terms near 1 and taking the log leaves
# only the last ~7 digits of $\log A_\alpha$ meaningful in float64, and the rounding
# error can go either way: dp_accounting's relative error here is up to $3\cdot10^{-8}$,
# about $10^{7}$ float64 ulps, and sometimes it returns *less* than the truth. jaxrdp
# computes $\log A = \operatorname{log1p}(A - 1)$ from non-negative terms and agrees with
# the reference to float64 rounding (~1e-14 relative). At $q = 10^{-4}$, $\sigma = 8$:

# %%
Q4, S4 = 1e-4, 8.0
A4 = np.array([2.5, 3.6, 5.5, 7.3, 12.5])
ex4 = exact_rdp(Q4, S4, A4)
ref4 = np.array([mp_rdp(Q4, S4, a) for a in A4])
assert np.allclose(ex4, ref4, rtol=1e-12, atol=0)
if HAVE_DPA:
    d4 = dpa(Q4, S4, A4)
print(f"q={Q4:g}, sigma={S4}:  alpha   mpmath               jaxrdp rel. err   dp_accounting rel. err")
for k, a in enumerate(A4):
    rel_dpa = (d4[k] - ref4[k]) / ref4[k] if HAVE_DPA else nan
    print(f"{'':19}{a:5.1f}   {ref4[k]:.12e}   {(ex4[k] - ref4[k]) / ref4[k]:+.1e}         {rel_dpa:+.1e}")
if HAVE_DPA:
    k = int(np.argmin(np.abs(A4 - 3.6)))
    print(f"\nalpha=3.6: dp_accounting {d4[k]:.10e} = exact x (1 {(d4[k] / ref4[k] - 1):+.1e})  <- below the truth")
    assert d4[k] < ref4[k] * (1 - 1e-11)

# %% [markdown]
# The same effect in float32 (q = 1e-5, σ = 1, α = 8): a naive float32 binomial sum
# gives a *negative* $\log A$; jaxrdp's float32 path keeps the sign and rounds upwards.

# %%
q32, s32, a32 = 1e-5, 1.0, 8
k = np.arange(a32 + 1, dtype=np.float32)
coef = np.array([math.comb(a32, i) for i in range(a32 + 1)], dtype=np.float32)
terms = coef * np.float32(q32) ** k * np.float32(1 - q32) ** (np.float32(a32) - k) \
    * np.exp(k * (k - 1) / np.float32(2 * s32**2))
assert terms.dtype == np.float32
naive32 = float(np.log(np.sum(terms, dtype=np.float32)))
jax32 = float(jaxrdp.log_a(jnp.float32(q32), jnp.float32(s32), jnp.float32(a32)))
ref32 = mp_rdp_integer(q32, s32, a32) * (a32 - 1)
print(f"log A: mpmath {ref32:.4e}, naive float32 sum {naive32:.4e}, jaxrdp float32 {jax32:.4e}")
assert naive32 <= 0 < ref32                                    # the naive sum loses the sign
assert jax32 >= ref32 and abs(jax32 - ref32) <= 1e-4 * ref32   # jaxrdp float32: rounded up, close

# %% [markdown]
# ## 5. Opacus: negative RDP from a truncated signed series
#
# Opacus computes fractional orders with the signed series and stops once every term
# is below $e^{-30}$ in absolute value. At $q = 0.5$, $\sigma = 100$, $\alpha = 45.5$ it
# returns RDP −0.70 (measured with Opacus 1.6); the true value is +0.00057. Fed to
# dp_accounting's conversion, that negative number would become ε = 0 (section 3).

# %%
Q5, S5, A5 = 0.5, 100.0, 45.5
ref5 = mp_rdp(Q5, S5, A5)
mine5 = float(exact_rdp(Q5, S5, [A5])[0])
print(f"q={Q5}, sigma={S5}, alpha={A5}: mpmath {ref5:.6e}, jaxrdp {mine5:.6e}")
assert abs(mine5 - ref5) <= 1e-10 * ref5 and abs(ref5 - 5.7e-4) < 1e-5
try:
    import opacus
    from opacus.accountants.analysis.rdp import _compute_rdp as opacus_rdp
except ImportError:
    print("opacus is not installed: skipping its value (reported: -0.70)")
else:
    print(f"opacus {opacus.__version__}: {float(opacus_rdp(Q5, S5, A5)):.6e}")
if HAVE_DPA:
    print(f"dp_accounting: {dpa(Q5, S5, [A5])[0]:.6e}")

# %% [markdown]
# ## Summary
#
# | case | dp_accounting | jaxrdp | mpmath |
# |---|---|---|---|
# | q=0.1, σ=0.8, α ∈ [1.1, 1.6] | +inf (order excluded) | exact | agrees with jaxrdp to 1e-10 |
# | α = 1.1, large q and σ | loose by up to ~10²×, or excluded | exact | agrees |
# | σ = NaN, negative RDP | ε = 0, silently | `ValueError` (NaN under `jit`) | — |
# | q = 1e-4, σ = 8, α = 3.6 | 2e-10 relative *below* the truth | within ~1e-14 (float64 rounding) | reference |
# | q = 0.5, σ = 100, α = 45.5 | — | +5.69e-4 | +5.69e-4 (Opacus: −0.70) |
