# %% [markdown]
# # jaxrdp quickstart: the privacy of a DP-SGD run
#
# DP-SGD adds Gaussian noise to a sum of clipped per-example gradients of a
# **Poisson-sampled** batch: every record joins a step's batch independently with
# probability $q = B/N$. One step is the **Sampled Gaussian Mechanism** (SGM) with
# sampling rate $q$ and noise multiplier $\sigma$ (noise std / clipping norm). jaxrdp
# computes its Rényi-DP curve $\varepsilon_{\text{step}}(\alpha)$ *exactly*
# (Mironov, Talwar, Zhang 2019, Sec. 3), composes $T$ steps additively
# ($T\,\varepsilon_{\text{step}}(\alpha)$, Mironov 2017, Prop. 1) and converts to
# $(\varepsilon, \delta)$-DP with the conversion of Canonne, Kamath, Steinke (2020),
# Prop. 12, minimised over the orders $\alpha$.
#
# This notebook shows the three everyday tasks:
#
# 1. $\varepsilon$ of a given run (`jaxrdp.epsilon`);
# 2. the noise multiplier $\sigma$ for a privacy budget (`jaxrdp.sweep.noise_multiplier`);
# 3. the accountant *inside* a jitted JAX training loop (`jaxrdp.accountant`), which stops
#    training when the next step would exceed the budget.

# %%
import numpy as np
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt

import jaxrdp
from jaxrdp import accountant, sweep

print("jax", jax.__version__, "| devices:", jax.devices())
ORDERS = jaxrdp.DEFAULT_ORDERS  # one order vector for the whole notebook (one compilation)
print(f"{ORDERS.size} Rényi orders from {ORDERS[0]} to {ORDERS[-1]:g}")

# %% [markdown]
# ## 1. ε of a DP-SGD run
#
# A CIFAR-10-sized run: $N = 50\,000$ training examples, expected batch size $B = 256$
# ($q = B/N$), 30 epochs ($T = \lceil 30 N / B \rceil$ steps), noise multiplier
# $\sigma = 1.1$, target $\delta = 10^{-5}$.

# %%
N, batch, epochs = 50_000, 256, 30
q = batch / N
steps = int(np.ceil(epochs * N / batch))
sigma, delta = 1.1, 1e-5

eps, best_order = jaxrdp.epsilon(q, sigma, steps, delta)
eps = float(eps)
print(f"q = {q:.5f}, T = {steps} steps, sigma = {sigma}, delta = {delta:g}")
print(f"epsilon = {eps:.4f}   (attained at Renyi order alpha = {float(best_order):g})")
assert 1.9 < eps < 2.1

# %% [markdown]
# Where does this number come from? The composed RDP curve $T\,\varepsilon_{\text{step}}(\alpha)$
# grows with $\alpha$; the conversion adds a term that falls with $\alpha$,
# $\varepsilon_\alpha = T\varepsilon_{\text{step}}(\alpha) + \log(1 - 1/\alpha) - \frac{\log(\delta\alpha)}{\alpha - 1}$,
# and the guarantee is the smallest $\varepsilon_\alpha$ over the orders.

# %%
total_rdp = steps * np.asarray(jaxrdp.rdp(q, sigma, ORDERS))  # fast path: one kernel call
eps_alpha = total_rdp + np.log1p(-1 / ORDERS) - np.log(delta * ORDERS) / (ORDERS - 1)
assert abs(eps_alpha.min() - eps) < 1e-9 * eps  # jaxrdp rounds outwards by a few ulps

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
ax1.loglog(ORDERS, total_rdp, ".-")
ax1.set(xlabel="Rényi order α", ylabel="RDP of T steps",
        title=f"Composed RDP curve (q={q:.4f}, σ={sigma}, T={steps})")
ax2.semilogx(ORDERS, eps_alpha, ".-", label="ε_α (improved conversion)")
ax2.axvline(float(best_order), color="k", ls=":", label=f"best order α={float(best_order):g}")
ax2.axhline(eps, color="C3", ls="--", label=f"ε = {eps:.3f}")
ax2.set(xlabel="Rényi order α", ylabel="ε at δ = 1e-5", ylim=(0, 10),
        title="(ε, δ) guarantee per order")
ax2.legend()
fig.tight_layout()

# %% [markdown]
# Cross-check with Google's `dp_accounting` (its `RdpAccountant` uses a subset of
# jaxrdp's default orders and the same conversion, so jaxrdp's ε can only be smaller
# or equal).

# %%
try:
    import dp_accounting
    from absl import logging as absl_logging
except ImportError:
    print("dp_accounting is not installed: skipping the cross-check")
else:
    absl_logging.set_verbosity(absl_logging.ERROR)
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    eps_dpa = acc.get_epsilon(delta)
    print(f"dp_accounting: epsilon = {eps_dpa:.4f}   jaxrdp: epsilon = {eps:.4f}")
    assert eps <= eps_dpa * (1 + 1e-9) and eps > 0.97 * eps_dpa

# %% [markdown]
# ## 2. The noise multiplier for a budget
#
# `jaxrdp.sweep.noise_multiplier` solves $\min\{\sigma : \varepsilon(q, \sigma, T, \delta) \le \varepsilon_{\text{target}}\}$
# for a whole array of targets at once (one batched root search, not one search per
# target). The result is a `Calibration(value, status)`; `.unwrap()` returns the values
# and raises if any target cannot be met. The returned σ is rounded *up*: the exact ε at
# σ* never exceeds the target.

# %%
targets = np.array([1.0, 2.0, 4.0, 8.0])
sigma_star = sweep.noise_multiplier(targets, delta, q, steps).unwrap()

# One epsilon call for a σ grid (for the plot) and the calibrated σ* values.
sigma_grid = np.geomspace(0.5, 3.0, 36)
eps_all, _ = jaxrdp.epsilon(q, np.concatenate([sigma_grid, sigma_star]), steps, delta)
eps_all = np.asarray(eps_all)
eps_grid, eps_at_star = eps_all[:-targets.size], eps_all[-targets.size:]
for t, s, e in zip(targets, sigma_star, eps_at_star):
    print(f"target epsilon {t:4.1f}  ->  sigma* = {s:.5f}   (epsilon at sigma* = {e:.6f})")
assert np.all(eps_at_star <= targets)
assert np.all(eps_at_star >= targets * (1 - 1e-3))  # tight, not just safe

fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(sigma_grid, eps_grid, label="ε(σ) for this run")
ax.plot(sigma_star, targets, "o", color="C3", label="calibrated σ* per target ε")
ax.set(xlabel="noise multiplier σ", ylabel="ε at δ = 1e-5",
       title=f"Calibration: CIFAR-10-sized run, B={batch}, {epochs} epochs")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()

# %% [markdown]
# ## 3. The accountant inside a jitted training loop
#
# `jaxrdp.accountant` keeps the accumulated RDP curve in an `RdpState` (a `NamedTuple`
# pytree), with pure functions `init`, `compose` and `get_epsilon`. They trace under
# `jax.jit` and `lax.scan`, so the privacy check runs in-graph, with no host round
# trip per step.
#
# Below: DP-SGD for logistic regression on synthetic data. Each iteration of the
# `lax.scan` Poisson-samples a batch (every example kept with probability $q$), clips
# per-example gradients to norm $C$, adds $\mathcal N(0, \sigma^2 C^2)$ noise, composes
# one SGM step into a *candidate* state and computes its ε. If that ε would exceed the
# budget, the update is skipped and training stops (all later iterations are no-ops).
# The state is float32 (JAX's default); jaxrdp rounds float32 RDP and ε upwards, so the
# in-graph ε is never below the exact float64 value.

# %%
budget = 3.0
n_toy, dim, q_toy, sigma_toy, clip, lr, max_iters = 1000, 10, 0.05, 1.5, 1.0, 0.5, 600

kx, kw, kn, ktrain = jax.random.split(jax.random.PRNGKey(0), 4)
X = jax.random.normal(kx, (n_toy, dim))
w_true = jax.random.normal(kw, (dim,))
y = (X @ w_true + 0.5 * jax.random.normal(kn, (n_toy,)) > 0).astype(jnp.float32)

def example_loss(w, x, label):
    z = x @ w
    return jnp.logaddexp(0.0, z) - label * z

per_example_grads = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))

@jax.jit
def train(w0, state0, key):
    def step(carry, key):
        w, state, stopped = carry
        candidate = accountant.compose(state, q_toy, sigma_toy)   # one SGM step
        eps_next, _ = accountant.get_epsilon(candidate, delta)
        go = ~stopped & (eps_next <= budget)                      # stay within budget
        k_sample, k_noise = jax.random.split(key)
        mask = jax.random.bernoulli(k_sample, q_toy, (n_toy,))    # Poisson sampling
        g = per_example_grads(w, X, y)
        g = g / jnp.maximum(1.0, jnp.linalg.norm(g, axis=1, keepdims=True) / clip)
        noise = sigma_toy * clip * jax.random.normal(k_noise, (dim,))
        update = (jnp.sum(g * mask[:, None], axis=0) + noise) / (q_toy * n_toy)
        w = jnp.where(go, w - lr * update, w)
        state = jax.tree_util.tree_map(lambda new, old: jnp.where(go, new, old), candidate, state)
        eps_now, _ = accountant.get_epsilon(state, delta)
        loss = jnp.mean(jax.vmap(example_loss, in_axes=(None, 0, 0))(w, X, y))
        return (w, state, ~go), (eps_now, loss, go)

    carry0 = (w0, state0, jnp.array(False))
    (w, state, _), history = jax.lax.scan(step, carry0, jax.random.split(key, max_iters))
    return w, state, history

state0 = accountant.init(ORDERS)  # float32 state, zero RDP
w, state, (eps_hist, loss_hist, took_step) = train(jnp.zeros(dim), state0, ktrain)
n_steps = int(jnp.sum(took_step))
eps_final = float(eps_hist[-1])
accuracy = float(jnp.mean(((X @ w) > 0) == (y > 0.5)))
print(f"trained {n_steps} of {max_iters} iterations; in-graph float32 epsilon = {eps_final:.5f} "
      f"(budget {budget}); train accuracy {accuracy:.3f}")

# %% [markdown]
# Check against the host-side float64 computation: the loop stopped exactly where the
# budget runs out (allowing one step less, because the float32 ε is rounded up), and the
# in-graph ε is never below the exact one.

# %%
eps64 = np.asarray(jaxrdp.epsilon(q_toy, sigma_toy, np.array([n_steps, n_steps + 1, n_steps + 2]), delta)[0])
print(f"float64 epsilon after {n_steps}, {n_steps + 1}, {n_steps + 2} steps: {eps64.round(5)}")
assert eps64[0] <= budget < eps64[2]          # stopped at the budget (float32 may stop one step early)
assert eps64[0] <= eps_final <= budget          # in-graph float32 epsilon is conservative
assert eps_final - eps64[0] < 1e-3 * budget
assert accuracy > 0.8

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
it = np.arange(1, max_iters + 1)
ax1.plot(it, eps_hist, label="in-graph ε (float32)")
ax1.axhline(budget, color="C3", ls="--", label=f"budget ε = {budget}")
ax1.axvline(n_steps, color="k", ls=":", label=f"stopped after {n_steps} steps")
ax1.set(xlabel="iteration", ylabel="ε at δ = 1e-5", title="Privacy spent during training")
ax1.legend()
ax2.plot(it, loss_hist)
ax2.axvline(n_steps, color="k", ls=":")
ax2.set(xlabel="iteration", ylabel="training loss (logistic)",
        title=f"DP-SGD, q={q_toy}, σ={sigma_toy}, clip={clip}")
fig.tight_layout()
