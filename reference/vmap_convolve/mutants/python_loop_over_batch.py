# jaxgrade-mutant: fails=vectorization
# Bug: Python loop over the batch in batched, fast_batched and manually_vectorized_convolve.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp


# %%
def convolve(x, w):
    """Given: 1-D convolution of `x` (N,) with a window `w` (3,); result (N-2,)."""
    output = []
    for i in range(1, len(x) - 1):
        output.append(jnp.dot(x[i - 1 : i + 2], w))
    return jnp.array(output)


# %%
def batched_convolve(xs, ws):
    """(B, N), (B, 3) -> (B, N-2): row b is convolve(xs[b], ws[b])."""
    return jnp.stack([convolve(xs[b], ws[b]) for b in range(xs.shape[0])])


# %%
def batched_convolve_shared_w(xs, w):
    """(B, N), (3,) -> (B, N-2): the same window w for every row."""
    return jax.vmap(convolve, in_axes=(0, None))(xs, w)


# %%
def batched_convolve_axis1(xst, wst):
    """(N, B), (3, B) -> (N-2, B): the batch runs along axis 1, in and out."""
    return jax.vmap(convolve, in_axes=1, out_axes=1)(xst, wst)


# %%
fast_batched_convolve = jax.jit(batched_convolve)


# %%
def manually_vectorized_convolve(xs, ws):
    """(B, N), (B, 3) -> (B, N-2) with array operations over the whole batch, no vmap."""
    rows = []
    for b in range(xs.shape[0]):
        x, w = xs[b], ws[b]
        rows.append(x[:-2] * w[0] + x[1:-1] * w[1] + x[2:] * w[2])
    return jnp.stack(rows)
