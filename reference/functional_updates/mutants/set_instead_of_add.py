# jaxgrade-mutant: fails=numerics
# Bug: increment_at writes x.at[idx].set(x[idx] + amount): x[idx] is read once, so a repeated index gets only one of its amounts.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax.numpy as jnp


# %%
def set_first(x, value):
    """A new array equal to x with element 0 set to value (x's dtype); x unchanged."""
    return jnp.asarray(x).at[0].set(value)


# %%
def increment_at(x, idx, amount):
    """x[idx] + amount, written back with set (wrong for repeated indices)."""
    x = jnp.asarray(x)
    return x.at[idx].set(x[idx] + amount)


# %%
def clamp_negatives(x):
    """Negative entries replaced by 0, the others unchanged; the shape never depends on the values."""
    x = jnp.asarray(x)
    return jnp.where(x < 0, jnp.zeros_like(x), x)
