# jaxgrade-mutant: fails=numerics
# Bug: per_example_grads maps over params too (in_axes=0 for every argument): raises unless B == P, wrong then.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp


# %%
def loss_fn(params, x, y):
    """Given: the squared error of a linear model on one example (or the mean over a batch)."""
    return jnp.mean((jnp.dot(x, params) - y) ** 2)


# %%
per_example_grads = jax.jit(jax.vmap(jax.grad(loss_fn)))


# %%
def batch_grad(params, xs, ys):
    """The gradient of the mean loss over the batch: loss_fn already averages over a batch."""
    return jax.grad(loss_fn)(params, xs, ys)
