/*
 * `jitop`: prewarm, inspect and manage the jitop kernel cache from a shell.
 * This file only dispatches; each command lives in its own tools/cli_*.c.
 */
#include "cli.h"

#include <string.h>

static int print_version(void)
{
    if (printf("jitop %s\nNVRTC %s\n", jitop_version_string(), jitop_nvrtc_version()) < 0 ||
        fflush(stdout) != 0) {
        perror("jitop --version: stdout");
        return JITOP_CLI_EXIT_FAIL;
    }
    return JITOP_CLI_EXIT_OK;
}

/* `jitop help [COMMAND]` */
static int help_command(int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "jitop help: expected at most one command, got '%s' too\n", argv[2]);
        return JITOP_CLI_EXIT_USAGE;
    }
    if (argc == 2 && strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0) {
        if (jitop_cli_help(stdout, argv[1]) != 0) {
            fprintf(stderr, "jitop help: unknown command '%s'\n", argv[1]);
            jitop_cli_help(stderr, NULL);
            return JITOP_CLI_EXIT_USAGE;
        }
        return JITOP_CLI_EXIT_OK;
    }
    jitop_cli_help(stdout, argc == 2 ? "help" : NULL);
    return JITOP_CLI_EXIT_OK;
}

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} commands[] = {
    {"build", jitop_cli_build}, {"explain", jitop_cli_explain}, {"watch", jitop_cli_watch},
    {"ls", jitop_cli_ls},       {"gc", jitop_cli_gc},           {"clean", jitop_cli_clean},
    {"help", help_command},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        jitop_cli_help(stderr, NULL);
        return JITOP_CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0)
        return print_version();
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        jitop_cli_help(stdout, NULL);
        return JITOP_CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    }
    if (cmd[0] == '-')
        fprintf(stderr, "jitop: unknown flag '%s'\n", cmd);
    else
        fprintf(stderr, "jitop: unknown command '%s'\n", cmd);
    jitop_cli_help(stderr, NULL);
    return JITOP_CLI_EXIT_USAGE;
}
