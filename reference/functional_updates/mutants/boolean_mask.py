# jaxgrade-mutant: fails=jit
# Bug: clamp_negatives writes x.at[x < 0].set(0): right eagerly, NonConcreteBooleanIndexError under jit.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

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
    return x.at[x < 0].set(0.0)
