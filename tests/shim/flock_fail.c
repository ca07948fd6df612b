/* An LD_PRELOAD shim for tests: flock() fails as it does on a filesystem
 * without locks (NFS without a lock daemon): errno from
 * $JITOP_TEST_FLOCK_ERRNO, ENOLCK by default. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/file.h>

int flock(int fd, int operation)
{
    (void)fd;
    (void)operation;
    const char *e = getenv("JITOP_TEST_FLOCK_ERRNO");
    errno = e && *e ? atoi(e) : ENOLCK;
    return -1;
}
