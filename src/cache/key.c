/* Cache keys and manifest ids: XXH3-128 over everything that changes the
 * binary (the key) or names the unit (the manifest id). */
#include "cache/cache_private.h"

#include <limits.h>
#include <unistd.h>

/* Every field is length-prefixed (jitop__hash_str); lists are prefixed by
 * their count. */
static void key_strv(XXH3_state_t *st, const jitop__strv *sv)
{
    jitop__hash_u64(st, sv->n);
    for (size_t i = 0; i < sv->n; i++)
        jitop__hash_str(st, sv->v[i]);
}

static void key_unit(XXH3_state_t *st, const char *kind, const jitop__unit *u)
{
    jitop__hash_str(st, kind);
    jitop__hash_u64(st, JITOP__FORMAT_VERSION);
    jitop__hash_str(st, u->arch);
    jitop__hash_str(st, u->source_name);
    jitop__hash_str(st, u->source_path);
    jitop__hash_u64(st, u->inline_text != NULL);
    jitop__hash_str(st, u->inline_text);
    key_strv(st, &u->options);
    /* The include folders, the toolkit's included (they are no option): a
     * header found in one, or __has_include of one, depends on them. */
    key_strv(st, &u->include_dirs);
    key_strv(st, &u->names);
}

static void key_finish(XXH3_state_t *st, char out[33])
{
    jitop__hash_hex(XXH3_128bits_digest(st), out);
}

void jitop__cache_key(const jitop__unit *u, const jitop__deps *d, char key[33])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    key_unit(&st, "jitop entry key", u);
    /* The NVRTC library's file name and size, not nvrtcVersion: that would
     * load NVRTC (8-10 ms) on every hit, and the file already tells one
     * release from another (see jitop__nvrtc_identity in compile.h). */
    jitop__hash_str(&st, jitop__nvrtc_identity());
    jitop__deps_hash(&st, d);
    key_finish(&st, key);
}

void jitop__link_key(const char *arch, const jitop__strv *options, const char *const *keys,
                     size_t n, char key[33])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    jitop__hash_str(&st, "jitop link key");
    jitop__hash_u64(&st, JITOP__FORMAT_VERSION);
    jitop__hash_str(&st, arch);
    key_strv(&st, options);
    jitop__hash_str(&st, jitop__nvjitlink_identity());
    jitop__hash_u64(&st, n);
    for (size_t i = 0; i < n; i++)
        jitop__hash_str(&st, keys[i]);
    key_finish(&st, key);
}

/* Everything but file contents and the NVRTC version: the manifest then
 * survives an NVRTC upgrade, and the key is recomputed from it anyway.
 * Inline text's quoted includes are looked up in the current directory
 * (resolve.c), so its manifest is per directory too: one recorded elsewhere
 * would vouch for another directory's header by stat alone. */
void jitop__manifest_id(const jitop__unit *u, char id[33])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    key_unit(&st, "jitop manifest id", u);
    if (!u->source_path) {
        char cwd[PATH_MAX];
        jitop__hash_str(&st, getcwd(cwd, sizeof cwd) ? cwd : "");
    }
    key_finish(&st, id);
}

char *jitop__unit_source_label(const jitop__unit *u)
{
    return u->source_path ? jitop__strdup(u->source_path)
                          : jitop__sprintf("inline:%s", u->source_name);
}
