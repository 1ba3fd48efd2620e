# jaxgrade-mutant: fails=vectorization
# Bug: per_example_grads loops over the examples in Python (jitted, right numbers, not vectorized over B).
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp


# %%
def loss_fn(params, x, y):
    """Given: the squared error of a linear model on one example (or the mean over a batch)."""
    return jnp.mean((jnp.dot(x, params) - y) ** 2)


# %%
@jax.jit
def per_example_grads(params, xs, ys):
    """(P,), (B, P), (B,) -> (B, P): one gradient per example."""
    return jnp.stack([jax.grad(loss_fn)(params, xs[b], ys[b]) for b in range(xs.shape[0])])


# %%
def batch_grad(params, xs, ys):
    """The gradient of the mean loss over the batch: loss_fn already averages over a batch."""
    return jax.grad(loss_fn)(params, xs, ys)
