"""Device plumbing for batched entry points: mesh, padding, put/fetch, chunks, progress.

A batched core ``core(cfg, *flat_args)`` maps flat ``(n,)`` arrays to a tuple of ``(n,)``
arrays. :func:`run_batched` broadcasts the public arguments, flattens them, pads the batch
to a size shared by similar calls (one compilation), shards it over a 1-D
:class:`jax.sharding.Mesh` of all ``jax.devices()`` with :func:`jax.shard_map` (so a
multi-GPU host or a multi-host cluster runs the same call; on several hosts every process
must pass the same inputs), and reshapes the results. Tracers are computed as given (the
caller controls sharding). :func:`run_chunks` streams a long job through one compiled
program chunk by chunk, overlapping dispatch with copying results out.
"""

from __future__ import annotations

import functools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrdp import _precision, _validate

BATCH = P("batch")
REPLICATED = P()


def broadcast_shape(names, values):
    """The broadcast shape of ``values``; a ``ValueError`` naming every shape otherwise."""
    try:
        return np.broadcast_shapes(*(np.shape(v) for v in values))
    except ValueError:
        shapes = ", ".join(f"{n} {np.shape(v)}" for n, v in zip(names, values))
        raise ValueError(f"arguments must broadcast together; got shapes {shapes}") from None


@functools.lru_cache(maxsize=None)
def _mesh(devices: tuple) -> Mesh:
    return Mesh(np.asarray(devices, dtype=object), ("batch",))


@functools.lru_cache(maxsize=64)
def compiled(core, cfg, devices: tuple, in_specs=None):
    """``core(cfg, *batch_args)`` jitted, and sharded over ``devices`` when there are several."""
    fn = functools.partial(core, cfg)
    if len(devices) == 1:
        return jax.jit(fn)
    specs = dict(mesh=_mesh(devices), in_specs=BATCH if in_specs is None else in_specs,
                 out_specs=BATCH)
    if hasattr(jax, "shard_map"):
        sharded = jax.shard_map(fn, check_vma=False, **specs)
    else:  # jax < 0.6
        from jax.experimental.shard_map import shard_map

        sharded = shard_map(fn, check_rep=False, **specs)
    return jax.jit(sharded)


def put(array: np.ndarray, devices: tuple, spec):
    """A global ``jax.Array`` laid out as ``spec`` over the mesh (works on several hosts)."""
    if len(devices) == 1:
        return jnp.asarray(array)
    sharding = NamedSharding(_mesh(devices), spec)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def fetch(tree):
    """Bring a (possibly multi-host) result back as fully addressable arrays."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return tree


def padded_size(n: int, n_devices: int) -> int:
    """Batch size actually compiled for ``n`` lanes: few distinct sizes, whole per device.

    Up to 1024 lanes per device the next power of two, above that the next multiple of
    256, so that calls of similar sizes share one compiled program.
    """
    per_device = -(-n // n_devices)
    if per_device <= 1024:
        per_device = 1 << max(per_device - 1, 0).bit_length()
    else:
        per_device = -(-per_device // 256) * 256
    return per_device * n_devices


def run_batched(core, cfg, names, args, out_dtypes):
    """Broadcast, flatten, pad, shard and run ``core(cfg, *flat)``; reshape its outputs.

    Args:
      core: ``(cfg, *flat_args) -> tuple`` of ``(n,)`` arrays.
      cfg: static, hashable configuration.
      names: argument names (for the broadcast error).
      args: the public arguments (array-likes or tracers).
      out_dtypes: per output, a dtype or ``None`` for the compute dtype (used for empty
        batches).

    Returns:
      The tuple of outputs, each of the broadcast shape.
    """
    shape = broadcast_shape(names, args)
    dtype, ctx = _precision.compute_context(*args)
    with ctx:
        if not _validate.is_concrete(*args):
            flat = [jnp.broadcast_to(jnp.asarray(a, dtype), shape).reshape(-1) for a in args]
            return tuple(o.reshape(shape) for o in core(cfg, *flat)[: len(out_dtypes)])
        np_dtype = np.dtype(dtype)
        flat = [np.broadcast_to(np.asarray(a, dtype=np_dtype), shape).reshape(-1) for a in args]
        n = flat[0].size
        if n == 0:
            return tuple(jnp.zeros(shape, dtype if d is None else d) for d in out_dtypes)
        devices = tuple(jax.devices())
        pad = padded_size(n, len(devices)) - n
        if pad:  # copies of the first lane: valid input, results dropped below
            flat = [np.concatenate([a, np.repeat(a[:1], pad)]) for a in flat]
        fn = compiled(core, cfg, devices)
        out = fetch(fn(*(put(a, devices, BATCH) for a in flat)))
        return tuple(o[:n].reshape(shape) for o in out[: len(out_dtypes)])


class Progress:
    """A one-line progress bar on stderr, shown once a job has run a few seconds."""

    def __init__(self, total: int, enabled, label: str, delay: float = 2.0):
        self.total, self.enabled, self.label, self.delay = total, enabled, label, delay
        self.start = time.perf_counter()
        self.shown = False

    def update(self, done: int) -> None:
        elapsed = time.perf_counter() - self.start
        if self.enabled is False or (self.enabled is None and elapsed < self.delay):
            return
        frac = done / self.total
        eta = elapsed * (1.0 - frac) / frac if frac > 0 else float("nan")
        bar = "#" * int(30 * frac)
        sys.stderr.write(
            f"\r{self.label} [{bar:<30}] {done}/{self.total} chunks, "
            f"{elapsed:.1f}s elapsed, ~{eta:.1f}s left"
        )
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def run_chunks(core, cfg, batched, shared, out, chunk: int, *, progress, label: str):
    """Stream ``core(cfg, *batched_chunk, *shared)`` over chunks of ``batched``, into ``out``.

    Args:
      core: ``(cfg, *chunk_args, *shared_args) -> (chunk, ...)`` array.
      cfg: static configuration.
      batched: ``(pad_values, arrays)``: flat ``(n,)`` host arrays split into chunks and
        sharded, and the value each is padded with.
      shared: host arrays given whole (replicated) to every chunk.
      out: host array ``(n, ...)`` written chunk by chunk.
      chunk: lanes per chunk (rounded up to a multiple of the device count).
      progress: ``True``/``False``/``None`` (shown after 2 s).
      label: progress-bar label.

    Returns:
      ``out``.
    """
    pads, arrays = batched
    devices = tuple(jax.devices())
    nd = len(devices)
    n = arrays[0].size
    chunk = max(nd, -(-min(chunk, n) // nd) * nd)
    n_chunks = -(-n // chunk)
    extra = n_chunks * chunk - n
    arrays = [np.concatenate([a, np.full(extra, p, a.dtype)]) for a, p in zip(arrays, pads)]
    bar = Progress(n_chunks, progress, label)
    specs = (BATCH,) * len(arrays) + (REPLICATED,) * len(shared)
    fn = compiled(core, cfg, devices, in_specs=specs)
    shared_d = [put(a, devices, REPLICATED) for a in shared]
    pending = None
    for i in range(n_chunks + 1):
        current = None
        if i < n_chunks:
            sl = slice(i * chunk, (i + 1) * chunk)
            # dispatched asynchronously while the previous chunk is copied out
            current = fn(*(put(a[sl], devices, BATCH) for a in arrays), *shared_d)
        if pending is not None:
            j, result = pending
            lo, hi = j * chunk, min((j + 1) * chunk, n)
            out[lo:hi] = np.asarray(fetch(result))[: hi - lo]
            bar.update(j + 1)
        pending = (i, current) if current is not None else None
    bar.close()
    return out
