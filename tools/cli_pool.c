/*
 * Runs independent tasks in forked worker processes. Processes, not
 * threads: NVRTC serializes much of a compile inside one process (on the
 * 16-core GPU machine, 16 threads built 32 sources only 2.4x faster than
 * one), and a compile's memory is its own process's, returned whole when it
 * ends or dies.
 *
 * The workers are forks of the calling process, taken after its setup
 * (context, job list, NVRTC opened by the arch check) while it runs no
 * other thread: each worker starts with NVRTC loaded and the job list in
 * hand, so a task is one index and a reply one frame. A worker takes tasks
 * until its socket closes. The parent never runs a thread, so it may fork
 * again: a worker that dies (a signal, an exit) fails only the task it
 * held, and a fresh worker takes the tasks left.
 *
 * Protocol, on one AF_UNIX stream socketpair per worker: the parent sends a
 * u32 task index; the worker answers with a u32 length and that many bytes.
 * Writes use MSG_NOSIGNAL (a dead peer is EPIPE, not SIGPIPE) and loop over
 * partial writes and EINTR; reads loop until the whole frame is in, and an
 * end of file inside a frame is the worker's death.
 */
#include "cli.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* A reply over this is a broken worker, not a reply (an NVRTC log is
 * rarely over a few MiB). */
#define MAX_REPLY ((uint32_t)256 << 20)

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* 1: all len bytes read; 0: end of file before the first byte; -1: an
 * error, or an end of file inside. */
static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, p + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return got == 0 ? 0 : -1;
        got += (size_t)n;
    }
    return 1;
}

void jitop_cli_buf_free(jitop_cli_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

int jitop_cli_buf_put(jitop_cli_buf *b, const void *data, size_t len)
{
    if (b->failed)
        return -1;
    if (len > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < len)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return -1;
        }
        b->data = d;
        b->cap = cap;
    }
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

int jitop_cli_buf_put_str(jitop_cli_buf *b, const char *s)
{
    uint32_t n = s ? (uint32_t)strlen(s) : UINT32_MAX;
    if (jitop_cli_buf_put(b, &n, sizeof n) != 0)
        return -1;
    return s ? jitop_cli_buf_put(b, s, n) : 0;
}

int jitop_cli_buf_get(const char **p, const char *end, void *out, size_t len)
{
    if ((size_t)(end - *p) < len)
        return -1;
    memcpy(out, *p, len);
    *p += len;
    return 0;
}

int jitop_cli_buf_get_str(const char **p, const char *end, char **out)
{
    uint32_t n;
    *out = NULL;
    if (jitop_cli_buf_get(p, end, &n, sizeof n) != 0)
        return -1;
    if (n == UINT32_MAX)
        return 0;
    if ((size_t)(end - *p) < n || !(*out = malloc((size_t)n + 1)))
        return -1;
    memcpy(*out, *p, n);
    (*out)[n] = '\0';
    *p += n;
    return 0;
}

typedef struct worker {
    pid_t pid;   /* 0: no process */
    int fd;      /* the parent's end of the socketpair, -1: none */
    size_t task; /* the task it holds, SIZE_MAX: none */
} worker;

/* The worker's life: tasks in, replies out, until the socket closes. Never
 * returns. Exits with _exit: the parent's atexit handlers and stdio buffers
 * are the parent's. */
static void worker_main(int fd, const jitop_cli_pool_ops *ops, void *user)
{
    for (;;) {
        uint32_t task;
        int rc = read_all(fd, &task, sizeof task);
        if (rc != 1)
            _exit(rc == 0 ? 0 : 3);
        jitop_cli_buf reply = {0};
        ops->run(user, task, &reply);
        uint32_t n = (uint32_t)reply.len;
        if (reply.failed || reply.len > MAX_REPLY)
            _exit(4); /* the parent reports it: "exited with status 4" */
        if (write_all(fd, &n, sizeof n) != 0 || write_all(fd, reply.data, reply.len) != 0)
            _exit(5);
        jitop_cli_buf_free(&reply);
    }
}

/* Forks worker w. The child closes every other worker's socket, so that a
 * worker's death is seen by the parent alone (the socket's only other
 * holder). -1 with errno when fork or socketpair fails. */
static int spawn(worker *ws, int nworkers, int w, const jitop_cli_pool_ops *ops, void *user)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    /* What the parent printed must not be printed again by a child's exit
     * path (it uses _exit, but a buffered line could still be flushed by a
     * library's own exit path). */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        for (int i = 0; i < nworkers; i++)
            if (ws[i].fd >= 0)
                close(ws[i].fd);
        worker_main(sv[1], ops, user);
    }
    close(sv[1]);
    ws[w] = (worker){.pid = pid, .fd = sv[0], .task = SIZE_MAX};
    return 0;
}

/* Ends worker w: closes its socket (a live worker exits on the end of
 * file) and reaps it. *why describes a death that was not that exit. */
static void retire(worker *w, char *why, size_t whylen)
{
    int st = 0;
    pid_t r;
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (why)
        why[0] = '\0';
    if (w->pid > 0) {
        while ((r = waitpid(w->pid, &st, 0)) < 0 && errno == EINTR)
            ;
        if (why && r == w->pid) {
            if (WIFSIGNALED(st))
                snprintf(why, whylen, "the worker process (pid %ld) was killed by signal %d (%s)",
                         (long)w->pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
            else if (WIFEXITED(st))
                snprintf(why, whylen, "the worker process (pid %ld) exited with status %d",
                         (long)w->pid, WEXITSTATUS(st));
        } else if (why) {
            snprintf(why, whylen, "the worker process (pid %ld) was lost: %s", (long)w->pid,
                     strerror(errno));
        }
    }
    w->pid = 0;
    w->task = SIZE_MAX;
}

static int give(worker *w, size_t task)
{
    uint32_t t = (uint32_t)task;
    w->task = task;
    return write_all(w->fd, &t, sizeof t);
}

int jitop_cli_pool_procs(size_t ntasks, int nworkers, const jitop_cli_pool_ops *ops, void *user)
{
    worker *ws = NULL;
    struct pollfd *pfd = NULL;
    size_t next = 0, done = 0;
    int rc = 0, idle_deaths = 0;
    char why[256];
    if (ntasks == 0)
        return 0;
    if (ntasks > UINT32_MAX)
        return EINVAL;
    if (nworkers < 1)
        nworkers = 1;
    if ((size_t)nworkers > ntasks)
        nworkers = (int)ntasks;
    ws = calloc((size_t)nworkers, sizeof *ws);
    pfd = calloc((size_t)nworkers, sizeof *pfd);
    if (!ws || !pfd) {
        rc = ENOMEM;
        goto out;
    }
    for (int i = 0; i < nworkers; i++)
        ws[i] = (worker){.pid = 0, .fd = -1, .task = SIZE_MAX};

    while (done < ntasks) {
        /* Every idle slot gets a worker and a task while tasks are left. A
         * slot whose fork fails stays empty; with no worker at all and
         * tasks left, the pool fails (the caller reports the rest). */
        int live = 0, spawn_err = 0;
        for (int i = 0; i < nworkers; i++) {
            if (ws[i].pid == 0 && next < ntasks && spawn(ws, nworkers, i, ops, user) != 0) {
                spawn_err = errno ? errno : EAGAIN;
                continue;
            }
            if (ws[i].pid != 0 && ws[i].task == SIZE_MAX) {
                if (next < ntasks) {
                    size_t t = next;
                    if (give(&ws[i], t) != 0) {
                        /* Dead while idle, before it read this task (killed,
                         * or out of memory at its start): the task goes to
                         * the next worker, unless workers keep dying this
                         * way, when it fails with the death's reason. */
                        retire(&ws[i], why, sizeof why);
                        if (++idle_deaths <= nworkers + 2)
                            continue;
                        next++;
                        ops->started(user, t);
                        ops->done(user, t, NULL, 0, why[0] ? why : "the worker process died");
                        done++;
                        idle_deaths = 0;
                        continue;
                    }
                    next++;
                    idle_deaths = 0;
                    ops->started(user, t);
                } else {
                    retire(&ws[i], NULL, 0);
                    continue;
                }
            }
            if (ws[i].pid != 0)
                live++;
        }
        if (done >= ntasks)
            break;
        if (live == 0) {
            if (!spawn_err)
                continue; /* a worker died idle: its slot is forked again */
            rc = spawn_err;
            goto out;
        }
        for (int i = 0; i < nworkers; i++)
            pfd[i] = (struct pollfd){.fd = ws[i].task != SIZE_MAX ? ws[i].fd : -1,
                                     .events = POLLIN};
        if (poll(pfd, (nfds_t)nworkers, -1) < 0) {
            if (errno == EINTR)
                continue;
            rc = errno;
            goto out;
        }
        for (int i = 0; i < nworkers; i++) {
            if (pfd[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            worker *w = &ws[i];
            size_t t = w->task;
            uint32_t n = 0;
            char *reply = NULL;
            int got = read_all(w->fd, &n, sizeof n);
            if (got == 1 && n <= MAX_REPLY && (reply = malloc(n ? n : 1)) != NULL &&
                read_all(w->fd, reply, n) == 1) {
                w->task = SIZE_MAX;
                ops->done(user, t, reply, n, NULL);
            } else {
                retire(w, why, sizeof why);
                ops->done(user, t, NULL, 0,
                          why[0] ? why : "the worker process sent a broken reply");
            }
            free(reply);
            done++;
        }
    }
out:
    for (int i = 0; ws && i < nworkers; i++)
        if (ws[i].pid != 0)
            retire(&ws[i], NULL, 0);
    free(ws);
    free(pfd);
    return rc;
}

/* Longest processing time first: a pool that takes its tasks in the order
 * given ends when its last task does, so a long task handed out last keeps
 * one worker busy while the others idle (compile times of the sources
 * differ by more than 20x, and the long cooperative-groups sources can come
 * late; bench/BUILD_NOTES.md). Taking the longest first bounds the makespan
 * at 4/3 of the best (Graham's bound for LPT) instead of nearly twice. The
 * estimate is what is known before any compile: the bytes a compile reads,
 * which orders the header-heavy sources first but not a small source that
 * instantiates much; a wrong estimate costs only the order. An insertion
 * sort: stable, and n is the number of files of one command. */
void jitop_cli_longest_first(size_t *tasks, int64_t *est, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        size_t t = tasks[i];
        int64_t e = est[i];
        size_t k = i;
        for (; k > 0 && est[k - 1] < e; k--) {
            tasks[k] = tasks[k - 1];
            est[k] = est[k - 1];
        }
        tasks[k] = t;
        est[k] = e;
    }
}

int jitop_cli_default_jobs(void)
{
    const char *env = getenv("JITOP_JOBS");
    if (env && *env) {
        char *end;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (errno == 0 && *end == '\0' && v >= 1 && v <= 4096)
            return (int)v;
        fprintf(stderr, "jitop: JITOP_JOBS='%s' is not a number of jobs from 1 to 4096; using "
                        "one per online core\n",
                env);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}
