# jaxgrade-mutant: fails=purity
# Bug: sample_noise and dropout draw with numpy.random (hidden global state) instead of jax.random.
# Declared fails=purity: the curriculum lists 'no numpy.random' under purity, and the purity tests
# see it twice (the same key twice gives different output eagerly; under jit the numpy draw is
# baked in as a constant, so different keys give the same output). It also loses prng points
# (same key, same output) and jit points (compiled result disagrees with the eager one).
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax.numpy as jnp
import numpy as np
from jax import random


# %%
def init_mlp_params(layer_widths, key):
    """One dict per layer, {'weights': (n_in, n_out), 'biases': (n_out,)}; a fresh key per layer."""
    params = []
    for n_in, n_out in zip(layer_widths[:-1], layer_widths[1:]):  # noqa: RUF007 - as in the tutorial
        key, w_key = random.split(key)  # w_key is used once; key only to split again
        params.append(
            {
                "weights": random.normal(w_key, (n_in, n_out)) * jnp.sqrt(2.0 / n_in),
                "biases": jnp.ones((n_out,)),
            }
        )
    return params


# %%
def sample_noise(key, num_samples, shape):
    """(new_key, samples): samples (num_samples, *shape) i.i.d. N(0, 1); new_key never sampled with."""
    new_key, _ = random.split(key)
    samples = np.random.normal(size=(num_samples, *tuple(shape))).astype(np.float32)  # BUG: numpy's global RNG
    return new_key, samples


# %%
def dropout(key, x, rate):
    """Zero each entry of x with probability `rate`, scale the kept ones by 1/(1-rate).

    Written with jax.numpy only, so it works under jax.jit with `rate` static
    (`static_argnames="rate"`, how the grader compiles it) and also with `rate` traced."""
    keep = np.random.random(jnp.shape(x)) >= rate  # BUG: numpy's global RNG, the key is ignored
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))
