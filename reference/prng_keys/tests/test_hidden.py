"""Hidden tests for `prng_keys` (curriculum §3).

Keys and inputs come from the `rng` fixture (seeded per grading run and test), never the public
ones. Typed keys cross into the sandbox as `PRNGKeyData` and become `jax.random.key`s there;
legacy keys are plain uint32[2] arrays. JAX's key-reuse checker only sees typed keys.

Statistics never flake: every threshold below comes with a bound on the probability that a
correct solution fails it, and the sample sizes are large enough that every mutant misses its
threshold by a wide margin. Per grading run, a correct solution fails with probability at most
  init scale   5 layers x (mean 3.8e-8 + chi-square 3.0e-8)       3.4e-7
  uncorrelated 3 pairs of layers x 3.0e-8                          0.9e-7
  sample_noise 3 sign-pair frequencies x 1e-8 + 2 x (3.8e-8 + 3.0e-8)  1.7e-7
  dropout      3 rates x 3 frequencies x 1e-8                      0.9e-7
  exact coincidences of independent draws (equal outputs for different keys, repeated rows)
               below 2^-60 together
  key reuse seen in the returned data: a returned array taken for a draw of a key it was not
               drawn with (|cos| > 1 - 5e-7, arrays of >= 8 values): below 1e-20 per comparison,
               a few thousand comparisons, below 1e-16 together
  total                                                            < 7e-7 < 1e-6.
Tail bounds used:
  - normal:    P(|N(0,1)| > 5.5) = 3.8e-8.
  - chi-square (Laurent & Massart 2000, Lemma 1), X ~ chi2_k, x = 18 (e^-18 = 1.5e-8):
               P(X - k >= 2 sqrt(k x) + 2 x) <= e^-x  and  P(k - X >= 2 sqrt(k x)) <= e^-x.
  - Hoeffding: m i.i.d. Bernoulli(p), frequency f: P(|f - p| >= t) <= 2 exp(-2 m t^2).
  - sphere:    a, b independent with b isotropic in R^m (i.i.d. N(0, s^2) entries): the cosine
               <a,b>/(|a||b|) is the first coordinate of a uniform unit vector, and
               P(|cos| >= t) <= 2 exp(-m t^2 / 2).

`dropout` is compiled with `rate` static (`static_argnames="rate"`), key and x traced; a legacy
key is used there because jax.export takes arrays, not typed keys.

Points: structure 5, prng 13, numerics 10, jit 3, purity 4 (35; with the public tests' 7, 42).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from grader.testing import CheckFailure, PRNGKeyData, StudentRaised, assert_close, check_jit, check_pure, quoted

FUNCTIONS = ["init_mlp_params", "sample_noise", "dropout"]
IMPL = "threefry2x32"

# ---- thresholds (see the module docstring for the bounds)
Z = 5.5  # |standardized mean| < Z: P(fail) <= 3.8e-8
CHI2_X = 18.0  # chi-square deviation parameter: P(fail) <= 2 * 1.5e-8 = 3e-8
HOEFFDING_LOG = math.log(2 / 1e-8)  # t = sqrt(log(2/1e-8) / (2m)): 2 exp(-2 m t^2) = 1e-8
SPHERE_T = 6.0  # |cos| < 6/sqrt(m): P(fail) <= 2 exp(-18) = 3e-8


# --------------------------------------------------------------------------- helpers


def typed_key(rng: np.random.Generator) -> PRNGKeyData:
    """A random typed threefry key (any two uint32 words are valid key data)."""
    return PRNGKeyData(IMPL, rng.integers(0, 2**32, size=2, dtype=np.uint32))


def legacy_key(rng: np.random.Generator) -> np.ndarray:
    """A legacy key: what `jax.random.PRNGKey(seed)` gives, a uint32 array of shape (2,)."""
    return rng.integers(0, 2**32, size=2, dtype=np.uint32)


def key_words(key) -> np.ndarray | None:
    """The raw uint32[2] data of a returned key (typed or legacy), or None if it is not a key."""
    if isinstance(key, PRNGKeyData):
        return np.asarray(key.data)
    if isinstance(key, np.ndarray) and key.dtype == np.uint32 and key.shape == (2,):
        return key
    return None


def hoeffding_t(m: int) -> float:
    """Deviation t of a frequency over m i.i.d. Bernoulli trials with P(|f-p| >= t) <= 1e-8."""
    return math.sqrt(HOEFFDING_LOG / (2 * m))


def check_chi2(sum_sq: float, k: int, what: str) -> None:
    """sum_sq should be a chi-square with k degrees of freedom (sum of k squared N(0,1))."""
    hi = k + 2 * math.sqrt(k * CHI2_X) + 2 * CHI2_X  # P(X >= hi) <= 1.5e-8
    lo = k - 2 * math.sqrt(k * CHI2_X)  # P(X <= lo) <= 1.5e-8
    if not lo < sum_sq < hi:
        ratio = math.sqrt(sum_sq / k)
        raise CheckFailure(
            f"{what}: the spread is {ratio:.3g} times the expected one (acceptable: "
            f"{math.sqrt(max(lo, 0) / k):.3g} to {math.sqrt(hi / k):.3g} for {k} values)"
        )


def check_mean_zero(total: float, k: int, what: str) -> None:
    """total should be a sum of k i.i.d. N(0,1): |total|/sqrt(k) < Z."""
    if abs(total) / math.sqrt(k) >= Z:
        raise CheckFailure(f"{what}: the mean is {total / k:.4g}, too far from 0 for {k} values")


def no_key_reuse(submission, name: str, *args):
    """Call with typed keys under JAX's key-reuse checker; a KeyReuseError fails with its line."""
    try:
        return submission.call(name, *args, key_reuse=True).value
    except StudentRaised as exc:
        if exc.ename != "KeyReuseError":
            raise
        where = exc.location.describe() if exc.location else ""
        raise CheckFailure(
            f"`{name}` used a PRNG key twice (KeyReuseError{' at ' + where if where else ''})",
            "Every key may be used once: to draw numbers, or to be split. Split first "
            "(`key, sub = jax.random.split(key)` or `jax.random.split(key, n)`) and give each draw "
            "its own key; never draw with a key after splitting it.",
        ) from None


# ---- key reuse seen in the returned data (trusted side)
#
# JAX's key-reuse checker runs in the student's kernel, where `jax.debug_key_reuse(False)` or
# `jax.random.clone` hides a reuse from it. The grader knows the key it hands over, so it can
# derive on its own side the keys a solution derives from it, draw with each the way solutions
# draw, and recognise which key drew each returned array:
#   - family: the given key, its splits `split(key, m)[j]` (m in a few likely counts, every j) and
#     `fold_in(key, i)`, and, along two-way splits, the same again a few levels deep (the chain
#     `key, sub = split(key)`, once per layer or per sample);
#   - an array was drawn by a key when it is a multiple of `normal(key, its shape)` (any scale:
#     `* sqrt(2/n_in)`; |cos| > 1 - 5e-7, which independent draws of >= 8 values reach with
#     probability below 1e-20 per comparison, a few thousand comparisons per test).
# A reuse is then visible as: a key that drew an array is also a split ancestor of another key
# seen in the result (a key that drew and was split: the parent reused after `split`), or one
# key drew two arrays. fold_in does not use up a key (JAX's checker agrees), so keys derived by
# fold_in are not counted as a use of their parent. Legitimate solutions (split chains, split(n),
# fold_in) draw only with leaves of this family and never show either pattern.
# dropout returns one masked array drawn from one key: keys split off and not used leave no
# trace in it, so there is nothing to see on the trusted side; only the kernel's checker judges it.

REUSE_FOLD_INS = 4  # fold_in(key, i) for i < 4
REUSE_DEPTH = 3  # levels of two-way splits followed


@functools.lru_cache(maxsize=4)
def _reuse_family(given: bytes, split_counts: tuple[int, ...]) -> dict[bytes, tuple[bytes | None, str, str]]:
    """words of every derived key -> (parent's words, 'split' | 'fold_in' | 'given', description)."""
    import jax

    words = np.frombuffer(given, np.uint32)

    def wrap(w):
        return jax.random.wrap_key_data(np.asarray(w, np.uint32), impl=IMPL)

    def data(k) -> np.ndarray:
        return np.asarray(jax.random.key_data(k), np.uint32)

    family: dict[bytes, tuple[bytes | None, str, str]] = {words.tobytes(): (None, "given", "key")}
    level = [(words, "key")]
    for depth in range(REUSE_DEPTH + 1):
        nxt = []
        for w, desc in level:
            k = wrap(w)
            for m in split_counts:
                children = data(jax.random.split(k, m))
                for j, c in enumerate(children):
                    family.setdefault(c.tobytes(), (w.tobytes(), "split", f"split({desc}, {m})[{j}]"))
                    if m == 2 and depth < REUSE_DEPTH:
                        nxt.append((c, f"split({desc})[{j}]"))
            for i in range(REUSE_FOLD_INS):
                c = data(jax.random.fold_in(k, i))
                family.setdefault(c.tobytes(), (w.tobytes(), "fold_in", f"fold_in({desc}, {i})"))
        level = nxt
    return family


def _drawn_by(family, arrays: dict[str, np.ndarray]) -> dict[str, bytes]:
    """label -> words of the family key whose normal(key, shape) the array is a multiple of."""
    import jax

    keys = [np.frombuffer(w, np.uint32) for w in family]
    typed = jax.random.wrap_key_data(np.stack(keys), impl=IMPL)
    found: dict[str, bytes] = {}
    for label, a in arrays.items():
        a = np.asarray(a, np.float64).ravel()
        if a.size < 8 or not np.all(np.isfinite(a)) or not np.any(a):
            continue
        shape = np.shape(arrays[label])
        draws = np.asarray(
            jax.vmap(lambda k, shape=shape: jax.random.normal(k, shape, np.float32))(typed),
            np.float64,
        ).reshape(len(keys), -1)
        cos = draws @ a / (np.linalg.norm(draws, axis=1) * np.linalg.norm(a))
        hits = np.flatnonzero(np.abs(cos) > 1 - 5e-7)
        if hits.size:
            found[label] = keys[hits[0]].tobytes()
    return found


def check_no_reuse_in_data(name: str, key: PRNGKeyData, arrays: dict[str, np.ndarray], seen_keys, split_counts) -> None:
    """Fail when the returned data shows a key the grader handed over (or one derived from it)
    used to draw and also split, or used to draw twice (see the comment above)."""
    family = _reuse_family(np.asarray(key.data, np.uint32).tobytes(), tuple(split_counts))
    drawn = _drawn_by(family, arrays)
    hint = (
        "Every key may be used once: to draw numbers, or to be split. After "
        "`key, subkey = jax.random.split(key)`, draw with subkey and never again with the key you split "
        "(not through `jax.random.clone`, not with the key-reuse checker switched off)."
    )

    def which(w: bytes) -> str:
        desc = family[w][2]
        return "the key it was given" if desc == "key" else f"`{desc}` (derived from the key it was given)"

    by_key: dict[bytes, list[str]] = {}
    for label, w in drawn.items():
        by_key.setdefault(w, []).append(label)
    for w, labels in by_key.items():
        if len(labels) > 1:
            raise CheckFailure(
                f"`{name}` drew {', '.join(labels)} with one key, {which(w)}: the key was used twice",
                hint,
            )
    # keys that were split: the split ancestors of every key seen in the result
    split_parents: set[bytes] = set()
    for w in [*drawn.values(), *(s.tobytes() for s in seen_keys if s is not None)]:
        while w in family and family[w][0] is not None:
            parent, how, _ = family[w]
            if how == "split":
                split_parents.add(parent)
            w = parent
    for label, w in drawn.items():
        if w in split_parents:
            raise CheckFailure(
                f"`{name}` drew {label} with {which(w)}, a key it also split: the key was used twice "
                "(seen in the returned numbers, even with JAX's key-reuse checker off or bypassed)",
                hint,
            )


def check_init_structure(params, widths, what: str) -> None:
    if type(params) is not list:
        raise CheckFailure(f"{what}: expected a list (one dict per layer), got {type(params).__name__}")
    if len(params) != len(widths) - 1:
        raise CheckFailure(
            f"{what}: expected {len(widths) - 1} layers for {len(widths)} widths, got {len(params)}",
            "One layer for each pair of consecutive widths: zip(layer_widths[:-1], layer_widths[1:]).",
        )
    for i, (layer, n_in, n_out) in enumerate(zip(params, widths[:-1], widths[1:])):
        if type(layer) is not dict:
            raise CheckFailure(f"{what}[{i}]: expected a dict, got {type(layer).__name__}")
        if set(layer) != {"weights", "biases"}:
            raise CheckFailure(
                f"{what}[{i}]: expected exactly the keys ['biases', 'weights'], got {quoted(str(sorted(map(str, layer))), 'other keys')}"
            )
        for k, shape in (("weights", (n_in, n_out)), ("biases", (n_out,))):
            v = layer[k]
            if not isinstance(v, np.ndarray):
                raise CheckFailure(f"{what}[{i}][{k!r}]: expected an array, got {type(v).__name__}")
            if v.shape != shape:
                raise CheckFailure(f"{what}[{i}][{k!r}]: shape {quoted(str(v.shape), '(another)')}, expected {shape}")
            if v.dtype != np.float32:
                raise CheckFailure(f"{what}[{i}][{k!r}]: dtype {v.dtype}, expected float32")


def split_noise(result, what: str):
    """(new_key, samples) from sample_noise's result, checked for the pair structure."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckFailure(f"{what}: expected a pair (new_key, samples), got {type(result).__name__}")
    new_key, samples = result
    if key_words(new_key) is None:
        raise CheckFailure(f"{what}: the first element, new_key, is not a PRNG key ({type(new_key).__name__})")
    if not isinstance(samples, np.ndarray):
        raise CheckFailure(f"{what}: the second element, samples, is not an array ({type(samples).__name__})")
    return new_key, samples


def check_samples_structure(samples, n, shape, what: str) -> None:
    if samples.shape != (n, *shape):
        raise CheckFailure(
            f"{what}: samples have shape {quoted(str(samples.shape), '(another)')}, expected {(n, *shape)}"
        )
    if samples.dtype != np.float32:
        raise CheckFailure(f"{what}: samples have dtype {samples.dtype}, expected float32")


def nonzero_normal(rng, shape) -> np.ndarray:
    """float32 values with |x| >= 0.5, so a zero in dropout's output means 'dropped'."""
    x = rng.standard_normal(shape)
    return (np.sign(x) * (0.5 + np.abs(x))).astype(np.float32)


def same_sign_fraction(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean((a > 0) == (b > 0)))


def call_args(name: str, key, rng):
    """Representative arguments for each function, with `key` in the key position."""
    if name == "init_mlp_params":
        return ([6, 32, 32, 3], key)
    if name == "sample_noise":
        return (key, 16, (8,))
    return (key, nonzero_normal(rng, (32, 64)), 0.5)


def key_determined_part(name: str, result):
    """The part of the result that the key determines (the whole result, for dropout)."""
    if name == "sample_noise":
        new_key, samples = split_noise(result, "sample_noise(key, 16, (8,))")
        return [key_words(new_key), samples]
    return result


# --------------------------------------------------------------------------- structure (5)


@pytest.mark.category("structure")
@pytest.mark.points(2)
# three layers: the widths of call_args, whose program test_output_determined_by_key compiles too
@pytest.mark.parametrize("widths", [[5, 1], [6, 32, 32, 3]], ids=["one-layer", "three-layers"])
def test_init_mlp_params_structure(submission, rng, widths):
    """init_mlp_params returns a list with one {'weights', 'biases'} dict per layer, float32."""
    params = submission.init_mlp_params(list(widths), typed_key(rng))
    check_init_structure(params, widths, f"init_mlp_params({widths}, key)")


@pytest.mark.category("structure")
@pytest.mark.points(2)
@pytest.mark.parametrize("n,shape", [(1, (2, 3)), (6, ())], ids=["one-sample", "scalar-samples"])
def test_sample_noise_structure(submission, rng, n, shape):
    """sample_noise returns (new_key, samples), samples of shape (num_samples, *shape), float32."""
    key = typed_key(rng)
    what = f"sample_noise(key, {n}, {shape})"
    new_key, samples = split_noise(submission.sample_noise(key, n, shape), what)
    if not isinstance(new_key, PRNGKeyData):
        raise CheckFailure(f"{what}: given a typed key (jax.random.key), new_key should be a typed key too")
    check_samples_structure(samples, n, shape, what)


@pytest.mark.category("structure")
@pytest.mark.points(1)
def test_dropout_structure(submission, rng):
    """dropout returns an array of the input's shape and dtype."""
    for shape in [(1,), (4, 5, 6)]:
        x = nonzero_normal(rng, shape)
        y = submission.dropout(typed_key(rng), x, 0.3)
        if not isinstance(y, np.ndarray):
            raise CheckFailure(f"dropout(key, x, 0.3): expected an array, got {type(y).__name__}")
        if y.shape != shape:
            raise CheckFailure(f"dropout(key, x, 0.3) with x of shape {shape}: result shape {y.shape}")
        if y.dtype != np.float32:
            raise CheckFailure(f"dropout(key, x, 0.3) with float32 x: result dtype {y.dtype}, expected float32")


# --------------------------------------------------------------------------- prng (13)


@pytest.mark.category("prng")
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_no_key_reuse(submission, rng, name):
    """With a typed key and JAX's key-reuse checker on, no key is used twice; and the returned
    data shows no reuse of the given key or its splits (checked on the trusted side)."""
    key = typed_key(rng)
    args = call_args(name, key, rng)
    result = no_key_reuse(submission, name, *args)
    if name == "init_mlp_params":
        widths = args[0]
        check_init_structure(result, widths, f"init_mlp_params({widths}, key)")
        layers = len(widths) - 1
        arrays = {f"layer {i}'s weights": layer["weights"] for i, layer in enumerate(result)}
        check_no_reuse_in_data(name, key, arrays, [], (2, layers, layers + 1))
    elif name == "sample_noise":
        _, n, shape = args
        new_key, samples = split_noise(result, f"sample_noise(key, {n}, {shape})")
        check_samples_structure(samples, n, shape, f"sample_noise(key, {n}, {shape})")
        seen, counts = [key_words(new_key)], (2, 3, n, n + 1)
        # drawn at once, or one key per sample (the first rows are enough to see a reuse); checked
        # apart, as the whole draw and its first row may come from one key legitimately
        check_no_reuse_in_data(name, key, {"the samples": samples}, seen, counts)
        check_no_reuse_in_data(name, key, {f"sample {i}": samples[i] for i in range(3)}, seen, counts)


@pytest.mark.category("prng")
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_output_determined_by_key(submission, rng, name):
    """The same key gives the same output; different keys give different outputs."""
    k1, k2 = typed_key(rng), typed_key(rng)
    args1 = call_args(name, k1, rng)
    args2 = tuple(k2 if a is k1 else a for a in args1)
    first = key_determined_part(name, getattr(submission, name)(*args1))
    again = key_determined_part(name, getattr(submission, name)(*args1))
    try:
        assert_close(again, first, name=f"second call of {name} with the same key", exact=True)
    except CheckFailure as exc:
        raise CheckFailure(
            f"`{name}` gave different results for the same key ({exc.message})",
            "All randomness must come from the key argument, through jax.random: no numpy.random, "
            "no Python random, no global state.",
        ) from None
    other = key_determined_part(name, getattr(submission, name)(*args2))
    if name == "init_mlp_params":
        check_init_structure(first, args1[0], f"init_mlp_params({args1[0]}, key)")
        check_init_structure(other, args1[0], f"init_mlp_params({args1[0]}, key)")
    elif name == "dropout" and not (isinstance(first, np.ndarray) and isinstance(other, np.ndarray)):
        raise CheckFailure("dropout(key, x, rate): expected an array")
    # for independent draws, every compared array below differs with probability 1 - O(2^-20)
    parts = (
        [(f"layer {i} weights", a["weights"], b["weights"]) for i, (a, b) in enumerate(zip(first, other))]
        if name == "init_mlp_params"
        else [("new_key", first[0], other[0]), ("samples", first[1], other[1])]
        if name == "sample_noise"
        else [("result", first, other)]
    )
    for label, a, b in parts:
        if np.array_equal(a, b):
            raise CheckFailure(
                f"`{name}`: two different keys gave the same {label}",
                "The output must depend on the key argument: do not create a key inside the function "
                "(`jax.random.PRNGKey(42)`), split the key you are given.",
            )


@pytest.mark.category("prng")
@pytest.mark.points(2)
def test_init_layers_of_equal_shape_uncorrelated(submission, rng):
    """Layers of equal shape get independent weights (a distinct key per layer)."""
    widths = [64, 64, 64, 64]  # three (64, 64) layers: m = 4096 weights each
    params = submission.init_mlp_params(widths, legacy_key(rng))
    check_init_structure(params, widths, f"init_mlp_params({widths}, key)")
    w = [p["weights"].astype(np.float64).ravel() for p in params]
    m = w[0].size
    limit = SPHERE_T / math.sqrt(m)  # 0.094; independent layers: P(|cos| >= limit) <= 3e-8 per pair
    for i in range(3):
        for j in range(i + 1, 3):
            cos = float(w[i] @ w[j] / (np.linalg.norm(w[i]) * np.linalg.norm(w[j]) or 1.0))
            if abs(cos) >= limit:
                raise CheckFailure(
                    f"init_mlp_params({widths}, key): layers {i} and {j} have the same shape and "
                    f"correlated weights (cosine {cos:.3f}; independent layers stay below {limit:.3f})",
                    "Each layer needs its own key: split the key (`jax.random.split(key, n)`, or "
                    "`key, sub = jax.random.split(key)` per layer) instead of drawing every layer with one key.",
                )


@pytest.mark.category("prng")
@pytest.mark.points(2)
def test_sample_noise_new_key_is_fresh(submission, rng):
    """No sample repeats; new_key differs from the key given, was never used for sampling, and can be used next."""
    import jax

    n, shape = 16, (8,)
    key = typed_key(rng)
    new_key, samples = split_noise(no_key_reuse(submission, "sample_noise", key, n, shape), "sample_noise")
    check_samples_structure(samples, n, shape, f"sample_noise(key, {n}, {shape})")
    # 0. no sample repeats another (rows of 8 independent float32 normals coincide w.p. < 2^-160)
    if len({r.tobytes() for r in samples.reshape(n, -1)}) < n:
        raise CheckFailure(
            f"sample_noise(key, {n}, {shape}): some samples are identical: they were drawn with the same key",
            "Draw all samples at once with one key (`jax.random.normal(subkey, (num_samples, *shape))`), "
            "or split one key per sample (`jax.random.split(subkey, num_samples)`).",
        )
    words = key_words(new_key)
    if np.array_equal(words, key.data):
        raise CheckFailure(
            "sample_noise returned the key it was given as new_key: the caller's next draw will reuse it",
            "Split the key: `new_key, subkey = jax.random.split(key)`; sample with subkey, return new_key.",
        )
    fresh_hint = (
        "new_key is for the caller's next step: sample with a different key, e.g. "
        "`new_key, subkey = jax.random.split(key)` and `jax.random.normal(subkey, ...)`."
    )

    def shares_a_row(a: np.ndarray, b: np.ndarray) -> bool:
        # rows of 8 float32 normals from independent draws coincide with probability < 2^-160
        rows_a = {r.tobytes() for r in a.reshape(n, -1)}
        return any(r.tobytes() in rows_a for r in b.reshape(n, -1))

    # 1. was new_key itself used to draw these samples? (the usual ways of drawing with a key)
    k = jax.random.wrap_key_data(words, impl=IMPL)
    drawn = {
        "jax.random.normal(new_key, (num_samples, *shape))": jax.random.normal(k, (n, *shape)),
        "jax.random.normal(new_key, shape) per sample": jax.random.normal(k, shape)[None],
        "jax.random.split(new_key, num_samples)": jax.vmap(lambda kk: jax.random.normal(kk, shape))(
            jax.random.split(k, n)
        ),
    }
    for how, values in drawn.items():
        values = np.broadcast_to(np.asarray(values), (n, *shape))
        if shares_a_row(samples, values):
            raise CheckFailure(
                f"sample_noise drew its samples with the key it returned ({how} reproduces them)", fresh_hint
            )
    # 2. the caller continues with new_key: its draw must be new (and new_key must work, reuse-free)
    new_key2, samples2 = split_noise(
        no_key_reuse(submission, "sample_noise", new_key, n, shape), "sample_noise(new_key, ...)"
    )
    if shares_a_row(samples, samples2):
        raise CheckFailure(
            "sample_noise(new_key, ...) repeated samples of the first call: new_key had been used for sampling",
            fresh_hint,
        )
    if np.array_equal(key_words(new_key2), words) or np.array_equal(key_words(new_key2), key.data):
        raise CheckFailure(
            "a second sample_noise call returned a key it had already returned or been given", fresh_hint
        )


@pytest.mark.category("prng")
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_legacy_keys_accepted(submission, rng, name):
    """Legacy keys (jax.random.PRNGKey, a uint32[2] array) work as well as typed keys."""
    # the representative arguments (call_args), which test_pure passes with a legacy key too: the
    # student's programs for these shapes are compiled once for both tests (a jitted dropout or
    # a vmapped draw compiles in 0.1 to 0.6 s per new shape in the sandbox: bench/README.md)
    key = legacy_key(rng)
    args = call_args(name, key, rng)
    if name == "init_mlp_params":
        widths = args[0]
        check_init_structure(submission.init_mlp_params(*args), widths, f"init_mlp_params({widths}, legacy key)")
    elif name == "sample_noise":
        _, n, shape = args
        what = f"sample_noise(legacy key, {n}, {shape})"
        new_key, samples = split_noise(submission.sample_noise(*args), what)
        check_samples_structure(samples, n, shape, what)
        if np.array_equal(key_words(new_key), key):
            raise CheckFailure(
                "sample_noise(legacy key, ...) returned the key it was given as new_key",
                "Split it: `new_key, subkey = jax.random.split(key)`, sample with subkey, return new_key.",
            )
    else:
        _, x, rate = args
        y = submission.dropout(*args)
        if not isinstance(y, np.ndarray) or y.shape != x.shape:
            raise CheckFailure(f"dropout(legacy key, x, {rate}): expected an array of shape {x.shape}")


# --------------------------------------------------------------------------- numerics (10)


@pytest.mark.category("numerics")
@pytest.mark.points(4)
@pytest.mark.parametrize("widths", [[784, 512, 256, 10], [3, 4096, 1]], ids=["mnist-sizes", "narrow-wide-narrow"])
def test_init_mlp_params_scale(submission, rng, widths):
    """Weights of each layer are N(0, 2/n_in) (He initialization); biases are exactly ones."""
    params = submission.init_mlp_params(widths, legacy_key(rng))
    check_init_structure(params, widths, f"init_mlp_params({widths}, key)")
    for i, (layer, n_in, n_out) in enumerate(zip(params, widths[:-1], widths[1:])):
        what = f"init_mlp_params({widths}, key)[{i}]['weights'] ({n_in}x{n_out})"
        z = layer["weights"].astype(np.float64) / math.sqrt(2.0 / n_in)  # N(0,1) entries if correct
        k = z.size  # >= 2560 here, so a variance off by a factor 2 is far outside the bounds
        check_mean_zero(float(z.sum()), k, what)
        try:
            check_chi2(float(np.sum(z * z)), k, what)
        except CheckFailure as exc:
            raise CheckFailure(
                exc.message + f"; the standard deviation should be sqrt(2/n_in) = {math.sqrt(2 / n_in):.4g}",
                "Scale standard normals: `jax.random.normal(k, (n_in, n_out)) * jnp.sqrt(2 / n_in)`.",
            ) from None
        assert_close(layer["biases"], np.ones(n_out, np.float32), exact=True, name=f"layer {i} biases")


@pytest.mark.category("numerics")
@pytest.mark.points(3)
# Few samples, so that a correct solution that splits one key per sample and draws in a Python
# loop (about 0.5 ms per sample eagerly) finishes in about a second: 1024 + 256 calls in all.
# The failure bounds do not depend on the sizes (the thresholds scale with them); the sizes only
# set the power: every mutant still misses its threshold by a wide margin (repeated samples agree
# in sign 100% of the time, against 50% +- 13.7% and 4.8%; a variance off by a factor 2 puts the
# spread outside 0.86..1.14 and 0.95..1.05).
@pytest.mark.parametrize("n,shape", [(1024, ()), (256, (4, 8))], ids=["scalars", "matrices"])
def test_sample_noise_is_iid_standard_normal(submission, rng, n, shape):
    """Samples have mean 0 and variance 1, and are independent across and within samples."""
    what = f"sample_noise(key, {n}, {shape})"
    _, samples = split_noise(submission.sample_noise(legacy_key(rng), n, shape), what)
    check_samples_structure(samples, n, shape, what)
    z = samples.astype(np.float64).reshape(n, -1)
    k = z.size  # 1024 values (scalars), 8192 (matrices)
    # independence: disjoint pairs of i.i.d. symmetric values agree in sign w.p. 1/2, so the
    # frequency over m pairs is within hoeffding_t(m) of 1/2 except w.p. 1e-8; repeated values
    # (a sample drawn again with the same key) agree always
    pairs = {"consecutive samples": (z[0::2], z[1::2])}
    if z.shape[1] > 1:
        pairs["entries within a sample"] = (z[:, 0::2], z[:, 1::2])
    for label, (a, b) in pairs.items():
        # m = 512 pairs (scalars): t = 0.137; m = 4096 pairs (matrices, both kinds): t = 0.048
        f, t = same_sign_fraction(a, b), hoeffding_t(a.size)
        if abs(f - 0.5) >= t:
            raise CheckFailure(
                f"{what}: {label} are not independent ({f:.1%} of pairs share their sign, expected 50% ± {t:.1%})",
                "Draw all samples at once with one fresh key (`jax.random.normal(subkey, (num_samples, *shape))`), "
                "or give every sample its own key: never draw twice with the same key.",
            )
    normal_hint = "Draw standard normals with `jax.random.normal(subkey, (num_samples, *shape))`."
    try:
        check_mean_zero(float(z.sum()), k, what)
        check_chi2(float(np.sum(z * z)), k, what)
    except CheckFailure as exc:
        raise CheckFailure(exc.message, normal_hint) from None


@pytest.mark.category("numerics")
@pytest.mark.points(3)
@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
def test_dropout_statistics(submission, rng, rate):
    """dropout zeroes about `rate` of the entries, independently, scales the rest by 1/(1-rate), keeps the mean."""
    shape = (256, 256)  # m = 65536 entries: Hoeffding t = 0.0120
    m = shape[0] * shape[1]
    x = nonzero_normal(rng, shape)
    what = f"dropout(key, x, {rate})"
    y = submission.dropout(legacy_key(rng), x, rate)
    if not isinstance(y, np.ndarray) or y.shape != shape:
        raise CheckFailure(f"{what}: expected an array of shape {shape}")
    dropped = y == 0
    kept = ~dropped
    try:
        assert_close(y[kept], x[kept] / np.float32(1 - rate), name=f"{what}: the kept entries, x / (1 - rate)")
    except CheckFailure as exc:
        raise CheckFailure(
            exc.message, "Scale the kept entries by 1/(1-rate): `jnp.where(keep, x / (1 - rate), 0)`."
        ) from None
    f, t = float(dropped.mean()), hoeffding_t(m)  # P(|f - rate| >= t) <= 1e-8
    if abs(f - rate) >= t:
        raise CheckFailure(
            f"{what} zeroed {f:.1%} of the entries, expected {rate:.0%} ± {t:.1%}",
            "`jax.random.bernoulli(key, p, shape)` is True with probability p: to keep an entry with "
            "probability 1 - rate, use p = 1 - rate.",
        )
    # independence: neighbouring entries are dropped together w.p. rate^2 + (1-rate)^2
    p = rate**2 + (1 - rate) ** 2
    same = dropped[:, 0::2] == dropped[:, 1::2]
    f2, t2 = float(same.mean()), hoeffding_t(same.size)  # 32768 pairs: t2 = 0.017
    if abs(f2 - p) >= t2:
        raise CheckFailure(
            f"{what}: entries are not dropped independently of each other "
            f"({f2:.1%} of neighbouring pairs share their fate, expected {p:.1%} ± {t2:.1%})",
            "Draw one independent keep/drop decision per entry: a mask of shape x.shape.",
        )
    # the mean: on ones, mean(y) = (kept fraction) / (1 - rate), within t / (1 - rate) of 1
    y1 = submission.dropout(legacy_key(rng), np.ones(shape, np.float32), rate)
    mean = float(np.mean(np.asarray(y1, dtype=np.float64)))
    if abs(mean - 1.0) >= t / (1 - rate):  # same Hoeffding event: P <= 1e-8
        raise CheckFailure(
            f"dropout(key, ones, {rate}) has mean {mean:.4f}: dropout must keep the mean (1.0)",
            "Scale the kept entries by 1/(1-rate): `jnp.where(keep, x / (1 - rate), 0)`.",
        )


# --------------------------------------------------------------------------- jit (3)


@pytest.mark.category("jit")
@pytest.mark.points(3)
# (1, 64): a batch of one row. Enough entries that the compiled function's masks for two keys
# agree (a mask fixed at trace time: numpy.random) only with probability (0.25^2 + 0.75^2)^64 < 1e-13.
@pytest.mark.parametrize("rate,shape", [(0.25, (1, 64)), (0.6, (32, 48))], ids=["one-row", "matrix"])
def test_dropout_under_jit(submission, rng, rate, shape):
    """dropout compiles under jax.jit (key and x traced, rate static), and the compiled function
    is a dropout: each entry is x / (1 - rate) or 0, about `rate` of them are 0, and another key
    gives another mask."""

    masks = []

    def is_dropout(y, key, x):
        y = np.asarray(y)
        masks.append(y != 0)
        if y.shape != x.shape:
            raise CheckFailure(f"jax.jit(dropout): expected shape {x.shape}, got {y.shape}")
        kept = y != 0
        assert_close(y[kept], x[kept] / (1 - rate), name="jax.jit(dropout): the kept entries (x / (1 - rate))")
        # zeros ~ Binomial(n, rate); 6 standard deviations: a right dropout fails w.p. < 2e-9
        n, zeros = x.size, int(np.sum(~kept))
        if abs(zeros - n * rate) > 6 * math.sqrt(n * rate * (1 - rate)) + 1:
            raise CheckFailure(
                f"jax.jit(dropout) with rate={rate} zeroed {zeros} of {n} entries; about {n * rate:.0f} expected"
            )

    x = nonzero_normal(rng, shape)
    exp = check_jit(submission, "dropout", (legacy_key(rng), x), static={"rate": rate}, accept=is_dropout)
    other, _ = submission.evaluate("dropout", exp.module, legacy_key(rng), x)
    is_dropout(other, None, x)
    # independent masks of 64 or more entries agree with probability below (0.25^2 + 0.75^2)^64 < 1e-13
    if np.array_equal(masks[0], masks[1]):
        raise CheckFailure(
            f"jax.jit(dropout) with rate={rate} gave the same mask for two different keys: its randomness "
            "was fixed when it was traced",
            "Draw the mask with jax.random and the key argument (`jax.random.bernoulli(key, 1 - rate, x.shape)`); "
            "numpy.random runs once, while tracing, and its numbers become constants.",
        )


# --------------------------------------------------------------------------- purity (4)


@pytest.mark.category("purity")
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_pure(submission, rng, name):
    """Called twice with the same key, the function repeats its result exactly (no numpy.random)."""
    args = call_args(name, legacy_key(rng), rng)
    if name == "dropout":
        check_pure(submission, name, args)
        return
    res = submission.call(name, *args, repeat=2)
    if res.mutated:
        raise CheckFailure(f"`{name}` modified its input argument(s) in place")
    try:
        assert_close(res.values[1], res.values[0], name=f"second call of {name}", exact=True)
    except CheckFailure as exc:
        raise CheckFailure(
            f"`{name}` gave a different result when called again with the same key ({exc.message})",
            "Use jax.random with the key you are given: numpy.random and Python's random keep hidden "
            "global state, so the same key does not give the same numbers.",
        ) from None


@pytest.mark.category("purity")
@pytest.mark.points(1)
def test_dropout_compiled_depends_on_key(submission, rng):
    """Compiled once, dropout still draws a new mask for every key (no numpy.random baked in)."""
    x = nonzero_normal(rng, (64, 64))
    k1, k2 = legacy_key(rng), legacy_key(rng)
    try:
        exp = submission.export("dropout", [("2", "uint32"), ("64, 64", "float32")], {"rate": 0.5})
    except StudentRaised:
        return  # it does not trace under jit at all: that is the jit tests' business
    y1, _ = submission.evaluate("dropout", exp.module, k1, x)
    y2, _ = submission.evaluate("dropout", exp.module, k2, x)
    if np.array_equal(np.asarray(y1), np.asarray(y2)):  # independent masks: equal w.p. 2^-4096
        raise CheckFailure(
            "compiled with jax.jit, dropout gave the same mask for two different keys: its randomness "
            "was fixed when it was traced",
            "Draw the mask with jax.random and the key argument (`jax.random.bernoulli(key, 1 - rate, x.shape)`); "
            "numpy.random runs once, while tracing, and its numbers become constants.",
        )
