# jaxgrade-mutant: fails=purity
# Bug: set_first assigns into its argument (x[0] = value) and returns it: right numbers, but the caller's array changes, a read-only one raises, and a tracer cannot be assigned to.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax.numpy as jnp


# %%
def set_first(x, value):
    """x itself, changed in place."""
    x[0] = value
    return x


# %%
def increment_at(x, idx, amount):
    """x plus amount at the integer indices idx; a repeated index gets every one of its amounts."""
    return jnp.asarray(x).at[idx].add(amount)


# %%
def clamp_negatives(x):
    """Negative entries replaced by 0, the others unchanged; the shape never depends on the values."""
    x = jnp.asarray(x)
    return jnp.where(x < 0, jnp.zeros_like(x), x)
