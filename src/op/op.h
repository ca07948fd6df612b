/*
 * The op room: the named ops of a loaded module and their launches (op.c).
 * The lock-free op table, jitop_op_get (an extern "C" kernel of the
 * sources, or a template instance compiled on demand as a unit of its
 * own), the names that failed to make an op, describing a binding (its
 * parameter layout and attributes, read from the driver on first need), the
 * op list (jitop_module_ops), launches and occupancy.
 * May include: base, compile, cache, build, load. Included by op/ only: the
 * rooms above (watch, the shipped ops) use ops through the public API.
 *
 * A launch is the reader's side of the protocol in load/load.h: it holds
 * the image of the binding it loaded (in-flight count, then a re-check of
 * the op's binding), so that the reaper never unloads code a launch is
 * about to use. What the op room keeps in a module (ops, tables, failed
 * names; global.c's resolved global names) it frees itself, through
 * m->ops_free and m->globals_free.
 */
#ifndef JITOP_OP_H
#define JITOP_OP_H

#include "load/load.h"

/* One name an op answers to: the name it was made for, and each other
 * spelling asked for that found the same kernel ("f<float, 4>" after
 * "f<float,4>", "f<float, 4u>"). Immutable once in the table; freed with the
 * module. */
struct jitop__opname {
    char *name;
    jitop_op *op;
    struct jitop__opname *next; /* every name of the module (m->lock) */
};

/* The lock-free op table from names to ops: open addressing, power-of-two
 * capacity, grown by publishing a new table (old ones are kept until the
 * module is freed, since a reader may still be probing one). */
struct jitop__optab {
    size_t cap;               /* power of two */
    size_t count;
    _Atomic(jitop__opname *) *slots;
    struct jitop__optab *older;
};

#endif
