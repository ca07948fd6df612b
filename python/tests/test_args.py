"""Argument conversion by the kernel's parameter sizes, checked against the
bytes a launch passes (op._pack uses the launch's own conversion) and by
launches on the fake driver (tests/fakecuda), which writes the id of the
module it launched from into the int its first pointer argument names."""
import ctypes
import struct

import pytest

import jitop
from jtest import context, need_fake, write

SRC = r"""
struct __align__(16) vec4 { float x, y, z, w; };
extern "C" __global__ void sizes(char c, short s, int i, long long l, float f, double d,
                                 float *p, vec4 v) {}
extern "C" __global__ void mark(int *out, int n) {}
template <typename T> __global__ void typed(T a, T *p, int n, const unsigned long long m) {}
__global__ void cpp_kernel(double d, float *__restrict__ p, short s) {}
"""


def load(tmp_path):
    need_fake(pytest)
    ctx = context(tmp_path)
    return ctx.load("args", [write(tmp_path / "args.cu", SRC)])


class CAI:
    """What CuPy and Numba give: __cuda_array_interface__."""

    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (ptr, False),
                                          "version": 3}


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class DLPack:
    """An object with __dlpack__ returning an unversioned 'dltensor'
    capsule (no deleter: the tensor lives in this object)."""

    def __init__(self, ptr, offset=0, device_type=2):
        self.t = DLTensor(data=ptr, device_type=device_type, byte_offset=offset)

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.t), b"dltensor", None)


def args(**over):
    a = dict(c=1, s=2, i=3, l=4, f=1.5, d=2.5, p=None, v=VEC)
    a.update(over)
    return [a[k] for k in ("c", "s", "i", "l", "f", "d", "p", "v")]


class Vec4(ctypes.Structure):
    _fields_ = [("x", ctypes.c_float), ("y", ctypes.c_float), ("z", ctypes.c_float),
                ("w", ctypes.c_float)]


VEC = Vec4(1, 2, 3, 4)


def test_sizes_are_the_drivers(tmp_path):
    mod = load(tmp_path)
    (info,) = [o for o in mod.ops() if o["name"] == "sizes"]
    assert [p["size"] for p in info["params"]] == [1, 2, 4, 8, 4, 8, 8, 16]
    assert mod.sizes.info()["params"] == info["params"]


def test_ints_by_size(tmp_path):
    op = load(tmp_path).sizes
    b = op._pack(*args(c=-1, s=65535, i=-2**31, l=2**64 - 1))
    assert b[0] == b"\xff" and b[1] == b"\xff\xff"
    assert b[2] == struct.pack("<i", -2**31)
    assert b[3] == struct.pack("<Q", 2**64 - 1)
    b = op._pack(*args(i=2**32 - 1, l=-2**63, c=True))
    assert b[2] == struct.pack("<I", 2**32 - 1) and b[3] == struct.pack("<q", -2**63)
    assert b[0] == b"\x01"


def test_int_out_of_range_names_the_parameter(tmp_path):
    op = load(tmp_path).sizes
    for over, index in ((dict(s=65536), 1), (dict(i=2**32), 2), (dict(l=2**64), 3),
                        (dict(c=-129), 0), (dict(v=7), 7)):
        with pytest.raises(TypeError, match=r"op sizes: parameter %d \(" % index):
            op._pack(*args(**over))


def test_floats_by_size(tmp_path):
    op = load(tmp_path).sizes
    b = op._pack(*args(f=0.1, d=0.1))
    assert b[4] == struct.pack("<f", 0.1) and b[5] == struct.pack("<d", 0.1)
    with pytest.raises(TypeError, match=r"parameter 1 \(2 bytes\).*float.*ambiguous"):
        op._pack(*args(s=1.0))
    with pytest.raises(TypeError, match=r"parameter 7 \(16 bytes\)"):
        op._pack(*args(v=1.0))


def test_ctypes_values_as_they_are(tmp_path):
    op = load(tmp_path).sizes
    b = op._pack(*args(f=ctypes.c_float(2.5), d=ctypes.c_double(-1.0), s=ctypes.c_uint16(7),
                       v=Vec4(5, 6, 7, 8)))
    assert b[4] == struct.pack("<f", 2.5) and b[5] == struct.pack("<d", -1.0)
    assert b[1] == struct.pack("<H", 7) and b[7] == struct.pack("<4f", 5, 6, 7, 8)
    with pytest.raises(TypeError, match=r"parameter 4 \(4 bytes\).*c_double of 8 bytes"):
        op._pack(*args(f=ctypes.c_double(1.0)))


def test_numpy_scalars_as_they_are(tmp_path):
    np = pytest.importorskip("numpy")
    op = load(tmp_path).sizes
    b = op._pack(*args(s=np.float16(1.5), f=np.float32(3.0), l=np.int64(-5)))
    assert b[1] == np.float16(1.5).tobytes() and b[4] == struct.pack("<f", 3.0)
    assert b[3] == struct.pack("<q", -5)
    with pytest.raises(TypeError, match="parameter 4"):
        op._pack(*args(f=np.float64(1.0)))


def test_device_pointers(tmp_path):
    op = load(tmp_path).sizes
    assert op._pack(*args(p=None))[6] == bytes(8)
    assert op._pack(*args(p=0x7f0000001000))[6] == struct.pack("<Q", 0x7f0000001000)
    assert op._pack(*args(p=CAI(0x1234500)))[6] == struct.pack("<Q", 0x1234500)
    assert op._pack(*args(p=DLPack(0x1000, offset=16)))[6] == struct.pack("<Q", 0x1010)
    with pytest.raises(TypeError, match=r"parameter 6 .*DLPack device type 1"):
        op._pack(*args(p=DLPack(0x1000, device_type=1)))  # host memory
    with pytest.raises(TypeError, match=r"parameter 2 \(4 bytes\): a device pointer"):
        op._pack(*args(i=CAI(0x1000)))
    with pytest.raises(TypeError, match=r"parameter 6 .*cannot pass a str"):
        op._pack(*args(p="x"))
    with pytest.raises(TypeError, match=r"parameter 6 .*cannot pass a bytes"):
        op._pack(*args(p=bytes(8)))


def test_argument_count(tmp_path):
    op = load(tmp_path).sizes
    with pytest.raises(TypeError, match="op sizes takes 8 kernel arguments, 3 given"):
        op._pack(1, 2, 3)
    with pytest.raises(TypeError, match="takes 8 kernel arguments, 0 given"):
        op(1, 1)
    with pytest.raises(TypeError, match=r"op\(grid, block"):
        op(1)


def test_launch_passes_the_pointer(tmp_path):
    mod = load(tmp_path)
    for make in (lambda a: a, CAI, DLPack):
        out = ctypes.c_int(0)
        mod.mark(1, 32, make(ctypes.addressof(out)), 5)
        assert out.value >= 1  # the fake wrote its module id through the pointer
    out = ctypes.c_int(0)
    mod.mark((2, 2), (8, 4, 1), ctypes.addressof(out), 5, shared_mem=1024, stream=0)
    assert out.value >= 1


def test_launch_shape_and_keywords(tmp_path):
    mark = load(tmp_path).mark
    out = ctypes.c_int(0)
    p = ctypes.addressof(out)
    for grid in (0, (1, 2, 3, 4), (), "1", -1, 2**32):
        with pytest.raises(TypeError, match="grid must be"):
            mark(grid, 1, p, 0)
    with pytest.raises(TypeError, match="block must be"):
        mark(1, (0,), p, 0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'smem'"):
        mark(1, 1, p, 0, smem=0)
    with pytest.raises(OverflowError):
        mark(1, 1, p, 0, shared_mem=-1)
    with pytest.raises(jitop.JitopError):
        mark(1, 1, p, 0, shared_mem=10 ** 9)  # more than any device has
    assert out.value == 0


def test_streams(tmp_path):
    mark = load(tmp_path).mark
    out = ctypes.c_int(0)
    p = ctypes.addressof(out)

    class TorchLike:
        cuda_stream = 0

    class CupyLike:
        ptr = 0

    class Protocol:
        def __cuda_stream__(self):
            return (0, 0)

    for s in (None, 0, TorchLike(), CupyLike(), Protocol()):
        mark(1, 1, p, 0, stream=s)
    with pytest.raises(TypeError, match="stream must be"):
        mark(1, 1, p, 0, stream="default")
    assert jitop._jitop.stream(TorchLike(), 0) == 0
    assert jitop._jitop.stream(1234, 0) == 1234
    if "torch" not in __import__("sys").modules:
        assert jitop._jitop.stream(None, 0) == 0


def test_bench_launches_from_c(tmp_path):
    mark = load(tmp_path).mark
    out = ctypes.c_int(0)
    secs = mark._bench(10, 1, 32, ctypes.addressof(out), 0)
    assert isinstance(secs, float) and secs >= 0.0 and out.value >= 1
    with pytest.raises(TypeError, match="takes 2 kernel arguments, 1 given"):
        mark._bench(10, 1, 32, 0)


def test_cpp_kernels_convert_by_type(tmp_path):
    mod = load(tmp_path)
    op = mod["typed<float>"]
    b = op._pack(2, None, 3, 4)  # the int 2 for T = float: 2.0f
    assert b[0] == struct.pack("<f", 2.0) and b[2] == struct.pack("<i", 3)
    assert mod["typed<double>"]._pack(2, 0, 3, 4)[0] == struct.pack("<d", 2.0)
    # An extern "C" kernel has no types: the same int goes by size.
    assert mod.sizes._pack(*args(f=2))[4] == struct.pack("<i", 2)
    with pytest.raises(TypeError, match=r"parameter 2 \(4 bytes\): a float for an integer"):
        op._pack(2.0, None, 3.5, 4)
    with pytest.raises(TypeError, match=r"parameter 1 \(8 bytes\): a float for a pointer"):
        op._pack(2.0, 1.0, 3, 4)
    with pytest.raises(TypeError, match=r"parameter 0 \(4 bytes\): a CAI for a floating"):
        op._pack(CAI(0x1000), None, 3, 4)
    with pytest.raises(TypeError, match=r"parameter 3 \(8 bytes\): a NoneType for an integer"):
        op._pack(1.0, None, 3, None)
    c = mod.cpp_kernel
    b = c._pack(1, CAI(0x2000), 7)
    assert b[0] == struct.pack("<d", 1.0) and b[1] == struct.pack("<Q", 0x2000)
    assert b[2] == struct.pack("<h", 7)
