/* What jitop owns under the cache root: the markers it writes, the names it
 * makes at each level, adopting a tree made before markers existed, making
 * its directories (again, when a clean in another process moved them away)
 * and writing files into them, removing unheld lock files, and clean, which
 * deletes only trees
 * jitop marked and only jitop's names in them. A cache root may be a
 * directory the user also keeps files in (JITOP_CACHE_DIR=$HOME by mistake):
 * nothing here deletes a name jitop would not have made.
 *
 * The names, level by level (anything else is not jitop's):
 *   root   CACHEDIR.TAG, v<digits>/ (trees), .jitop-trash-XXXXXX/ (a tree
 *          being deleted by clean), .tmp-CACHEDIR.TAG-XXXXXX
 *   tree   jitop.tag, <ab>/ (2 hex digits), locks/, manifests/,
 *          .tmp-jitop.tag-XXXXXX
 *   <ab>   <key> (32 hex digits), .tmp-<key>-XXXXXX
 *   locks  <key>.lock
 *   manifests  <ab>/ (holding manifests named and written like entries)
 *   trash  v<digits>/ */
#include "cache/cache_private.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define ROOT_TAG "CACHEDIR.TAG"
#define TREE_TAG "jitop.tag"
#define TRASH_PREFIX ".jitop-trash-"

/* The Cache Directory Tagging specification's signature line, then free
 * text (https://bford.info/cachedir/). */
static const char root_tag_text[] =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by jitop.\n"
    "# For information about cache directory tags, see: https://bford.info/cachedir/\n";
static const char tree_tag_text[] =
    "jitop cache tree: made by jitop, which deletes only its own files here\n";

enum level { L_FOREIGN, L_FILE, L_ROOT, L_TRASH, L_TREE, L_SHARD, L_LOCKS, L_MANIFESTS };

static bool hex_span(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

bool jitop__is_hex(const char *s, size_t n)
{
    return strlen(s) == n && hex_span(s, n);
}

static bool is_alnum(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* "<prefix>XXXXXX" as mkstemp and mkdtemp fill in the X's. */
static bool is_temp_name(const char *name, const char *prefix)
{
    size_t n = strlen(name), p = strlen(prefix);
    if (n != p + 6 || strncmp(name, prefix, p) != 0)
        return false;
    for (size_t i = p; i < n; i++)
        if (!is_alnum(name[i]))
            return false;
    return true;
}

/* ".tmp-<target>-XXXXXX", jitop__cache_write_once's temporary file for
 * target at this level. */
static bool is_tmp_at(const char *name, enum level level)
{
    size_t n = strlen(name);
    if (n < 5 + 7 + 1 || strncmp(name, ".tmp-", 5) != 0 || name[n - 7] != '-')
        return false;
    for (size_t i = n - 6; i < n; i++)
        if (!is_alnum(name[i]))
            return false;
    const char *t = name + 5;
    size_t m = n - 5 - 7;
    switch (level) {
    case L_ROOT:
        return m == strlen(ROOT_TAG) && memcmp(t, ROOT_TAG, m) == 0;
    case L_TREE:
        return m == strlen(TREE_TAG) && memcmp(t, TREE_TAG, m) == 0;
    case L_SHARD:
        return m == 32 && hex_span(t, 32);
    default:
        return false;
    }
}

static bool is_tree_name(const char *name)
{
    return name[0] == 'v' && name[1] && strspn(name + 1, "0123456789") == strlen(name + 1);
}

/* What name is inside a directory of this level: a file of jitop's
 * (L_FILE), a directory of jitop's (its level), or not jitop's. */
static enum level child_level(enum level level, const char *name)
{
    switch (level) {
    case L_ROOT:
        if (strcmp(name, ROOT_TAG) == 0 || is_tmp_at(name, L_ROOT))
            return L_FILE;
        if (is_tree_name(name))
            return L_TREE;
        if (is_temp_name(name, TRASH_PREFIX))
            return L_TRASH;
        break;
    case L_TRASH:
        if (is_tree_name(name))
            return L_TREE;
        break;
    case L_TREE:
        if (strcmp(name, TREE_TAG) == 0 || is_tmp_at(name, L_TREE))
            return L_FILE;
        if (jitop__is_hex(name, 2))
            return L_SHARD;
        if (strcmp(name, "locks") == 0)
            return L_LOCKS;
        if (strcmp(name, "manifests") == 0)
            return L_MANIFESTS;
        break;
    case L_SHARD:
        if (jitop__is_hex(name, 32) || is_tmp_at(name, L_SHARD))
            return L_FILE;
        break;
    case L_LOCKS:
        if (strlen(name) == 32 + 5 && hex_span(name, 32) && strcmp(name + 32, ".lock") == 0)
            return L_FILE;
        break;
    case L_MANIFESTS:
        if (jitop__is_hex(name, 2))
            return L_SHARD;
        break;
    default:
        break;
    }
    return L_FOREIGN;
}

/* Whether a directory entry is a directory, without following links. */
static bool entry_is_dir(int dfd, const struct dirent *de)
{
    if (de->d_type != DT_UNKNOWN)
        return de->d_type == DT_DIR;
    struct stat st;
    return fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

static int open_dir_at(int dfd, const char *name)
{
    return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* A stream over the directory fd (a copy of fd: fd stays the caller's). */
static int open_listing(int fd, const char *shown, DIR **out)
{
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    *out = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (*out)
        return JITOP_OK;
    int status = jitop__fail(JITOP_EIO, "cache: read directory %s: %s", shown, strerror(errno));
    if (dup_fd >= 0 && close(dup_fd) != 0)
        jitop__cache_vlog(NULL, "cache: close %s failed", shown);
    return status;
}

/* The names in a directory (fd stays the caller's). Collected before
 * anything is renamed or removed there, which readdir does not promise to
 * survive. */
static int list_dir(int fd, const char *shown, jitop__strv *names)
{
    DIR *d = NULL;
    int status = open_listing(fd, shown, &d);
    if (status != JITOP_OK)
        return status;
    struct dirent *de;
    while (status == JITOP_OK && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        status = jitop__strv_push(names, de->d_name);
    }
    if (closedir(d) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", shown, strerror(errno));
    return status;
}

/* The first name under fd (a directory of this level) that jitop would
 * not have made, as a path under shown (malloc'd; NULL when every name is
 * jitop's). Names that vanish meanwhile are skipped. */
static int find_foreign(int fd, enum level level, const char *shown, char **foreign)
{
    *foreign = NULL;
    DIR *d = NULL;
    int status = open_listing(fd, shown, &d);
    if (status != JITOP_OK)
        return status;
    struct dirent *de;
    while (status == JITOP_OK && !*foreign && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
            continue;
        enum level k = child_level(level, n);
        bool dir = entry_is_dir(dirfd(d), de);
        char *sub = jitop__sprintf("%s/%s", shown, n);
        if (!sub) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        if (k == L_FOREIGN || (k == L_FILE) == dir) {
            *foreign = sub; /* not jitop's name, or a file where a directory belongs */
            continue;
        }
        if (k != L_FILE) {
            int sfd = open_dir_at(dirfd(d), n);
            if (sfd >= 0) {
                status = find_foreign(sfd, k, sub, foreign);
                if (close(sfd) != 0 && status == JITOP_OK)
                    status = jitop__fail(JITOP_EIO, "cache: close %s: %s", sub, strerror(errno));
            } else if (errno != ENOENT) {
                status = jitop__fail(JITOP_EIO, "cache: open %s: %s", sub, strerror(errno));
            }
        }
        free(sub);
    }
    if (closedir(d) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", shown, strerror(errno));
    return status;
}

/* What clean leaves behind: a count and the first path, for its warning. */
struct left {
    size_t n;
    char *first;
};

static void left_add(struct left *l, const char *path)
{
    if (l->n++ == 0)
        l->first = jitop__strdup(path);
}

static int remove_dir_at(int dfd, const char *name, enum level level, const char *shown,
                         struct left *left);

/* Deletes jitop's names under fd (a directory of this level), depth first;
 * what is not jitop's stays and is counted in *left. A tree's marker stays
 * (remove_dir_at removes it last, once nothing else is left). */
static int remove_shaped(int fd, enum level level, const char *shown, struct left *left)
{
    jitop__strv names = {0};
    int status = list_dir(fd, shown, &names);
    for (size_t i = 0; status == JITOP_OK && i < names.n; i++) {
        const char *n = names.v[i];
        enum level k = child_level(level, n);
        char *sub = jitop__sprintf("%s/%s", shown, n);
        if (!sub) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        if (k == L_FOREIGN) {
            left_add(left, sub);
        } else if (k != L_FILE) {
            status = remove_dir_at(fd, n, k, sub, left);
        } else if (!(level == L_TREE && strcmp(n, TREE_TAG) == 0)) {
            /* unlinkat never follows a link: a link goes, its target stays. A
             * directory under a file's name may hold anyone's files: it stays. */
            if (unlinkat(fd, n, 0) != 0 && errno != ENOENT) {
                if (errno == EISDIR || errno == EPERM)
                    left_add(left, sub);
                else
                    status = jitop__fail(JITOP_EIO, "cache: remove %s: %s", sub, strerror(errno));
            }
        }
        free(sub);
    }
    jitop__strv_free(&names);
    return status;
}

/* Deletes the directory name under dfd, of this level, when only jitop's
 * names are in it. Names that appear while it is emptied (a build's
 * temporary file in a tree clean has just moved aside) make it look again,
 * a bounded number of times. */
static int remove_dir_at(int dfd, const char *name, enum level level, const char *shown,
                         struct left *left)
{
    int status = JITOP_OK;
    for (int pass = 0; status == JITOP_OK; pass++) {
        int fd = open_dir_at(dfd, name);
        if (fd < 0) {
            if (errno == ENOENT)
                return JITOP_OK;
            if (errno == ENOTDIR || errno == ELOOP) {
                left_add(left, shown); /* a file or link where a directory belongs */
                return JITOP_OK;
            }
            return jitop__fail(JITOP_EIO, "cache: open %s: %s", shown, strerror(errno));
        }
        struct left here = {0};
        status = remove_shaped(fd, level, shown, &here);
        if (status == JITOP_OK && here.n == 0 && level == L_TREE &&
            unlinkat(fd, TREE_TAG, 0) != 0 && errno != ENOENT)
            status = jitop__fail(JITOP_EIO, "cache: remove %s/%s: %s", shown, TREE_TAG,
                                 strerror(errno));
        if (close(fd) != 0 && status == JITOP_OK)
            status = jitop__fail(JITOP_EIO, "cache: close %s: %s", shown, strerror(errno));
        if (here.n) {
            if (left->n == 0) {
                left->first = here.first;
                here.first = NULL;
            }
            left->n += here.n;
        }
        free(here.first);
        if (status != JITOP_OK || here.n)
            return status;
        if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
            return JITOP_OK;
        if (errno != ENOTEMPTY && errno != EEXIST)
            return jitop__fail(JITOP_EIO, "cache: rmdir %s: %s", shown, strerror(errno));
        if (pass == JITOP__CACHE_RETRIES) /* kept filling up: the next clean tries again */
            return JITOP_OK;
    }
    return status;
}

static bool tree_tagged(int tfd)
{
    struct stat st;
    return fstatat(tfd, TREE_TAG, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           st.st_size == (off_t)(sizeof tree_tag_text - 1);
}

static void warn_left_alone(const char *path, const char *why)
{
    fprintf(stderr, "jitop: warning: clean left %s alone: %s\n", path, why);
}

/* Moves the tree name (under the root's fd) into a fresh trash directory,
 * then deletes it there: builds in other processes that find their
 * directory gone make a new tree and go on, and the tree being deleted can
 * gain nothing but their temporary files. A tree that jitop did not mark,
 * and that holds anything jitop would not have made, is left alone; a
 * marked tree that holds someone's files too is emptied of jitop's in
 * place, so that theirs stay where they put them. */
static int clean_tree(jitop__cache *c, int rfd, const char *name, struct left *left)
{
    int status = JITOP_OK;
    char *shown = jitop__sprintf("%s/%s", c->root, name), *foreign = NULL, *trash = NULL,
         *dest = NULL;
    if (!shown)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    int tfd = open_dir_at(rfd, name);
    if (tfd < 0) {
        if (errno == ENOTDIR || errno == ELOOP)
            warn_left_alone(shown, "not a directory");
        else if (errno != ENOENT)
            status = jitop__fail(JITOP_EIO, "cache: open %s: %s", shown, strerror(errno));
        goto out;
    }
    struct stat st;
    bool ours = fstat(tfd, &st) == 0 && st.st_uid == geteuid();
    bool tagged = ours && tree_tagged(tfd);
    if (ours)
        status = find_foreign(tfd, L_TREE, shown, &foreign);
    if (close(tfd) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: close %s: %s", shown, strerror(errno));
    if (status != JITOP_OK)
        goto out;
    if (tagged && foreign) {
        status = remove_dir_at(rfd, name, L_TREE, shown, left);
        goto out;
    }
    if (!ours || foreign) {
        char *why = !ours ? jitop__sprintf("owned by another user")
                          : jitop__sprintf("it has no %s marker and holds %s, which jitop did "
                                           "not make",
                                           TREE_TAG, foreign);
        warn_left_alone(shown, why ? why : "not made by jitop");
        free(why);
        goto out;
    }
    for (int attempt = 0; status == JITOP_OK; attempt++) {
        free(trash);
        free(dest);
        dest = NULL;
        trash = jitop__sprintf("%s/" TRASH_PREFIX "XXXXXX", c->root);
        if (!trash) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        if (!mkdtemp(trash)) {
            status = jitop__fail(JITOP_EIO, "cache: cannot create %s: %s", trash,
                                 strerror(errno));
            break;
        }
        dest = jitop__sprintf("%s/%s", trash, name);
        if (!dest) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        } else if (renameat(rfd, name, AT_FDCWD, dest) != 0) {
            /* ENOENT: another clean moved the tree first, or deleted this
             * trash directory while it was still empty: then again. */
            int e = errno;
            bool retry = e == ENOENT && fstatat(rfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                         attempt < JITOP__CACHE_RETRIES;
            if (e != ENOENT)
                status = jitop__fail(JITOP_EIO, "cache: rename %s -> %s: %s", shown, dest,
                                     strerror(e));
            if (rmdir(trash) != 0 && errno != ENOENT)
                jitop__cache_vlog(c, "cache: rmdir %s: %s", trash, strerror(errno));
            if (retry)
                continue;
            break;
        }
        status = remove_dir_at(AT_FDCWD, trash, L_TRASH, trash, left);
        break;
    }
out:
    free(shown);
    free(foreign);
    free(trash);
    free(dest);
    return status;
}

/* Opens the root for clean with the rules of jitop__cache_make_root: a
 * symbolic link there must be ours; the directory must be ours and not
 * writable by others. *fd -1 when there is no root. */
static int open_root(jitop__cache *c, int *fd)
{
    struct stat st;
    *fd = -1;
    if (lstat(c->root, &st) != 0)
        return errno == ENOENT ? JITOP_OK
                               : jitop__fail(JITOP_EIO, "cache: lstat %s: %s", c->root,
                                             strerror(errno));
    if (S_ISLNK(st.st_mode) && st.st_uid != geteuid())
        return jitop__fail(JITOP_EUNSAFE,
                           "cache root %s is a symbolic link owned by uid %u, not by this user "
                           "(uid %u): refused",
                           c->root, (unsigned)st.st_uid, (unsigned)geteuid());
    int rfd = open(c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return errno == ENOENT ? JITOP_OK
                               : jitop__fail(JITOP_EIO, "cache: open %s: %s", c->root,
                                             strerror(errno));
    int status = fstat(rfd, &st) != 0
                     ? jitop__fail(JITOP_EIO, "cache: fstat %s: %s", c->root, strerror(errno))
                     : jitop__cache_check_safe(c->root, &st);
    if (status != JITOP_OK) {
        if (close(rfd) != 0)
            jitop__cache_vlog(c, "cache: close %s: %s", c->root, strerror(errno));
        return status;
    }
    *fd = rfd;
    return JITOP_OK;
}

int jitop__cache_clean_trees(jitop__cache *c)
{
    int rfd = -1;
    jitop__strv names = {0};
    struct left left = {0};
    int status = open_root(c, &rfd);
    if (status != JITOP_OK || rfd < 0)
        return status;
    status = list_dir(rfd, c->root, &names);
    for (size_t i = 0; status == JITOP_OK && i < names.n; i++) {
        const char *n = names.v[i];
        enum level k = child_level(L_ROOT, n);
        if (k == L_TREE) {
            status = clean_tree(c, rfd, n, &left);
        } else if (k == L_TRASH) {
            /* Left by a clean that was interrupted or met foreign files. */
            char *shown = jitop__sprintf("%s/%s", c->root, n);
            status = shown ? remove_dir_at(rfd, n, L_TRASH, shown, &left)
                           : jitop__fail(JITOP_ENOMEM, "out of memory");
            free(shown);
        }
    }
    if (left.n)
        fprintf(stderr,
                "jitop: warning: clean left %zu name%s that jitop did not make, such as %s "
                "(jitop deletes only its own files)\n",
                left.n, left.n == 1 ? "" : "s", left.first ? left.first : "(out of memory)");
    free(left.first);
    jitop__strv_free(&names);
    if (close(rfd) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: close %s: %s", c->root, strerror(errno));
    return status;
}

/* Writes the tree's marker: one attempt; *again when the tree vanished. */
static int tag_tree(jitop__cache *c, bool made, int *err, bool *again)
{
    int status = JITOP_OK;
    char *tag = jitop__sprintf("%s/%s", c->vdir, TREE_TAG), *foreign = NULL;
    struct stat st;
    *again = false;
    if (!tag)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    /* The usual case: marked; one stat. */
    if (stat(tag, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size == (off_t)(sizeof tree_tag_text - 1))
        goto out;
    if (!made) {
        /* A tree without a marker: made by a jitop from before markers (or
         * by a process that is writing it right now), or by someone else.
         * Where nothing can be written, nothing is deleted either: read as
         * it is. Else it is adopted if it holds only jitop's names. */
        if (faccessat(AT_FDCWD, c->vdir, W_OK, AT_EACCESS) != 0 &&
            jitop__cache_unwritable_errno(errno))
            goto out;
        int tfd = open(c->vdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (tfd < 0) {
            if (errno == ENOENT)
                *again = true;
            else
                status = jitop__fail(JITOP_EIO, "cache: open %s: %s", c->vdir, strerror(errno));
            goto out;
        }
        status = find_foreign(tfd, L_TREE, c->vdir, &foreign);
        if (close(tfd) != 0 && status == JITOP_OK)
            status = jitop__fail(JITOP_EIO, "cache: close %s: %s", c->vdir, strerror(errno));
        if (status != JITOP_OK)
            goto out;
        if (foreign) {
            status = jitop__fail(JITOP_EUNSAFE,
                                 "cache directory %s has no %s marker and holds %s, which jitop "
                                 "did not make: refused, so that jitop never writes or deletes "
                                 "among your files; choose another cache directory "
                                 "(JITOP_CACHE_DIR) or move %s away",
                                 c->vdir, TREE_TAG, foreign, c->vdir);
            goto out;
        }
    }
    status = jitop__cache_write_once(c->vdir, TREE_TAG, (const unsigned char *)tree_tag_text,
                                     sizeof tree_tag_text - 1, true, err);
    if (status == JITOP_EIO && *err == ENOENT) {
        jitop__clear_error();
        *again = true;
        status = JITOP_OK;
    } else if (status == JITOP_OK && !made) {
        jitop__cache_vlog(c, "cache: adopted %s (it holds only jitop's files)", c->vdir);
    }
out:
    free(tag);
    free(foreign);
    return status;
}

int jitop__cache_ensure_tree(jitop__cache *c, int *err)
{
    int status = JITOP_OK;
    *err = 0;
    for (int attempt = 0;; attempt++) {
        struct stat st;
        bool made = false, again = false;
        if (stat(c->vdir, &st) != 0) {
            if (errno != ENOENT) {
                *err = errno;
                return jitop__fail(JITOP_EIO, "cache directory %s: stat: %s", c->vdir,
                                   strerror(errno));
            }
            if (mkdir(c->vdir, 0700) == 0) {
                made = true;
            } else if (errno == ENOENT && attempt < JITOP__CACHE_RETRIES) {
                status = jitop__cache_make_root(c, err);
                if (status != JITOP_OK)
                    return status;
                continue;
            } else if (errno != EEXIST) {
                *err = errno;
                return jitop__fail(JITOP_EIO, "cannot create cache directory %s: %s", c->vdir,
                                   strerror(errno));
            }
            if (stat(c->vdir, &st) != 0) {
                if (errno == ENOENT && attempt < JITOP__CACHE_RETRIES)
                    continue;
                *err = errno;
                return jitop__fail(JITOP_EIO, "cache directory %s: stat: %s", c->vdir,
                                   strerror(errno));
            }
        }
        if (!S_ISDIR(st.st_mode))
            return jitop__fail(JITOP_EIO, "cache path %s is not a directory", c->vdir);
        status = jitop__cache_check_safe(c->vdir, &st);
        if (status == JITOP_OK)
            status = tag_tree(c, made, err, &again);
        if (status != JITOP_OK || !again)
            return status;
        if (attempt == JITOP__CACHE_RETRIES) {
            *err = ENOENT;
            return jitop__fail(JITOP_EIO, "cache directory %s kept vanishing", c->vdir);
        }
    }
}

void jitop__cache_tag_root(jitop__cache *c)
{
    char *tag = jitop__sprintf("%s/%s", c->root, ROOT_TAG);
    struct stat st;
    jitop__strv names = {0};
    int err = 0;
    if (!tag || stat(tag, &st) == 0)
        goto out;
    /* Backup tools skip a tagged directory whole: a root that also holds
     * someone's files is not tagged. */
    int rfd = open(c->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        goto out;
    int status = list_dir(rfd, c->root, &names);
    if (close(rfd) != 0)
        status = JITOP_EIO;
    for (size_t i = 0; status == JITOP_OK && i < names.n; i++) {
        if (child_level(L_ROOT, names.v[i]) == L_FOREIGN) {
            jitop__cache_vlog(c, "cache: %s not tagged (%s): it holds %s, which jitop did not "
                                 "make",
                              c->root, ROOT_TAG, names.v[i]);
            goto out;
        }
    }
    if (status == JITOP_OK)
        status = jitop__cache_write_once(c->root, ROOT_TAG, (const unsigned char *)root_tag_text,
                                         sizeof root_tag_text - 1, false, &err);
    if (status != JITOP_OK)
        jitop__cache_vlog(c, "cache: cannot tag %s: %s", c->root, jitop_errmsg(NULL));
out:
    /* The tag only spares backups a cache: a missing one is not an error. */
    jitop__clear_error();
    jitop__strv_free(&names);
    free(tag);
}

/* Creates dir (mode 0700) when missing, checks it when present. *err gets
 * mkdir's errno on a failure to create (so that the caller can tell an
 * unwritable cache from a broken one). A missing parent is made again
 * (jitop clean in another process moves the tree away at any moment), up to
 * JITOP__CACHE_RETRIES times; the root and the tree go through their own
 * functions, so that the tree gets its marker. */
int jitop__cache_ensure_dir(jitop__cache *c, const char *dir, int *err)
{
    if (strcmp(dir, c->root) == 0)
        return jitop__cache_make_root(c, err);
    if (strcmp(dir, c->vdir) == 0)
        return jitop__cache_ensure_tree(c, err);
    *err = 0;
    struct stat st;
    /* The usual case, an existing directory, costs one stat. */
    for (int attempt = 0; stat(dir, &st) != 0; attempt++) {
        if (errno != ENOENT || attempt == JITOP__CACHE_RETRIES) {
            *err = errno;
            return jitop__fail(JITOP_EIO, "cache directory %s: stat: %s", dir, strerror(errno));
        }
        if (mkdir(dir, 0700) == 0 || errno == EEXIST)
            continue;
        if (errno != ENOENT || attempt == JITOP__CACHE_RETRIES) {
            *err = errno;
            return jitop__fail(JITOP_EIO, "cannot create cache directory %s: %s", dir,
                               strerror(errno));
        }
        char *parent = jitop__dirname(dir);
        if (!parent)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        int status = strcmp(parent, dir) == 0 ? JITOP_OK : jitop__cache_ensure_dir(c, parent, err);
        free(parent);
        if (status != JITOP_OK)
            return status;
    }
    if (!S_ISDIR(st.st_mode))
        return jitop__fail(JITOP_EIO, "cache path %s is not a directory", dir);
    return jitop__cache_check_safe(dir, &st);
}

/* write_once in dir, made first. A directory that vanishes between its
 * making and the rename (mkostemp or rename fail with ENOENT: jitop clean
 * moved the tree away) is made again and the write starts over. */
int jitop__cache_write_atomic(jitop__cache *c, const char *dir, const char *name,
                              const unsigned char *data, size_t len, bool durable, int *err)
{
    int status = JITOP_OK;
    for (int attempt = 0;; attempt++) {
        status = jitop__cache_ensure_dir(c, dir, err);
        if (status == JITOP_OK)
            status = jitop__cache_write_once(dir, name, data, len, durable, err);
        if (status != JITOP_EIO || *err != ENOENT || attempt == JITOP__CACHE_RETRIES)
            break;
        jitop__cache_vlog(c, "cache: %s went away while %s was written: writing again", dir,
                          name);
        jitop__clear_error();
        /* A clean that keeps running (a loop of them, or one over a huge
         * tree) can win several rounds in a row; after the first few, wait
         * a little longer each time (about 0.1 s in all) so that the
         * write gets a window between two of its moves. */
        if (attempt >= 4) {
            struct timespec pause = {0, 250000L * (attempt - 3)};
            nanosleep(&pause, NULL);
        }
    }
    return status;
}

bool jitop__cache_no_locks_errno(int e)
{
    return e == ENOLCK || e == EOPNOTSUPP || e == ENOTSUP || e == ENOSYS;
}

/* The other side of lock_once's second look: a lock file is unlinked only
 * while held here, so that whoever locked it before finds it gone and opens
 * the new one. Where flock is unsupported nobody can hold it. */
void jitop__cache_remove_lock(const jitop__cache *c, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ELOOP && unlink(path) != 0)
            jitop__cache_vlog(c, "cache: remove %s: %s", path, strerror(errno));
        return;
    }
    struct stat a, b;
    bool take = fstat(fd, &a) == 0 &&
                (!S_ISREG(a.st_mode) || flock(fd, LOCK_EX | LOCK_NB) == 0 ||
                 jitop__cache_no_locks_errno(errno));
    if (take && lstat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
        if (unlink(path) == 0)
            jitop__cache_vlog(c, "cache: removed the unused lock %s", path);
        else if (errno != ENOENT)
            jitop__cache_vlog(c, "cache: remove %s: %s", path, strerror(errno));
    }
    if (close(fd) != 0)
        jitop__cache_vlog(c, "cache: close %s: %s", path, strerror(errno));
}
