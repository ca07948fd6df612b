/*
 * jitop._jitop: contexts, modules, errors and hot reload. The Python layer
 * (jitop/__init__.py) adds torch's load()/load_inline() signatures and the
 * default contexts on top.
 *
 * Calls that may compile (load, op lookup, build, reload) release the GIL;
 * launches (op.c) do not: they cost microseconds and the GIL round trip
 * would be a fair part of it.
 *
 * Hot reload callbacks run on jitop's watch thread, which must never wait
 * for the GIL (the main thread may hold it while it waits for a lock the
 * watch thread holds). The C callback only queues the event and asks
 * Py_AddPendingCall to deliver it: the interpreter's main thread calls the
 * Python callback at its next check, within milliseconds in a notebook.
 */
#include "pyjitop.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

PyObject *pj_error;
PyObject *pj_compile_error;
PyObject *pj_not_found_error;
static PyObject *pj_driver_error;

PyObject *pj_raise(int status, const char *what)
{
    PyObject *type = pj_error;
    if (status == JITOP_ECOMPILE)
        type = pj_compile_error;
    else if (status == JITOP_ENOTFOUND)
        type = pj_not_found_error;
    else if (status == JITOP_ENODRIVER)
        type = pj_driver_error;
    else if (status == JITOP_EARGS)
        type = PyExc_TypeError;
    else if (status == JITOP_EINVAL)
        type = PyExc_ValueError;
    else if (status == JITOP_ENOMEM)
        return PyErr_NoMemory();
    const char *msg = jitop_errmsg(NULL);
    PyObject *text = what ? PyUnicode_FromFormat("%s: %s", what, msg && *msg ? msg : jitop_strerror(status))
                          : PyUnicode_FromString(msg && *msg ? msg : jitop_strerror(status));
    if (!text)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(type, text);
    Py_DECREF(text);
    if (!exc)
        return NULL;
    if (PyObject_IsInstance(exc, pj_error) == 1) {
        PyObject *st = PyLong_FromLong(status);
        if (!st || PyObject_SetAttrString(exc, "status", st) < 0) {
            Py_XDECREF(st);
            Py_DECREF(exc);
            return NULL;
        }
        Py_DECREF(st);
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ------------------------------------------------------- string arrays */

/* A list of str/path-like objects as a C array of file-system bytes. */
typedef struct {
    PyObject *keep; /* list of bytes objects */
    const char **v;
    size_t n;
} pj_strv;

static void strv_free(pj_strv *s)
{
    Py_CLEAR(s->keep);
    PyMem_Free(s->v);
    s->v = NULL;
    s->n = 0;
}

static int strv_from(PyObject *seq, const char *what, pj_strv *out)
{
    out->keep = NULL, out->v = NULL, out->n = 0;
    if (!seq || seq == Py_None)
        return 0;
    if (PyUnicode_Check(seq) || PyBytes_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of strings, not one string", what);
        return -1;
    }
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    out->keep = PyList_New(0);
    out->v = PyMem_Calloc((size_t)(n ? n : 1), sizeof *out->v);
    if (!out->keep || !out->v) {
        Py_DECREF(fast);
        strv_free(out);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = NULL;
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(fast, i), &b) ||
            PyList_Append(out->keep, b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(fast);
            strv_free(out);
            return -1;
        }
        out->v[i] = PyBytes_AS_STRING(b);
        Py_DECREF(b);
    }
    out->n = (size_t)n;
    Py_DECREF(fast);
    return 0;
}

/* --------------------------------------------------------------- events */

typedef struct pj_event {
    struct pj_event *next;
    pj_module *mod;
    int status;
    char *msg;
} pj_event;

static pthread_mutex_t g_ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pj_event *g_ev_head, *g_ev_tail;
static int g_ev_scheduled;
/* Set by _unwatch_all() at exit: no pending call is asked for once the
 * interpreter may be going away. */
static int g_ev_closed;
/* The watched modules (strong references: a watched module stays alive,
 * its object too, so that the callback has a home, until unwatch()). */
static PyObject *g_watched;

static int deliver(void *unused);

static void on_reload(void *user, jitop_module *m, int status, const char *message)
{
    (void)m;
    pj_event *e = malloc(sizeof *e);
    if (!e)
        return; /* the swap happened; only its report is lost */
    e->next = NULL;
    e->mod = user;
    e->status = status;
    e->msg = message ? strdup(message) : NULL;
    pthread_mutex_lock(&g_ev_lock);
    if (g_ev_tail)
        g_ev_tail->next = e;
    else
        g_ev_head = e;
    g_ev_tail = e;
    int ask = !g_ev_scheduled && !g_ev_closed;
    g_ev_scheduled = g_ev_scheduled || ask;
    pthread_mutex_unlock(&g_ev_lock);
    /* Without the GIL: Py_AddPendingCall takes its own lock. When its queue
     * is full the events wait for the next successful schedule (the next
     * reload, or a call of jitop.poll_events()). */
    if (ask && Py_AddPendingCall(deliver, NULL) != 0) {
        pthread_mutex_lock(&g_ev_lock);
        g_ev_scheduled = 0;
        pthread_mutex_unlock(&g_ev_lock);
    }
}

static void report(pj_event *e)
{
    pj_module *mod = e->mod;
    PyObject *msg = NULL;
    if (e->msg && !(msg = PyUnicode_DecodeUTF8(e->msg, (Py_ssize_t)strlen(e->msg), "replace"))) {
        PyErr_WriteUnraisable((PyObject *)mod);
        return;
    }
    if (mod->callback && mod->callback != Py_None) {
        PyObject *args[2] = {(PyObject *)mod, e->status == JITOP_OK ? Py_None : msg};
        PyObject *r = PyObject_Vectorcall(mod->callback, args, 2, NULL);
        if (!r)
            PyErr_WriteUnraisable(mod->callback);
        Py_XDECREF(r);
    } else if (e->status != JITOP_OK) {
        /* No callback: a failed rebuild must still be seen (the old code
         * keeps running). */
        PySys_FormatStderr("jitop: hot reload of module %s failed, the previous code keeps "
                           "running:\n%U\n",
                           jitop_module_name(mod->m), msg ? msg : Py_None);
    }
    Py_XDECREF(msg);
}

static int deliver(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&g_ev_lock);
    pj_event *e = g_ev_head;
    g_ev_head = g_ev_tail = NULL;
    g_ev_scheduled = 0;
    pthread_mutex_unlock(&g_ev_lock);
    /* Every module in the list is alive now (a dealloc purges its events
     * under the lock, and needs the GIL we hold); a callback may drop the
     * last reference to one (unwatch), so each is held until reported. */
    for (pj_event *k = e; k; k = k->next)
        Py_INCREF((PyObject *)k->mod);
    while (e) {
        pj_event *next = e->next;
        report(e);
        Py_DECREF((PyObject *)e->mod);
        free(e->msg);
        free(e);
        e = next;
    }
    return 0;
}

/* Drops the queued events of mod (it is going away). */
static void purge_events(pj_module *mod)
{
    pthread_mutex_lock(&g_ev_lock);
    pj_event **pp = &g_ev_head, *last = NULL;
    while (*pp) {
        pj_event *e = *pp;
        if (e->mod == mod) {
            *pp = e->next;
            free(e->msg);
            free(e);
        } else {
            last = e;
            pp = &e->next;
        }
    }
    g_ev_tail = last;
    pthread_mutex_unlock(&g_ev_lock);
}

/* --------------------------------------------------------------- Module */

static PyObject *module_wrap(pj_context *c, jitop_module *m)
{
    PyObject *key = PyLong_FromVoidPtr(m);
    if (!key)
        return NULL;
    PyObject *ref = PyDict_GetItemWithError(c->modules, key); /* borrowed weakref */
    if (ref) {
        PyObject *obj = NULL;
#if PY_VERSION_HEX >= 0x030D0000
        if (PyWeakref_GetRef(ref, &obj) < 0) {
            Py_DECREF(key);
            return NULL;
        }
#else
        obj = PyWeakref_GetObject(ref);
        obj = obj && obj != Py_None ? Py_NewRef(obj) : NULL;
#endif
        if (obj) {
            Py_DECREF(key);
            return obj;
        }
    } else if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    pj_module *mod = PyObject_GC_New(pj_module, &pj_module_type);
    if (!mod) {
        Py_DECREF(key);
        return NULL;
    }
    mod->owner = (pj_context *)Py_NewRef((PyObject *)c);
    mod->m = m;
    mod->items = PyDict_New();
    mod->callback = NULL;
    mod->watching = 0;
    mod->weakrefs = NULL;
    PyObject_GC_Track((PyObject *)mod);
    PyObject *wr = mod->items ? PyWeakref_NewRef((PyObject *)mod, NULL) : NULL;
    if (!wr || PyDict_SetItem(c->modules, key, wr) < 0) {
        Py_XDECREF(wr);
        Py_DECREF(key);
        Py_DECREF(mod);
        return NULL;
    }
    Py_DECREF(wr);
    Py_DECREF(key);
    return (PyObject *)mod;
}

/* Finds an op by name, once per name (the dict keeps the Op). Kernels now;
 * host functions (jitop_fn_get) take the same path when that API lands:
 * a name no kernel has is looked up there before NotFoundError. */
static PyObject *module_lookup(pj_module *mod, PyObject *name)
{
    PyObject *found = PyDict_GetItemWithError(mod->items, name);
    if (found)
        return Py_NewRef(found);
    if (PyErr_Occurred())
        return NULL;
    if (!PyUnicode_Check(name))
        return PyErr_Format(PyExc_TypeError, "an op name is a str, not %.100s",
                            Py_TYPE(name)->tp_name);
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return NULL;
    jitop_op *op = NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = jitop_op_get(mod->m, s, &op);
    Py_END_ALLOW_THREADS
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    PyObject *obj = pj_op_new(mod, op, name);
    if (!obj || PyDict_SetItem(mod->items, name, obj) < 0) {
        Py_XDECREF(obj);
        return NULL;
    }
    return obj;
}

static PyObject *module_getattro(PyObject *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(self, name);
    if (r || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    /* Not an attribute: an op, unless a dunder (copy, pickle and IPython
     * probe those and must get AttributeError at once). */
    if (!PyUnicode_Check(name) || PyUnicode_READ_CHAR(name, 0) == '_')
        return NULL;
    PyErr_Clear();
    r = module_lookup((pj_module *)self, name);
    if (!r && PyErr_ExceptionMatches(pj_not_found_error)) {
        /* getattr's contract: AttributeError (hasattr, getattr(m, n, d)). */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *eargs = value ? PyObject_GetAttrString(value, "args") : NULL;
        PyObject *text = eargs && PyTuple_Check(eargs) && PyTuple_GET_SIZE(eargs) > 0
                             ? Py_NewRef(PyTuple_GET_ITEM(eargs, 0))
                             : NULL;
        Py_XDECREF(eargs);
        PyErr_Clear();
        PyErr_SetObject(PyExc_AttributeError, text ? text : name);
        Py_XDECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    return r;
}

static PyObject *module_subscript(PyObject *self, PyObject *name)
{
    return module_lookup((pj_module *)self, name);
}

static PyObject *module_ops(PyObject *self, PyObject *unused)
{
    (void)unused;
    pj_module *mod = (pj_module *)self;
    size_t n = 0;
    int status = jitop_module_ops(mod->m, NULL, 0, &n);
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    jitop_op_info *infos = PyMem_Calloc(n ? n : 1, sizeof *infos);
    if (!infos)
        return PyErr_NoMemory();
    size_t got = 0;
    status = jitop_module_ops(mod->m, infos, n, &got);
    PyObject *list = NULL;
    if (status != JITOP_OK) {
        pj_raise(status, NULL);
        goto out;
    }
    if (got > n)
        got = n; /* a reload in between added kernels: list what was read */
    list = PyList_New((Py_ssize_t)got);
    for (size_t i = 0; list && i < got; i++) {
        PyObject *d = pj_op_info_dict(&infos[i]);
        if (!d) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
out:
    PyMem_Free(infos);
    return list;
}

static PyObject *module_watch(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"callback", NULL};
    PyObject *cb = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:watch", kwlist, &cb))
        return NULL;
    if (cb != Py_None && !PyCallable_Check(cb))
        return PyErr_Format(PyExc_TypeError, "callback must be callable or None");
    pj_module *mod = (pj_module *)self;
    Py_XSETREF(mod->callback, Py_NewRef(cb));
    if (mod->watching)
        Py_RETURN_NONE;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = jitop_watch(mod->m, JITOP_RELOAD_AUTO, on_reload, mod);
    Py_END_ALLOW_THREADS
    if (status != JITOP_OK)
        return pj_raise(status, "watch");
    if (PyList_Append(g_watched, self) < 0) {
        (void)jitop_unwatch(mod->m);
        return NULL;
    }
    mod->watching = 1;
    Py_RETURN_NONE;
}

static int unwatch(pj_module *mod)
{
    if (!mod->watching)
        return JITOP_OK;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = jitop_unwatch(mod->m);
    Py_END_ALLOW_THREADS
    if (status == JITOP_OK)
        mod->watching = 0;
    return status;
}

/* Drops mod from g_watched (the reference watch() took); may free mod. */
static int forget_watched(pj_module *mod)
{
    for (Py_ssize_t i = 0; g_watched && i < PyList_GET_SIZE(g_watched); i++)
        if (PyList_GET_ITEM(g_watched, i) == (PyObject *)mod)
            return PySequence_DelItem(g_watched, i);
    return 0;
}

static PyObject *module_unwatch(PyObject *self, PyObject *unused)
{
    (void)unused;
    pj_module *mod = (pj_module *)self;
    int status = unwatch(mod);
    if (status != JITOP_OK)
        return pj_raise(status, "unwatch");
    if (forget_watched(mod) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *module_reload(PyObject *self, PyObject *unused)
{
    (void)unused;
    int status;
    pj_module *mod = (pj_module *)self;
    Py_BEGIN_ALLOW_THREADS
    status = jitop_module_reload(mod->m);
    Py_END_ALLOW_THREADS
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    Py_RETURN_NONE;
}

static PyObject *module_log(PyObject *self, PyObject *unused)
{
    (void)unused;
    char *log = NULL;
    int status = jitop_module_log(((pj_module *)self)->m, &log);
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    PyObject *r = PyUnicode_DecodeUTF8(log, (Py_ssize_t)strlen(log), "replace");
    jitop_free(log);
    return r;
}

static PyObject *module_get_name(PyObject *self, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(jitop_module_name(((pj_module *)self)->m));
}

static PyObject *module_get_generation(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(jitop_module_generation(((pj_module *)self)->m));
}

static PyObject *module_get_context(PyObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef((PyObject *)((pj_module *)self)->owner);
}

static PyObject *module_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<jitop.Module %s>", jitop_module_name(((pj_module *)self)->m));
}

static int module_traverse(PyObject *self, visitproc visit, void *arg)
{
    pj_module *mod = (pj_module *)self;
    Py_VISIT(mod->items);
    Py_VISIT(mod->callback);
    Py_VISIT(mod->owner);
    return 0;
}

static int module_clear(PyObject *self)
{
    pj_module *mod = (pj_module *)self;
    Py_CLEAR(mod->items);
    Py_CLEAR(mod->callback);
    /* owner stays until dealloc: the jitop module lives in its context. */
    return 0;
}

static void module_dealloc(PyObject *self)
{
    pj_module *mod = (pj_module *)self;
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb); /* dealloc may run while an exception propagates */
    PyObject_GC_UnTrack(self);
    if (mod->weakrefs)
        PyObject_ClearWeakRefs(self);
    (void)unwatch(mod); /* only reached unwatched, unless at exit */
    purge_events(mod);
    module_clear(self);
    if (mod->owner) {
        /* Only our own entry: after a cycle collection cleared our weak
         * reference, a later load may have registered a new object. */
        PyObject *key = PyLong_FromVoidPtr(mod->m);
        PyObject *ref = key ? PyDict_GetItemWithError(mod->owner->modules, key) : NULL;
        if (ref && PyWeakref_Check(ref) && pj_weak_dead(ref) &&
            PyDict_DelItem(mod->owner->modules, key) < 0)
            PyErr_Clear();
        PyErr_Clear();
        Py_XDECREF(key);
    }
    Py_CLEAR(mod->owner);
    Py_TYPE(self)->tp_free(self);
    PyErr_Restore(et, ev, etb);
}

static PyMethodDef module_methods[] = {
    {"ops", module_ops, METH_NOARGS,
     "The kernels of the module: a list of dicts (name, lowered, params, max_threads_per_block, "
     "num_regs, static_shared_bytes)."},
    {"watch", (PyCFunction)(void (*)(void))module_watch, METH_VARARGS | METH_KEYWORDS,
     "watch(callback=None): rebuild and swap in the new code when a source or header is "
     "saved. callback(module, error) runs on the main thread after each rebuild: error None "
     "when the new code is in place, else the compile log (the old code keeps running). "
     "Without a callback, failures are printed to stderr."},
    {"unwatch", module_unwatch, METH_NOARGS, "Stops watching."},
    {"reload", module_reload, METH_NOARGS, "Rebuilds now and swaps the new code in."},
    {"log", module_log, METH_NOARGS, "NVRTC's warnings for the code the module runs."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef module_getset[] = {
    {"name", module_get_name, NULL, "the name given at load", NULL},
    {"generation", module_get_generation, NULL, "how many times a reload swapped new code in",
     NULL},
    {"context", module_get_context, NULL, "the Context the module lives in", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMappingMethods module_mapping = {
    .mp_subscript = module_subscript,
};

PyTypeObject pj_module_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jitop.Module",
    .tp_doc = "Loaded kernels: mod.name or mod['name<T, 4>'] gives an Op.",
    .tp_basicsize = sizeof(pj_module),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = module_dealloc,
    .tp_traverse = module_traverse,
    .tp_clear = module_clear,
    .tp_getattro = module_getattro,
    .tp_as_mapping = &module_mapping,
    .tp_repr = module_repr,
    .tp_methods = module_methods,
    .tp_getset = module_getset,
    .tp_weaklistoffset = offsetof(pj_module, weakrefs),
};

/* -------------------------------------------------------------- Context */

/* PyUnicode_FSConverter that takes None for "not given". */
static int fs_or_none(PyObject *obj, void *out)
{
    if (obj == Py_None) {
        *(PyObject **)out = NULL;
        return 1;
    }
    return PyUnicode_FSConverter(obj, out);
}

static int context_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"cache_dir", "arch", "device", "compile_only", "verbose",
                             "kernel_dir", "cache_max_size", NULL};
    pj_context *c = (pj_context *)self;
    PyObject *cache_dir = NULL, *kernel_dir = NULL;
    const char *arch = NULL;
    int device = 0, compile_only = 0, verbose = -1;
    long long max_size = 0;
    if (c->ctx) {
        PyErr_SetString(PyExc_RuntimeError, "Context is already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&zipiO&L:Context", kwlist,
                                     fs_or_none, &cache_dir, &arch, &device, &compile_only,
                                     &verbose, fs_or_none, &kernel_dir,
                                     &max_size))
        return -1;
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache_dir ? PyBytes_AS_STRING(cache_dir) : NULL;
    cfg.kernel_dir = kernel_dir ? PyBytes_AS_STRING(kernel_dir) : NULL;
    cfg.arch = arch;
    cfg.device = device;
    cfg.compile_only = compile_only;
    cfg.verbose = verbose;
    cfg.cache_max_size = max_size;
    jitop_ctx *ctx = NULL;
    int status = jitop_ctx_create(&cfg, &ctx);
    Py_XDECREF(cache_dir);
    Py_XDECREF(kernel_dir);
    if (status != JITOP_OK) {
        pj_raise(status, NULL);
        return -1;
    }
    c->ctx = ctx;
    c->device = device;
    c->compile_only = compile_only;
    return 0;
}

static PyObject *context_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args, (void)kw;
    pj_context *c = (pj_context *)type->tp_alloc(type, 0);
    if (!c)
        return NULL;
    c->modules = PyDict_New();
    if (!c->modules) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static void context_dealloc(PyObject *self)
{
    pj_context *c = (pj_context *)self;
    /* Modules keep their context alive, so none is left here. */
    jitop_ctx_destroy(c->ctx);
    c->ctx = NULL;
    Py_CLEAR(c->modules);
    Py_TYPE(self)->tp_free(self);
}

static int context_ready(pj_context *c)
{
    if (c->ctx)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "Context.__init__ was not called");
    return -1;
}

/* ctx.load(name, sources, options) -> Module */
static PyObject *context_load(PyObject *self, PyObject *args)
{
    pj_context *c = (pj_context *)self;
    const char *name;
    PyObject *sources, *options = Py_None;
    if (!PyArg_ParseTuple(args, "sO|O:load", &name, &sources, &options) || context_ready(c) < 0)
        return NULL;
    pj_strv src, opt;
    if (strv_from(sources, "sources", &src) < 0)
        return NULL;
    if (strv_from(options, "options", &opt) < 0) {
        strv_free(&src);
        return NULL;
    }
    jitop_module *m = NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = jitop_load(c->ctx, name, src.v, src.n, opt.v, opt.n, &m);
    Py_END_ALLOW_THREADS
    strv_free(&src);
    strv_free(&opt);
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    return module_wrap(c, m);
}

/* ctx.load_inline(name, text, options) -> Module */
static PyObject *context_load_inline(PyObject *self, PyObject *args)
{
    pj_context *c = (pj_context *)self;
    const char *name, *text;
    PyObject *options = Py_None;
    if (!PyArg_ParseTuple(args, "ss|O:load_inline", &name, &text, &options) ||
        context_ready(c) < 0)
        return NULL;
    pj_strv opt;
    if (strv_from(options, "options", &opt) < 0)
        return NULL;
    /* text points into a str the caller's tuple keeps alive. */
    jitop_module *m = NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = jitop_load_inline(c->ctx, name, text, opt.v, opt.n, &m);
    Py_END_ALLOW_THREADS
    strv_free(&opt);
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    return module_wrap(c, m);
}

/* ctx.build(path, options=None, names=None, arch=None) -> dict */
static PyObject *context_build(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "options", "names", "arch", NULL};
    pj_context *c = (pj_context *)self;
    PyObject *path = NULL, *options = Py_None, *names = Py_None;
    const char *arch = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|OOz:build", kwlist, PyUnicode_FSConverter,
                                     &path, &options, &names, &arch))
        return NULL;
    PyObject *ret = NULL;
    pj_strv opt = {0}, nm = {0};
    if (context_ready(c) < 0 || strv_from(options, "options", &opt) < 0 ||
        strv_from(names, "names", &nm) < 0)
        goto out;
    jitop_build_result res;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = jitop_build(c->ctx, PyBytes_AS_STRING(path), arch, opt.v, opt.n, nm.v, nm.n, &res);
    Py_END_ALLOW_THREADS
    if (status != JITOP_OK) {
        pj_raise(status, NULL);
        goto out;
    }
    ret = Py_BuildValue("{s:O,s:s,s:d,s:O}", "cached", res.cached ? Py_True : Py_False, "key",
                        res.key, "ms", res.ms, "warnings", res.warnings ? Py_True : Py_False);
out:
    strv_free(&opt);
    strv_free(&nm);
    Py_XDECREF(path);
    return ret;
}

static PyObject *context_get_cache_dir(PyObject *self, void *unused)
{
    (void)unused;
    pj_context *c = (pj_context *)self;
    if (context_ready(c) < 0)
        return NULL;
    const char *d = jitop_cache_dir(c->ctx);
    return PyUnicode_DecodeFSDefault(d ? d : "");
}

static PyObject *context_get_arch(PyObject *self, void *unused)
{
    (void)unused;
    pj_context *c = (pj_context *)self;
    const char *arch = NULL;
    if (context_ready(c) < 0)
        return NULL;
    int status = jitop_ctx_arch(c->ctx, &arch);
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    return PyUnicode_FromString(arch);
}

static PyObject *context_get_bool(int v)
{
    return Py_NewRef(v ? Py_True : Py_False);
}

static PyObject *context_get_compile_only(PyObject *self, void *unused)
{
    (void)unused;
    return context_get_bool(((pj_context *)self)->compile_only);
}

static PyObject *context_get_device(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(((pj_context *)self)->device);
}

/* ctx.cuda() -> (CUcontext as int, device ordinal): starts the driver. */
static PyObject *context_cuda(PyObject *self, PyObject *unused)
{
    (void)unused;
    pj_context *c = (pj_context *)self;
    void *cu = NULL;
    int dev = 0;
    if (context_ready(c) < 0)
        return NULL;
    int status = jitop_ctx_cuda(c->ctx, &cu, &dev);
    if (status != JITOP_OK)
        return pj_raise(status, NULL);
    return Py_BuildValue("(Ni)", PyLong_FromVoidPtr(cu), dev);
}

static PyMethodDef context_methods[] = {
    {"load", context_load, METH_VARARGS,
     "load(name, sources, options=None) -> Module (jitop_load)."},
    {"load_inline", context_load_inline, METH_VARARGS,
     "load_inline(name, text, options=None) -> Module (jitop_load_inline)."},
    {"build", (PyCFunction)(void (*)(void))context_build, METH_VARARGS | METH_KEYWORDS,
     "build(path, options=None, names=None, arch=None) -> {cached, key, ms, warnings}: compile "
     "into the cache without loading (works in a compile_only context)."},
    {"cuda", context_cuda, METH_NOARGS, "(CUcontext, device) jitop launches in."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef context_getset[] = {
    {"cache_dir", context_get_cache_dir, NULL, "the cache root (absolute)", NULL},
    {"arch", context_get_arch, NULL, "the arch the context compiles for", NULL},
    {"compile_only", context_get_compile_only, NULL, "never opens the driver", NULL},
    {"device", context_get_device, NULL, "the CUDA device ordinal", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pj_context_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "jitop.Context",
    .tp_doc = "Context(cache_dir=None, arch=None, device=0, compile_only=False, verbose=-1, "
              "kernel_dir=None, cache_max_size=0): a jitop context (jitop_ctx_create).",
    .tp_basicsize = sizeof(pj_context),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = context_new,
    .tp_init = context_init,
    .tp_dealloc = context_dealloc,
    .tp_methods = context_methods,
    .tp_getset = context_getset,
};

/* --------------------------------------------------------------- module */

static PyObject *pj_poll_events(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    deliver(NULL);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* _unwatch_all(): stops every watch and every report (jitop/__init__.py
 * registers it with atexit: a watch thread must not ask for a pending call
 * of an interpreter that is finalizing). */
static PyObject *pj_unwatch_all(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    pthread_mutex_lock(&g_ev_lock);
    g_ev_closed = 1;
    pthread_mutex_unlock(&g_ev_lock);
    int first = JITOP_OK;
    while (g_watched && PyList_GET_SIZE(g_watched) > 0) {
        PyObject *mod = Py_NewRef(PyList_GET_ITEM(g_watched, 0));
        int status = unwatch((pj_module *)mod);
        if (status != JITOP_OK && first == JITOP_OK)
            first = status;
        int rc = PySequence_DelItem(g_watched, 0);
        Py_DECREF(mod);
        if (rc < 0)
            return NULL;
    }
    if (first != JITOP_OK)
        return pj_raise(first, "unwatch at exit");
    Py_RETURN_NONE;
}

static PyObject *pj_version(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(jitop_version_string());
}

static PyObject *pj_nvrtc_version(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(jitop_nvrtc_version());
}

static PyMethodDef pj_methods[] = {
    {"poll_events", pj_poll_events, METH_NOARGS,
     "Delivers queued hot-reload reports now (they are otherwise delivered at the "
     "interpreter's next check)."},
    {"_unwatch_all", pj_unwatch_all, METH_NOARGS,
     "Stops every watch and report (registered with atexit by the package)."},
    {"version", pj_version, METH_NOARGS, "libjitop's version."},
    {"nvrtc_version", pj_nvrtc_version, METH_NOARGS, "The NVRTC version jitop compiles with."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pj_moduledef = {
    PyModuleDef_HEAD_INIT, "jitop._jitop", "jitop's C extension (see the jitop package).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t) < 0)
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

static int add_error(PyObject *m, PyObject **slot, const char *name, PyObject *bases,
                     const char *doc)
{
    /* The message as it is: KeyError's __str__ (NotFoundError is one, for
     * mod["name"]) would print it as a quoted repr. */
    /* Looked up as an attribute: from Python 3.12 a static built-in type's
     * tp_dict is NULL (its dict lives with the interpreter). */
    PyObject *dict = PyDict_New();
    PyObject *str = PyObject_GetAttrString(PyExc_BaseException, "__str__");
    if (!dict || !str || PyDict_SetItemString(dict, "__str__", str) < 0) {
        Py_XDECREF(dict);
        Py_XDECREF(str);
        return -1;
    }
    Py_DECREF(str);
    *slot = PyErr_NewExceptionWithDoc(name, doc, bases, dict);
    Py_DECREF(dict);
    if (!*slot)
        return -1;
    Py_INCREF(*slot);
    if (PyModule_AddObject(m, strrchr(name, '.') + 1, *slot) < 0) {
        Py_DECREF(*slot);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__jitop(void)
{
    if (jitop_version() != JITOP_VERSION_NUMBER) {
        PyErr_Format(PyExc_ImportError, "jitop: libjitop %s does not match the headers (%d)",
                     jitop_version_string(), JITOP_VERSION_NUMBER);
        return NULL;
    }
    PyObject *m = PyModule_Create(&pj_moduledef);
    if (!m)
        return NULL;
    if (!g_watched && !(g_watched = PyList_New(0))) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddFunctions(m, pj_methods) < 0 ||
        PyModule_AddFunctions(m, pj_shipped_methods) < 0 || pj_op_init(m) < 0 ||
        add_type(m, &pj_context_type, "Context") < 0 ||
        add_type(m, &pj_module_type, "Module") < 0 || add_type(m, &pj_op_type, "Op") < 0)
        goto fail;
    if (add_error(m, &pj_error, "jitop.JitopError", PyExc_RuntimeError,
                  "A jitop call failed; str() is jitop's message, .status its jitop_status.") <
        0)
        goto fail;
    if (add_error(m, &pj_compile_error, "jitop.CompileError", pj_error,
                  "NVRTC rejected the source: the message holds its log (file:line).") < 0)
        goto fail;
    PyObject *nf_bases = PyTuple_Pack(2, pj_error, PyExc_KeyError);
    if (!nf_bases)
        goto fail;
    int rc = add_error(m, &pj_not_found_error, "jitop.NotFoundError", nf_bases,
                       "No such file, op or device; the message lists what exists.");
    Py_DECREF(nf_bases);
    if (rc < 0)
        goto fail;
    if (add_error(m, &pj_driver_error, "jitop.NoDriverError", pj_error,
                  "No usable CUDA driver or device, or a compile_only context.") < 0)
        goto fail;
    for (int s = 0; s < JITOP_STATUS_COUNT; s++) {
        static const char *names[] = {"OK",     "EINVAL",    "ENOMEM", "EIO",    "ECOMPILE",
                                      "ENVRTC", "ENODRIVER", "ECUDA",  "ENOTFOUND", "EARGS",
                                      "EUNSAFE", "ESTALE",   "ENOTSUP"};
        if (s < (int)(sizeof names / sizeof names[0]) && PyModule_AddIntConstant(m, names[s], s) < 0)
            goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
