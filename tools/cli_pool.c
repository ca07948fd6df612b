/*
 * Runs independent tasks on worker threads. Threads, not forked processes:
 * NVRTC 13 compiles concurrently inside one process. Measured on this 2-core
 * machine (notes/readme-cli.md): `jitop build` of 4 files x 2 archs takes
 * 2.0-2.3 s with -j1 and 1.15-1.47 s with -j2, and raw NVRTC with 2 threads
 * is as fast as with 2 forked processes (1.03-1.18 s vs 0.98-1.08 s for 8
 * compiles). Threads also share NVRTC's one-time start-up cost, and results
 * and error messages need no pipes.
 */
#include "cli.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pool {
    pthread_mutex_t lock;
    size_t next, ntasks;
    void (*run)(void *user, size_t task);
    void *user;
} pool;

static void *worker(void *arg)
{
    pool *p = arg;
    for (;;) {
        size_t task;
        pthread_mutex_lock(&p->lock);
        task = p->next < p->ntasks ? p->next++ : p->ntasks;
        pthread_mutex_unlock(&p->lock);
        if (task == p->ntasks)
            break;
        p->run(p->user, task);
    }
    return NULL;
}

int jitop_cli_pool_run(size_t ntasks, int nworkers, void (*run)(void *user, size_t task),
                       void *user)
{
    pool p = {.next = 0, .ntasks = ntasks, .run = run, .user = user};
    pthread_t *threads = NULL;
    size_t started = 0;
    int rc;
    if (ntasks == 0)
        return 0;
    if (nworkers < 1)
        nworkers = 1;
    if ((size_t)nworkers > ntasks)
        nworkers = (int)ntasks;
    if ((rc = pthread_mutex_init(&p.lock, NULL)) != 0)
        return rc;
    /* The calling thread is one of the workers, so -j1 starts no thread, and
     * when threads cannot be had (no memory, a thread limit) the tasks still
     * all run, only with less parallelism. */
    if (nworkers > 1 && (threads = calloc((size_t)nworkers - 1, sizeof *threads)) != NULL) {
        while (started < (size_t)nworkers - 1 &&
               pthread_create(&threads[started], NULL, worker, &p) == 0)
            started++;
    }
    worker(&p);
    for (size_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    pthread_mutex_destroy(&p.lock);
    return 0;
}

int jitop_cli_default_jobs(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}
