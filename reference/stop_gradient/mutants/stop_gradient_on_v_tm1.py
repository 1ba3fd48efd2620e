# jaxgrade-mutant: fails=numerics
# Bug: stop_gradient wraps v_tm1 instead of the target: the gradient flows through the wrong term.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp


# %%
def value_fn(theta, s):
    """Given: a linear value function, v(s) = theta . s."""
    return jnp.dot(theta, s)


def td_loss(theta, s_tm1, r_t, s_t):
    """Given: the TD loss of one transition (s_tm1, r_t, s_t), without stop_gradient."""
    v_tm1 = value_fn(theta, s_tm1)
    target = r_t + value_fn(theta, s_t)
    return -0.5 * ((target - v_tm1) ** 2)


# %%
def td_loss_with_stop_gradient(theta, s_tm1, r_t, s_t):
    """The value of td_loss, with the target r_t + v(s_t) held constant for differentiation."""
    v_tm1 = value_fn(theta, s_tm1)
    target = r_t + value_fn(theta, s_t)
    return -0.5 * ((target - jax.lax.stop_gradient(v_tm1)) ** 2)


# %%
td_update = jax.grad(td_loss_with_stop_gradient)


# %%
def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    """(P,), (B, P), (B,), (B, P) -> (P,): the mean of td_update over the batch."""
    per_example = jax.vmap(td_update, in_axes=(None, 0, 0, 0))(theta, s_tm1s, r_ts, s_ts)
    return jnp.mean(per_example, axis=0)
