# jaxgrade-mutant: fails=numerics
# Bug: tree_l2_norm returns the sum of squares, without the square root (jittable, wrong numbers).
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp


# %%
def count_leaves(tree):
    """The number of leaves as jax.tree_util counts them: None and empty containers have none."""
    return len(jax.tree.leaves(tree))


# %%
def tree_shapes(tree):
    """The same structure with each array leaf replaced by its shape, a tuple of ints."""
    return jax.tree.map(jnp.shape, tree)


# %%
def scale_tree(tree, c):
    """Every leaf times c, with JAX's type promotion (an int leaf times a float c is a float)."""
    return jax.tree.map(lambda leaf: jnp.asarray(leaf) * c, tree)


# %%
def sgd_update(params, grads, lr):
    """params - lr * grads, leaf by leaf; params and grads have the same structure."""
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)


# %%
def tree_l2_norm(tree):
    """The sum of squares (the square root is missing)."""
    squares = [jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(tree)]
    return sum(squares, jnp.float32(0.0))
