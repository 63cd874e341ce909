# %% [markdown]
# # Mironov–Talwar–Zhang (2019): Figure 1 and Table 1 reproduced
#
# *Rényi Differential Privacy of the Sampled Gaussian Mechanism* (arXiv:1908.10530),
# Sec. 3.2, **Theorem 11**: if $q \le 1/5$, $\sigma \ge 4$ and
#
# $$(4)\quad 1 < \alpha \le \tfrac12\sigma^2 L - 2\ln\sigma, \qquad
#   (5)\quad \alpha \le \frac{\tfrac12\sigma^2 L^2 - \ln 5 - 2\ln\sigma}{L + \ln(q\alpha) + 1/(2\sigma^2)},
#   \qquad L = \ln\Bigl(1 + \frac{1}{q(\alpha - 1)}\Bigr),$$
#
# then the SGM is $(\alpha, 2q^2\alpha/\sigma^2)$-RDP.
#
# **Figure 1, left:** the largest α allowed by condition (4), by condition (5), their
# minimum (the range of Theorem 11), and the *exact* largest α for which
# $\varepsilon(\alpha) \le 2q^2\alpha/\sigma^2$ still holds, as functions of $q$, for
# $\sigma = 4$ and $10$. **Right:** the exact RDP next to the Theorem 11 bound as a
# function of α. The exact values come from `jaxrdp.rdp`; the per-condition maxima
# from `jaxrdp.bounds.theorem11_max_order`.

# %%
import numpy as np
import matplotlib.pyplot as plt

import jaxrdp
from jaxrdp import bounds

SIGMAS = np.array([4.0, 10.0])
# q from 1e-4 to 0.2 (Theorem 11 needs q <= 1/5): 0.1-decade steps plus a few points up to 0.2.
QS = np.concatenate([10.0 ** np.linspace(-4, -1, 31), [0.125, 0.15, 0.175, 0.2]])
Q = np.broadcast_to(QS, (SIGMAS.size, QS.size))
S = np.broadcast_to(SIGMAS[:, None], Q.shape)

mo = bounds.theorem11_max_order(Q, S)
a_cond4, a_cond5, a_thm = (np.asarray(v) for v in (mo.alpha_max_cond4, mo.alpha_max_cond5, mo.alpha_max))
assert np.allclose(a_thm, np.minimum(a_cond4, a_cond5))


# %% [markdown]
# **The exact α.** For each $(q, \sigma)$ find the largest α with
# $\varepsilon_{\text{exact}}(\alpha) \le 2q^2\alpha/\sigma^2$ by bisection on
# $\log(\alpha - 1)$, evaluating `jaxrdp.rdp` for the whole $(\sigma, q)$ grid at once
# (same shape in every iteration: one compilation). The bracket is checked first: the
# inequality holds at $\alpha = 1.001$ and fails at $\alpha = 10^6$ everywhere.

# %%
def excess(alpha):
    # exact RDP minus the Theorem 11 bound, elementwise over the (sigma, q) grid
    return np.asarray(jaxrdp.rdp(Q, S, alpha)) - 2 * Q**2 * alpha / S**2

lo = np.full(Q.shape, np.log(1e-3))   # log(alpha - 1)
hi = np.full(Q.shape, np.log(1e6))
assert np.all(excess(1 + np.exp(lo)) <= 0) and np.all(excess(1 + np.exp(hi)) > 0)
for _ in range(60):
    mid = 0.5 * (lo + hi)
    ok = excess(1 + np.exp(mid)) <= 0
    lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
a_exact = 1 + np.exp(lo)

print("largest alpha            cond (4)   cond (5)   Thm 11 (min)   exact")
for i, s in enumerate(SIGMAS):
    for qq in (1e-4, 1e-3, 1e-2, 1e-1, 0.2):
        j = int(np.argmin(np.abs(QS - qq)))
        print(f"sigma={s:4.0f}  q={QS[j]:<7.4g}  {a_cond4[i, j]:9.2f}  {a_cond5[i, j]:9.2f}"
              f"  {a_thm[i, j]:11.2f}  {a_exact[i, j]:9.2f}")

# %% [markdown]
# **Ordering as in the paper.** Theorem 11 is a valid bound, so its range lies below the
# exact crossover ($\alpha_{\text{Thm 11}} \le \alpha_{\text{exact}}$); all curves fall
# as $q$ grows, and the $\sigma = 10$ curves lie above the $\sigma = 4$ curves.

# %%
assert np.all(a_thm <= a_exact)
for a in (a_cond4, a_cond5, a_thm, a_exact):
    assert np.all(np.diff(a, axis=1) <= 1e-9 * a[:, 1:])   # non-increasing in q
    assert np.all(a[1] > a[0])                                # sigma = 10 above sigma = 4
# At the edge of its range Theorem 11 holds (validity mask) and bounds the exact RDP.
valid = np.asarray(bounds.theorem11_rdp(Q, S, a_thm).valid)
assert valid.all() and np.all(excess(a_thm) <= 0)
print("ratio exact / Theorem-11 range of alpha: "
      f"{(a_exact / a_thm).min():.1f}x to {(a_exact / a_thm).max():.1f}x")

# %% [markdown]
# **Right panel.** Exact RDP and the bound $2q^2\alpha/\sigma^2$ over α for $q = 0.01$:
# the bound is drawn solid where Theorem 11 applies and dashed beyond; the exact curve
# crosses it at the α of the left panel. One α grid for both σ (one compilation).

# %%
Q_RIGHT = 0.01
ALPHAS = np.geomspace(1.1, 1e4, 120)
A = np.broadcast_to(ALPHAS, (SIGMAS.size, ALPHAS.size))
S_R = np.broadcast_to(SIGMAS[:, None], A.shape)
Q_R = np.full(A.shape, Q_RIGHT)
rdp_exact = np.asarray(jaxrdp.rdp(Q_R, S_R, A))
thm = bounds.theorem11_rdp(Q_R, S_R, A)
thm_bound, thm_valid = np.asarray(thm.bound), np.asarray(thm.valid)
j_right = int(np.argmin(np.abs(QS - Q_RIGHT)))

# The exact curve crosses the bound exactly once, at the bisection's alpha.
for i in range(SIGMAS.size):
    below = rdp_exact[i] <= thm_bound[i]
    n_cross = int(np.sum(below[:-1] != below[1:]))
    assert n_cross == 1, n_cross
    cross = ALPHAS[np.argmax(~below)]
    assert ALPHAS[np.argmax(~below) - 1] <= a_exact[i, j_right] <= cross
    assert np.all(rdp_exact[i][thm_valid[i]] <= thm_bound[i][thm_valid[i]])

fig, (axl, axr) = plt.subplots(1, 2, figsize=(13, 5))
for i, (s, c) in enumerate(zip(SIGMAS, ("C0", "C3"))):
    axl.loglog(QS, a_cond4[i], ls="--", color=c, label=f"σ={s:g}: condition (4)")
    axl.loglog(QS, a_cond5[i], ls=":", color=c, label=f"σ={s:g}: condition (5)")
    axl.loglog(QS, a_thm[i], ls="-", lw=1, color=c, label=f"σ={s:g}: min of (4), (5)")
    axl.loglog(QS, a_exact[i], ls="-", lw=2.5, color=c, alpha=0.6,
               label=f"σ={s:g}: exact, ε = 2q²α/σ²")
axl.set(xlabel="sampling rate q", ylabel="largest order α",
        title="Fig. 1 (left): maximum α for Theorem 11")
axl.grid(True, which="both", alpha=0.3)
axl.legend(fontsize=8, ncol=2)

for i, (s, c) in enumerate(zip(SIGMAS, ("C0", "C3"))):
    axr.loglog(ALPHAS, rdp_exact[i], color=c, lw=2, label=f"σ={s:g}: exact RDP")
    axr.loglog(ALPHAS, np.where(thm_valid[i], thm_bound[i], np.nan), color=c, ls="-", lw=1,
               label=f"σ={s:g}: 2q²α/σ² (Theorem 11 applies)")
    axr.loglog(ALPHAS, np.where(thm_valid[i], np.nan, thm_bound[i]), color=c, ls="--", lw=1,
               label=f"σ={s:g}: 2q²α/σ² (outside Theorem 11)")
    axr.axvline(a_exact[i, j_right], color=c, ls=":", lw=1)
axr.set(xlabel="Rényi order α", ylabel="RDP ε(α) of one step", ylim=(1e-7, 1e2),
        title=f"Fig. 1 (right): exact RDP vs Theorem 11, q = {Q_RIGHT}")
axr.grid(True, which="both", alpha=0.3)
axr.legend(fontsize=8)
fig.tight_layout()

# %% [markdown]
# ## Table 1: the closed-form bounds side by side with exact values
#
# Table 1 of the paper lists, for a function of $\ell_2$-sensitivity 1:
#
# | reference | conditions | bound (RDP at order α) |
# |---|---|---|
# | Abadi et al. (2016) | $q < \frac{1}{16\sigma}$, $\alpha \le 1 + \sigma^2\ln\frac{1}{q\sigma}$ | $\frac{q^2\alpha}{(1-q)\sigma^2} + O(q^3\alpha^3/\sigma^3)$ as $q \to 0$ (asymptotic, **not** a guarantee) |
# | Bun et al. (2018, tCDP) | $q \le \frac{1}{10}$, $\sigma \ge \sqrt5$, $\alpha \le \frac12\sigma^2\ln\frac1q$ | $6q^2\alpha/\sigma^2$, for a **fixed-size** sample and replace-one neighbours |
# | this work (Theorem 11) | $q \le \frac15$, $\sigma \ge 4$, (4), (5) | $2q^2\alpha/\sigma^2$, Poisson sample |
# | this work (Sec. 3.3) | any α | numerical procedure: the exact value (`jaxrdp.rdp`) |
#
# The Bun et al. bound is for a different sampling scheme and neighbouring relation, so
# it is shown for scale only. Below, `*` marks a bound outside its stated conditions;
# a ratio below 1 means the formula is *smaller* than the exact RDP (not a bound there).

# %%
tq, ts, ta = (v.ravel() for v in np.meshgrid([1e-3, 1e-2, 0.1], [4.0, 10.0], [2.0, 8.0, 32.0, 128.0], indexing="ij"))
exact_t = np.asarray(jaxrdp.rdp(tq, ts, ta))
thm_t = bounds.theorem11_rdp(tq, ts, ta)
abadi_t = np.asarray(bounds.abadi_asymptotic_rdp(tq, ts, ta))
abadi_ok = np.asarray(bounds.abadi_conditions(tq, ts, ta))
bun_t = 6 * tq**2 * ta / ts**2
bun_ok = (tq <= 0.1) & (ts >= np.sqrt(5)) & (ta <= 0.5 * ts**2 * np.log(1 / tq))
thm_b, thm_ok = np.asarray(thm_t.bound), np.asarray(thm_t.valid)

def cell(value, ok):
    return f"{value:10.3e}{' ' if ok else '*'}"

print("    q  sigma  alpha |     exact  |  Abadi (asympt.)  ratio |  Thm 11 2q²α/σ²  ratio |  Bun et al. 6q²α/σ²  ratio")
for k in range(tq.size):
    print(f"{tq[k]:5g} {ts[k]:5g} {ta[k]:6g} | {exact_t[k]:10.3e} | {cell(abadi_t[k], abadi_ok[k])} {abadi_t[k] / exact_t[k]:6.2f} |"
          f" {cell(thm_b[k], thm_ok[k])}    {thm_b[k] / exact_t[k]:6.2f} | {cell(bun_t[k], bun_ok[k])}       {bun_t[k] / exact_t[k]:6.2f}")

# Theorem 11 is a guarantee wherever its conditions hold ...
assert np.all(exact_t[thm_ok] <= thm_b[thm_ok]) and thm_ok.sum() >= 10
# ... and for small q the exact RDP approaches q²α/(2σ²): Theorem 11 is 4x, Abadi's leading term 2x.
small = (tq == 1e-3) & (ta <= 32)
assert np.allclose(thm_b[small] / exact_t[small], 4, rtol=0.05)
assert np.allclose(abadi_t[small] / exact_t[small], 2, rtol=0.05)
# Outside their conditions the closed forms are not bounds: at q = 0.1, σ = 4, α = 128
# all three are below the exact RDP.
k = int(np.flatnonzero((tq == 0.1) & (ts == 4) & (ta == 128))[0])
assert max(abadi_t[k], thm_b[k], bun_t[k]) < exact_t[k] and not thm_ok[k]

# %% [markdown]
# The same comparison over α (ratio of each closed form to the exact value, $q = 0.01$):
# for small $q\alpha$ all three are constant multiples of the exact RDP
# ($\approx q^2\alpha/2\sigma^2$); for large α the exact RDP overtakes every one of them.
# Solid where a formula's conditions hold, dashed outside.

# %%
abadi_r = np.asarray(bounds.abadi_asymptotic_rdp(Q_R, S_R, A))
abadi_r_ok = np.asarray(bounds.abadi_conditions(Q_R, S_R, A))
bun_r = 6 * Q_R**2 * A / S_R**2
bun_r_ok = (S_R >= np.sqrt(5)) & (A <= 0.5 * S_R**2 * np.log(1 / Q_R))

fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
for i, ax in enumerate(axes):
    for name, vals, ok, c in (("Abadi et al. (asymptotic)", abadi_r[i], abadi_r_ok[i], "C2"),
                              ("Theorem 11", thm_bound[i], thm_valid[i], "C0"),
                              ("Bun et al. (fixed-size sample)", bun_r[i], bun_r_ok[i], "C1")):
        ratio = vals / rdp_exact[i]
        ax.loglog(ALPHAS, np.where(ok, ratio, np.nan), color=c, label=name)
        ax.loglog(ALPHAS, np.where(ok, np.nan, ratio), color=c, ls="--")
    ax.axhline(1, color="k", lw=0.8)
    ax.set(xlabel="Rényi order α", title=f"Table 1 bounds / exact RDP, q={Q_RIGHT}, σ={SIGMAS[i]:g}")
    ax.grid(True, which="both", alpha=0.3)
axes[0].set_ylabel("bound / exact (below 1: not an upper bound)")
axes[0].legend()
fig.tight_layout()
