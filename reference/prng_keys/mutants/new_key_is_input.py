# jaxgrade-mutant: fails=prng
# Bug: sample_noise samples with the key it was given and returns that same key as new_key:
# the caller's next draw repeats these samples.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax.numpy as jnp
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
    samples = random.normal(key, (num_samples, *tuple(shape)))
    return key, samples  # BUG: the returned key was already used for sampling


# %%
def dropout(key, x, rate):
    """Zero each entry of x with probability `rate`, scale the kept ones by 1/(1-rate).

    Written with jax.numpy only, so it works under jax.jit with `rate` static
    (`static_argnames="rate"`, how the grader compiles it) and also with `rate` traced."""
    keep = random.bernoulli(key, 1.0 - rate, jnp.shape(x))
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))
