# jaxgrade-mutant: fails=structure
# Bug: tree_shapes, scale_tree and sgd_update return a flat list of leaves (right numbers, in jax.tree.leaves order; the structure is lost).
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
    """A flat list of the leaves' shapes (the structure is lost)."""
    return [jnp.shape(leaf) for leaf in jax.tree.leaves(tree)]


# %%
def scale_tree(tree, c):
    """A flat list of the scaled leaves (the structure is lost)."""
    return [jnp.asarray(leaf) * c for leaf in jax.tree.leaves(tree)]


# %%
def sgd_update(params, grads, lr):
    """A flat list of the updated leaves (the structure is lost)."""
    return [p - lr * g for p, g in zip(jax.tree.leaves(params), jax.tree.leaves(grads))]


# %%
def tree_l2_norm(tree):
    """The square root of the sum of squares of every entry of every leaf (0.0 for no leaves)."""
    squares = [jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(tree)]
    return jnp.sqrt(sum(squares, jnp.float32(0.0)))
