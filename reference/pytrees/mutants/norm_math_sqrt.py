# jaxgrade-mutant: fails=jit
# Bug: tree_l2_norm takes math.sqrt of the sum: right numbers eagerly (a Python float), ConcretizationTypeError under jit.
# Executed as a notebook by `jaxgrade validate`: a new cell starts at each `# %%` line.

# %%
import math

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
    """math.sqrt asks for a concrete float: fails on a tracer."""
    squares = [jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(tree)]
    return math.sqrt(sum(squares, jnp.float32(0.0)))
