/*
 * jitop's CPython extension (module jitop._jitop): the types and helpers its
 * files share. module.c holds contexts, modules, errors and hot reload;
 * op.c the op type and its launch (argument conversion, streams); shipped.c
 * the shipped ops' entry points (layernorm, lltm) for jitop.torch.
 *
 * Ownership: a Context owns its jitop_ctx and a dict of the Module objects
 * loaded in it (one Python object per jitop_module, so that `load` asked
 * again gives the same object and a watch's callback has a stable home).
 * A Module keeps its Context alive; an Op keeps its Module alive.
 */
#ifndef PYJITOP_H
#define PYJITOP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "jitop.h"

/* 1 when the weak reference ref is dead. */
static inline int pj_weak_dead(PyObject *ref)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj = NULL;
    int rc = PyWeakref_GetRef(ref, &obj);
    Py_XDECREF(obj);
    return rc == 0;
#else
    return PyWeakref_GET_OBJECT(ref) == Py_None;
#endif
}

/* PyObject_GetOptionalAttr is public from 3.13; _PyObject_LookupAttr is
 * the same call before (3.7-3.12). */
static inline int pj_optional_attr(PyObject *obj, PyObject *name, PyObject **out)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, name, out);
#else
    return _PyObject_LookupAttr(obj, name, out);
#endif
}

typedef struct {
    PyObject_HEAD
    jitop_ctx *ctx;
    PyObject *modules;   /* dict: id (int of the jitop_module pointer) -> Module */
    int compile_only;
    int device;
} pj_context;

typedef struct {
    PyObject_HEAD
    pj_context *owner;   /* strong */
    jitop_module *m;
    PyObject *items;     /* dict: name -> Op, what getattr/getitem found */
    PyObject *callback;  /* watch callback (None: print failures) or NULL */
    int watching;
    PyObject *weakrefs;  /* the context's registry holds a weak reference */
} pj_module;

/* The per-op conversion table, refreshed when the module's code generation
 * changes (a hot reload may change a kernel's parameters). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    pj_module *owner;    /* strong */
    jitop_op *op;
    PyObject *name;
    uint64_t generation; /* of the table below; UINT64_MAX: not read yet */
    size_t nparams;
    size_t *param_size;  /* nparams entries */
    size_t *slot;        /* each argument's byte offset in the packed buffer */
    unsigned char *kind; /* PJ_ANY, PJ_INT, PJ_FLOAT or PJ_PTR per parameter */
    size_t packed_bytes; /* the packed buffer's size */
} pj_op;

/* A parameter's kind, from a C++ kernel's demangled signature (sig.c);
 * PJ_ANY where unknown (extern "C" kernels): its size alone decides. */
enum { PJ_ANY = 0, PJ_INT, PJ_FLOAT, PJ_PTR };
void pj_param_kinds(const char *lowered, size_t nparams, unsigned char *kinds);

extern PyTypeObject pj_context_type;
extern PyTypeObject pj_module_type;
extern PyTypeObject pj_op_type;

/* jitop.JitopError and its subclasses (module.c). */
extern PyObject *pj_error;
extern PyObject *pj_compile_error;
extern PyObject *pj_not_found_error;

/* Raises the exception for a jitop status, with jitop_errmsg()'s text
 * (and `what` in front when not NULL). Returns NULL. */
PyObject *pj_raise(int status, const char *what);

/* An op's description as op.info() and mod.ops() give it: a dict of name,
 * lowered, params (offset and size each), max_threads_per_block, num_regs
 * and static_shared_bytes; NULL with an exception set (op.c). */
PyObject *pj_op_info_dict(const jitop_op_info *info);
/* Creates an Op for op (op.c). */
PyObject *pj_op_new(pj_module *owner, jitop_op *op, PyObject *name);
/* Resolves the stream argument (None: torch's current stream or 0) (op.c). */
int pj_stream_arg(PyObject *obj, int device, void **out);
/* Initializes op.c's cached names; 0 on success (op.c). */
int pj_op_init(PyObject *module);

/* The shipped ops' methods (shipped.c). */
extern PyMethodDef pj_shipped_methods[];

#endif
