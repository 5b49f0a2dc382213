"""Fused LM head + log-softmax + entropy over vocabulary tiles (docs/architecture.md §3; the entropy of docs/algorithms.md (A.12)).

The learner needs, per scored position, two numbers of the next-token distribution
p = softmax(z), z = softcap(h·W) / τ over the vocabulary V: the taken token's log-prob and the
entropy. `rlvr.models.scoring`'s default ("chunked") path computes them from [B, chunk, V] float32
logits blocks. This module computes them without ever holding more than [rows, tile] logits: per
block of rows it scans over vocabulary tiles of `tile` columns with an online log-sum-exp that
also carries the target logit and the entropy's first moment. With, over the tiles seen so far,

    m = max_j z_j,    s = Σ_j e^{z_j − m},    u = Σ_j e^{z_j − m} z_j,    z_y (the target's logit)

(a new tile with maximum m' rescales s and u by e^{m − m'} and adds its own terms; the XLA path
takes z_y from W's column y directly, the Pallas kernel from the tile holding it), at the end

    log Z = m + log s,    log p(y) = z_y − log Z,    H = log Z − u / s        (H = −Σ p log p).

**Backward** (`jax.custom_vjp`): the forward saves only h, W, the targets, log Z and E_p[z] = u/s
(O(rows) floats, no logits). The backward recomputes each tile's logits and, with upstream
cotangents g_lp (of log p(y)) and g_H (of H),

    ∂/∂z_j:  g_z = g_lp (1[j = y] − p_j) − g_H p_j (z_j − E_p[z])

(∂H/∂z_j = −p_j (z_j − E_p[z])), then through the temperature and the soft cap,
g_a = g_z (1 − tanh²(a / c)) / τ for pre-activations a = h·W, and accumulates
dh += g_a Wᵀ (per row block) and dW[:, tile] += hᵀ g_a, tile by tile. Memory: O(rows × tile)
besides dW itself.

**Vocabulary-parallel** (`impl="vocab_tiled"` given a mesh whose `tensor` axis, of size t > 1,
divides V: `vocab_parallel`). W [D, V] is split along the vocabulary as the model's parameters
are (shard i holds columns i·V/t .. (i+1)·V/t − 1) and the rows over the mesh's other axes. In a
`jax.shard_map` each tensor shard runs the scan above over its own V/t columns alone, giving
(m_i, s_i, u_i) and z_y,i (the target's logit if its column is there, else 0); the shards combine
over the axis

    m = pmax_i m_i,   s = psum_i s_i e^{m_i − m},   u = psum_i u_i e^{m_i − m},   z_y = psum_i z_y,i

and finish as above. The backward recomputes each shard's tiles against the global log Z and
E_p[z] (the formula above, restricted to its columns), sums dh over the tensor axis and the
shard's dW [D, V/t] over the row axes. When W's rows D are split over `fsdp` (one of the row
axes), each shard gathers its columns over fsdp and reduce-scatters dW back over it: W is never
gathered along the vocabulary and its gradient comes out split like W. Without such a mesh (or for "pallas") one program covers the vocabulary.

**Pallas** (`impl="pallas"`): the forward as one kernel (jax.experimental.pallas) and the
backward as two, split as in flash attention's backward: one accumulates dh per row block over
the vocabulary tiles, the other dW per vocabulary tile over the row blocks (each recomputes its
tiles' logits). On TPU (Mosaic) the grids are (row blocks, vocab tiles) / (vocab tiles, row
blocks) with the accumulated axis innermost and sequential and the running sums kept in the
resident output blocks; on GPU (Triton) the grid is the outer axis alone and each program loops
over the inner one itself (hidden size and tiles padded to powers of two, as Triton's blocks
need). Only [128, 512] logits blocks exist at a time, in registers / VMEM, never in HBM. The
kernels run on GPU and TPU backends only; `interpret=True` runs them in Pallas's interpreter
(any backend, for tests).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

IMPLS = ("chunked", "vocab_tiled", "pallas")
DEFAULT_TILE = 4096       # vocabulary columns per tile (XLA path)
DEFAULT_ROW_BLOCK = 2048  # rows per block: a tile's logits are ≤ 2048 × 4096 float32 (32 MiB)
PALLAS_ROWS = 128         # rows per Pallas program / block
PALLAS_TILE = 512         # vocabulary columns per Pallas tile


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """Static parameters of the fused head (hashable: a `custom_vjp` non-differentiable argument).

    temperature: τ dividing the (soft-capped) logits; logit_softcap: c in z = c·tanh(a/c), or
    None; dtype: the matmul's input dtype name (the model's compute dtype; float32 accumulation);
    tile: vocabulary columns per tile; row_block: rows per block; impl: "vocab_tiled" or
    "pallas" (the implementation of both passes); interpret: run the Pallas kernels interpreted.
    """

    temperature: float = 1.0
    logit_softcap: Optional[float] = None
    dtype: str = "float32"
    tile: int = DEFAULT_TILE
    row_block: int = DEFAULT_ROW_BLOCK
    impl: str = "vocab_tiled"
    interpret: bool = False


def check_impl(impl: str, *, interpret: bool = False, backend: Optional[str] = None) -> None:
    """Raises ValueError unless `impl` is one of IMPLS and runs here: "pallas" needs a GPU or TPU
    backend (`backend`, default `jax.default_backend()`) unless `interpret`."""
    if impl not in IMPLS:
        raise ValueError(f"logprob_impl must be one of {IMPLS}, got {impl!r}")
    if impl == "pallas" and not interpret:
        backend = backend or jax.default_backend()
        if backend not in ("gpu", "cuda", "rocm", "tpu"):
            raise ValueError(f"logprob_impl 'pallas' needs a GPU or TPU backend, this one is "
                             f"{backend!r}; use 'vocab_tiled' (the same computation in XLA) here")


def _static_float(x, name: str) -> Optional[float]:
    if x is None:
        return None
    if isinstance(x, jax.core.Tracer):
        raise ValueError(f"the vocab-tiled head needs a static (Python) {name}, got a traced value")
    return float(x)


# ----------------------------------------------------------------------------- tile math
def _tile_logits(h, wt, spec: HeadSpec):
    """h [r, D], wt [D, n] -> (a, z) [r, n] float32: pre-activations a = h·W and logits z."""
    dt = jnp.dtype(spec.dtype)
    a = jnp.dot(h.astype(dt), wt.astype(dt), preferred_element_type=jnp.float32)
    z = a if spec.logit_softcap is None else spec.logit_softcap * jnp.tanh(a / spec.logit_softcap)
    return a, z / spec.temperature


def _online_update(carry, z, cols, fresh, tg):
    """One tile of the online log-sum-exp. carry (m, s, u, zy) [r] each; z [r, n] logits; cols
    [n] their vocabulary indices; fresh [n] or [r, n]: columns counted here (not padding, not
    seen in an earlier tile); tg [r] targets, or None: zy is left as is (taken separately)."""
    m, s, u, zy = carry
    zf = jnp.where(fresh, z, -jnp.inf)
    m_new = jnp.maximum(m, jnp.max(zf, axis=-1))
    scale = jnp.exp(m - m_new)
    e = jnp.exp(zf - m_new[:, None])  # 0 on columns not counted here
    s = s * scale + jnp.sum(e, axis=-1)
    u = u * scale + jnp.sum(e * z, axis=-1)
    if tg is not None:
        hit = (cols[None, :] == tg[:, None]) & fresh
        zy = zy + jnp.sum(jnp.where(hit, z, 0.0), axis=-1)
    return m_new, s, u, zy


def _init_carry(r):
    return (jnp.full((r,), -jnp.inf, jnp.float32), jnp.zeros((r,), jnp.float32),
            jnp.zeros((r,), jnp.float32), jnp.zeros((r,), jnp.float32))


def _finish(m, s, u, zy):
    """(logp, entropy, log Z, E_p[z]) [r] from the final carry."""
    lse = m + jnp.log(s)
    ez = u / s
    return zy - lse, lse - ez, lse, ez


def _tiles(v: int, tile: int):
    """(tile width, number of tiles): tiles of min(tile, V) columns; the last one starts at
    V − tile (overlapping its predecessor, whose columns it does not count again)."""
    n = min(tile, v)
    return n, -(-v // n)


def _tile_start(j, v, n):
    first = j * n                         # the first column this tile counts
    return jnp.minimum(first, v - n), first


def _rows_partials(h, w, spec: HeadSpec):
    """The online log-sum-exp of one row block over all of w's columns: h [r, D], w [D, V] ->
    (m, s, u) [r] each (module doc)."""
    v = w.shape[1]
    n, num = _tiles(v, spec.tile)

    def body(carry, j):
        start, first = _tile_start(j, v, n)
        wt = jax.lax.dynamic_slice_in_dim(w, start, n, axis=1)
        _, z = _tile_logits(h, wt, spec)
        cols = start + jnp.arange(n)
        return _online_update(carry, z, cols, cols >= first, None), None

    m, s, u, _ = jax.lax.scan(body, _init_carry(h.shape[0]), jnp.arange(num))[0]
    return m, s, u


def _target_logit(h, w, tg, spec: HeadSpec):
    """z_y [r]: the logit of column tg of w (h [r, D], w [D, V], tg [r] in [0, V)), from that
    column alone (one [r, D] gather, no pass over the tiles)."""
    dt = jnp.dtype(spec.dtype)
    a_y = jnp.einsum("rd,dr->r", h.astype(dt), jnp.take(w, tg, axis=1).astype(dt),
                     preferred_element_type=jnp.float32)
    z_y = a_y if spec.logit_softcap is None else spec.logit_softcap * jnp.tanh(
        a_y / spec.logit_softcap)
    return z_y / spec.temperature


def _rows_forward(h, w, tg, spec: HeadSpec):
    """XLA forward of one row block: h [r, D], w [D, V], tg [r] -> (logp, H, log Z, E_p[z])."""
    return _finish(*_rows_partials(h, w, spec), _target_logit(h, w, tg, spec))


def _tile_grad(h, wt, cols, valid, tg, lse, ez, g_lp, g_ent, spec: HeadSpec):
    """Cotangent of one tile's pre-activations a = h·W (module doc): h [r, D], wt [D, n] in the
    compute dtype; cols [n] vocabulary indices; valid [n] or [r, n] columns counted in this tile;
    tg, lse (log Z), ez (E_p[z]), g_lp, g_ent [r]. Returns g_a [r, n] in the compute dtype."""
    a, z = _tile_logits(h, wt, spec)
    p = jnp.exp(z - lse[:, None])
    onehot = (cols[None, :] == tg[:, None]).astype(jnp.float32)
    gz = g_lp[:, None] * (onehot - p) - g_ent[:, None] * p * (z - ez[:, None])
    gz = jnp.where(valid, gz, 0.0) / spec.temperature
    if spec.logit_softcap is not None:
        gz = gz * (1.0 - jnp.square(jnp.tanh(a / spec.logit_softcap)))
    return gz.astype(spec.dtype)


def _rows_backward(h, w, tg, lse, ez, g_lp, g_ent, dw, spec: HeadSpec):
    """XLA backward of one row block: returns (dh [r, D] float32, dw [D, V] float32 += this
    block's contribution)."""
    v = w.shape[1]
    n, num = _tiles(v, spec.tile)
    hc = h.astype(spec.dtype)

    def body(carry, j):
        dh, dw = carry
        start, first = _tile_start(j, v, n)
        wt = jax.lax.dynamic_slice_in_dim(w, start, n, axis=1).astype(spec.dtype)
        cols = start + jnp.arange(n)
        ga = _tile_grad(hc, wt, cols, (cols >= first)[None, :], tg, lse, ez, g_lp, g_ent, spec)
        dh = dh + jnp.dot(ga, wt.T, preferred_element_type=jnp.float32)
        dwt = jnp.dot(hc.T, ga, preferred_element_type=jnp.float32)
        dw = jax.lax.dynamic_update_slice_in_dim(
            dw, jax.lax.dynamic_slice_in_dim(dw, start, n, axis=1) + dwt, start, axis=1)
        return (dh, dw), None

    dh0 = jnp.zeros(h.shape, jnp.float32)
    (dh, dw), _ = jax.lax.scan(body, (dh0, dw), jnp.arange(num))
    return dh, dw


def _blocked(x, r: int, nb: int):
    """[N, ...] -> [nb, r, ...], zero-padded at the end."""
    pad = nb * r - x.shape[0]
    x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
    return x.reshape((nb, r) + x.shape[1:])


def _block_rows(n_rows: int, spec: HeadSpec):
    r = max(1, min(spec.row_block, n_rows))
    return r, -(-n_rows // r)


def _map_rows(fn, spec: HeadSpec, *xs):
    """fn applied to blocks of spec.row_block rows of the [N, ...] arrays xs (a scan over the
    blocks, the last one zero-padded); fn returns a tuple of [r] arrays; returns them [N]."""
    n_rows = xs[0].shape[0]
    r, nb = _block_rows(n_rows, spec)
    if nb == 1:
        return fn(*xs)
    blocked = tuple(_blocked(x, r, nb) for x in xs)
    _, outs = jax.lax.scan(lambda c, x: (c, fn(*x)), None, blocked)
    return tuple(o.reshape(-1)[:n_rows] for o in outs)


def _forward(h, w, tg, spec: HeadSpec):
    """(logp, H, log Z, E_p[z]) [N] for h [N, D], w [D, V], tg [N]."""
    if spec.impl == "pallas":
        return pallas_forward(h, w, tg, spec)
    w = w.astype(spec.dtype)  # once, not per row block
    return _map_rows(lambda hb, tb: _rows_forward(hb, w, tb, spec), spec, h, tg)


def _backward(h, w, tg, lse, ez, g_lp, g_ent, spec: HeadSpec):
    """XLA backward over all rows: (dh [N, D], dw [D, V]) float32 for h [N, D], w [D, V] in the
    compute dtype, tg, lse, ez, g_lp, g_ent [N] (a target outside [0, V) has no column here)."""
    n_rows = h.shape[0]
    r, nb = _block_rows(n_rows, spec)
    dw = jnp.zeros(w.shape, jnp.float32)
    if nb == 1:
        return _rows_backward(h, w, tg, lse, ez, g_lp, g_ent, dw, spec)
    xs = tuple(_blocked(x, r, nb) for x in (h, tg, lse, ez, g_lp, g_ent))

    def body(dw, x):
        dh, dw = _rows_backward(x[0], w, *x[1:], dw, spec)
        return dw, dh

    dw, dh = jax.lax.scan(body, dw, xs)
    return dh.reshape(-1, h.shape[1])[:n_rows], dw


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _head(h, w, tg, spec):
    logp, ent, _, _ = _forward(h, w, tg, spec)
    return logp, ent


def _head_fwd(h, w, tg, spec):
    logp, ent, lse, ez = _forward(h, w, tg, spec)
    return (logp, ent), (h, w, tg, lse, ez)


def _head_bwd(spec, res, g):
    h, w, tg, lse, ez = res
    # the backward recomputes the tiles: keep XLA from merging them with the forward's (which
    # would keep every tile's logits alive from the forward to the backward)
    h, w = jax.lax.optimization_barrier((h, w))
    g_lp, g_ent = (x.astype(jnp.float32) for x in g)
    if spec.impl == "pallas":
        dh, dw = pallas_backward(h, w, tg, lse, ez, g_lp, g_ent, spec)
        return dh.astype(h.dtype), dw.astype(w.dtype), None
    w_dtype = w.dtype
    dh, dw = _backward(h, w.astype(spec.dtype), tg, lse, ez, g_lp, g_ent, spec)
    return dh.astype(h.dtype), dw.astype(w_dtype), None


_head.defvjp(_head_fwd, _head_bwd)


# ----------------------------------------------------------------------------- vocabulary-parallel
@dataclasses.dataclass(frozen=True)
class VocabParallel:
    """How the vocab-tiled head splits over a device mesh (hashable: a `custom_vjp`
    non-differentiable argument).

    mesh: the `jax.sharding.Mesh` (or the abstract mesh of a `jax.set_mesh` context); axis: the
    mesh axis splitting the vocabulary (W's columns, V / mesh.shape[axis] per shard); rows: the
    mesh axes splitting the rows (h, targets) in mesh order, or () when every device holds all
    rows; hidden_axis: one of `rows` that also splits W's rows D (as fully sharded data
    parallelism places the head: each shard gathers its columns over it and reduce-scatters dW
    back over it, so dW comes out split like W), or None.
    """

    mesh: Any
    axis: str
    rows: tuple
    hidden_axis: Optional[str] = None

    @property
    def row_spec(self):
        return self.rows if self.rows else None


def vocab_parallel(mesh, n_rows: int, vocab: int, axis: str = "tensor", hidden: int = 0,
                   hidden_axis: str = "fsdp") -> Optional[VocabParallel]:
    """The VocabParallel layout of an [N, D] × [D, V] head on `mesh`, or None (the one-program
    path) when there is no mesh, it has no `axis` larger than 1, or V does not divide by it (a
    head the mesh does not split along the vocabulary). The rows split over every other mesh
    axis larger than 1 when N divides by their product, else they are replicated; W's rows D
    (`hidden`, 0: unknown) over `hidden_axis` when that is one of the row axes and divides D."""
    if mesh is None or getattr(mesh, "empty", False) or axis not in mesh.shape:
        return None
    t = int(mesh.shape[axis])
    if t == 1 or vocab % t:
        return None
    rows = tuple(a for a in mesh.axis_names if a != axis and int(mesh.shape[a]) > 1)
    shards = 1
    for a in rows:
        shards *= int(mesh.shape[a])
    if n_rows % shards:
        rows = ()
    split_d = hidden_axis in rows and hidden > 0 and hidden % int(mesh.shape[hidden_axis]) == 0
    return VocabParallel(mesh=mesh, axis=axis, rows=rows,
                         hidden_axis=hidden_axis if split_d else None)


def _shard_forward(h, w, tg, spec: HeadSpec, layout: VocabParallel):
    """One shard's forward: h [n, D] its rows, w [D, V_s] its vocabulary slice (columns
    i·V_s .. (i+1)·V_s − 1 on shard i of layout.axis), tg [n] global ids. The shard's online
    log-sum-exp (m_i, s_i, u_i) and its target logit (0 unless it owns the target's column)
    combine over the axis:

        m = max_i m_i,   s = Σ_i s_i e^{m_i − m},   u = Σ_i u_i e^{m_i − m},   z_y = Σ_i z_y,i

    then log Z, log p(y), H and E_p[z] as in `_finish`. Returns them [n], equal on every shard."""
    ax = layout.axis
    w = _gather_hidden(w, layout)
    vs = w.shape[1]
    idx = tg - jax.lax.axis_index(ax) * vs
    own = (idx >= 0) & (idx < vs)
    w = w.astype(spec.dtype)

    def rows(hb, ib, ob):
        m, s, u = _rows_partials(hb, w, spec)
        zy = jnp.where(ob, _target_logit(hb, w, jnp.clip(ib, 0, vs - 1), spec), 0.0)
        return m, s, u, zy

    m, s, u, zy = _map_rows(rows, spec, h, idx, own)
    m_all = jax.lax.pmax(m, ax)
    scale = jnp.exp(m - m_all)
    s, u, zy = jax.lax.psum((s * scale, u * scale, zy), ax)
    return _finish(m_all, s, u, zy)


def _shard_backward(h, w, tg, lse, ez, g_lp, g_ent, spec: HeadSpec, layout: VocabParallel):
    """One shard's backward with the global log Z and E_p[z]: its tiles' cotangents (module doc)
    against its own columns (targets shifted into its column range: another shard's target has
    no column here). dh sums over the vocabulary shards, dW over the row shards (reduce-scattered
    over layout.hidden_axis); returns (dh [n, D], dW [D, V_s] or [D / fsdp, V_s]) float32."""
    w = _gather_hidden(w, layout)
    vs = w.shape[1]
    shifted = tg - jax.lax.axis_index(layout.axis) * vs
    dh, dw = _backward(h, w.astype(spec.dtype), shifted, lse, ez, g_lp, g_ent, spec)
    dh = jax.lax.psum(dh, layout.axis)
    if layout.hidden_axis is not None:
        dw = jax.lax.psum_scatter(dw, layout.hidden_axis, scatter_dimension=0, tiled=True)
    rest = tuple(a for a in layout.rows if a != layout.hidden_axis)
    if rest:
        dw = jax.lax.psum(dw, rest)
    return dh, dw


def _gather_hidden(w, layout: VocabParallel):
    """A shard's [D / fsdp, V_s] block of W -> its [D, V_s] columns (all-gather over fsdp)."""
    if layout.hidden_axis is None:
        return w
    return jax.lax.all_gather(w, layout.hidden_axis, axis=0, tiled=True)


def _vp_map(fn, layout: VocabParallel, n_vec_in: int, out_specs):
    rows = layout.row_spec
    in_specs = (P(rows, None), P(layout.hidden_axis, layout.axis)) + (P(rows),) * n_vec_in
    # collectives are placed by hand and the function is never differentiated (its custom_vjp
    # gives the backward), so no replication tracking is needed
    return jax.shard_map(fn, mesh=layout.mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _head_vp(h, w, tg, spec, layout):
    return _head_vp_fwd(h, w, tg, spec, layout)[0]


def _head_vp_fwd(h, w, tg, spec, layout):
    fwd = _vp_map(functools.partial(_shard_forward, spec=spec, layout=layout), layout, 1,
                  (P(layout.row_spec),) * 4)
    logp, ent, lse, ez = fwd(h, w, tg)
    return (logp, ent), (h, w, tg, lse, ez)


def _head_vp_bwd(spec, layout, res, g):
    h, w, tg, lse, ez = res
    h, w = jax.lax.optimization_barrier((h, w))  # as in _head_bwd
    g_lp, g_ent = (x.astype(jnp.float32) for x in g)
    bwd = _vp_map(functools.partial(_shard_backward, spec=spec, layout=layout), layout, 5,
                  (P(layout.row_spec, None), P(layout.hidden_axis, layout.axis)))
    dh, dw = bwd(h, w, tg, lse, ez, g_lp, g_ent)
    return dh.astype(h.dtype), dw.astype(w.dtype), None


_head_vp.defvjp(_head_vp_fwd, _head_vp_bwd)


def head_logprobs_entropy(h, w, targets, *, temperature=1.0, logit_softcap=None,
                          dtype=jnp.float32, tile: Optional[int] = None,
                          row_block: Optional[int] = None, impl: str = "vocab_tiled",
                          interpret: bool = False, mesh=None, vocab_axis: str = "tensor"):
    """(log p(target) [N], entropy [N]) float32 of softmax(softcap(h·W) / τ), vocab-tiled.

    Args:
      h: [N, D] hidden states (one row per scored position).
      w: [D, V] LM head kernel.
      targets: int [N] token ids in [0, V).
      temperature: static τ > 0; logit_softcap: static c > 0 or None (module doc).
      dtype: the matmul inputs' dtype (float32 accumulation).
      tile: vocabulary columns per tile (V need not be a multiple; default DEFAULT_TILE);
        row_block: rows per block (default DEFAULT_ROW_BLOCK). The Pallas kernel uses its own
        blocks (PALLAS_ROWS × PALLAS_TILE).
      impl: "vocab_tiled" (XLA) or "pallas" (Pallas kernels, forward and backward; GPU / TPU,
        or interpret=True anywhere).
      mesh: the device mesh the head is sharded on (a `jax.sharding.Mesh`), or None: the mesh
        of an enclosing `jax.set_mesh`, if any. When its `vocab_axis` is larger than 1 and
        divides V, impl="vocab_tiled" runs vocabulary-parallel (`vocab_parallel`, module doc):
        each shard scans the tiles of its own V / tensor columns, the shards combine their
        log-sum-exp statistics with pmax / psum over the axis, and dW comes out split along the
        vocabulary like W. Otherwise (and for "pallas") one program over the whole vocabulary.
      vocab_axis: the mesh axis that splits W's columns.
    Differentiable in h and w (`jax.custom_vjp`, module doc); the logits are never stored.
    """
    chex_ok = h.ndim == 2 and w.ndim == 2 and targets.shape == h.shape[:1] \
        and h.shape[1] == w.shape[0]
    if not chex_ok:
        raise ValueError(f"head_logprobs_entropy: need h [N, D], w [D, V], targets [N]; got "
                         f"{h.shape}, {w.shape}, {targets.shape}")
    if impl not in ("vocab_tiled", "pallas"):
        raise ValueError(f"head_logprobs_entropy: impl must be 'vocab_tiled' or 'pallas', got {impl!r}")
    check_impl(impl, interpret=interpret)
    temperature = _static_float(temperature, "temperature")
    logit_softcap = _static_float(logit_softcap, "logit_softcap")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if logit_softcap is not None and not logit_softcap > 0:
        raise ValueError(f"logit_softcap must be > 0 or None, got {logit_softcap}")
    tile = DEFAULT_TILE if tile is None else tile
    row_block = DEFAULT_ROW_BLOCK if row_block is None else row_block
    if tile < 1 or row_block < 1:
        raise ValueError(f"tile and row_block must be >= 1, got {tile}, {row_block}")
    spec = HeadSpec(temperature=temperature, logit_softcap=logit_softcap,
                    dtype=jnp.dtype(dtype).name, tile=int(tile), row_block=int(row_block),
                    impl=impl, interpret=bool(interpret))
    if impl == "vocab_tiled":
        if mesh is None:
            mesh = jax.sharding.get_abstract_mesh()
        layout = vocab_parallel(mesh, h.shape[0], w.shape[1], vocab_axis, hidden=w.shape[0])
        if layout is not None:
            return _head_vp(h, w, targets.astype(jnp.int32), spec, layout)
    return _head(h, w, targets.astype(jnp.int32), spec)


# ----------------------------------------------------------------------------- Pallas
def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _pad_axis(x, axis: int, size: int):
    pad = size - x.shape[axis]
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths)


def _grid_kernel(h_ref, w_ref, tg_ref, m_ref, s_ref, u_ref, zy_ref, *, spec, v, bv):
    """TPU layout: program (i, j) folds vocab tile j into row block i's running statistics,
    which live in the output blocks (resident across the sequential j axis)."""
    from jax.experimental import pallas as pl

    j = pl.program_id(1)

    @pl.when(j == 0)
    def _():
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
        s_ref[...] = jnp.zeros(s_ref.shape, jnp.float32)
        u_ref[...] = jnp.zeros(u_ref.shape, jnp.float32)
        zy_ref[...] = jnp.zeros(zy_ref.shape, jnp.float32)

    _, z = _tile_logits(h_ref[...], w_ref[...], spec)
    cols = j * bv + jax.lax.broadcasted_iota(jnp.int32, (1, bv), 1)
    fresh = cols < v
    carry = (m_ref[...][:, 0], s_ref[...][:, 0], u_ref[...][:, 0], zy_ref[...][:, 0])
    m, s, u, zy = _online_update(carry, z, cols[0], fresh, tg_ref[...][:, 0])
    m_ref[...], s_ref[...], u_ref[...], zy_ref[...] = (x[:, None] for x in (m, s, u, zy))


def _loop_kernel(h_ref, w_ref, tg_ref, m_ref, s_ref, u_ref, zy_ref, *, spec, v, bv, num):
    """GPU layout: program i loops over the vocabulary tiles of row block i."""
    from jax.experimental import pallas as pl

    h = h_ref[...]
    tg = tg_ref[...]

    def body(j, carry):
        wt = w_ref[:, pl.ds(pl.multiple_of(j * bv, bv), bv)]
        _, z = _tile_logits(h, wt, spec)
        cols = j * bv + jax.lax.broadcasted_iota(jnp.int32, (bv,), 0)
        return _online_update(carry, z, cols, (cols < v)[None, :], tg)

    m, s, u, zy = jax.lax.fori_loop(0, num, body, _init_carry(h.shape[0]))
    m_ref[...], s_ref[...], u_ref[...], zy_ref[...] = m, s, u, zy


def pallas_forward(h, w, tg, spec: HeadSpec, *, layout: Optional[str] = None):
    """(logp, H, log Z, E_p[z]) [N] by the Pallas kernel. layout: "grid" (TPU: 2-D grid, vocab
    innermost) or "loop" (GPU: 1-D grid, vocab loop in the program); default by backend."""
    from jax.experimental import pallas as pl

    layout = _pallas_layout(layout)
    n_rows, d = h.shape
    v = w.shape[1]
    bm, bv = PALLAS_ROWS, PALLAS_TILE
    bm = min(bm, _next_pow2(n_rows))
    bv = min(bv, _next_pow2(v))
    rows = -(-n_rows // bm) * bm
    num = -(-v // bv)
    hp = _pad_axis(h, 0, rows)
    tgp = _pad_axis(tg.astype(jnp.int32), 0, rows)
    wp = _pad_axis(w, 1, num * bv)
    out_dt = jax.ShapeDtypeStruct
    if layout == "grid":
        outs = [out_dt((rows, 1), jnp.float32)] * 4
        row_spec = pl.BlockSpec((bm, 1), lambda i, j: (i, 0))
        res = pl.pallas_call(
            functools.partial(_grid_kernel, spec=spec, v=v, bv=bv),
            grid=(rows // bm, num),
            in_specs=[pl.BlockSpec((bm, d), lambda i, j: (i, 0)),
                      pl.BlockSpec((d, bv), lambda i, j: (0, j)), row_spec],
            out_specs=[row_spec] * 4, out_shape=outs, interpret=spec.interpret,
        )(hp, wp, tgp[:, None])
        res = [x[:, 0] for x in res]
    elif layout == "loop":
        dp = _next_pow2(d)  # Triton blocks: power-of-two sizes (zero columns add nothing to h·W)
        hp, wp = _pad_axis(hp, 1, dp), _pad_axis(wp, 0, dp)
        row_spec = pl.BlockSpec((bm,), lambda i: (i,))
        res = pl.pallas_call(
            functools.partial(_loop_kernel, spec=spec, v=v, bv=bv, num=num),
            grid=(rows // bm,),
            in_specs=[pl.BlockSpec((bm, dp), lambda i: (i, 0)),
                      pl.BlockSpec((dp, num * bv), lambda i: (0, 0)), row_spec],
            out_specs=[row_spec] * 4, out_shape=[out_dt((rows,), jnp.float32)] * 4,
            interpret=spec.interpret,
        )(hp, wp, tgp)
    else:
        raise ValueError(f"pallas_forward: layout must be 'grid' or 'loop', got {layout!r}")
    return tuple(x[:n_rows] for x in _finish(*res))


def _pallas_layout(layout: Optional[str]) -> str:
    layout = layout or ("grid" if jax.default_backend() == "tpu" else "loop")
    if layout not in ("grid", "loop"):
        raise ValueError(f"pallas: layout must be 'grid' or 'loop', got {layout!r}")
    return layout


def _dh_grid_kernel(h_ref, w_ref, tg_ref, lse_ref, ez_ref, glp_ref, gent_ref, dh_ref, *, spec,
                    v, bv):
    """TPU layout, dh: program (i, j) adds vocab tile j's g_a Wᵀ to row block i's dh."""
    from jax.experimental import pallas as pl

    j = pl.program_id(1)

    @pl.when(j == 0)
    def _():
        dh_ref[...] = jnp.zeros(dh_ref.shape, jnp.float32)

    wt = w_ref[...].astype(spec.dtype)
    cols = j * bv + jax.lax.broadcasted_iota(jnp.int32, (1, bv), 1)
    vec = [r[...][:, 0] for r in (tg_ref, lse_ref, ez_ref, glp_ref, gent_ref)]
    ga = _tile_grad(h_ref[...].astype(spec.dtype), wt, cols[0], cols < v, *vec, spec)
    dh_ref[...] += jnp.dot(ga, wt.T, preferred_element_type=jnp.float32)


def _dw_grid_kernel(h_ref, w_ref, tg_ref, lse_ref, ez_ref, glp_ref, gent_ref, dw_ref, *, spec,
                    v, bv):
    """TPU layout, dW: program (j, i) adds row block i's hᵀ g_a to vocab tile j's dW."""
    from jax.experimental import pallas as pl

    j, i = pl.program_id(0), pl.program_id(1)

    @pl.when(i == 0)
    def _():
        dw_ref[...] = jnp.zeros(dw_ref.shape, jnp.float32)

    h = h_ref[...].astype(spec.dtype)
    cols = j * bv + jax.lax.broadcasted_iota(jnp.int32, (1, bv), 1)
    vec = [r[...][:, 0] for r in (tg_ref, lse_ref, ez_ref, glp_ref, gent_ref)]
    ga = _tile_grad(h, w_ref[...].astype(spec.dtype), cols[0], cols < v, *vec, spec)
    dw_ref[...] += jnp.dot(h.T, ga, preferred_element_type=jnp.float32)


def _dh_loop_kernel(h_ref, w_ref, tg_ref, lse_ref, ez_ref, glp_ref, gent_ref, dh_ref, *, spec,
                    v, bv, num):
    """GPU layout, dh: program i loops over the vocabulary tiles of row block i."""
    from jax.experimental import pallas as pl

    h = h_ref[...].astype(spec.dtype)
    vec = [r[...] for r in (tg_ref, lse_ref, ez_ref, glp_ref, gent_ref)]

    def body(j, dh):
        wt = w_ref[:, pl.ds(pl.multiple_of(j * bv, bv), bv)].astype(spec.dtype)
        cols = j * bv + jax.lax.broadcasted_iota(jnp.int32, (bv,), 0)
        ga = _tile_grad(h, wt, cols, (cols < v)[None, :], *vec, spec)
        return dh + jnp.dot(ga, wt.T, preferred_element_type=jnp.float32)

    dh_ref[...] = jax.lax.fori_loop(0, num, body, jnp.zeros(dh_ref.shape, jnp.float32))


def _dw_loop_kernel(h_ref, w_ref, tg_ref, lse_ref, ez_ref, glp_ref, gent_ref, dw_ref, *, spec,
                    v, bv, bm, nr):
    """GPU layout, dW: program j loops over the row blocks for vocab tile j."""
    from jax.experimental import pallas as pl

    j = pl.program_id(0)
    wt = w_ref[...].astype(spec.dtype)
    cols = j * bv + jax.lax.broadcasted_iota(jnp.int32, (bv,), 0)

    def body(i, dw):
        rows = pl.ds(pl.multiple_of(i * bm, bm), bm)
        h = h_ref[rows, :].astype(spec.dtype)
        vec = [r[rows] for r in (tg_ref, lse_ref, ez_ref, glp_ref, gent_ref)]
        ga = _tile_grad(h, wt, cols, (cols < v)[None, :], *vec, spec)
        return dw + jnp.dot(h.T, ga, preferred_element_type=jnp.float32)

    dw_ref[...] = jax.lax.fori_loop(0, nr, body, jnp.zeros(dw_ref.shape, jnp.float32))


def pallas_backward(h, w, tg, lse, ez, g_lp, g_ent, spec: HeadSpec, *,
                    layout: Optional[str] = None):
    """(dh [N, D], dW [D, V]) float32 by two Pallas kernels (the flash-attention split: one
    accumulates dh per row block over the vocabulary tiles, the other dW per vocabulary tile over
    the row blocks; each recomputes its tiles' logits). Arguments as `_head_bwd`'s."""
    from jax.experimental import pallas as pl

    layout = _pallas_layout(layout)
    n_rows, d = h.shape
    v = w.shape[1]
    bm = min(PALLAS_ROWS, _next_pow2(n_rows))
    bv = min(PALLAS_TILE, _next_pow2(v))
    rows, num = -(-n_rows // bm) * bm, -(-v // bv)
    nr = rows // bm
    hp = _pad_axis(h, 0, rows)
    wp = _pad_axis(w, 1, num * bv)
    # padded rows have zero cotangents: they add nothing to dW
    vecs = [_pad_axis(x, 0, rows) for x in (tg.astype(jnp.int32), lse, ez, g_lp, g_ent)]
    f32 = jnp.float32
    if layout == "grid":
        vecs = [x[:, None] for x in vecs]
        kw = dict(spec=spec, v=v, bv=bv)
        row = lambda f: pl.BlockSpec((bm, 1), f)  # noqa: E731
        dh = pl.pallas_call(
            functools.partial(_dh_grid_kernel, **kw), grid=(nr, num),
            in_specs=[pl.BlockSpec((bm, d), lambda i, j: (i, 0)),
                      pl.BlockSpec((d, bv), lambda i, j: (0, j))] + [row(lambda i, j: (i, 0))] * 5,
            out_specs=pl.BlockSpec((bm, d), lambda i, j: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((rows, d), f32), interpret=spec.interpret,
        )(hp, wp, *vecs)
        dw = pl.pallas_call(
            functools.partial(_dw_grid_kernel, **kw), grid=(num, nr),
            in_specs=[pl.BlockSpec((bm, d), lambda j, i: (i, 0)),
                      pl.BlockSpec((d, bv), lambda j, i: (0, j))] + [row(lambda j, i: (i, 0))] * 5,
            out_specs=pl.BlockSpec((d, bv), lambda j, i: (0, j)),
            out_shape=jax.ShapeDtypeStruct((d, num * bv), f32), interpret=spec.interpret,
        )(hp, wp, *vecs)
    else:
        dp = _next_pow2(d)
        hp, wp = _pad_axis(hp, 1, dp), _pad_axis(wp, 0, dp)
        dh = pl.pallas_call(
            functools.partial(_dh_loop_kernel, spec=spec, v=v, bv=bv, num=num), grid=(nr,),
            in_specs=[pl.BlockSpec((bm, dp), lambda i: (i, 0)),
                      pl.BlockSpec((dp, num * bv), lambda i: (0, 0))]
                     + [pl.BlockSpec((bm,), lambda i: (i,))] * 5,
            out_specs=pl.BlockSpec((bm, dp), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((rows, dp), f32), interpret=spec.interpret,
        )(hp, wp, *vecs)
        dw = pl.pallas_call(
            functools.partial(_dw_loop_kernel, spec=spec, v=v, bv=bv, bm=bm, nr=nr),
            grid=(num,),
            in_specs=[pl.BlockSpec((rows, dp), lambda j: (0, 0)),
                      pl.BlockSpec((dp, bv), lambda j: (0, j))]
                     + [pl.BlockSpec((rows,), lambda j: (0,))] * 5,
            out_specs=pl.BlockSpec((dp, bv), lambda j: (0, j)),
            out_shape=jax.ShapeDtypeStruct((dp, num * bv), f32), interpret=spec.interpret,
        )(hp, wp, *vecs)
    return dh[:n_rows, :d], dw[:d, :v]
