# An alternative solution for `prng_keys` (staff only): split one key per layer and one per
# sample up front (`random.split(key, n)`), and draw each sample in a Python loop, the way the
# tutorial's `[float(random.normal(k)) for k in keys]` does. `jaxgrade validate` requires full
# marks; the trusted compilation cache is warmed with it (the programs such loops compile).

# %%
import jax.numpy as jnp
from jax import random


# %%
def init_mlp_params(layer_widths, key):
    keys = random.split(key, len(layer_widths) - 1)  # one key per layer
    params = []
    for k, n_in, n_out in zip(keys, layer_widths[:-1], layer_widths[1:]):
        params.append(dict(weights=random.normal(k, (n_in, n_out)) * jnp.sqrt(2 / n_in), biases=jnp.ones(shape=(n_out,))))
    return params


# %%
def sample_noise(key, num_samples, shape):
    keys = random.split(key, num_samples + 1)  # keys[0] for the caller, one more per sample
    samples = jnp.stack([random.normal(k, shape) for k in keys[1:]])
    return keys[0], samples


# %%
def dropout(key, x, rate):
    keep = random.uniform(key, jnp.shape(x)) < 1 - rate
    return jnp.where(keep, x / (1 - rate), 0.0)
