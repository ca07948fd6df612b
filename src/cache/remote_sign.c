/* Signatures of remote entries: HMAC-SHA256 through OpenSSL's libcrypto,
 * opened with dlopen on first need (the one-shot HMAC() and CRYPTO_memcmp;
 * no crypto is written here). The secret is a file, as ssh keys are: one
 * that group or others may read is refused. */
#include "cache/remote_private.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

/* libcrypto's prototypes, declared here rather than taken from its headers
 * so that the build needs no OpenSSL headers: these two have been stable
 * since OpenSSL 1.0 (EVP_MD is opaque). */
typedef struct evp_md_st EVP_MD;
static struct {
    pthread_once_t once;
    const char *why;
    const EVP_MD *(*sha256)(void);
    unsigned char *(*hmac)(const EVP_MD *md, const void *key, int klen, const unsigned char *d,
                           size_t n, unsigned char *md_out, unsigned int *md_len);
    int (*memcmp_ct)(const void *a, const void *b, size_t n);
} crypto = {.once = PTHREAD_ONCE_INIT};

static void open_crypto(void)
{
    void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen("libcrypto.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        crypto.why = "cannot open libcrypto.so.3 (install libssl3)";
        return;
    }
    *(void **)&crypto.sha256 = dlsym(h, "EVP_sha256");
    *(void **)&crypto.hmac = dlsym(h, "HMAC");
    *(void **)&crypto.memcmp_ct = dlsym(h, "CRYPTO_memcmp");
    if (!crypto.sha256 || !crypto.hmac || !crypto.memcmp_ct)
        crypto.why = "libcrypto lacks EVP_sha256, HMAC or CRYPTO_memcmp";
}

bool jitop__remote_mac(const unsigned char *key, size_t klen, const unsigned char *data, size_t n,
                       unsigned char mac[JITOP__REMOTE_MAC_SIZE], const char **why)
{
    pthread_once(&crypto.once, open_crypto);
    *why = crypto.why;
    if (crypto.why)
        return false;
    unsigned int outlen = 0;
    jitop__remote_io_begin(); /* libcrypto may hold its own locks meanwhile */
    const EVP_MD *md = crypto.sha256();
    bool ok = md && klen <= INT32_MAX && crypto.hmac(md, key, (int)klen, data, n, mac, &outlen) &&
              outlen == JITOP__REMOTE_MAC_SIZE;
    jitop__remote_io_end();
    if (!ok)
        *why = "HMAC-SHA256 failed in libcrypto";
    return ok;
}

bool jitop__remote_mac_equal(const unsigned char *a, const unsigned char *b)
{
    /* Only called after jitop__remote_mac succeeded: libcrypto is open. */
    return crypto.memcmp_ct(a, b, JITOP__REMOTE_MAC_SIZE) == 0;
}

int jitop__remote_secret_load(const char *path, unsigned char **key, size_t *len)
{
    int status = JITOP_OK;
    unsigned char *buf = NULL;
    *key = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return jitop__fail(JITOP_EINVAL, "JITOP_REMOTE_CACHE_SECRET: cannot open %s: %s", path,
                           strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        status = jitop__fail(JITOP_EIO, "JITOP_REMOTE_CACHE_SECRET: fstat %s: %s", path,
                             strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077) || st.st_uid != geteuid()) {
        status = jitop__fail(JITOP_EUNSAFE,
                             "JITOP_REMOTE_CACHE_SECRET: %s must be a regular file of yours "
                             "that only you can read (chmod 600)",
                             path);
        goto out;
    }
    if (st.st_size < 16 || st.st_size > 4096) {
        status = jitop__fail(JITOP_EINVAL,
                             "JITOP_REMOTE_CACHE_SECRET: %s holds %lld bytes; a key of 16 to "
                             "4096 bytes is expected (e.g. head -c 32 /dev/urandom | base64)",
                             path, (long long)st.st_size);
        goto out;
    }
    buf = malloc((size_t)st.st_size);
    if (!buf) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    size_t got = 0;
    int failed = jitop__read_upto(fd, buf, (size_t)st.st_size, &got);
    if (failed || got < (size_t)st.st_size) {
        status = jitop__fail(JITOP_EIO, "JITOP_REMOTE_CACHE_SECRET: read %s: %s", path,
                             failed ? strerror(errno) : "file shrank");
        goto out;
    }
    if (got > 0 && buf[got - 1] == '\n')
        got--;
    if (got < 16) {
        status = jitop__fail(JITOP_EINVAL, "JITOP_REMOTE_CACHE_SECRET: %s: key under 16 bytes",
                             path);
        goto out;
    }
    *key = buf;
    *len = got;
    buf = NULL;
out:
    if (buf) {
        memset(buf, 0, (size_t)st.st_size);
        free(buf);
    }
    if (close(fd) != 0 && status == JITOP_OK) {
        status = jitop__fail(JITOP_EIO, "JITOP_REMOTE_CACHE_SECRET: close %s: %s", path,
                             strerror(errno));
        memset(*key, 0, *len);
        free(*key);
        *key = NULL;
        *len = 0;
    }
    return status;
}
