"""Writes the ``prng_keys`` submission corpus.

Every notebook is the starter handed out (``assignments/prng_keys/prng_keys.ipynb``) with its
three TODO cells filled in the way a student might fill them, a line saying who submitted it,
and sometimes a cell of the student's own experiments. The notebooks are named for their
behaviour; ``expected.yaml`` (written by hand, beside this script) gives the verdict each one
must get, category by category.

Run from anywhere; the output is deterministic (new cells get ids derived from the file name
and the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/prng_keys/make_corpus.py
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import nbformat
from nbformat import v4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/corpus, for notebook_kit
import notebook_kit as kit  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
STARTER = REPO / "assignments" / "prng_keys" / "prng_keys.ipynb"
TODO_CELLS = {"init_mlp_params": "todo1", "sample_noise": "todo2", "dropout": "todo3"}

# ---------------------------------------------------------------------------------------------
# init_mlp_params

INIT_SPLIT_N = """\
def init_mlp_params(layer_widths, key):
    # one key per layer, all at once
    keys = random.split(key, len(layer_widths) - 1)
    params = []
    for k, n_in, n_out in zip(keys, layer_widths[:-1], layer_widths[1:]):
        params.append(
            dict(
                weights=random.normal(k, (n_in, n_out)) * jnp.sqrt(2 / n_in),
                biases=jnp.ones(shape=(n_out,)),
            )
        )
    return params"""

INIT_CHAIN = """\
def init_mlp_params(layer_widths, key):
    params = []
    for n_in, n_out in zip(layer_widths[:-1], layer_widths[1:]):
        key, subkey = random.split(key)  # subkey for this layer, key for the next split
        weights = random.normal(subkey, (n_in, n_out)) * jnp.sqrt(2 / n_in)
        biases = jnp.ones(shape=(n_out,))
        params.append({"weights": weights, "biases": biases})
    return params"""

INIT_FOLD_IN = """\
def init_mlp_params(layer_widths, key):
    # fold the layer index into the key: a different key for every layer, no splitting needed
    return [
        {
            "weights": random.normal(random.fold_in(key, i), (n_in, n_out)) * np.sqrt(2 / n_in),
            "biases": jnp.ones(n_out),
        }
        for i, (n_in, n_out) in enumerate(zip(layer_widths[:-1], layer_widths[1:]))
    ]"""

INIT_ONE_KEY = """\
def init_mlp_params(layer_widths, key):
    params = []
    for n_in, n_out in zip(layer_widths[:-1], layer_widths[1:]):
        params.append(
            dict(
                weights=random.normal(key, (n_in, n_out)) * jnp.sqrt(2 / n_in),
                biases=jnp.ones(shape=(n_out,)),
            )
        )
    return params"""

INIT_HARDCODED = """\
def init_mlp_params(layer_widths, key):
    key = random.PRNGKey(42)  # fixed seed so my results are reproducible
    params = []
    for n_in, n_out in zip(layer_widths[:-1], layer_widths[1:]):
        key, subkey = random.split(key)
        params.append(
            dict(weights=random.normal(subkey, (n_in, n_out)) * jnp.sqrt(2 / n_in), biases=jnp.ones(shape=(n_out,)))
        )
    return params"""

INIT_DRAWS_WITH_CARRY_KEY = """\
def init_mlp_params(layer_widths, key):
    params = []
    for n_in, n_out in zip(layer_widths[:-1], layer_widths[1:]):
        key, subkey = random.split(key)
        weights = random.normal(key, (n_in, n_out)) * jnp.sqrt(2 / n_in)  # draws with key, which is split again
        params.append({"weights": weights, "biases": jnp.ones(shape=(n_out,))})
    return params"""

# ---------------------------------------------------------------------------------------------
# sample_noise

NOISE_SPLIT_N = """\
def sample_noise(key, num_samples, shape):
    # key 0 goes back to the caller, the others draw one sample each
    keys = random.split(key, num_samples + 1)
    new_key, sample_keys = keys[0], keys[1:]
    samples = jax.vmap(lambda k: random.normal(k, shape))(sample_keys)
    return new_key, samples"""

NOISE_CHAIN = """\
def sample_noise(key, num_samples, shape):
    key, subkey = random.split(key)
    samples = random.normal(subkey, (num_samples, *shape))
    return key, samples"""

NOISE_FOLD_IN = """\
def sample_noise(key, num_samples, shape):
    new_key = random.fold_in(key, 0)
    samples = random.normal(random.fold_in(key, 1), (num_samples,) + tuple(shape))
    return new_key, samples"""

NOISE_PARENT_REUSED = """\
def sample_noise(key, num_samples, shape):
    new_key, subkey = random.split(key)
    samples = random.normal(key, (num_samples, *shape))
    return new_key, samples"""

NOISE_NEW_KEY_IS_INPUT = """\
def sample_noise(key, num_samples, shape):
    samples = random.normal(key, (num_samples, *shape))
    return key, samples"""

NOISE_RETURNS_INPUT_KEY = """\
def sample_noise(key, num_samples, shape):
    _, subkey = random.split(key)
    samples = random.normal(subkey, (num_samples, *shape))
    return key, samples  # the caller keeps its key"""

NOISE_ONE_KEY_FOR_ALL_SAMPLES = """\
def sample_noise(key, num_samples, shape):
    key, subkey = random.split(key)

    def one_sample(i):
        return random.normal(subkey, shape)

    samples = jax.vmap(one_sample)(jnp.arange(num_samples))
    return key, samples"""

# the seed tutorial's pattern, one sample at a time: `key, subkey = random.split(key)` in a loop
NOISE_PER_SAMPLE_LOOP = """\
def sample_noise(key, num_samples, shape):
    samples = []
    for i in range(num_samples):
        key, subkey = random.split(key)
        samples.append(random.normal(subkey, shape))
    return key, jnp.stack(samples)"""

NOISE_PER_SAMPLE_SPLIT_N = """\
def sample_noise(key, num_samples, shape):
    new_key, *sample_keys = random.split(key, num_samples + 1)
    samples = jnp.array([random.normal(k, shape) for k in sample_keys])
    return new_key, samples"""

NOISE_PARENT_REUSED_DEBUG_OFF = """\
def sample_noise(key, num_samples, shape):
    # the checker complained about this line, but the numbers look fine to me
    with jax.debug_key_reuse(False):
        new_key, subkey = random.split(key)
        samples = random.normal(key, (num_samples, *shape))
    return new_key, samples"""

NOISE_PARENT_REUSED_CLONE = """\
def sample_noise(key, num_samples, shape):
    draw_key = random.clone(key)  # a copy, so the checker does not mind
    new_key, subkey = random.split(key)
    samples = random.normal(draw_key, (num_samples, *shape))
    return new_key, samples"""

INIT_CARRY_KEY_CLONE = """\
def init_mlp_params(layer_widths, key):
    params = []
    for n_in, n_out in zip(layer_widths[:-1], layer_widths[1:]):
        key, subkey = random.split(key)
        weights = random.normal(random.clone(key), (n_in, n_out)) * jnp.sqrt(2 / n_in)
        params.append({"weights": weights, "biases": jnp.ones(shape=(n_out,))})
    return params"""

NOISE_NUMPY = """\
def sample_noise(key, num_samples, shape):
    new_key, _ = random.split(key)
    samples = np.random.normal(size=(num_samples, *shape)).astype(np.float32)
    return new_key, samples"""

# ---------------------------------------------------------------------------------------------
# dropout

DROP_BERNOULLI = """\
def dropout(key, x, rate):
    keep = random.bernoulli(key, 1.0 - rate, jnp.shape(x))
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))"""

DROP_UNIFORM_JIT = """\
from functools import partial


@partial(jax.jit, static_argnames="rate")
def dropout(key, x, rate):
    keep = random.uniform(key, x.shape) >= rate  # kept with probability 1 - rate
    return jnp.where(keep, x / (1 - rate), 0.0)"""

DROP_MULTIPLY_JITTED = """\
def _dropout(key, x, rate):
    mask = random.bernoulli(key, p=1 - rate, shape=x.shape)
    return x * mask / (1 - rate)


dropout = jax.jit(_dropout)  # rate is traced too"""

DROP_NUMPY = """\
def dropout(key, x, rate):
    keep = np.random.random(jnp.shape(x)) >= rate
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))"""

DROP_NO_RESCALE = """\
def dropout(key, x, rate):
    keep = random.bernoulli(key, 1.0 - rate, jnp.shape(x))
    return jnp.where(keep, x, 0.0)"""

DROP_KEEP_MASK_INVERTED = """\
def dropout(key, x, rate):
    mask = random.bernoulli(key, rate, jnp.shape(x))  # True where we keep
    return jnp.where(mask, x / (1 - rate), 0.0)"""

DROP_NUMPY_MASK = """\
def dropout(key, x, rate):
    keep = np.array(random.bernoulli(key, 1 - rate, jnp.shape(x)))  # numpy, so I can print it
    return jnp.where(keep, x / (1 - rate), 0.0)"""

# ---------------------------------------------------------------------------------------------
# the students' own experiments

MY_CHECKS = """\
key = random.key(2024)
key, k1, k2, k3 = random.split(key, 4)
params = init_mlp_params([784, 512, 256, 10], k1)
print([float(p["weights"].std()) for p in params])
print([float(jnp.sqrt(2 / n)) for n in (784, 512, 256)])
key, noise = sample_noise(key, 1000, (3,))
print(noise.mean(), noise.std())
y = dropout(k3, jnp.ones(10_000), 0.3)
print((y == 0).mean(), y.mean())"""

TRAINING_LOOP = """\
# how I would use them in a training loop
key = random.PRNGKey(0)
key, init_key = random.split(key)
params = init_mlp_params([8, 16, 1], init_key)
for step in range(3):
    key, noise = sample_noise(key, 4, (8,))
    key, drop_key = random.split(key)
    h = dropout(drop_key, jnp.tanh(noise @ params[0]["weights"] + params[0]["biases"]), 0.5)
    print(step, h.shape, float((h == 0).mean()))"""


def _id(name: str, i: int) -> str:
    return hashlib.sha1(f"{name}:{i}".encode()).hexdigest()[:8]


def student(
    name: str,
    who: str,
    *,
    init: str = INIT_CHAIN,
    noise: str = NOISE_CHAIN,
    drop: str = DROP_BERNOULLI,
    extra: tuple[str, ...] = (),
    tagged: bool = True,
) -> nbformat.NotebookNode:
    """The starter with its TODO cells filled in, a name line, and extra code cells at the end."""
    nb = nbformat.read(STARTER, as_version=4)
    fill = {TODO_CELLS["init_mlp_params"]: init, TODO_CELLS["sample_noise"]: noise, TODO_CELLS["dropout"]: drop}
    for cell in nb.cells:
        if cell.get("id") in fill:
            cell.source = fill[cell.id]
    name_cell = v4.new_markdown_cell(f"Submitted by: {who}")
    name_cell.id = _id(name, 0)
    nb.cells.insert(1, name_cell)
    for i, src in enumerate(extra, start=1):
        cell = v4.new_code_cell(src)
        cell.id = _id(name, i)
        nb.cells.append(cell)
    if not tagged:
        nb.metadata.pop("jaxgrade", None)
    nbformat.validate(nb)
    return nb


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}
    # three correct styles
    nbs["correct_split_n.ipynb"] = student(
        "correct_split_n", "A. Student", init=INIT_SPLIT_N, noise=NOISE_SPLIT_N, drop=DROP_UNIFORM_JIT, tagged=False
    )
    nbs["correct_split_chain.ipynb"] = student("correct_split_chain", "B. Student", extra=(MY_CHECKS, TRAINING_LOOP))
    nbs["correct_fold_in.ipynb"] = student(
        "correct_fold_in",
        "C. Student",
        init=INIT_FOLD_IN,
        noise=NOISE_FOLD_IN,
        drop=DROP_MULTIPLY_JITTED,
        extra=(MY_CHECKS,),
    )
    # the seed tutorial's way: a split per layer, one key per sample in a Python loop, bernoulli
    nbs["correct_tutorial.ipynb"] = student("correct_tutorial", "O. Student", noise=NOISE_PER_SAMPLE_LOOP)
    nbs["correct_tutorial_split_n_loop.ipynb"] = student(
        "correct_tutorial_split_n_loop", "P. Student", init=INIT_SPLIT_N, noise=NOISE_PER_SAMPLE_SPLIT_N
    )
    # the mutants of reference/prng_keys/mutants, as students write them
    nbs["one_key_every_layer.ipynb"] = student("one_key_every_layer", "D. Student", init=INIT_ONE_KEY)
    nbs["hardcoded_prngkey42.ipynb"] = student("hardcoded_prngkey42", "E. Student", init=INIT_HARDCODED)
    nbs["parent_key_reused.ipynb"] = student("parent_key_reused", "F. Student", noise=NOISE_PARENT_REUSED)
    nbs["numpy_random.ipynb"] = student("numpy_random", "G. Student", noise=NOISE_NUMPY, drop=DROP_NUMPY)
    nbs["new_key_is_input.ipynb"] = student("new_key_is_input", "H. Student", noise=NOISE_NEW_KEY_IS_INPUT)
    nbs["dropout_no_rescale.ipynb"] = student("dropout_no_rescale", "I. Student", drop=DROP_NO_RESCALE)
    # other typical mistakes
    nbs["samples_from_one_key.ipynb"] = student(
        "samples_from_one_key", "J. Student", noise=NOISE_ONE_KEY_FOR_ALL_SAMPLES
    )
    nbs["returns_input_key.ipynb"] = student("returns_input_key", "K. Student", noise=NOISE_RETURNS_INPUT_KEY)
    nbs["dropout_keep_mask_inverted.ipynb"] = student(
        "dropout_keep_mask_inverted", "L. Student", drop=DROP_KEEP_MASK_INVERTED
    )
    nbs["dropout_not_jittable.ipynb"] = student("dropout_not_jittable", "M. Student", drop=DROP_NUMPY_MASK)
    nbs["init_draws_with_carry_key.ipynb"] = student(
        "init_draws_with_carry_key", "N. Student", init=INIT_DRAWS_WITH_CARRY_KEY
    )
    # key reuse hidden from JAX's checker in the kernel: seen on the trusted side
    nbs["parent_key_reused_debug_off.ipynb"] = student(
        "parent_key_reused_debug_off", "Q. Student", noise=NOISE_PARENT_REUSED_DEBUG_OFF
    )
    nbs["parent_key_reused_clone.ipynb"] = student(
        "parent_key_reused_clone", "R. Student", noise=NOISE_PARENT_REUSED_CLONE, init=INIT_CARRY_KEY_CLONE
    )
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8")
    return nbs


if __name__ == "__main__":
    kit.write_corpus(HERE, corpus())
