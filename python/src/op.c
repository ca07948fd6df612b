/*
 * The Op type: op(grid, block, *args, shared_mem=0, stream=None) launches a
 * kernel. The call is a vectorcall (no tuple or dict is built for it), the
 * arguments are converted by the kernel's parameter sizes, read once per
 * code generation and kept in the op, and packed into a buffer on the C
 * stack: a launch allocates nothing (kernels with more than PJ_STACK_PARAMS
 * parameters or PJ_STACK_BYTES of them take one heap buffer per call).
 *
 * Conversion rules (by the parameter's size as the driver reports it;
 * kernels carry no parameter types):
 *  - int (and bool): 8 bytes -> int64 (or uint64 past INT64_MAX), 4 -> int32
 *    or uint32, 2 and 1 likewise; any other size is a TypeError.
 *  - float: 4 bytes -> float32, 8 -> float64; other sizes (a half?) are a
 *    TypeError: pass a NumPy or ctypes value of the exact size.
 *  - None: a NULL pointer (8 bytes).
 *  - torch.Tensor (data_ptr()), __cuda_array_interface__ (CuPy, Numba),
 *    __dlpack__ (a CUDA, CUDA-host or managed tensor): its device address,
 *    for an 8-byte parameter.
 *  - NumPy scalars and ctypes values: their bytes as they are, when their
 *    size is the parameter's.
 * A C++ kernel (not extern "C") also tells its parameter types through its
 * mangled name (sig.c): there an int given to a float or double parameter
 * is passed as that floating-point type, and a float, None or a device
 * array given to a parameter of another kind is a TypeError.
 */
#include "pyjitop.h"

#include <stdalign.h>
#include <string.h>
#include <time.h>

#define PJ_STACK_PARAMS 64
#define PJ_STACK_BYTES 1024

static PyObject *s_data_ptr, *s_cai, *s_dlpack, *s_shared_mem, *s_stream, *s_cuda_stream,
    *s_ptr, *s_cuda_stream_proto, *s_torch, *s_ctypes, *s_numpy;

/* Types found in sys.modules the first time a call needs them: importing
 * torch, NumPy or ctypes is the user's choice, never jitop's. */
static PyTypeObject *g_tensor_type;  /* torch.Tensor */
static PyTypeObject *g_cdata_type;   /* ctypes' _CData base */
static PyTypeObject *g_npgeneric;    /* numpy.generic */
/* torch._C._cuda_getCurrentRawStream, once torch is imported and has CUDA;
 * g_torch_stream_state: 0 not looked yet, 1 found, 2 torch without CUDA. */
static PyObject *g_torch_raw_stream;
static int g_torch_stream_state;
static PyObject *g_device_ints[16]; /* small ints for the raw-stream call */

/* sys.modules[name] or NULL (borrowed); name an interned str. */
static PyObject *sys_module(PyObject *name)
{
    PyObject *mods = PyImport_GetModuleDict(); /* borrowed */
    PyObject *m = mods ? PyDict_GetItemWithError(mods, name) : NULL;
    if (!m)
        PyErr_Clear();
    return m;
}

static void find_types(void)
{
    if (!g_tensor_type) {
        PyObject *torch = sys_module(s_torch);
        if (torch) {
            PyObject *t = PyObject_GetAttrString(torch, "Tensor");
            if (t && PyType_Check(t))
                g_tensor_type = (PyTypeObject *)t; /* kept for the process */
            else
                Py_XDECREF(t);
            PyErr_Clear();
        }
    }
    if (!g_cdata_type) {
        PyObject *ct = sys_module(s_ctypes);
        if (ct) {
            PyObject *simple = PyObject_GetAttrString(ct, "_SimpleCData");
            if (simple && PyType_Check(simple)) {
                /* _SimpleCData, Structure, Union, Array and _Pointer derive
                 * from _ctypes._CData, its base. */
                PyTypeObject *base = ((PyTypeObject *)simple)->tp_base;
                if (base && base != &PyBaseObject_Type) {
                    Py_INCREF(base);
                    g_cdata_type = base;
                }
            }
            Py_XDECREF(simple);
            PyErr_Clear();
        }
    }
    if (!g_npgeneric) {
        PyObject *np = sys_module(s_numpy);
        if (np) {
            PyObject *g = PyObject_GetAttrString(np, "generic");
            if (g && PyType_Check(g))
                g_npgeneric = (PyTypeObject *)g;
            else
                Py_XDECREF(g);
            PyErr_Clear();
        }
    }
}

static const char *op_cname(const pj_op *op)
{
    const char *s = PyUnicode_AsUTF8(op->name);
    if (!s) {
        PyErr_Clear();
        s = "?";
    }
    return s;
}

static int arg_error(const pj_op *op, size_t i, const char *fmt, PyObject *obj)
{
    PyObject *what = PyUnicode_FromFormat(fmt, Py_TYPE(obj)->tp_name);
    if (!what)
        return -1;
    PyErr_Format(PyExc_TypeError, "op %s: parameter %zu (%zu bytes): %U", op_cname(op), i,
                 op->param_size[i], what);
    Py_DECREF(what);
    return -1;
}

/* ------------------------------------------------------- device pointers */

/* DLPack's C ABI (dlpack.h, v0.8 and 1.x: DLTensor is the same), declared
 * here so that the package needs no header beyond Python's. */
typedef struct {
    void *data;
    struct {
        int32_t device_type;
        int32_t device_id;
    } device;
    int32_t ndim;
    struct {
        uint8_t code, bits;
        uint16_t lanes;
    } dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} pj_dltensor;

enum { PJ_DL_CUDA = 2, PJ_DL_CUDA_HOST = 3, PJ_DL_CUDA_MANAGED = 13 };

static int dlpack_ptr(const pj_op *op, size_t i, PyObject *obj, PyObject *fn, uint64_t *out)
{
    PyObject *cap = PyObject_CallNoArgs(fn);
    if (!cap)
        return -1;
    int rc = -1;
    const pj_dltensor *t = NULL;
    /* Versioned capsules (DLPack 1.x, asked for with max_version) put a
     * version and flags before the tensor; the call without arguments
     * returns the unversioned "dltensor", whose first member is the tensor. */
    if (PyCapsule_IsValid(cap, "dltensor"))
        t = PyCapsule_GetPointer(cap, "dltensor");
    if (!t) {
        PyErr_Clear();
        arg_error(op, i, "%s.__dlpack__() did not return a 'dltensor' capsule", obj);
        goto out;
    }
    if (t->device.device_type != PJ_DL_CUDA && t->device.device_type != PJ_DL_CUDA_HOST &&
        t->device.device_type != PJ_DL_CUDA_MANAGED) {
        PyObject *what = PyUnicode_FromFormat("a %%s on DLPack device type %d, not CUDA memory",
                                              (int)t->device.device_type);
        if (what) {
            arg_error(op, i, PyUnicode_AsUTF8(what), obj);
            Py_DECREF(what);
        }
        goto out;
    }
    *out = (uint64_t)(uintptr_t)t->data + t->byte_offset;
    rc = 0;
out:
    /* Unconsumed, the capsule's destructor calls the producer's deleter. */
    Py_DECREF(cap);
    return rc;
}

static int cai_ptr(const pj_op *op, size_t i, PyObject *obj, PyObject *cai, uint64_t *out)
{
    PyObject *data = PyDict_Check(cai) ? PyDict_GetItemString(cai, "data") : NULL;
    if (!data || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) < 1 ||
        !PyLong_Check(PyTuple_GET_ITEM(data, 0)))
        return arg_error(op, i, "%s.__cuda_array_interface__ has no 'data': (ptr, readonly)", obj);
    unsigned long long p = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(data, 0));
    if (p == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = p;
    return 0;
}

static int tensor_ptr(PyObject *obj, uint64_t *out)
{
    /* data_ptr() through the method vectorcall: no bound method object. */
    PyObject *p = PyObject_VectorcallMethod(s_data_ptr, &obj, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            NULL);
    if (!p)
        return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(p);
    Py_DECREF(p);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* 1 with *out set when obj is a device array, 0 when it is not one, -1 on
 * an error (raised). */
static int device_ptr(const pj_op *op, size_t i, PyObject *obj, uint64_t *out)
{
    if (g_tensor_type && PyObject_TypeCheck(obj, g_tensor_type))
        return tensor_ptr(obj, out) < 0 ? -1 : 1;
    PyObject *cai = NULL;
    if (pj_optional_attr(obj, s_cai, &cai) < 0)
        return -1;
    if (cai) {
        int rc = cai_ptr(op, i, obj, cai, out);
        Py_DECREF(cai);
        return rc < 0 ? -1 : 1;
    }
    PyObject *dl = NULL;
    if (pj_optional_attr(obj, s_dlpack, &dl) < 0)
        return -1;
    if (dl) {
        int rc = dlpack_ptr(op, i, obj, dl, out);
        Py_DECREF(dl);
        return rc < 0 ? -1 : 1;
    }
    return 0;
}

/* ------------------------------------------------------------ conversion */

static int put_int(const pj_op *op, size_t i, PyObject *obj, unsigned char *dst)
{
    size_t size = op->param_size[i];
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (size == 8) {
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(obj);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return arg_error(op, i, "an %s out of the 64-bit range", obj);
            }
            memcpy(dst, &u, 8);
            return 0;
        }
        if (overflow < 0)
            return arg_error(op, i, "an %s out of the 64-bit range", obj);
        memcpy(dst, &v, 8);
        return 0;
    }
    if (size != 4 && size != 2 && size != 1)
        return arg_error(op, i,
                         "an %s cannot fill it (ints go to 1, 2, 4 or 8-byte parameters); pass "
                         "a NumPy or ctypes value of its size",
                         obj);
    long long lo = -(1LL << (8 * size - 1)), hi = (1LL << (8 * size)) - 1;
    if (overflow || v < lo || v > hi) {
        PyObject *msg = PyUnicode_FromFormat("an %%s out of the %zu-bit range", 8 * size);
        if (msg) {
            arg_error(op, i, PyUnicode_AsUTF8(msg), obj);
            Py_DECREF(msg);
        }
        return -1;
    }
    /* Little-endian: the low bytes hold the value, signed or not. */
    memcpy(dst, &v, size);
    return 0;
}

static int put_float(const pj_op *op, size_t i, PyObject *obj, unsigned char *dst)
{
    double d = PyFloat_AsDouble(obj);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    if (op->param_size[i] == 4) {
        float f = (float)d;
        memcpy(dst, &f, 4);
        return 0;
    }
    if (op->param_size[i] == 8) {
        memcpy(dst, &d, 8);
        return 0;
    }
    return arg_error(op, i,
                     "a %s is ambiguous here (floats go to 4-byte float32 or 8-byte float64 "
                     "parameters); pass a NumPy or ctypes value of its size",
                     obj);
}

static int put_bytes(const pj_op *op, size_t i, PyObject *obj, unsigned char *dst)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return -1;
    int rc = 0;
    if ((size_t)view.len != op->param_size[i]) {
        PyObject *msg = PyUnicode_FromFormat("a %%s of %zd bytes", view.len);
        rc = -1;
        if (msg) {
            arg_error(op, i, PyUnicode_AsUTF8(msg), obj);
            Py_DECREF(msg);
        }
    } else {
        memcpy(dst, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return rc;
}

static const char *kind_name(unsigned char kind)
{
    return kind == PJ_INT ? "an integer" : kind == PJ_FLOAT ? "a floating-point" : "a pointer";
}

static int kind_error(const pj_op *op, size_t i, PyObject *obj)
{
    PyObject *msg = PyUnicode_FromFormat("a %%s for %s parameter", kind_name(op->kind[i]));
    if (msg) {
        arg_error(op, i, PyUnicode_AsUTF8(msg), obj);
        Py_DECREF(msg);
    }
    return -1;
}

static int convert(const pj_op *op, size_t i, PyObject *obj, unsigned char *dst)
{
    unsigned char kind = op->kind[i];
    if (PyFloat_CheckExact(obj))
        return kind == PJ_INT || kind == PJ_PTR ? kind_error(op, i, obj)
                                                : put_float(op, i, obj, dst);
    if (PyLong_Check(obj))
        /* A C++ float parameter given 2: the float 2.0, as C++ would. */
        return kind == PJ_FLOAT ? put_float(op, i, obj, dst) : put_int(op, i, obj, dst);
    if (obj == Py_None) {
        if (kind == PJ_INT || kind == PJ_FLOAT)
            return kind_error(op, i, obj);
        if (op->param_size[i] != 8)
            return arg_error(op, i, "%s (a NULL pointer) needs an 8-byte parameter", obj);
        memset(dst, 0, 8);
        return 0;
    }
    uint64_t p = 0;
    /* Tensors first: the common case pays no look-up of other types. */
    if (g_tensor_type && PyObject_TypeCheck(obj, g_tensor_type)) {
        if (kind == PJ_INT || kind == PJ_FLOAT)
            return kind_error(op, i, obj);
        if (op->param_size[i] != 8)
            return arg_error(op, i, "a device pointer (from a %s) needs an 8-byte parameter", obj);
        if (tensor_ptr(obj, &p) < 0)
            return -1;
        memcpy(dst, &p, 8);
        return 0;
    }
    find_types();
    if ((g_cdata_type && PyObject_TypeCheck(obj, g_cdata_type)) ||
        (g_npgeneric && PyObject_TypeCheck(obj, g_npgeneric)))
        return put_bytes(op, i, obj, dst);
    if (PyFloat_Check(obj))
        return kind == PJ_INT || kind == PJ_PTR ? kind_error(op, i, obj)
                                                : put_float(op, i, obj, dst);
    int rc = device_ptr(op, i, obj, &p);
    if (rc < 0)
        return -1;
    if (rc == 1 && (kind == PJ_INT || kind == PJ_FLOAT))
        return kind_error(op, i, obj);
    if (rc == 0)
        return arg_error(op, i,
                         "cannot pass a %s (expected a tensor, an object with "
                         "__cuda_array_interface__ or __dlpack__, an int, a float, None, or a "
                         "NumPy/ctypes value)",
                         obj);
    if (op->param_size[i] != 8)
        return arg_error(op, i, "a device pointer (from a %s) needs an 8-byte parameter", obj);
    memcpy(dst, &p, 8);
    return 0;
}

/* --------------------------------------------------------------- tables */

static int refresh(pj_op *op)
{
    uint64_t gen = jitop_module_generation(op->owner->m);
    jitop_op_info info;
    int status = jitop_op_info_get(op->op, &info);
    if (status != JITOP_OK) {
        pj_raise(status, NULL);
        return -1;
    }
    size_t n = info.nparams;
    size_t *sizes = PyMem_Calloc(n ? n : 1, sizeof *sizes);
    size_t *slots = PyMem_Calloc(n ? n : 1, sizeof *slots);
    unsigned char *kinds = PyMem_Calloc(n ? n : 1, 1);
    if (!sizes || !slots || !kinds) {
        PyMem_Free(sizes);
        PyMem_Free(slots);
        PyMem_Free(kinds);
        PyErr_NoMemory();
        return -1;
    }
    pj_param_kinds(info.lowered, n, kinds);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t s = info.param_size[i], align = s >= 16 ? 16 : 8;
        off = (off + align - 1) / align * align;
        sizes[i] = s;
        slots[i] = off;
        off += s;
    }
    PyMem_Free(op->param_size);
    PyMem_Free(op->slot);
    PyMem_Free(op->kind);
    op->param_size = sizes;
    op->slot = slots;
    op->kind = kinds;
    op->nparams = n;
    op->packed_bytes = off;
    op->generation = gen;
    return 0;
}

static inline int fresh(pj_op *op)
{
    if (op->generation == jitop_module_generation(op->owner->m))
        return 0;
    return refresh(op);
}

/* ----------------------------------------------------------------- calls */

static int dim3_arg(PyObject *obj, const char *what, jitop_dim3 *out)
{
    unsigned v[3] = {1, 1, 1};
    if (PyLong_Check(obj)) {
        unsigned long x = PyLong_AsUnsignedLong(obj);
        if (x == (unsigned long)-1 && PyErr_Occurred())
            goto bad;
        if (x == 0 || x > 0xffffffffUL)
            goto bad;
        v[0] = (unsigned)x;
    } else if (PyTuple_Check(obj) || PyList_Check(obj)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        if (n < 1 || n > 3)
            goto bad;
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *it = PySequence_Fast_GET_ITEM(obj, k);
            unsigned long x = PyLong_Check(it) ? PyLong_AsUnsignedLong(it) : 0;
            if ((x == (unsigned long)-1 && PyErr_Occurred()) || x == 0 || x > 0xffffffffUL)
                goto bad;
            v[k] = (unsigned)x;
        }
    } else {
        goto bad;
    }
    out->x = v[0], out->y = v[1], out->z = v[2];
    return 0;
bad:
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a positive int or a tuple of 1 to 3 of them, not %R",
                 what, obj);
    return -1;
}

static int torch_stream(int device, void **out)
{
    if (g_torch_stream_state == 0) {
        PyObject *torch = sys_module(s_torch);
        if (!torch)
            return 0; /* not imported (yet): ask again next call */
        g_torch_stream_state = 2;
        PyObject *cuda = PyObject_GetAttrString(torch, "cuda");
        PyObject *avail = cuda ? PyObject_CallMethod(cuda, "is_available", NULL) : NULL;
        if (avail && PyObject_IsTrue(avail) == 1) {
            PyObject *c = PyObject_GetAttrString(torch, "_C");
            g_torch_raw_stream = c ? PyObject_GetAttrString(c, "_cuda_getCurrentRawStream") : NULL;
            Py_XDECREF(c);
            if (g_torch_raw_stream)
                g_torch_stream_state = 1;
        }
        Py_XDECREF(avail);
        Py_XDECREF(cuda);
        PyErr_Clear();
    }
    if (g_torch_stream_state != 1)
        return 0;
    PyObject *dev = device >= 0 && device < 16 ? g_device_ints[device] : NULL;
    PyObject *tmp = dev ? NULL : PyLong_FromLong(device);
    if (!dev && !tmp)
        return -1;
    PyObject *argv[1] = {dev ? dev : tmp};
    PyObject *r = PyObject_Vectorcall(g_torch_raw_stream, argv, 1, NULL);
    Py_XDECREF(tmp);
    if (!r)
        return -1;
    void *s = PyLong_AsVoidPtr(r);
    Py_DECREF(r);
    if (!s && PyErr_Occurred())
        return -1;
    *out = s;
    return 0;
}

int pj_stream_arg(PyObject *obj, int device, void **out)
{
    *out = NULL;
    if (!obj || obj == Py_None)
        return torch_stream(device, out);
    PyObject *v = NULL;
    if (PyLong_Check(obj)) {
        Py_INCREF(obj);
        v = obj;
    } else {
        /* torch.cuda.Stream.cuda_stream, cupy.cuda.Stream.ptr, or the CUDA
         * stream protocol's __cuda_stream__() -> (version, handle). */
        if (pj_optional_attr(obj, s_cuda_stream, &v) < 0)
            return -1;
        if (!v && pj_optional_attr(obj, s_ptr, &v) < 0)
            return -1;
        if (!v) {
            PyObject *fn = NULL;
            if (pj_optional_attr(obj, s_cuda_stream_proto, &fn) < 0)
                return -1;
            if (fn) {
                PyObject *t = PyObject_CallNoArgs(fn);
                Py_DECREF(fn);
                if (!t)
                    return -1;
                if (PyTuple_Check(t) && PyTuple_GET_SIZE(t) == 2) {
                    v = PyTuple_GET_ITEM(t, 1);
                    Py_INCREF(v);
                }
                Py_DECREF(t);
            }
        }
        if (!v || !PyLong_Check(v)) {
            Py_XDECREF(v);
            PyErr_Format(PyExc_TypeError,
                         "stream must be None, an int (a CUstream), or a torch/CuPy stream, "
                         "not %.100s",
                         Py_TYPE(obj)->tp_name);
            return -1;
        }
    }
    void *s = PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    if (!s && PyErr_Occurred())
        return -1;
    *out = s;
    return 0;
}

/* Converts args[0..n) into buf (packed_bytes) and ptrs. */
static int pack(pj_op *op, PyObject *const *args, size_t n, unsigned char *buf, void **ptrs)
{
    if (n != op->nparams) {
        PyErr_Format(PyExc_TypeError, "op %s takes %zu kernel arguments, %zu given", op_cname(op),
                     op->nparams, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = buf + op->slot[i];
        if (convert(op, i, args[i], buf + op->slot[i]) < 0)
            return -1;
    }
    return 0;
}

static PyObject *op_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    pj_op *op = (pj_op *)self;
    size_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *smem_obj = NULL, *stream_obj = NULL;
    if (nargs < 2) {
        PyErr_Format(PyExc_TypeError, "op %s: call it as op(grid, block, *args, shared_mem=0, "
                     "stream=None)", op_cname(op));
        return NULL;
    }
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, k);
            if (key == s_shared_mem || PyUnicode_Compare(key, s_shared_mem) == 0)
                smem_obj = args[nargs + k];
            else if (key == s_stream || PyUnicode_Compare(key, s_stream) == 0)
                stream_obj = args[nargs + k];
            else {
                PyErr_Format(PyExc_TypeError, "op %s: unexpected keyword argument %R",
                             op_cname(op), key);
                return NULL;
            }
        }
    }
    jitop_dim3 grid, block;
    if (dim3_arg(args[0], "grid", &grid) < 0 || dim3_arg(args[1], "block", &block) < 0)
        return NULL;
    size_t smem = 0;
    if (smem_obj) {
        smem = PyLong_AsSize_t(smem_obj);
        if (smem == (size_t)-1 && PyErr_Occurred())
            return NULL;
    }
    void *stream = NULL;
    if (pj_stream_arg(stream_obj, op->owner->owner->device, &stream) < 0)
        return NULL;

    alignas(16) unsigned char stackbuf[PJ_STACK_BYTES];
    void *stackptrs[PJ_STACK_PARAMS];
    unsigned char *buf = stackbuf;
    void **ptrs = stackptrs;
    PyObject *ret = NULL;
    /* Twice at most: a hot reload between reading the table and the launch
     * is caught by jitop_launch's size check (JITOP_EARGS), and the table is
     * read again. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (fresh(op) < 0)
            goto out;
        if (op->packed_bytes > PJ_STACK_BYTES || op->nparams > PJ_STACK_PARAMS) {
            if (buf != stackbuf)
                PyMem_Free(buf);
            if (ptrs != stackptrs)
                PyMem_Free(ptrs);
            buf = PyMem_Malloc(op->packed_bytes ? op->packed_bytes : 1);
            ptrs = PyMem_Malloc((op->nparams ? op->nparams : 1) * sizeof *ptrs);
            if (!buf || !ptrs) {
                PyErr_NoMemory();
                goto out;
            }
        }
        if (pack(op, args + 2, nargs - 2, buf, ptrs) < 0)
            goto out;
        uint64_t gen = op->generation;
        int status = jitop_launch(op->op, grid, block, smem, stream, ptrs, op->param_size,
                                  op->nparams);
        if (status == JITOP_OK) {
            Py_INCREF(Py_None);
            ret = Py_None;
            goto out;
        }
        if (status != JITOP_EARGS || gen == jitop_module_generation(op->owner->m)) {
            pj_raise(status, NULL);
            goto out;
        }
    }
    pj_raise(JITOP_EARGS, NULL);
out:
    if (buf != stackbuf)
        PyMem_Free(buf);
    if (ptrs != stackptrs)
        PyMem_Free(ptrs);
    return ret;
}

/* op._pack(*args): each argument's bytes as the launch would pass them (a
 * list of bytes); the conversion rules without a launch, for tests. */
static PyObject *op_pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    pj_op *op = (pj_op *)self;
    if (fresh(op) < 0)
        return NULL;
    unsigned char *buf = PyMem_Calloc(op->packed_bytes ? op->packed_bytes : 1, 1);
    void **ptrs = PyMem_Calloc(op->nparams ? op->nparams : 1, sizeof *ptrs);
    PyObject *list = NULL;
    if (!buf || !ptrs) {
        PyErr_NoMemory();
        goto out;
    }
    if (pack(op, args, (size_t)nargs, buf, ptrs) < 0)
        goto out;
    list = PyList_New((Py_ssize_t)op->nparams);
    for (size_t i = 0; list && i < op->nparams; i++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)ptrs[i], (Py_ssize_t)op->param_size[i]);
        if (!b) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, b);
    }
out:
    PyMem_Free(buf);
    PyMem_Free(ptrs);
    return list;
}

static double now_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0.0; /* never for this clock; a zero reads as a broken bench */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* op._bench(count, grid, block, *args) -> seconds: count launches with
 * arguments converted once, from C: what jitop_launch alone costs, to set
 * beside a launch from Python in the same process (bench/python_bench.py). */
static PyObject *op_bench(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    pj_op *op = (pj_op *)self;
    if (nargs < 3)
        return PyErr_Format(PyExc_TypeError, "_bench(count, grid, block, *args)");
    long count = PyLong_AsLong(args[0]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    jitop_dim3 grid, block;
    if (dim3_arg(args[1], "grid", &grid) < 0 || dim3_arg(args[2], "block", &block) < 0 ||
        fresh(op) < 0)
        return NULL;
    unsigned char *buf = PyMem_Calloc(op->packed_bytes ? op->packed_bytes : 1, 1);
    void **ptrs = PyMem_Calloc(op->nparams ? op->nparams : 1, sizeof *ptrs);
    void *stream = NULL;
    PyObject *ret = NULL;
    if (!buf || !ptrs) {
        PyErr_NoMemory();
        goto out;
    }
    if (pack(op, args + 3, (size_t)nargs - 3, buf, ptrs) < 0 ||
        pj_stream_arg(NULL, op->owner->owner->device, &stream) < 0)
        goto out;
    double t0 = now_s();
    for (long k = 0; k < count; k++) {
        int status = jitop_launch(op->op, grid, block, 0, stream, ptrs, op->param_size,
                                  op->nparams);
        if (status != JITOP_OK) {
            pj_raise(status, NULL);
            goto out;
        }
    }
    ret = PyFloat_FromDouble(now_s() - t0);
out:
    PyMem_Free(buf);
    PyMem_Free(ptrs);
    return ret;
}

PyObject *pj_op_info_dict(const jitop_op_info *info)
{
    PyObject *params = PyList_New((Py_ssize_t)info->nparams);
    for (size_t i = 0; params && i < info->nparams; i++) {
        PyObject *t = Py_BuildValue("{s:n,s:n}", "offset", (Py_ssize_t)info->param_offset[i],
                                    "size", (Py_ssize_t)info->param_size[i]);
        if (!t) {
            Py_CLEAR(params);
            break;
        }
        PyList_SET_ITEM(params, (Py_ssize_t)i, t);
    }
    if (!params)
        return NULL;
    return Py_BuildValue("{s:s,s:s,s:N,s:i,s:i,s:n}", "name", info->name, "lowered",
                         info->lowered, "params", params, "max_threads_per_block",
                         info->max_threads_per_block, "num_regs", info->num_regs,
                         "static_shared_bytes", (Py_ssize_t)info->static_shared_bytes);
}

/* op.info(): the kernel's description (jitop_op_info_get). */
static PyObject *op_info(PyObject *self, PyObject *unused)
{
    (void)unused;
    pj_op *op = (pj_op *)self;
    jitop_op_info info;
    int status = jitop_op_info_get(op->op, &info);
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    return pj_op_info_dict(&info);
}

/* op.occupancy(shared_mem=0) -> (block_size, min_grid). */
static PyObject *op_occupancy(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"shared_mem", NULL};
    Py_ssize_t smem = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n", kwlist, &smem))
        return NULL;
    if (smem < 0)
        return PyErr_Format(PyExc_ValueError, "shared_mem must be >= 0");
    int block = 0, grid = 0;
    int status = jitop_occupancy(((pj_op *)self)->op, (size_t)smem, &block, &grid);
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    return Py_BuildValue("(ii)", block, grid);
}

static PyObject *op_repr(PyObject *self)
{
    pj_op *op = (pj_op *)self;
    return PyUnicode_FromFormat("<jitop.Op %R of module %s>", op->name,
                                jitop_module_name(op->owner->m));
}

static void op_dealloc(PyObject *self)
{
    pj_op *op = (pj_op *)self;
    PyObject_GC_UnTrack(self);
    Py_CLEAR(op->owner);
    Py_CLEAR(op->name);
    PyMem_Free(op->param_size);
    PyMem_Free(op->slot);
    PyMem_Free(op->kind);
    Py_TYPE(self)->tp_free(self);
}

static int op_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((pj_op *)self)->owner);
    return 0;
}

static PyObject *op_get_name(PyObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef(((pj_op *)self)->name);
}

static PyObject *op_get_module(PyObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef((PyObject *)((pj_op *)self)->owner);
}

static PyMethodDef op_methods[] = {
    {"info", op_info, METH_NOARGS, "The kernel's description: name, lowered, params "
                                   "(offset, size), max_threads_per_block, num_regs, "
                                   "static_shared_bytes."},
    {"occupancy", (PyCFunction)(void (*)(void))op_occupancy, METH_VARARGS | METH_KEYWORDS,
     "occupancy(shared_mem=0) -> (block_size, min_grid) that maximize occupancy."},
    {"_pack", (PyCFunction)(void (*)(void))op_pack, METH_FASTCALL,
     "The bytes each argument would be launched with (for tests)."},
    {"_bench", (PyCFunction)(void (*)(void))op_bench, METH_FASTCALL,
     "_bench(count, grid, block, *args) -> seconds of count launches from C (benchmarks)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef op_getset[] = {
    {"name", op_get_name, NULL, "the name the op was asked by", NULL},
    {"module", op_get_module, NULL, "the module the op belongs to", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pj_op_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jitop.Op",
    .tp_doc = "A kernel: op(grid, block, *args, shared_mem=0, stream=None) launches it.",
    .tp_basicsize = sizeof(pj_op),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(pj_op, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = op_dealloc,
    .tp_traverse = op_traverse,
    .tp_repr = op_repr,
    .tp_methods = op_methods,
    .tp_getset = op_getset,
};

PyObject *pj_op_new(pj_module *owner, jitop_op *jop, PyObject *name)
{
    pj_op *op = PyObject_GC_New(pj_op, &pj_op_type);
    if (!op)
        return NULL;
    op->vectorcall = op_vectorcall;
    op->owner = (pj_module *)Py_NewRef((PyObject *)owner);
    op->op = jop;
    op->name = Py_NewRef(name);
    op->generation = UINT64_MAX;
    op->nparams = 0;
    op->param_size = NULL;
    op->slot = NULL;
    op->kind = NULL;
    op->packed_bytes = 0;
    PyObject_GC_Track((PyObject *)op);
    return (PyObject *)op;
}

int pj_op_init(PyObject *module)
{
    (void)module;
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {
        {&s_data_ptr, "data_ptr"},         {&s_cai, "__cuda_array_interface__"},
        {&s_dlpack, "__dlpack__"},         {&s_shared_mem, "shared_mem"},
        {&s_stream, "stream"},             {&s_cuda_stream, "cuda_stream"},
        {&s_ptr, "ptr"},                   {&s_cuda_stream_proto, "__cuda_stream__"},
        {&s_torch, "torch"},               {&s_ctypes, "ctypes"},
        {&s_numpy, "numpy"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!*names[k].slot && !(*names[k].slot = PyUnicode_InternFromString(names[k].s)))
            return -1;
    for (int d = 0; d < 16; d++)
        if (!g_device_ints[d] && !(g_device_ints[d] = PyLong_FromLong(d)))
            return -1;
    return 0;
}
