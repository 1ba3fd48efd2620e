# Reference solution for `autodiff` (staff only).
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp


# %%
def sum_squared_error(x, y):
    """Given: the sum of squared differences between x and y."""
    return jnp.sum((x - y) ** 2)


# %%
def grad_sse_wrt_x(x, y):
    """d sum_squared_error / dx, the same shape as x."""
    return jax.grad(sum_squared_error)(x, y)


# %%
def grad_sse_wrt_both(x, y):
    """The tuple (d/dx, d/dy)."""
    return jax.grad(sum_squared_error, argnums=(0, 1))(x, y)


# %%
def sse_value_and_grad(x, y):
    """The tuple (sum_squared_error(x, y), d/dx) from one forward and one backward pass."""
    return jax.value_and_grad(sum_squared_error)(x, y)


# %%
def squared_error_with_aux(x, y):
    """The loss and, as auxiliary data, the residual x - y."""
    return sum_squared_error(x, y), x - y


def sse_with_aux_grad(x, y):
    """The tuple (d/dx, x - y): the gradient of the loss, the auxiliary output passed through."""
    return jax.grad(squared_error_with_aux, has_aux=True)(x, y)


# %%
def model(theta, x):
    w, b = theta
    return w * x + b


def mse(theta, x, y):
    return jnp.mean((model(theta, x) - y) ** 2)


@jax.jit
def _update(theta, xs, ys, lr):
    return theta - lr * jax.grad(mse)(theta, xs, ys)


def fit_linear_regression(xs, ys, lr=0.1, steps=1000):
    """theta = [w, b] after `steps` gradient-descent steps on the mean squared error, from [1, 1]."""
    theta = jnp.array([1.0, 1.0])
    for _ in range(steps):
        theta = _update(theta, xs, ys, lr)
    return theta
