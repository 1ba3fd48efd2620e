# jaxgrade-mutant: fails=jit
# Bug: set_first and increment_at copy x with np.array and assign in place (np.add.at): right numbers, pure, but NumPy cannot trace (TracerArrayConversionError under jit).
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax.numpy as jnp
import numpy as np


# %%
def set_first(x, value):
    """A NumPy copy of x, changed in place."""
    y = np.array(x)
    y[0] = value
    return y


# %%
def increment_at(x, idx, amount):
    """A NumPy copy of x; np.add.at accumulates repeated indices."""
    y = np.array(x)
    np.add.at(y, idx, amount)
    return y


# %%
def clamp_negatives(x):
    """Negative entries replaced by 0, the others unchanged; the shape never depends on the values."""
    x = jnp.asarray(x)
    return jnp.where(x < 0, jnp.zeros_like(x), x)
