# jaxgrade-mutant: fails=jit
# Bug: g_traced counts with a Python `while i < n`: right for a Python int, TracerBoolConversionError for a traced n.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp


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
def f_jittable(x):
    """f elementwise, for scalars and arrays, with traced x: both branches, then select."""
    return jnp.where(x > 0, x, 2 * x)


# %%
g_static = jax.jit(g, static_argnames="n")


# %%
def g_traced(x, n):
    """x + n, counted in a Python loop (fails for a traced n)."""
    i = 0
    while i < n:
        i += 1
    return x + i


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
