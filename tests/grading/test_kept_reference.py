"""grader/grading/kept_reference.py: the reference's outputs kept across submissions, never wrong."""

from __future__ import annotations

import inspect
import itertools
import types
from collections import namedtuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grader.grading.kept_reference import KeptModule, KeptOutputs


def module(**functions):
    """A reference module of these functions, each counting its calls in ``calls[name]``."""
    mod = types.ModuleType("ref_under_test")
    mod.__file__ = "/course/reference/solution.py"
    mod.calls = {name: 0 for name in functions}
    mod.WIDTH = 3

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            mod.calls[name] += 1
            return fn(*args, **kwargs)

        wrapper.__name__ = name
        wrapper.__doc__ = f"{name}'s doc"
        return wrapper

    for name, fn in functions.items():
        setattr(mod, name, counted(name, fn))
    return mod


def kept(mod, store=None):
    return KeptModule(mod, "v1", store if store is not None else KeptOutputs())


def test_an_output_is_computed_twice_then_kept_and_each_caller_gets_its_own_copy():
    mod = module(double=lambda x: {"y": [x * 2]})
    ref = kept(mod)
    x = np.arange(4, dtype=np.float32)
    outs = [ref.double(x.copy()) for _ in range(4)]
    assert mod.calls["double"] == 2  # the second call checks that the output repeats; then it is kept
    for out in outs:
        np.testing.assert_array_equal(out["y"][0], x * 2)
    outs[2]["y"][0][:] = -1  # a test that changes what it got
    outs[2]["y"].append("junk")
    again = ref.double(x)
    np.testing.assert_array_equal(again["y"][0], x * 2)
    assert len(again["y"]) == 1 and again["y"][0] is not outs[3]["y"][0]
    assert mod.calls["double"] == 2


def test_different_inputs_are_different_keys():
    mod = module(f=lambda *a, **k: np.float64(len(repr((a, k)))))
    ref = kept(mod)
    cases = [
        (np.zeros(3, np.float32),),
        (np.zeros(3, np.float64),),  # the dtype
        (np.zeros((3, 1), np.float32),),  # the shape
        (np.ones(3, np.float32),),  # the bytes
        (jnp.zeros(3, jnp.float32),),  # a JAX array is not a NumPy array
        (jnp.asarray(1.0),),  # weak-typed
        (jnp.float32(1.0),),  # not weak-typed
        (1,),
        (1.0,),
        (True,),
        ((1,),),
        ([1],),
        ({"a": 1},),
        ({"b": 1},),
        (jax.random.key(0),),
        (jax.random.key(1),),
        (jax.random.PRNGKey(0),),  # a legacy key: uint32 data
    ]
    for case in cases:
        ref.f(*case)
        ref.f(*case)
    ref.f(1, scale=2)
    ref.f(1, scale=2)
    assert mod.calls["f"] == 2 * (len(cases) + 1)  # every one computed twice: no two shared a key
    for case in cases:
        ref.f(*case)
    assert mod.calls["f"] == 2 * (len(cases) + 1)  # and now all are kept


def test_jax_configuration_is_part_of_the_key():
    mod = module(mean=lambda x: jnp.mean(jnp.asarray(x) * 1.0))
    ref = kept(mod)
    x = np.arange(3, dtype=np.int32)
    plain = [ref.mean(x) for _ in range(3)]
    with jax.default_matmul_precision("highest"):  # a context: this thread's state
        strict = [ref.mean(x) for _ in range(3)]
    assert mod.calls["mean"] == 4
    assert all(float(p) == 1.0 for p in plain + strict)


def test_values_it_cannot_see_whole_always_go_through():
    point = namedtuple("point", "x y")

    class Box:
        value = 1

    deep: list = []
    for _ in range(40):
        deep = [deep]
    mod = module(f=lambda v: 1.0)
    ref = kept(mod)
    for value in (point(1, 2), Box(), lambda: 1, np.array([object()]), {1: "int key"}, deep):
        for _ in range(3):
            ref.f(value)
    assert mod.calls["f"] == 18


def test_tracers_go_through_so_transformations_of_the_reference_work():
    mod = module(square=lambda x: jnp.sum(x**2))
    ref = kept(mod)
    x = jnp.arange(3.0)
    grads = [jax.grad(ref.square)(x) for _ in range(3)]
    for g in grads:
        np.testing.assert_allclose(g, 2 * x)
    assert mod.calls["square"] == 3  # each grad traced the function: nothing kept
    np.testing.assert_allclose(jax.jit(ref.square)(x), 5.0)
    np.testing.assert_allclose(jax.vmap(ref.square)(jnp.ones((2, 3))), [3.0, 3.0])


def test_a_function_whose_outputs_do_not_repeat_is_never_kept():
    counter = itertools.count()
    mod = module(noisy=lambda x: np.full(2, next(counter), np.int64), steady=lambda x: x + 1)
    store = KeptOutputs()
    ref = kept(mod, store)
    x = np.zeros(2, np.int64)
    got = [ref.noisy(x)[0] for _ in range(5)]
    assert got == [0, 1, 2, 3, 4]  # as without keeping: the clock, a global random state...
    assert mod.calls["noisy"] == 5
    for _ in range(3):
        ref.steady(x)
    assert mod.calls["steady"] == 2  # another function of the same module is still kept


def test_exceptions_are_not_kept_and_outputs_of_other_kinds_are_not_kept():
    mod = module(fails=lambda x: 1 / 0, odd=lambda x: types.SimpleNamespace(v=x))
    ref = kept(mod)
    for _ in range(3):
        with pytest.raises(ZeroDivisionError):
            ref.fails(1)
        assert ref.odd(2).v == 2
    assert mod.calls == {"fails": 3, "odd": 3}


def test_the_budget_drops_the_least_recently_used():
    mod = module(big=lambda n: np.zeros(n, np.uint8))
    store = KeptOutputs(budget=3_000)
    ref = kept(mod, store)
    for n in (1000, 1001, 1000, 1001):
        ref.big(n)
    assert len(store) == 2
    ref.big(1002)
    ref.big(1002)  # a third entry: the least recently used one goes
    assert len(store) == 2
    calls = mod.calls["big"]
    ref.big(1001)
    assert mod.calls["big"] == calls  # kept
    ref.big(1000)
    assert mod.calls["big"] == calls + 1  # dropped: computed again
    ref.big(10_000)
    ref.big(10_000)
    assert mod.calls["big"] == calls + 3  # larger than the budget: never kept
    assert len(store) == 2


def test_the_module_looks_like_the_module():
    mod = module(f=lambda x, scale=2: x * scale)
    ref = kept(mod)
    assert ref.WIDTH == 3 and ref.calls is mod.calls and ref.__file__ == mod.__file__
    assert ref.f is ref.f  # the same wrapper each time
    assert ref.f.__name__ == "f" and ref.f.__doc__ == "f's doc" and ref.f.__wrapped__ is mod.f
    assert inspect.signature(ref.f) == inspect.signature(mod.f)
    assert "f" in dir(ref)
    with pytest.raises(AttributeError):
        ref.missing  # noqa: B018
    mod.f = lambda x: -x  # a test (or a fixture) that replaces a function: the new one is called
    assert ref.f(3) == -3


def test_modules_and_versions_are_kept_apart():
    store = KeptOutputs()
    a, b = module(f=lambda x: 1), module(f=lambda x: 2)
    b.__file__ = "/course/reference/other.py"
    ka, kb, ka2 = KeptModule(a, "v1", store), KeptModule(b, "v1", store), KeptModule(a, "v2", store)
    for _ in range(3):
        assert ka.f(0) == 1 and kb.f(0) == 2 and ka2.f(0) == 1
    assert a.calls["f"] == 4 and b.calls["f"] == 2  # a's two versions: two keys
