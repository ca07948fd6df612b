"""Builds the jitop package from the repository: `pip install ./python`
(offline: add --no-build-isolation), or `make python`.

The extension links the static libjitop.a that the repository's Makefile
builds (it is made first, `make build/libjitop.a`), so the installed
package is one shared object with no run-time dependency on the build
folder; the shipped kernels (kernels/*.cu) are copied into the package.
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def repo_file(*parts):
    path = os.path.join(ROOT, *parts)
    if not os.path.exists(path):
        sys.exit("jitop: %s not found: build the package from the jitop repository "
                 "(pip install ./python, with pip 21.3 or newer, which builds in place)" % path)
    return path


def version():
    text = open(repo_file("include", "jitop.h")).read()
    parts = [re.search(r"#define JITOP_VERSION_%s\s+(\d+)" % p, text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def make(*args):
    cmd = ["make", "-s", "-C", ROOT] + list(args)
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout


class BuildExt(build_ext):
    def run(self):
        repo_file("Makefile")
        make("build/libjitop.a")
        flags = make("python-ldlibs").split()
        for ext in self.extensions:
            ext.extra_objects = [os.path.join(ROOT, "build", "libjitop.a")]
            ext.extra_link_args = flags
        super().run()


class BuildPy(build_py):
    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "jitop", "kernels")
        os.makedirs(dst, exist_ok=True)
        src = repo_file("kernels")
        for name in sorted(os.listdir(src)):
            if os.path.isfile(os.path.join(src, name)):
                shutil.copy2(os.path.join(src, name), dst)


setup(
    name="jitop",
    version=version(),
    description="CUDA kernels compiled at run time, cached, launched from Python at C speed, "
                "hot-reloaded",
    packages=["jitop"],
    ext_modules=[Extension(
        "jitop._jitop",
        sources=["src/module.c", "src/op.c", "src/shipped.c", "src/sig.c"],
        depends=["src/pyjitop.h"],
        include_dirs=[os.path.join(ROOT, "include")],
        define_macros=[("_GNU_SOURCE", None)],
        extra_compile_args=["-std=c11", "-fvisibility=hidden"],
    )],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
    python_requires=">=3.9",
    zip_safe=False,
)
