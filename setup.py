"""Builds torchtpu._C: the C core (csrc/) and its CPython extension.

No C++ and nothing is built against libtorch: the extension talks to PyTorch
only through Python objects and DLPack capsules.
"""
import glob
import os

from setuptools import Extension, setup

CORE_DIRS = ["base", "ir", "compiler", "runtime", "vtpu", "python"]
sources = sorted(
    f for d in CORE_DIRS for f in glob.glob(os.path.join("csrc", d, "*.c"))
)

extra = [
    "-std=c11",
    "-O3",
    "-fno-math-errno",
    "-Wall",
    "-Wextra",
    "-fvisibility=hidden",
    "-D_GNU_SOURCE",
]
if os.environ.get("TORCHTPU_WERROR", "0") == "1":
    extra.append("-Werror")

setup(
    ext_modules=[
        Extension(
            "torchtpu._C",
            sources=sources,
            include_dirs=["csrc/include", "csrc"],
            extra_compile_args=extra,
            libraries=["m", "dl", "pthread"],
        )
    ]
)
