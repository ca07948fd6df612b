/* The (file, arch, name) units a command line covers (see cli.h). */
#include "cli.h"

#include "base/base.h" /* jitop__mentions_template, jitop__read_file: see cli.h */

#include <stdbool.h>
#include <stdlib.h>

/* Which files each name goes with: mentions[f * nnames + k]. */
static int match_names(const char *cmd, const jitop_cli_strs *files, const jitop_cli_strs *names,
                       bool *mentions)
{
    /* Without a --name nothing is matched: no source is read (a 100 MB one
     * would cost a read before its build's stat fast path). */
    for (size_t f = 0; names->n > 0 && f < files->n; f++) {
        char *text = NULL;
        size_t len = 0;
        bool readable = jitop__read_file(files->v[f], &text, &len) == JITOP_OK;
        for (size_t k = 0; k < names->n; k++)
            mentions[f * names->n + k] =
                !readable || jitop__mentions_template(text, names->v[k]);
        free(text);
    }
    for (size_t k = 0; k < names->n; k++) {
        bool any = false;
        for (size_t f = 0; f < files->n && !any; f++)
            any = mentions[f * names->n + k];
        if (!any) {
            fprintf(stderr, "jitop %s: --name '%s': no source given mentions its template%s\n",
                    cmd, names->v[k], files->n == 1 ? "" : " (none of the files)");
            return JITOP_CLI_EXIT_USAGE;
        }
    }
    return JITOP_CLI_EXIT_OK;
}

int jitop_cli_units(const char *cmd, const jitop_cli_strs *files, const jitop_cli_strs *archs,
                    const jitop_cli_strs *names, jitop_cli_unit **out, size_t *n)
{
    bool *mentions = calloc(files->n * names->n + 1, sizeof *mentions);
    jitop_cli_unit *units = NULL;
    int rc = JITOP_CLI_EXIT_FAIL;
    *out = NULL;
    *n = 0;
    if (!mentions)
        goto oom;
    if ((rc = match_names(cmd, files, names, mentions)) != JITOP_CLI_EXIT_OK)
        goto out;
    size_t count = 0;
    for (size_t f = 0; f < files->n; f++) {
        count++;
        for (size_t k = 0; k < names->n; k++)
            count += mentions[f * names->n + k];
    }
    count *= archs->n;
    if (!(units = calloc(count + 1, sizeof *units)))
        goto oom;
    size_t u = 0;
    for (size_t f = 0; f < files->n; f++)
        for (size_t k = 0; k <= names->n; k++) {
            if (k > 0 && !mentions[f * names->n + k - 1])
                continue;
            for (size_t a = 0; a < archs->n; a++)
                units[u++] = (jitop_cli_unit){files->v[f], archs->v[a],
                                              k > 0 ? names->v[k - 1] : NULL};
        }
    *out = units;
    *n = u;
    free(mentions);
    return JITOP_CLI_EXIT_OK;
oom:
    fprintf(stderr, "jitop %s: out of memory\n", cmd);
    rc = JITOP_CLI_EXIT_FAIL;
out:
    free(mentions);
    free(units);
    return rc;
}
