# %% [markdown]
# # A real DP-SGD training loop with the accountant inside the jitted step
#
# A small MLP on scikit-learn's `load_digits` (1 797 8×8 images, shipped with the
# package: no download), trained with DP-SGD written out in a few lines of JAX and
# optax: per-example gradients by `vmap(grad)`, clipping to norm $C$, Gaussian noise
# of standard deviation $\sigma C$. The privacy accountant (`jaxrdp.accountant`)
# composes each step **inside the jitted, scanned step**, ε is logged while training
# runs, and the loop stops exactly when one more step would exceed the budget
# (`accountant.steps_remaining`, a closed form over the orders).
#
# Two ways to draw batches with the static shapes `jit` needs:
#
# 1. **Poisson sampling, done honestly.** Each record joins a step independently with
#    probability $q$. With static shapes we draw a Bernoulli mask over the *whole*
#    training set and sum the masked clipped gradients; the sum is divided by the
#    *expected* batch size $qN$ (dividing by the realised size would leak it). This
#    is the Sampled Gaussian Mechanism: add/remove-one neighbours.
# 2. **Fixed-size batches** of exactly $B$ records drawn without replacement, what most
#    JAX loops do. Accounting them as Poisson would be wrong. They are accounted by
#    Wang–Balle–Kasiviswanathan (2019), Theorem 9 (`jaxrdp.wor`), for **replace-one**
#    neighbours, where swapping one record moves the clipped sum by up to $2C$: the
#    noise multiplier entering the accountant is $\sigma/2$. A replace-one ε and an
#    add/remove ε are different promises and are not compared as if one were tighter.

# %%
import functools
import time

T_START = time.perf_counter()
import numpy as np
import jax
import jax.numpy as jnp
import optax
import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import jaxrdp
from jaxrdp import accountant, wor

digits = load_digits()
X = (digits.data / 16.0).astype(np.float32)
y = digits.target.astype(np.int32)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
mu, sd = X_tr.mean(0), X_tr.std(0) + 1e-3  # (data-dependent scaling: a public choice here)
X_tr, X_te = (X_tr - mu) / sd, (X_te - mu) / sd
X_tr, y_tr, X_te, y_te = map(jnp.asarray, (X_tr, y_tr, X_te, y_te))
N = X_tr.shape[0]
CLIP, DELTA, BUDGET = 1.0, 1e-5, 6.0
print(f"{N} training and {X_te.shape[0]} test images; budget (eps, delta) = ({BUDGET}, {DELTA})")

# %% [markdown]
# ## Model, per-example gradients, clipping and noise

# %%
HIDDEN = 32


def init_params(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (64, HIDDEN)) / 8.0, "b1": jnp.zeros(HIDDEN),
            "w2": jax.random.normal(k2, (HIDDEN, 10)) / jnp.sqrt(HIDDEN), "b2": jnp.zeros(10)}


def logits_fn(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def loss_one(p, x, label):
    return optax.softmax_cross_entropy_with_integer_labels(logits_fn(p, x[None]), label[None])[0]


per_example_grads = jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0))


@jax.jit
def test_accuracy(p):
    return jnp.mean(jnp.argmax(logits_fn(p, X_te), -1) == y_te)


def clip(g):
    leaves = jax.tree_util.tree_leaves(g)
    norms = jnp.sqrt(sum(jnp.sum(l.reshape(l.shape[0], -1) ** 2, 1) for l in leaves))
    scale = jnp.minimum(1.0, CLIP / jnp.maximum(norms, 1e-12))
    return jax.tree_util.tree_map(lambda l: l * scale.reshape((-1,) + (1,) * (l.ndim - 1)), g)


def add_noise(g_sum, key, std, denominator):
    leaves, tree = jax.tree_util.tree_flatten(g_sum)
    keys = jax.random.split(key, len(leaves))
    noisy = [(l + std * jax.random.normal(k, l.shape)) / denominator for l, k in zip(leaves, keys)]
    return jax.tree_util.tree_unflatten(tree, noisy)


opt = optax.adam(2e-3)

# %% [markdown]
# The Poisson batch's size is random, but `jit` needs static shapes. Clipping the
# gradients of all $N$ records and masking them is correct but does $N/(qN) = 20$ times
# the work. Instead the sampled records' indices go into a buffer of static size `CAP`
# (padding rows weigh 0), and only in the (astronomically rare) step whose batch
# overflows it does the step fall back to all $N$ records: the sum is the masked sum
# over all records in every case, so the mechanism is unchanged.

# %%
CAP = 128  # the batch size is Binomial(N, q = 0.05): mean 72, sd 8.3; 128 is 6.8 sd above


def weighted_sum(g, w):
    return jax.tree_util.tree_map(lambda l: jnp.tensordot(w, l, 1), g)


def poisson_grad_sum(p, mask):
    """Σ over the sampled records (``mask``, shape (N,)) of their clipped gradients."""
    def buffered():
        idx = jnp.nonzero(mask, size=CAP, fill_value=0)[0]
        weight = (jnp.arange(CAP) < mask.sum()).astype(jnp.float32)
        return weighted_sum(clip(per_example_grads(p, X_tr[idx], y_tr[idx])), weight)

    def every_record():
        return weighted_sum(clip(per_example_grads(p, X_tr, y_tr)), mask.astype(jnp.float32))

    return jax.lax.cond(mask.sum() <= CAP, buffered, every_record)


# %% [markdown]
# ## The training step: sample, clip, noise, update, **account**
#
# Fifty steps run per jitted `lax.scan` call. The per-step RDP curve of this
# $(q, \sigma)$ (or of this fixed-size batch) is computed once per call, outside the
# scan: every step shares it. Each step first asks the accountant how many steps the
# budget still allows (`steps_remaining_rdp`); once that is 0 the step becomes a no-op,
# so the loop stops on the budget exactly, with no host round trip per step. The step
# then composes the curve into the state (`compose_rdp_curve`). The accountant state is
# float32 here (the library's in-graph default; it rounds upwards, so it is never below
# the float64 value, checked at the end).

# %%
@functools.lru_cache(maxsize=None)
def make_chunk(sampling, q, batch, length=50):
    def step(sigma, per_step, carry, _):
        p, o, state, key, alive = carry
        key, k_sample, k_noise = jax.random.split(key, 3)
        left = accountant.steps_remaining_rdp(state, BUDGET, DELTA, per_step)
        if sampling == "poisson":
            mask = jax.random.bernoulli(k_sample, q, (N,))
            g_sum = poisson_grad_sum(p, mask)
            grad = add_noise(g_sum, k_noise, sigma * CLIP, q * N)
        else:  # fixed-size batch of exactly `batch` records, without replacement
            idx = jax.random.choice(k_sample, N, (batch,), replace=False)
            g = clip(per_example_grads(p, X_tr[idx], y_tr[idx]))
            g_sum = jax.tree_util.tree_map(lambda l: l.sum(0), g)
            grad = add_noise(g_sum, k_noise, sigma * CLIP, batch)
        new_state = accountant.compose_rdp_curve(state, per_step)
        alive = alive & (left >= 1)
        updates, new_o = opt.update(grad, o, p)
        new_p = optax.apply_updates(p, updates)
        keep = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(alive, a, b), new, old)
        return (keep(new_p, p), keep(new_o, o), keep(new_state, state), key, alive), alive

    @jax.jit
    def chunk(carry, sigma):  # σ traced: one compilation serves every noise level
        orders = carry[2].orders
        if sampling == "poisson":  # the SGM's RDP (add/remove), once for the fifty steps
            per_step = jaxrdp.rdp(q, sigma, orders)
        else:  # replace-one: the clipped sum moves by up to 2C, so the multiplier is σ/2
            per_step = wor.rdp(sigma / 2.0, orders, batch_size=batch, dataset_size=N)
        carry, took = jax.lax.scan(functools.partial(step, sigma, per_step), carry, None,
                                   length=length)
        eps, _ = accountant.get_epsilon(carry[2], DELTA)
        return carry, took.sum(), eps

    return chunk


def train(sampling, sigma, q=None, batch=None, seed=0, log_every=500):
    chunk = make_chunk(sampling, q, batch)
    p = init_params(jax.random.PRNGKey(seed))
    carry = (p, opt.init(p), accountant.init(), jax.random.PRNGKey(seed + 1), jnp.array(True))
    steps, history = 0, []
    while True:
        carry, took, eps = chunk(carry, jnp.float32(sigma))
        if int(took) == 0:
            break
        steps += int(took)
        history.append((float(eps), float(test_accuracy(carry[0]))))
        if steps % log_every == 0 or int(took) < 50:
            print(f"  {sampling:7s} sigma={sigma}: step {steps:5d}  eps={history[-1][0]:.3f}"
                  f"  test accuracy={history[-1][1]:.3f}", flush=True)
        if int(took) < 50:
            break
    return steps, carry[2], np.array(history)


# %% [markdown]
# ## Run 1: Poisson sampling, $q = 0.05$ (≈ 72 images a step), three noise levels
#
# ε is printed live (every 500 steps and at the stop).

# %%
Q = 0.05
runs = {}
t0 = time.perf_counter()
for sigma in (1.0, 1.5, 2.5):
    runs[sigma] = train("poisson", sigma, q=Q)
print(f"Poisson runs: {time.perf_counter() - t0:.1f} s")

for sigma, (steps, state, hist) in runs.items():
    eps_host = accountant.RdpAccountant().compose_sgm(Q, sigma, steps).get_epsilon(DELTA)
    eps_graph = float(accountant.get_epsilon(state, DELTA)[0])
    # Stopped on the budget, exactly: one more step of the in-graph accountant exceeds it.
    eps_next = float(accountant.get_epsilon(accountant.compose(state, Q, sigma), DELTA)[0])
    assert eps_graph <= BUDGET < eps_next
    assert eps_host <= eps_graph <= eps_host * (1 + 1e-3)  # float32 in-graph: never below
    print(f"sigma={sigma}: {steps} steps, eps={eps_host:.4f} (float64 host) / {eps_graph:.4f} "
          f"(float32 in graph), final test accuracy {hist[-1, 1]:.3f}")

# %% [markdown]
# ### The same runs by the exact privacy profile
#
# The loops stopped on the RDP ε. The exact privacy profile (`jaxrdp.profile`, never
# below the true ε) says how much privacy those same steps actually spent.

# %%
from jaxrdp import profile

sigmas = np.array(list(runs))
steps_done = np.array([runs[s][0] for s in sigmas], dtype=np.float64)
tight = profile.epsilon(Q, sigmas, steps_done, DELTA)
for s, n, e_rdp, e_tight, status in zip(sigmas, steps_done, np.asarray(tight.epsilon_rdp),
                                        np.asarray(tight.epsilon), np.asarray(tight.status)):
    print(f"σ={s}: {int(n)} steps, eps RDP {e_rdp:.4f}, exact profile {e_tight:.4f} (status {status})")
assert np.all(np.asarray(tight.epsilon) <= np.asarray(tight.epsilon_rdp))

# %% [markdown]
# ## Run 2: fixed-size batches of exactly 72, accounted without replacement
#
# Noise standard deviation $5C$, so the replace-one noise multiplier is $2.5$. The
# host accountant gives the same ε, and its `to_dp_event()` export lets
# dp_accounting's own RDP accountant (replace-one) check it.

# %%
B, SIGMA_FIXED = 72, 5.0
t0 = time.perf_counter()
steps_wor, state_wor, hist_wor = train("wor", SIGMA_FIXED, batch=B)
print(f"fixed-size run: {time.perf_counter() - t0:.1f} s")

host = accountant.RdpAccountant().compose_wor(SIGMA_FIXED / 2, batch_size=B, dataset_size=N,
                                              steps=steps_wor)
eps_wor = host.get_epsilon(DELTA)
eps_graph = float(accountant.get_epsilon(state_wor, DELTA)[0])
one_more = accountant.compose_wor(state_wor, SIGMA_FIXED / 2, batch_size=B, dataset_size=N)
assert eps_wor <= eps_graph <= BUDGET < float(accountant.get_epsilon(one_more, DELTA)[0])
print(f"{steps_wor} steps: eps={eps_wor:.4f} (replace-one), test accuracy {hist_wor[-1, 1]:.3f}")
try:
    from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
except ImportError:
    print("dp_accounting is not installed: skipping the cross-check")
else:
    ref = dp_rdp.RdpAccountant(neighboring_relation=dp_rdp.NeighborRel.REPLACE_ONE)
    ref.compose(host.to_dp_event())
    print(f"dp_accounting on the exported event: eps={ref.get_epsilon(DELTA):.4f}")
    assert abs(ref.get_epsilon(DELTA) / eps_wor - 1) < 1e-6

# %% [markdown]
# ## Test accuracy against ε

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
for sigma, (steps, _, hist) in runs.items():
    ax.plot(hist[:, 0], hist[:, 1], label=f"Poisson q={Q}, σ={sigma} ({steps} steps)")
ax.plot(hist_wor[:, 0], hist_wor[:, 1], "k--",
        label=f"fixed B={B}, noise {SIGMA_FIXED}C ({steps_wor} steps; replace-one ε)")
ax.set_xlabel(f"ε (δ = {DELTA})")
ax.set_ylabel("test accuracy")
ax.set_ylim(0, 1)
ax.axvline(BUDGET, color="grey", lw=0.8)
ax.legend(fontsize=8, loc="lower right")
ax.set_title("DP-SGD on load_digits, accountant in the jitted step")
plt.show()

best = max(hist[-1, 1] for _, _, hist in runs.values())
assert best > 0.85, best
elapsed = time.perf_counter() - T_START
print(f"best final test accuracy {best:.3f} at eps <= {BUDGET}; notebook time {elapsed:.0f} s")

# %% [markdown]
# Larger σ buys more steps for the same ε, which here buys accuracy. The fixed-size
# run's ε is a replace-one guarantee with the replace-one sensitivity $2C$, so the
# same noise buys fewer steps than Poisson sampling's add/remove guarantee; the two
# numbers answer different questions (an add/remove $(\varepsilon, \delta)$ implies
# replace-one $(2\varepsilon, (1+e^{\varepsilon})\delta)$, not the other way round).
