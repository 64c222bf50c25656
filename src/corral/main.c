/* corral: the command-line client of corrald.  main() only dispatches to
 * one command; each lives in its own cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"run", crl_cmd_run, "create a sandbox, run a command in it, destroy it"},
    {"create", crl_cmd_create, "create a sandbox and print its id"},
    {"ls", crl_cmd_ls, "list sandboxes"},
    {"inspect", crl_cmd_inspect, "show a sandbox: state, limits, usage"},
    {"exec", crl_cmd_exec, "run a command in a sandbox, streaming its output"},
    {"sh", crl_cmd_sh, "an interactive shell in a sandbox, on a terminal of its own"},
    {"ps", crl_cmd_ps, "list a sandbox's background processes"},
    {"attach", crl_cmd_attach, "attach to a background process: its output, our input"},
    {"kill", crl_cmd_kill, "send a signal to a background process"},
    {"cp", crl_cmd_cp, "copy files and directories in and out of a sandbox"},
    {"rm", crl_cmd_rm, "destroy sandboxes"},
    {"host", crl_cmd_host, "show the host's capacity and use; drain a cluster's host"},
    {"hosts", crl_cmd_hosts, "list the cluster's hosts: state, load, last heartbeat"},
    {"image", crl_cmd_image, "images: ls, inspect, rm, tag, gc, import, build-debian, build-vm"},
    {"images", crl_cmd_images, "list images (corral image ls)"},
    {"volume", crl_cmd_volume, "named volumes: create, ls, inspect, rm"},
    {"call", crl_cmd_call, "call a registered function with JSON arguments"},
    {"functions", crl_cmd_functions, "list the registered functions"},
    {"traj", crl_cmd_traj, "trajectories: ls, show, export, rm, replay, gc"},
    {"snapshot", crl_cmd_snapshot, "checkpoint a sandbox's filesystem"},
    {"fork", crl_cmd_fork, "a new sandbox from a sandbox's state, a step or a checkpoint"},
    {"pause", crl_cmd_pause, "freeze a sandbox's processes"},
    {"resume", crl_cmd_resume, "thaw a paused sandbox"},
    {"timeout", crl_cmd_timeout, "end a sandbox's ttl a number of seconds from now"},
    {"net", crl_cmd_net, "change a sandbox's network policy while it runs"},
    {"forward", crl_cmd_forward, "a local port that reaches a port of a sandbox"},
    {"services", crl_cmd_services, "a sandbox's services and their newest exchanges"},
    {"bench", crl_cmd_bench, "measure sandbox cycles and exec against crun"},
    {"setup", crl_cmd_setup, "fetch and build what a backend needs (microvm: kernel, initramfs)"},
};

static void usage(FILE *f)
{
    fputs("usage: corral COMMAND [OPTIONS] [ARGS]\n"
          "\n"
          "Talks to corrald at $CORRAL_URL (default " CRL_CLIENT_DEFAULT_URL ", or\n"
          "http://127.0.0.1:PORT with the token in $CORRAL_TOKEN).\n"
          "\n"
          "commands:\n",
          f);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\n'corral COMMAND --help' shows a command's options.  Exit status: 0, 1 on an\n"
          "error, 2 on a usage error; run and exec exit with the command's status.\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(stderr), CRL_EXIT_USAGE;
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return usage(stdout), 0;
    if (strcmp(cmd, "help") == 0) {
        if (argc < 3)
            return usage(stdout), 0;
        /* "corral help CMD" is "corral CMD --help" */
        char *help_argv[] = {argv[2], "--help", NULL};
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
            if (strcmp(commands[i].name, argv[2]) == 0)
                return commands[i].fn(2, help_argv);
        return crl_cli_usage(NULL, "unknown command '%s'", argv[2]);
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(commands[i].name, cmd) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    if (cmd[0] == '-')
        return crl_cli_usage(NULL, "unknown option '%s' (options go after the command)", cmd);
    return crl_cli_usage(NULL, "unknown command '%s'", cmd);
}
