# An alternative solution for `prng_keys` (staff only): split as you go
# (`key, subkey = random.split(key)`) for every sample, collected in a list, and fold the layer
# index into the key for every layer. `jaxgrade validate` requires full marks; the trusted
# compilation cache is warmed with it (the programs such loops compile).

# %%
import jax
import jax.numpy as jnp
from jax import random


# %%
def init_mlp_params(layer_widths, key):
    params = []
    for i, (n_in, n_out) in enumerate(zip(layer_widths[:-1], layer_widths[1:])):  # noqa: RUF007 - as in the tutorial
        weights = random.normal(random.fold_in(key, i), (n_in, n_out)) * jnp.sqrt(2 / n_in)
        params.append({"weights": weights, "biases": jnp.ones(n_out)})
    return params


# %%
def sample_noise(key, num_samples, shape):
    samples = []
    for _ in range(num_samples):
        key, subkey = random.split(key)
        samples.append(random.normal(subkey, shape))
    key, new_key = random.split(key)
    return new_key, jnp.array(samples)


# %%
@jax.jit
def _dropout(key, x, rate):
    mask = random.bernoulli(key, 1 - rate, x.shape)
    return x * mask / (1 - rate)


def dropout(key, x, rate):
    return _dropout(key, x, rate)
