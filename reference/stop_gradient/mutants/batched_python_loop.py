# jaxgrade-mutant: fails=vectorization
# Bug: batched_td_update loops in Python over the batch: right numbers, not vectorized.
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
    return -0.5 * ((jax.lax.stop_gradient(target) - v_tm1) ** 2)


# %%
td_update = jax.grad(td_loss_with_stop_gradient)


# %%
def batched_td_update(theta, s_tm1s, r_ts, s_ts):
    """(P,), (B, P), (B,), (B, P) -> (P,): the mean of td_update over the batch."""
    updates = [td_update(theta, s_tm1s[b], r_ts[b], s_ts[b]) for b in range(s_tm1s.shape[0])]
    return jnp.mean(jnp.stack(updates), axis=0)
