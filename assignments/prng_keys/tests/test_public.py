"""Public tests for `prng_keys`: small fixed inputs, a few checks per function.

Run them with `jaxgrade check prng_keys.ipynb`. The hidden tests use other keys and sizes, and
also check the statistics of your numbers (scale, mean, independence), that the same key gives
the same result and different keys different results, that legacy keys work too, that
`new_key` is fresh, and that `dropout` is pure and works under `jax.jit`.

A typed key (`jax.random.key(seed)`) is sent to your notebook as its raw key data; the key data
of `jax.random.key(seed)` is `[0, seed]`.
"""

import numpy as np
import pytest

from grader.testing import CheckFailure, PRNGKeyData, assert_close, check_jit


def typed_key(seed: int) -> PRNGKeyData:
    """What `jax.random.key(seed)` is, as data."""
    return PRNGKeyData("threefry2x32", np.array([0, seed], dtype=np.uint32))


WIDTHS = [3, 4, 2]
X = np.arange(1, 21, dtype=np.float32).reshape(4, 5)


@pytest.mark.category("structure")
@pytest.mark.points(1)
def test_init_mlp_params_structure(submission):
    """init_mlp_params([3, 4, 2], key) gives two layers {'weights': (n_in, n_out), 'biases': (n_out,)}."""
    params = submission.init_mlp_params(WIDTHS, typed_key(0))
    assert type(params) is list, f"expected a list of layers, got {type(params).__name__}"
    assert len(params) == 2, f"expected 2 layers for widths {WIDTHS}, got {len(params)}"
    for i, (layer, n_in, n_out) in enumerate(zip(params, WIDTHS[:-1], WIDTHS[1:])):
        assert type(layer) is dict, f"layer {i}: expected a dict, got {type(layer).__name__}"
        assert set(layer) == {"weights", "biases"}, f"layer {i}: keys {sorted(layer)}, expected ['biases', 'weights']"
        assert np.shape(layer["weights"]) == (n_in, n_out), f"layer {i} weights: shape {np.shape(layer['weights'])}"
        assert np.shape(layer["biases"]) == (n_out,), f"layer {i} biases: shape {np.shape(layer['biases'])}"


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_init_mlp_params_biases_are_ones(submission):
    """The biases of every layer are ones."""
    params = submission.init_mlp_params(WIDTHS, typed_key(1))
    assert_close([p["biases"] for p in params], [np.ones(4, np.float32), np.ones(2, np.float32)], name="biases")


@pytest.mark.category("prng")
@pytest.mark.points(1)
def test_init_mlp_params_no_key_reuse(submission):
    """init_mlp_params uses every key once (JAX's key-reuse checker is on)."""
    submission.call("init_mlp_params", [4, 4, 4, 1], typed_key(2), key_reuse=True)


@pytest.mark.category("structure")
@pytest.mark.points(1)
def test_sample_noise_shapes(submission):
    """sample_noise(key, 5, (2,)) returns (new_key, samples) with samples of shape (5, 2)."""
    result = submission.sample_noise(typed_key(3), 5, (2,))
    assert isinstance(result, (tuple, list)) and len(result) == 2, "expected a pair (new_key, samples)"
    new_key, samples = result
    assert isinstance(new_key, PRNGKeyData), "new_key should be a PRNG key (the same kind as the key given)"
    assert isinstance(samples, np.ndarray) and samples.shape == (5, 2), f"samples: shape {np.shape(samples)}"


@pytest.mark.category("prng")
@pytest.mark.points(1)
def test_sample_noise_returns_a_new_key(submission):
    """The returned new_key is not the key that was passed in."""
    key = typed_key(4)
    new_key, _ = submission.call("sample_noise", key, 3, (), key_reuse=True).value
    if isinstance(new_key, PRNGKeyData) and np.array_equal(new_key.data, key.data):
        raise CheckFailure(
            "sample_noise returned the key it was given",
            "Split it: `new_key, subkey = jax.random.split(key)`, sample with subkey, return new_key.",
        )


@pytest.mark.category("numerics")
@pytest.mark.points(1)
def test_dropout_zero_or_scaled(submission):
    """dropout(key, x, 0.5) keeps x's shape; every entry is 0 or 2 * x."""
    y = submission.dropout(typed_key(5), X, 0.5)
    assert isinstance(y, np.ndarray) and y.shape == X.shape, f"expected shape {X.shape}, got {np.shape(y)}"
    kept = y != 0
    assert_close(y[kept], 2 * X[kept], name="the kept entries (x / (1 - rate))")


@pytest.mark.category("jit")
@pytest.mark.points(1)
def test_dropout_under_jit(submission):
    """dropout works under jax.jit with rate static (a legacy key, as jax.random.PRNGKey(6)), and
    the compiled function keeps or zeroes each entry: x / (1 - rate), or 0."""

    masks = []

    def kept_or_zeroed(y, key, x):
        assert np.shape(y) == x.shape, f"jax.jit(dropout): expected shape {x.shape}, got {np.shape(y)}"
        kept = np.asarray(y) != 0
        assert_close(np.asarray(y)[kept], 2 * x[kept], name="jax.jit(dropout): the kept entries (x / (1 - rate))")
        masks.append(kept)

    exp = check_jit(
        submission, "dropout", (np.array([0, 6], dtype=np.uint32), X), static={"rate": 0.5}, accept=kept_or_zeroed
    )
    other, _ = submission.evaluate("dropout", exp.module, np.array([0, 7], dtype=np.uint32), X)
    # 20 entries: two keys give the same mask with probability 2^-20
    assert not np.array_equal(np.asarray(other) != 0, masks[0]), (
        "jax.jit(dropout) gave the same mask for the keys PRNGKey(6) and PRNGKey(7): its randomness was fixed "
        "when it was traced (numpy.random?); draw the mask with jax.random and the key argument"
    )
