# jaxgrade-mutant: fails=parallelism
# Bug: jax.vmap instead of jax.pmap (vmap binds the psum axis name too): right numbers, all on one device.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.
# Graded with 4 devices: the grader starts JAX with --xla_force_host_platform_device_count=4.

# %%
import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

import jax
import jax.numpy as jnp
from jax import lax


# %%
def convolve(x, w):
    """Given: 1-D convolution of `x` (N,) with a window `w` (3,); result (N-2,)."""
    output = []
    for i in range(1, len(x) - 1):
        output.append(jnp.dot(x[i - 1 : i + 2], w))
    return jnp.array(output)


# %%
parallel_convolve = jax.vmap(convolve)


# %%
def _device_mean(x):
    """On one device: the mean of its row, averaged with every other device's by a psum."""
    return lax.psum(jnp.mean(x), axis_name="devices") / lax.psum(1, axis_name="devices")


global_mean = jax.vmap(_device_mean, axis_name="devices")
