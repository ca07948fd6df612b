/* jitop_load's -instance=NAME options: the template instances a caller
 * declares at load, so that the source's first compile has them in (the
 * fold rule, build/build.h) and their first get compiles nothing. */
#include "load/load.h"

#include <stdlib.h>
#include <string.h>

#define INSTANCE_OPT "-instance="

int jitop__load_instance_refused(const char *module, const char *option)
{
    return jitop__fail(JITOP_EINVAL,
                       "module %s: option %s: not a template instance (write "
                       "-instance=NAME<ARGS>; a plain kernel name needs no declaration)",
                       module, option);
}

int jitop__load_instances(const char *name, const char *const *options, size_t noptions,
                          const char ***kept, size_t *nkept, jitop__strv *declared)
{
    int status = JITOP_OK;
    *kept = NULL;
    *nkept = 0;
    memset(declared, 0, sizeof *declared);
    if (noptions == 0)
        return JITOP_OK;
    const char **v = calloc(noptions, sizeof *v);
    if (!v)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; status == JITOP_OK && i < noptions; i++) {
        const char *o = options[i];
        if (!o || strncmp(o, INSTANCE_OPT, sizeof INSTANCE_OPT - 1) != 0) {
            v[n++] = o; /* NULL: the unit's normalization says what is wrong */
            continue;
        }
        const char *expr = o + sizeof INSTANCE_OPT - 1;
        char *canon = jitop__name_canonical(expr);
        if (!canon) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        if (canon[0] == '\0')
            status = jitop__load_instance_refused(name, o);
        bool dup = false;
        for (size_t j = 0; status == JITOP_OK && j < declared->n && !dup; j++)
            dup = strcmp(declared->v[j], canon) == 0;
        if (status == JITOP_OK && !dup)
            status = jitop__strv_push(declared, canon);
        free(canon);
    }
    if (status != JITOP_OK) {
        free(v);
        jitop__strv_free(declared);
        return status;
    }
    *kept = v;
    *nkept = n;
    return JITOP_OK;
}
