/* What a test can ask the fake driver (fake_libcuda.c) about. The fake is
 * opened with dlopen, never linked, so a test looks the function up with
 * dlsym(handle, FAKE_CUDA_STATS_SYMBOL); finding it is also how a test knows
 * that libcuda.so.1 is the fake and not a real driver. */
#ifndef JITOP_FAKE_LIBCUDA_H
#define JITOP_FAKE_LIBCUDA_H

/* python/tests/test_inplace.py mirrors this struct with ctypes (every
 * field, in order): change both. */
typedef struct fake_cuda_stats {
    long modules_loaded;     /* loaded now (cuModuleLoadData minus cuModuleUnload) */
    long modules_ever;       /* every cuModuleLoadData that succeeded */
    long unloads;
    long functions_loaded;   /* functions whose code was put on the "GPU" (lazy loading) */
    long loaded_at_launch;   /* of which by their first launch (nothing else had loaded them) */
    long launches;
    long syncs;              /* finished cuCtxSynchronize calls */
    long primary_ctx_refs;   /* cuDevicePrimaryCtxRetain minus Release */
    long describe_calls;     /* cuFuncGetParamInfo and cuFuncGetAttribute calls */
    long cluster_queries;    /* cuOccupancyMaxActiveClusters calls, and the last one's */
    unsigned last_cluster_size; /* cluster attribute (0: none given) */
    unsigned last_cluster_smem; /* and dynamic shared memory */
    long symbols_resolved;   /* cuGetProcAddress calls that found their symbol */
    long global_lookups;     /* cuModuleGetGlobal calls */
    long global_copies;      /* cuMemcpy* calls into or out of a module's global */
    long global_async_copies; /* of which the *Async ones */
    /* the last launch's shape, shared memory and cooperative attribute */
    unsigned last_grid[3], last_block[3], last_smem;
    int last_cooperative;
    /* cuTensorMapEncodeTiled calls that succeeded, and the last one's box
     * (its first two dimensions) */
    long tensor_maps;
    unsigned last_box[2];
    long memsets; /* cuMemsetD32Async calls */
} fake_cuda_stats;

#define FAKE_CUDA_STATS_SYMBOL "fake_cuda_get_stats"
typedef void (*fake_cuda_stats_fn)(fake_cuda_stats *out);

#endif
