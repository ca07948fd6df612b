/* The (file, arch, name) units a command line covers (see cli.h). */
#include "cli.h"

#include <stdlib.h>

int jitop_cli_units(const char *cmd, const jitop_cli_strs *files, const jitop_cli_strs *archs,
                    const jitop_cli_strs *names, jitop_cli_unit **out, size_t *n)
{
    size_t count = files->n * (names->n + 1) * archs->n;
    jitop_cli_unit *units = calloc(count + 1, sizeof *units);
    *out = NULL;
    *n = 0;
    if (!units) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        return JITOP_CLI_EXIT_FAIL;
    }
    size_t u = 0;
    for (size_t f = 0; f < files->n; f++)
        for (size_t k = 0; k <= names->n; k++)
            for (size_t a = 0; a < archs->n; a++)
                units[u++] = (jitop_cli_unit){files->v[f], archs->v[a],
                                              k > 0 ? names->v[k - 1] : NULL};
    *out = units;
    *n = u;
    return JITOP_CLI_EXIT_OK;
}
