"""jitop: CUDA kernels compiled at run time (NVRTC), cached on disk, launched
from Python at C speed, hot-reloaded when their source is saved.

    import jitop
    mod = jitop.load("saxpy", ["saxpy.cu"])
    mod.saxpy(blocks, 256, n, 2.0, x, y)        # x, y: torch/CuPy arrays

The module is a small C extension over libjitop (jitop._jitop); torch,
CuPy and NumPy are used when present and never imported by jitop itself
(jitop.torch, the shipped ops as autograd functions, imports torch).
See docs/PYTHON.md.
"""
import atexit as _atexit
import os as _os

from . import _jitop
from ._jitop import (  # noqa: F401  (the public names)
    CompileError,
    Context,
    JitopError,
    Module,
    NoDriverError,
    NotFoundError,
    Op,
    poll_events,
)

__version__ = _jitop.version()
# Watch threads stop before the interpreter finalizes (their reports are
# delivered through Py_AddPendingCall).
_atexit.register(_jitop._unwatch_all)
nvrtc_version = _jitop.nvrtc_version

__all__ = ["load", "load_inline", "context", "Context", "Module", "Op", "JitopError",
           "CompileError", "NotFoundError", "NoDriverError", "poll_events"]

# The shipped kernels (layernorm.cu, lltm.cu) travel with the package, so
# that an installed jitop finds them wherever the repository went.
_KERNEL_DIR = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "kernels")
_contexts = {}


def context(cache_dir=None, verbose=False):
    """The process's context for (cache_dir, verbose), created on first use
    (device 0's primary CUDA context, the driver opened at the first load)."""
    key = (_os.fspath(cache_dir) if cache_dir is not None else None, bool(verbose))
    ctx = _contexts.get(key)
    if ctx is None:
        kernel_dir = None
        if not _os.environ.get("JITOP_KERNEL_DIR") and _os.path.isdir(_KERNEL_DIR):
            kernel_dir = _KERNEL_DIR
        ctx = Context(cache_dir=key[0], verbose=1 if verbose else -1, kernel_dir=kernel_dir)
        _contexts[key] = ctx
    return ctx


def _options(extra_cuda_cflags, extra_include_paths):
    for what, v in (("extra_cuda_cflags", extra_cuda_cflags),
                    ("extra_include_paths", extra_include_paths)):
        if isinstance(v, (str, bytes, _os.PathLike)):
            raise TypeError("%s must be a list, not one string" % what)
    opts = [str(o) for o in (extra_cuda_cflags or ())]
    opts += ["-I" + _os.fspath(p) for p in (extra_include_paths or ())]
    return opts


def load(name, sources, extra_cuda_cflags=None, extra_include_paths=None, verbose=False,
         cache_dir=None):
    """Compiles (through the cache) and loads .cu sources: torch's
    cpp_extension.load for kernels. Returns a Module whose kernels are
    attributes (mod.saxpy) or items (mod["axpy<float, 4>"]). Loading the same
    sources again returns the same module (only the stat fast path touches
    the disk). A compile error raises CompileError with NVRTC's log."""
    if isinstance(sources, (str, bytes, _os.PathLike)):
        sources = [sources]
    return context(cache_dir, verbose).load(
        name, [_os.fspath(s) for s in sources], _options(extra_cuda_cflags, extra_include_paths))


def load_inline(name, cuda_sources, extra_cuda_cflags=None, extra_include_paths=None,
                verbose=False, cache_dir=None):
    """load() for source text (a str, or a list of them joined by newlines);
    a quoted #include is looked up in the current directory first."""
    if not isinstance(cuda_sources, str):
        cuda_sources = "\n".join(cuda_sources)
    return context(cache_dir, verbose).load_inline(
        name, cuda_sources, _options(extra_cuda_cflags, extra_include_paths))
