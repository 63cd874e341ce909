# %% [markdown]
# # Hyper-parameter sweeps: ε over (q, σ), σ* for a budget, steps vs batch size
#
# `jaxrdp.sweep` evaluates and inverts the exact SGM accountant over whole arrays of
# hyper-parameters at once: one fast-path RDP kernel call per solver iteration for all
# targets, sharded over every device JAX finds (`jax.devices()`), so the same cells run
# on a CPU, a GPU or several.
#
# Setting: a data set of $N = 50\,000$ records, $\delta = 10^{-5}$.

# %%
import numpy as np
import jax
import matplotlib.pyplot as plt
from matplotlib.colors import LogNorm

import jaxrdp
from jaxrdp import sweep

print("JAX backend:", jax.default_backend(), "| devices:", jax.devices())
N, DELTA, EPOCHS = 50_000, 1e-5, 30

# %% [markdown]
# ## ε heat map over $(q, \sigma)$ at a fixed number of epochs
#
# With 30 epochs, the number of steps is $T = \lceil 30/q \rceil$: a larger sampling rate
# means fewer but more expensive steps. One `jaxrdp.epsilon` call evaluates the whole
# grid (NumPy broadcasting of $q$ and $T$ along one axis, σ along the other).

# %%
QS = np.geomspace(1e-4, 0.1, 25)
SIGMAS = np.geomspace(0.4, 14.0, 24)
STEPS = np.ceil(EPOCHS / QS)
eps_grid = np.asarray(jaxrdp.epsilon(QS[:, None], SIGMAS[None, :], STEPS[:, None], DELTA)[0])
print("grid", eps_grid.shape, f"epsilon from {eps_grid.min():.3g} to {eps_grid.max():.3g}")
assert np.all(np.diff(eps_grid, axis=1) <= 0)  # more noise, less epsilon

# %% [markdown]
# ## σ* contours: the noise needed for a target ε
#
# `sweep.noise_multiplier` solves all $5 \times 25$ (target, q) pairs in one batched
# search. Its σ*(q) curves must be the level lines of the heat map; this is checked
# against the grid: at every grid σ above σ* the grid ε is within the target, below it
# is not.

# %%
TARGETS = np.array([0.5, 1.0, 2.0, 4.0, 8.0])
cal = sweep.noise_multiplier(TARGETS[:, None], DELTA, QS[None, :], STEPS[None, :])
sigma_star = cal.unwrap()  # raises if any target were infeasible
for t, row in zip(TARGETS, sigma_star):
    print(f"target eps {t:3.1f}: sigma* from {row.min():.3f} (q={QS[row.argmin()]:.1e}) "
          f"to {row.max():.3f} (q={QS[row.argmax()]:.1e})")

for k, t in enumerate(TARGETS):
    above = SIGMAS[None, :] >= sigma_star[k][:, None]
    assert np.all(eps_grid[above] <= t)
    assert np.all(eps_grid[SIGMAS[None, :] < sigma_star[k][:, None] * (1 - 1e-6)] > t)

fig, ax = plt.subplots(figsize=(8.5, 5.5))
mesh = ax.pcolormesh(QS, SIGMAS, eps_grid.T, norm=LogNorm(), cmap="viridis", shading="nearest")
fig.colorbar(mesh, ax=ax, label=f"ε at δ = {DELTA:g} after {EPOCHS} epochs")
ax.contour(QS, SIGMAS, eps_grid.T, levels=TARGETS, colors="k", linestyles="--", linewidths=0.9)
for t, row in zip(TARGETS, sigma_star):
    ax.plot(QS, row, "-", color="orangered", lw=1.8)
    ax.text(QS[0] * 1.15, row[0] * 1.04, f"ε = {t:g}", color="white", fontsize=9, va="bottom")
ax.plot([], [], "-", color="orangered", lw=1.8, label="σ*(q) from sweep.noise_multiplier")
ax.plot([], [], "--", color="k", lw=0.9, label="level lines of the ε grid")
ax.set(xscale="log", yscale="log", xlim=(QS[0], QS[-1]), ylim=(SIGMAS[0], SIGMAS[-1]),
       xlabel="sampling rate q = B / N", ylabel="noise multiplier σ",
       title=f"ε over (q, σ), {EPOCHS} epochs of N = {N:,}, with σ* for ε = 0.5 … 8")
ax.legend(loc="upper right", fontsize=8)
fig.tight_layout()

# %% [markdown]
# ## Steps vs batch size
#
# At a fixed budget $(\varepsilon, \delta) = (3, 10^{-5})$ and noise σ, how many steps can
# we afford as a function of the batch size $B$ ($q = B/N$)? `sweep.max_steps` answers
# in closed form ($T^* = \lfloor\max_\alpha R_\alpha / r_\alpha\rfloor$, no search, since RDP
# composes linearly). Larger batches allow fewer steps but more passes over the data
# ($T^* B / N$ epochs). `sweep.batch_size` gives the largest batch for a fixed number
# of epochs; those points lie on the epochs curves.

# %%
BUDGET = 3.0
BATCHES = 2.0 ** np.arange(4, 16)
NOISE = np.array([0.8, 1.0, 1.5, 2.0])
cal_steps = sweep.max_steps(BUDGET, DELTA, BATCHES[None, :] / N, NOISE[:, None])
t_star, status = np.asarray(cal_steps.value), np.asarray(cal_steps.status)
# INFEASIBLE (value 0): not even one step of that batch size fits the budget.
assert np.all((status == sweep.Status.OK) | ((status == sweep.Status.INFEASIBLE) & (t_star == 0)))
assert np.all(np.diff(t_star, axis=1) <= 0) and np.all(np.diff(t_star, axis=0) >= 0)
t_star = np.where(t_star > 0, t_star, np.nan)
epochs_star = t_star * BATCHES[None, :] / N

EPOCH_TARGETS = np.array([1.0, 10.0, 100.0])
b_star = sweep.batch_size(BUDGET, DELTA, NOISE[:, None], EPOCH_TARGETS[None, :], N).value
b_star = np.asarray(b_star)
for s, row in zip(NOISE, b_star):
    print(f"sigma={s:3.1f}: largest batch for " + ", ".join(
        f"{e:g} epochs: {int(b) if b > 0 else 'none'}" for e, b in zip(EPOCH_TARGETS, row)))

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.3))
for k, s in enumerate(NOISE):
    ax1.loglog(BATCHES, t_star[k], "-o", ms=3, color=f"C{k}", label=f"σ = {s:g}")
    ax2.loglog(BATCHES, epochs_star[k], "-o", ms=3, color=f"C{k}", label=f"σ = {s:g}")
    ok = b_star[k] > 0
    ax2.plot(b_star[k][ok], EPOCH_TARGETS[ok], "*", ms=13 - 2 * k, color=f"C{k}", mec="k")
for e in EPOCH_TARGETS:
    ax2.axhline(e, color="k", lw=0.6, ls=":")
ax1.set(xlabel="batch size B", ylabel="max steps T*", title=f"Steps allowed by (ε, δ) = ({BUDGET:g}, {DELTA:g})")
ax2.set(xlabel="batch size B", ylabel="epochs T*·B/N",
        title="Epochs allowed (★: sweep.batch_size for 1, 10, 100 epochs)")
for ax in (ax1, ax2):
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()

# %% [markdown]
# Consistency of the two solvers: for each batch size $B^*$ returned by `batch_size`,
# the steps it needs, $\lceil \text{epochs}\cdot N / B^*\rceil$, are within the exact budget,
# and one more record per batch is not (unless $B^* = N$, the whole data set).

# %%
ok = b_star > 0
bb, ee = b_star[ok], np.broadcast_to(EPOCH_TARGETS, b_star.shape)[ok]
ss = np.broadcast_to(NOISE[:, None], b_star.shape)[ok]
cand = np.stack([bb, np.minimum(bb + 1, N)])
eps_check = np.asarray(jaxrdp.epsilon(cand / N, ss, np.ceil(ee * N / cand), DELTA)[0])
print("epsilon at B*:  ", eps_check[0].round(4))
print("epsilon at B*+1:", np.where(bb < N, eps_check[1], np.nan).round(4), "(nan: B* = N)")
assert np.all(eps_check[0] <= BUDGET) and np.all(eps_check[1][bb < N] > BUDGET)
