# jaxgrade-mutant: fails=jit
# Bug: f_jittable = jax.jit(f, static_argnums=0): x is static, so arrays (unhashable) and tracers fail.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp
from jax import lax


# %%
def f(x):
    """Given: x if x > 0, else 2 * x (a Python `if`: fails under jit)."""
    if x > 0:
        return x
    else:
        return 2 * x


def g(x, n):
    """Given: x + n, counted up in a Python `while` loop (n must be a concrete int)."""
    i = 0
    while i < n:
        i += 1
    return x + i


def selu(x, alpha=1.67, lambda_=1.05):
    """Given: the scaled exponential linear unit."""
    return lambda_ * jnp.where(x > 0, x, alpha * jnp.exp(x) - alpha)


# %%
f_jittable = jax.jit(f, static_argnums=0)


# %%
g_static = jax.jit(g, static_argnames="n")


# %%
def g_traced(x, n):
    """x + n with a lax loop, so n may be traced."""
    return lax.fori_loop(0, n, lambda i, acc: acc + 1, x)


# %%
selu_jit = jax.jit(selu)


# %%
@jax.jit
def _add_one(x):
    return x + 1


def g_loop_cached(x, n):
    """x + n by calling one jitted body n times: compiled once per shape and dtype."""
    for _ in range(n):
        x = _add_one(x)
    return x
