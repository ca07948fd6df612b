/*
 * The shipped ops (include/jitop_ops.h) for jitop.torch: thin fast-call
 * wrappers whose pointers and stream are ints (data_ptr(), the raw stream),
 * so that an autograd step pays one C call per op and no ctypes.
 */
#include "pyjitop.h"

/* Reads nargs ints into v[] (pointers and sizes alike, as 64-bit values)
 * after the Context in args[0]. */
static int parse(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *fn,
                 pj_context **ctx, long long *v)
{
    if (nargs != want + 1) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, %zd given", fn, want + 1, nargs);
        return -1;
    }
    if (!PyObject_TypeCheck(args[0], &pj_context_type) || !((pj_context *)args[0])->ctx) {
        PyErr_Format(PyExc_TypeError, "%s: the first argument must be a jitop.Context", fn);
        return -1;
    }
    *ctx = (pj_context *)args[0];
    for (Py_ssize_t i = 0; i < want; i++) {
        PyObject *a = args[i + 1];
        if (a == Py_None) {
            v[i] = 0;
            continue;
        }
        int overflow = 0;
        v[i] = PyLong_AsLongLongAndOverflow(a, &overflow);
        if (overflow > 0) /* an address past INT64_MAX */
            v[i] = (long long)PyLong_AsUnsignedLongLong(a);
        if (PyErr_Occurred())
            return -1;
    }
    return 0;
}

#define P(x) ((void *)(uintptr_t)(x))

static PyObject *done(int status, const char *fn)
{
    if (status != JITOP_OK)
        return pj_raise(status, fn);
    Py_RETURN_NONE;
}

/* layernorm_forward(ctx, dtype, rows, cols, eps, x, gamma, beta, y, mean, rstd, stream) */
static PyObject *sh_layernorm_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    pj_context *c;
    long long v[11];
    if (nargs == 12 && PyFloat_Check(args[4])) {
        /* eps is a float: parse around it */
        double eps = PyFloat_AsDouble(args[4]);
        PyObject *rest[12];
        for (int i = 0; i < 12; i++)
            rest[i] = args[i];
        rest[4] = Py_None;
        if (parse(rest, 12, 11, "layernorm_forward", &c, v) < 0)
            return NULL;
        return done(jitop_layernorm_forward(c->ctx, (jitop_dtype)v[0], v[1], v[2], (float)eps,
                                            P(v[4]), P(v[5]), P(v[6]), P(v[7]), P(v[8]),
                                            P(v[9]), P(v[10])),
                    "layernorm_forward");
    }
    PyErr_SetString(PyExc_TypeError,
                    "layernorm_forward(ctx, dtype, rows, cols, eps: float, x, gamma, beta, y, "
                    "mean, rstd, stream)");
    return NULL;
}

/* layernorm_backward(ctx, dtype, rows, cols, dy, x, gamma, mean, rstd, dx, dgamma, dbeta,
 * stream) */
static PyObject *sh_layernorm_backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    pj_context *c;
    long long v[12];
    if (parse(args, nargs, 12, "layernorm_backward", &c, v) < 0)
        return NULL;
    return done(jitop_layernorm_backward(c->ctx, (jitop_dtype)v[0], v[1], v[2], P(v[3]),
                                         P(v[4]), P(v[5]), P(v[6]), P(v[7]), P(v[8]), P(v[9]),
                                         P(v[10]), P(v[11])),
                "layernorm_backward");
}

static int check_int(long long x, const char *what)
{
    if (x < 1 || x > 0x7fffffff) {
        PyErr_Format(PyExc_ValueError, "%s must be in 1..2^31-1, not %lld", what, x);
        return -1;
    }
    return 0;
}

/* lltm_saved_size(dtype, B, I, S) -> bytes */
static PyObject *sh_lltm_saved_size(PyObject *self, PyObject *args)
{
    (void)self;
    int dtype, B, I, S;
    if (!PyArg_ParseTuple(args, "iiii:lltm_saved_size", &dtype, &B, &I, &S))
        return NULL;
    return PyLong_FromSize_t(jitop_lltm_saved_size((jitop_dtype)dtype, B, I, S));
}

/* lltm_forward(ctx, dtype, B, I, S, input, weights, bias, old_h, old_cell, new_h, new_cell,
 * saved, stream) */
static PyObject *sh_lltm_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    pj_context *c;
    long long v[13];
    if (parse(args, nargs, 13, "lltm_forward", &c, v) < 0 || check_int(v[1], "B") < 0 ||
        check_int(v[2], "I") < 0 || check_int(v[3], "S") < 0)
        return NULL;
    return done(jitop_lltm_forward(c->ctx, (jitop_dtype)v[0], (int)v[1], (int)v[2], (int)v[3],
                                   P(v[4]), P(v[5]), P(v[6]), P(v[7]), P(v[8]), P(v[9]),
                                   P(v[10]), P(v[11]), P(v[12])),
                "lltm_forward");
}

/* lltm_backward(ctx, dtype, B, I, S, grad_h, grad_cell, saved, weights, d_old_h, d_input,
 * d_weights, d_bias, d_old_cell, stream) */
static PyObject *sh_lltm_backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    pj_context *c;
    long long v[14];
    if (parse(args, nargs, 14, "lltm_backward", &c, v) < 0 || check_int(v[1], "B") < 0 ||
        check_int(v[2], "I") < 0 || check_int(v[3], "S") < 0)
        return NULL;
    return done(jitop_lltm_backward(c->ctx, (jitop_dtype)v[0], (int)v[1], (int)v[2], (int)v[3],
                                    P(v[4]), P(v[5]), P(v[6]), P(v[7]), P(v[8]), P(v[9]),
                                    P(v[10]), P(v[11]), P(v[12]), P(v[13])),
                "lltm_backward");
}

/* square_matmul_inplace(ctx, dtype, m, n, a, w, transpose_w, flags, stream) */
static PyObject *sh_square_matmul_inplace(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    pj_context *c;
    long long v[8];
    if (parse(args, nargs, 8, "square_matmul_inplace", &c, v) < 0)
        return NULL;
    if (v[6] < 0 || v[6] > 0xffffffffLL) {
        PyErr_Format(PyExc_ValueError, "square_matmul_inplace: flags must fit 32 bits, not %lld",
                     v[6]);
        return NULL;
    }
    return done(jitop_square_matmul_inplace(c->ctx, (jitop_dtype)v[0], v[1], v[2], P(v[3]),
                                            P(v[4]), (int)(v[5] != 0), (unsigned)v[6], P(v[7])),
                "square_matmul_inplace");
}

/* softmax_inplace(ctx, dtype, rows, n, x, scale: float, causal_q, stream) */
static PyObject *sh_softmax_inplace(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    pj_context *c;
    long long v[7];
    if (nargs != 8 || !PyFloat_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "softmax_inplace(ctx, dtype, rows, n, x, scale: float, causal_q, stream)");
        return NULL;
    }
    /* scale is a float: parse around it */
    double scale = PyFloat_AsDouble(args[5]);
    PyObject *rest[8];
    for (int i = 0; i < 8; i++)
        rest[i] = args[i];
    rest[5] = Py_None;
    if (parse(rest, 8, 7, "softmax_inplace", &c, v) < 0)
        return NULL;
    return done(jitop_softmax_inplace(c->ctx, (jitop_dtype)v[0], v[1], v[2], P(v[3]),
                                      (float)scale, v[5], P(v[6])),
                "softmax_inplace");
}

/* square_matmul_scratch_bound(dtype, n) -> bytes */
static PyObject *sh_square_matmul_scratch_bound(PyObject *self, PyObject *args)
{
    (void)self;
    int dtype;
    long long n;
    if (!PyArg_ParseTuple(args, "iL:square_matmul_scratch_bound", &dtype, &n))
        return NULL;
    return PyLong_FromSize_t(jitop_square_matmul_scratch_bound((jitop_dtype)dtype, n));
}

static pj_context *context_arg(PyObject *arg, const char *fn)
{
    if (!PyObject_TypeCheck(arg, &pj_context_type) || !((pj_context *)arg)->ctx) {
        PyErr_Format(PyExc_TypeError, "%s: the argument must be a jitop.Context", fn);
        return NULL;
    }
    return (pj_context *)arg;
}

/* inplace_scratch_bytes(ctx) -> bytes the in-place ops hold now */
static PyObject *sh_inplace_scratch_bytes(PyObject *self, PyObject *arg)
{
    (void)self;
    pj_context *c = context_arg(arg, "inplace_scratch_bytes");
    return c ? PyLong_FromSize_t(jitop_inplace_scratch_bytes(c->ctx)) : NULL;
}

/* inplace_release(ctx): synchronizes the context (without the GIL) and frees
 * the in-place ops' scratch. */
static PyObject *sh_inplace_release(PyObject *self, PyObject *arg)
{
    (void)self;
    pj_context *c = context_arg(arg, "inplace_release");
    if (!c)
        return NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = jitop_inplace_release(c->ctx);
    Py_END_ALLOW_THREADS
    return done(status, "inplace_release");
}

/* stream(obj, device) -> int: what a launch's stream= gives (None: torch's
 * current stream when torch is imported, else 0). */
static PyObject *sh_stream(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "stream(obj, device: int)");
        return NULL;
    }
    long device = PyLong_AsLong(args[1]);
    if (device == -1 && PyErr_Occurred())
        return NULL;
    if (device < 0 || device > 0x7fffffff) {
        PyErr_SetString(PyExc_ValueError, "device must be a CUDA ordinal");
        return NULL;
    }
    void *s = NULL;
    if (pj_stream_arg(args[0], (int)device, &s) < 0)
        return NULL;
    return PyLong_FromVoidPtr(s);
}

PyMethodDef pj_shipped_methods[] = {
    {"layernorm_forward", (PyCFunction)(void (*)(void))sh_layernorm_forward, METH_FASTCALL,
     "jitop_layernorm_forward with pointers as ints."},
    {"layernorm_backward", (PyCFunction)(void (*)(void))sh_layernorm_backward, METH_FASTCALL,
     "jitop_layernorm_backward with pointers as ints."},
    {"lltm_saved_size", sh_lltm_saved_size, METH_VARARGS, "jitop_lltm_saved_size."},
    {"lltm_forward", (PyCFunction)(void (*)(void))sh_lltm_forward, METH_FASTCALL,
     "jitop_lltm_forward with pointers as ints."},
    {"lltm_backward", (PyCFunction)(void (*)(void))sh_lltm_backward, METH_FASTCALL,
     "jitop_lltm_backward with pointers as ints."},
    {"square_matmul_inplace", (PyCFunction)(void (*)(void))sh_square_matmul_inplace,
     METH_FASTCALL, "jitop_square_matmul_inplace with pointers as ints."},
    {"softmax_inplace", (PyCFunction)(void (*)(void))sh_softmax_inplace, METH_FASTCALL,
     "jitop_softmax_inplace with pointers as ints."},
    {"square_matmul_scratch_bound", sh_square_matmul_scratch_bound, METH_VARARGS,
     "jitop_square_matmul_scratch_bound."},
    {"inplace_scratch_bytes", sh_inplace_scratch_bytes, METH_O, "jitop_inplace_scratch_bytes."},
    {"inplace_release", sh_inplace_release, METH_O,
     "jitop_inplace_release (synchronizes the context, without the GIL)."},
    {"stream", (PyCFunction)(void (*)(void))sh_stream, METH_FASTCALL,
     "stream(obj, device) -> the CUstream as an int, as a launch's stream= resolves it."},
    {NULL, NULL, 0, NULL},
};
