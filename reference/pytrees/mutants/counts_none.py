# jaxgrade-mutant: fails=structure
# Bug: count_leaves counts None as a leaf (is_leaf=lambda x: x is None).
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import jax
import jax.numpy as jnp


# %%
def count_leaves(tree):
    """Counts None as a leaf (wrong: None is a node without children)."""
    return len(jax.tree.leaves(tree, is_leaf=lambda x: x is None))


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
    """The square root of the sum of squares of every entry of every leaf (0.0 for no leaves)."""
    squares = [jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(tree)]
    return jnp.sqrt(sum(squares, jnp.float32(0.0)))
