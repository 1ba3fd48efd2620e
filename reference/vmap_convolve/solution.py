# Reference solution for `vmap_convolve` (staff only).
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
    return jax.vmap(convolve)(xs, ws)


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
    return xs[:, :-2] * ws[:, 0:1] + xs[:, 1:-1] * ws[:, 1:2] + xs[:, 2:] * ws[:, 2:3]
