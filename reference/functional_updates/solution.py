# Reference solution for `functional_updates` (staff only).
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.
# Each function converts its input with `jnp.asarray` (a NumPy array, read-only or not, or a JAX
# array, or a tracer under jit) and builds a new array: the caller's array is never written to.

# %%
import jax.numpy as jnp


# %%
def set_first(x, value):
    """A new array equal to x with element 0 set to value (x's dtype); x unchanged."""
    return jnp.asarray(x).at[0].set(value)


# %%
def increment_at(x, idx, amount):
    """x plus amount at the integer indices idx; a repeated index gets every one of its amounts."""
    return jnp.asarray(x).at[idx].add(amount)


# %%
def clamp_negatives(x):
    """Negative entries replaced by 0, the others unchanged; the shape never depends on the values."""
    x = jnp.asarray(x)
    return jnp.where(x < 0, jnp.zeros_like(x), x)
