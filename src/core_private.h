/* What the core files (deps.c, compile.c, cache*.c, build.c) share beyond
 * internal.h: the freshness window and the stat comparisons built on it,
 * read-only looks at the cache for jitop_explain (which must not mark
 * entries used nor remove them), and the NVRTC library's identity for keys. */
#ifndef JITOP_CORE_PRIVATE_H
#define JITOP_CORE_PRIVATE_H

#include "internal.h"

/* A file whose mtime is this close to the moment its stat data was recorded
 * is never trusted by that stat data alone (jitop__dep.recent). Timestamps
 * have a granularity: ext4 stamps files from a coarse kernel clock (a few
 * ms), some network file systems to 1 s, FAT to 2 s. Two writes within one
 * tick, the second after we looked, leave size and mtime unchanged (git
 * calls this "racy clean"). The test is against the time of the recording,
 * not of a later check: a manifest written in the tick of an edit must not
 * be trusted once the tick is old. 2 s covers the coarsest of these; the
 * cost is one content hash per check of a file saved less than 2 s before
 * it was last scanned, until a scan records it older. */
#define JITOP__RECENT_WINDOW_NS ((int64_t)2000000000)

/* The mtime of a recent record read back from a manifest, which stores the
 * flag in place of the time (cache_manifest.c): no file has this mtime (it
 * is 292 years before 1970, and the ns count of such a time overflows). */
#define JITOP__MTIME_UNKNOWN INT64_MIN

/* The dep of d whose path is path, NULL when none (deps.c). */
const jitop__dep *jitop__deps_find(const jitop__deps *d, const char *path);

/* After a compile: did any file change since it was scanned? NVRTC read the
 * files itself, so a header saved during the compile may be in the binary
 * while the key holds its old hash. Stat differences say so; a recent record
 * is hashed again. *changed names the first such file (malloc'd), NULL when
 * none (deps.c). */
int jitop__deps_changed(const jitop__deps *d, char **changed);

/* A test seam (build.c): when set, the build calls it after NVRTC returns
 * and before it checks the files again, with the unit's source name. Tests
 * use it to edit a header "during" a compile, or to die there, at a known
 * point rather than by racing a timer (which valgrind's scheduler loses).
 * NULL in normal use; set it only while no build runs. */
extern void (*jitop__after_compile_hook)(const char *source);
/* The same seam just before NVRTC runs (tests count compiles with it,
 * failed ones included). */
extern void (*jitop__before_compile_hook)(const char *source);

/* Whether a valid entry exists under key. Does not mark it used and leaves
 * an invalid one in place. */
int jitop__cache_peek(jitop__cache *c, const char key[33], bool *found);

/* The most recently used valid entry whose first source is source (a
 * path, or the inline unit's name). *found false when none. Walks the whole
 * cache: meant for explaining a miss, not for the build path. */
int jitop__cache_find_recent(jitop__cache *c, const char *source, jitop__entry *out,
                             char key[33], bool *found);

/* The first line of an entry's sources for a unit: its path, or
 * "inline:<name>" for inline text. Malloc'd (NULL on ENOMEM). */
char *jitop__unit_source_label(const jitop__unit *u);

/* The NVRTC library file jitop compiles with, as its soname and the size of
 * the file behind it, for example "libnvrtc.so.13 109338064" (compile.c). It
 * is the NVRTC part of every key: nvrtcVersion gives major.minor only, while
 * a patch release may change the code it generates (and its library size
 * differs). Found by one stat of the file dlopen would open, through its
 * links, without loading NVRTC, so that a hit never pays for the load; only
 * where NVRTC is not in the toolkit jitop was built against is it loaded to
 * learn which file the search path gives. "unknown" when there is no NVRTC.
 * Path, file name and mtime are left out so that a cache prewarmed on one
 * machine hits on another with the same release, whatever its layout. */
const char *jitop__nvrtc_identity(void);

#endif
