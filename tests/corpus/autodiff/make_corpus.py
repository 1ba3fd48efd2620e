"""Writes the ``autodiff`` submission corpus.

Each notebook is named for its behaviour and looks like something a student could hand in:
imports, the given ``sum_squared_error``, one cell per function, some chatter.
``expected.yaml`` (written by hand, beside this script) gives the verdict each one must get,
category by category.

Run from anywhere; the output is deterministic (cell ids are derived from the file name and
the cell's position), so re-running only changes files whose content changed::

    python tests/corpus/autodiff/make_corpus.py

``untouched_starter.ipynb`` is a copy of ``assignments/autodiff/autodiff.ipynb``.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/corpus, for notebook_kit
import notebook_kit as kit  # noqa: E402
from notebook_kit import code, md  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
STARTER = REPO / "assignments" / "autodiff" / "autodiff.ipynb"
ASSIGNMENT = "autodiff"
build = partial(kit.build, ASSIGNMENT)

# ---------------------------------------------------------------------------------------------
# Cell sources shared by many notebooks

INTRO = """\
# Homework 4: automatic differentiation

Name: {student}

Gradients of the sum of squared errors, and a line fitted by gradient descent."""

IMPORTS = """\
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax"""

GIVEN_MD = "## Given code\n\nFrom the assignment (do not change it)."

GIVEN = """\
def sum_squared_error(x, y):
    return jnp.sum((x - y) ** 2)"""

TRY_GIVEN = """\
x = jnp.asarray([1.0, 2.0, 3.0, 4.0])
y = jnp.asarray([1.1, 2.1, 3.1, 4.1])
sum_squared_error(x, y)"""

DATA = """\
rng = np.random.default_rng(0)
xs = rng.normal(size=100).astype(np.float32)
ys = (3 * xs - 1 + rng.normal(scale=0.1, size=100)).astype(np.float32)"""

CHECK_ALL = """\
print(grad_sse_wrt_x(x, y))
print(grad_sse_wrt_both(x, y))
print(sse_value_and_grad(x, y))
print(sse_with_aux_grad(x, y))
print(jax.jit(grad_sse_wrt_x)(x, y))
print(fit_linear_regression(xs, ys), fit_linear_regression(xs, ys, steps=5))"""

# -- correct: the reference style (grad, argnums, value_and_grad, has_aux, a jitted update) ---

GRAD_X = """\
def grad_sse_wrt_x(x, y):
    return jax.grad(sum_squared_error)(x, y)"""

GRAD_BOTH = """\
def grad_sse_wrt_both(x, y):
    return jax.grad(sum_squared_error, argnums=(0, 1))(x, y)"""

VALUE_AND_GRAD = """\
def sse_value_and_grad(x, y):
    return jax.value_and_grad(sum_squared_error)(x, y)"""

AUX = """\
def squared_error_with_aux(x, y):
    return sum_squared_error(x, y), x - y


def sse_with_aux_grad(x, y):
    return jax.grad(squared_error_with_aux, has_aux=True)(x, y)"""

FIT = """\
def model(theta, x):
    w, b = theta
    return w * x + b


def loss_fn(theta, x, y):
    prediction = model(theta, x)
    return jnp.mean((prediction - y) ** 2)


@jax.jit
def update(theta, x, y, lr):
    return theta - lr * jax.grad(loss_fn)(theta, x, y)


def fit_linear_regression(xs, ys, lr=0.1, steps=1000):
    theta = jnp.array([1.0, 1.0])
    for _ in range(steps):
        theta = update(theta, xs, ys, lr)
    return theta"""

# -- correct: jacrev, vjp, vjp with has_aux, a fori_loop over value_and_grad -------------------

JACREV_X = """\
def grad_sse_wrt_x(x, y):
    # for a scalar function the Jacobian is the gradient
    return jax.jacrev(sum_squared_error)(x, y)"""

VJP_BOTH = """\
def grad_sse_wrt_both(x, y):
    value, pullback = jax.vjp(sum_squared_error, x, y)
    return pullback(jnp.ones_like(value))"""

VJP_VALUE_AND_GRAD = """\
def sse_value_and_grad(x, y):
    value, pullback = jax.vjp(lambda x_: sum_squared_error(x_, y), x)
    (dx,) = pullback(jnp.ones_like(value))
    return value, dx"""

VJP_AUX = """\
def sse_with_aux_grad(x, y):
    def loss_and_residual(x_):
        return sum_squared_error(x_, y), x_ - y

    value, pullback, residual = jax.vjp(loss_and_residual, x, has_aux=True)
    (dx,) = pullback(jnp.ones_like(value))
    return dx, residual"""

FORI_FIT = """\
def fit_linear_regression(xs, ys, lr=0.1, steps=1000):
    design = jnp.stack([xs, jnp.ones_like(xs)], axis=1)  # rows [x, 1]: predictions are design @ theta

    def mse(theta):
        return jnp.mean((design @ theta - ys) ** 2)

    def step(i, theta):
        loss, g = jax.value_and_grad(mse)(theta)
        return theta - lr * g

    return lax.fori_loop(0, steps, step, jnp.array([1.0, 1.0]))"""

# -- correct: jitted closures, jacfwd, value_and_grad with has_aux, a jitted fori_loop ---------

CLOSURE_X = """\
@jax.jit
def grad_sse_wrt_x(x, y):
    return jax.grad(lambda x_: sum_squared_error(x_, y))(x)"""

JACFWD_BOTH = """\
@jax.jit
def grad_sse_wrt_both(x, y):
    return jax.jacfwd(sum_squared_error, argnums=(0, 1))(x, y)"""

JIT_VALUE_AND_GRAD = """\
sse_value_and_grad = jax.jit(jax.value_and_grad(sum_squared_error))"""

VAG_AUX = """\
@jax.jit
def sse_with_aux_grad(x, y):
    (loss, residual), dx = jax.value_and_grad(lambda x_: (sum_squared_error(x_, y), x_ - y), has_aux=True)(x)
    return dx, residual"""

STATIC_FIT = """\
@partial(jax.jit, static_argnames="steps")
def fit_linear_regression(xs, ys, lr=0.1, steps=1000):
    def mse(theta):
        w, b = theta[0], theta[1]
        return jnp.mean(jnp.square(w * xs + b - ys))

    return lax.fori_loop(0, steps, lambda i, theta: theta - lr * jax.grad(mse)(theta), jnp.ones(2))"""

EXTRA_FD_MD = """\
## Checking against finite differences

Central differences with h = 1e-3 are close to the exact gradient, but only to about three digits."""

EXTRA_FD = """\
h = 1e-3
big_x = jnp.linspace(-4.0, 4.0, 64)
big_y = jnp.cos(big_x) * 4
approx = jnp.array([
    (sum_squared_error(big_x.at[i].add(h), big_y) - sum_squared_error(big_x.at[i].add(-h), big_y)) / (2 * h)
    for i in range(8)
])
print(approx - grad_sse_wrt_x(big_x, big_y)[:8])"""

EXTRA_LOSSES = """\
theta = jnp.array([1.0, 1.0])
for steps in (0, 10, 100, 1000):
    theta = fit_linear_regression(xs, ys, steps=steps)
    print(steps, theta, jnp.mean((theta[0] * xs + theta[1] - ys) ** 2))"""

# -- mutants of the reference -----------------------------------------------------------------

FD_HELPER = """\
def numerical_grad(f, x, h=1e-3):
    # central differences, one entry at a time
    flat = jnp.ravel(x)
    out = []
    for i in range(flat.size):
        up = flat.at[i].add(h).reshape(x.shape)
        down = flat.at[i].add(-h).reshape(x.shape)
        out.append((f(up) - f(down)) / (2 * h))
    return jnp.array(out).reshape(x.shape)"""

FD_X = """\
def grad_sse_wrt_x(x, y):
    return numerical_grad(lambda v: sum_squared_error(v, y), x)"""

FD_BOTH = """\
def grad_sse_wrt_both(x, y):
    return numerical_grad(lambda v: sum_squared_error(v, y), x), numerical_grad(lambda v: sum_squared_error(x, v), y)"""

FD_VALUE_AND_GRAD = """\
def sse_value_and_grad(x, y):
    return sum_squared_error(x, y), numerical_grad(lambda v: sum_squared_error(v, y), x)"""

FD_AUX = """\
def sse_with_aux_grad(x, y):
    return numerical_grad(lambda v: sum_squared_error(v, y), x), x - y"""

ARGNUMS_0_BOTH = """\
def grad_sse_wrt_both(x, y):
    return jax.grad(sum_squared_error, argnums=0)(x, y)"""

AUX_DROPPED = """\
def sse_with_aux_grad(x, y):
    # the aux output is just x - y, the gradient is what matters
    return jax.grad(sum_squared_error)(x, y)"""

ASCENT_FIT = FIT.replace("return theta - lr * jax.grad", "return theta + lr * jax.grad")

NUMPY_X = """\
def grad_sse_wrt_x(x, y):
    x, y = np.asarray(x), np.asarray(y)  # plain arrays are easier to inspect
    return jax.grad(sum_squared_error)(x, y)"""

# -- typical mistakes -------------------------------------------------------------------------

FORWARD_FD_HELPER = """\
def numerical_grad(f, x, eps=1e-4):
    # forward differences, all entries at once (as in the autodiff cookbook's check)
    basis = jnp.eye(x.size, dtype=x.dtype).reshape((x.size, *x.shape))
    f0 = f(x)
    return jax.vmap(lambda e: (f(x + eps * e) - f0) / eps)(basis).reshape(x.shape)"""

JIT_STEPS_TRACED_FIT = """\
def _fit(xs, ys, lr=0.1, steps=1000):
    def mse(theta):
        return jnp.mean((theta[0] * xs + theta[1] - ys) ** 2)

    def step(theta, _):
        return theta - lr * jax.grad(mse)(theta), None

    theta, _ = lax.scan(step, jnp.array([1.0, 1.0]), None, length=steps)
    return theta


fit_linear_regression = jax.jit(_fit)  # compile the whole loop (steps is traced when passed)"""

ZEROS_FIT = FIT.replace("theta = jnp.array([1.0, 1.0])", "theta = jnp.zeros(2)")

IGNORES_STEPS_FIT = FIT.replace("    for _ in range(steps):", "    for _ in range(1000):")

VALUE_AND_GRAD_WRT_Y = """\
def sse_value_and_grad(x, y):
    return jax.value_and_grad(sum_squared_error, argnums=1)(x, y)"""

SUM_FIT = FIT.replace("return jnp.mean((prediction - y) ** 2)", "return jnp.sum((prediction - y) ** 2)")

TODO = """\
# TODO"""

# ---------------------------------------------------------------------------------------------
# Assembling notebooks


def head(student: str) -> list[tuple[str, str]]:
    return [md(INTRO.format(student=student)), code(IMPORTS), md(GIVEN_MD), code(GIVEN), code(TRY_GIVEN), code(DATA)]


def solution_cells(x: str, both: str, value_and_grad: str, aux: str, fit: str) -> list[tuple[str, str]]:
    cells = [md("## My solutions")]
    for title, source in [
        ("grad_sse_wrt_x", x),
        ("grad_sse_wrt_both", both),
        ("sse_value_and_grad", value_and_grad),
        ("sse_with_aux_grad", aux),
        ("fit_linear_regression", fit),
    ]:
        cells += [md(f"### `{title}`"), code(source)]
    return cells


def grad_solution(**override: str) -> list[tuple[str, str]]:
    parts = {"x": GRAD_X, "both": GRAD_BOTH, "value_and_grad": VALUE_AND_GRAD, "aux": AUX, "fit": FIT}
    parts.update(override)
    return solution_cells(**parts)


def mistake(
    name: str, student: str, check: str = CHECK_ALL, helper: str | None = None, **override: str
) -> nbformat.NotebookNode:
    """The reference style with some functions replaced; the last cell tries them all."""
    extra = [md("### A helper"), code(helper)] if helper else []
    return build(name, head(student) + extra + grad_solution(**override) + [code(check)])


# the seed tutorial (a JAX basics lesson: grad, argnums, value_and_grad, has_aux, and a linear
# regression fitted with an un-jitted `update` in a Python loop), as it writes them
TUTORIAL_FILLS = {
    "todo1": """\
grad_sse_wrt_x = jax.grad(sum_squared_error)""",
    "todo2": """\
grad_sse_wrt_both = jax.grad(sum_squared_error, argnums=(0, 1))""",
    "todo3": """\
sse_value_and_grad = jax.value_and_grad(sum_squared_error)""",
    "todo4": """\
def sse_with_aux(x, y):
    error = x - y
    sse = jnp.sum(error ** 2)
    return sse, error  # the loss and the residual as an auxiliary output

sse_with_aux_grad = jax.grad(sse_with_aux, has_aux=True)""",
    "todo5": """\
def model(theta, x):
  # Computes wx + b on a batch of input x.
  w, b = theta
  return w * x + b


def loss_fn(theta, x, y):
  prediction = model(theta, x)
  return jnp.mean((prediction-y)**2)


def update(theta, x, y, lr=0.1):
  return theta - lr * jax.grad(loss_fn)(theta, x, y)


def fit_linear_regression(xs, ys, lr=0.1, steps=1000):
  theta = jnp.array([1., 1.])
  for _ in range(steps):
    theta = update(theta, xs, ys, lr)
  return theta""",
}


def corpus() -> dict[str, nbformat.NotebookNode | str]:
    nbs: dict[str, nbformat.NotebookNode | str] = {}

    # correct, in three styles
    nbs["correct_grad.ipynb"] = mistake("correct_grad", "A. Student")
    nbs["correct_vjp_jacrev.ipynb"] = build(
        "correct_vjp_jacrev",
        head("B. Student")
        + solution_cells(JACREV_X, VJP_BOTH, VJP_VALUE_AND_GRAD, VJP_AUX, FORI_FIT)
        + [code(CHECK_ALL)],
        tagged=False,
    )
    nbs["correct_jit_closures.ipynb"] = build(
        "correct_jit_closures",
        [
            *head("C. Student"),
            *solution_cells(CLOSURE_X, JACFWD_BOTH, JIT_VALUE_AND_GRAD, VAG_AUX, STATIC_FIT),
            code(CHECK_ALL),
            md(EXTRA_FD_MD),
            code(EXTRA_FD),
            code(EXTRA_LOSSES),
        ],
    )

    # the reference's mutants, as a student would write them
    nbs["finite_differences.ipynb"] = mistake(
        "finite_differences",
        "D. Student",
        helper=FD_HELPER,
        x=FD_X,
        both=FD_BOTH,
        value_and_grad=FD_VALUE_AND_GRAD,
        aux=FD_AUX,
    )
    nbs["argnums_0_only.ipynb"] = mistake("argnums_0_only", "E. Student", both=ARGNUMS_0_BOTH)
    nbs["aux_dropped.ipynb"] = mistake("aux_dropped", "F. Student", aux=AUX_DROPPED)
    nbs["gradient_ascent.ipynb"] = mistake("gradient_ascent", "G. Student", fit=ASCENT_FIT)
    nbs["numpy_gradient.ipynb"] = mistake(
        "numpy_gradient", "H. Student", check=CHECK_ALL.replace("print(jax.jit(grad_sse_wrt_x)(x, y))\n", ""), x=NUMPY_X
    )

    # typical mistakes
    nbs["forward_differences.ipynb"] = mistake(
        "forward_differences",
        "I. Student",
        helper=FORWARD_FD_HELPER,
        x=FD_X,
        both=FD_BOTH,
        value_and_grad=FD_VALUE_AND_GRAD,
        aux=FD_AUX,
    )
    nbs["fit_steps_traced.ipynb"] = mistake(
        "fit_steps_traced",
        "J. Student",
        check=CHECK_ALL.replace(", fit_linear_regression(xs, ys, steps=5))", ")"),
        fit=JIT_STEPS_TRACED_FIT,
    )
    nbs["fit_init_zeros.ipynb"] = mistake("fit_init_zeros", "K. Student", fit=ZEROS_FIT)
    nbs["fit_ignores_steps.ipynb"] = mistake("fit_ignores_steps", "L. Student", fit=IGNORES_STEPS_FIT)
    nbs["fit_sum_not_mean.ipynb"] = mistake("fit_sum_not_mean", "M. Student", fit=SUM_FIT)
    nbs["value_and_grad_wrt_y.ipynb"] = mistake(
        "value_and_grad_wrt_y", "N. Student", value_and_grad=VALUE_AND_GRAD_WRT_Y
    )
    nbs["partial_submission.ipynb"] = mistake(
        "partial_submission",
        "O. Student",
        check="print(grad_sse_wrt_x(x, y), grad_sse_wrt_both(x, y))",
        value_and_grad=TODO,
        aux=TODO,
        fit=TODO,
    )
    nbs["correct_tutorial.ipynb"] = kit.fill_starter(ASSIGNMENT, "correct_tutorial", TUTORIAL_FILLS, who="T. Student")
    nbs["untouched_starter.ipynb"] = STARTER.read_text(encoding="utf-8")
    return nbs


if __name__ == "__main__":
    kit.write_corpus(HERE, corpus())
