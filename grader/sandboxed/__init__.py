"""Code that runs INSIDE the sandbox (untrusted side): the worker that drives the student's
notebook and kernel (:mod:`.worker`), the kernel's start (:mod:`.kernel_launcher`: ipykernel
without its debugger), what the worker runs in that kernel (:mod:`.kernel_side`),
the evaluator of exported modules (:mod:`.evaluator`) and their rlimits (:mod:`.rlimits`).
Only this package and :mod:`grader.wire` are mounted into the sandbox: nothing here may import
any other ``grader`` module (``tests/test_layout.py`` checks it).
"""
