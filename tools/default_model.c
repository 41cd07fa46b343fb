#include "default_model.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int tool_default_model(const char *argv0, const char *prog) {
    struct stat st;
    if (stat(RECUR_DEFAULT_MODEL, &st) == 0) return 0;
    char tool[4096];
    const char *slash = strrchr(argv0, '/');
    snprintf(tool, sizeof tool, "%.*srecur-gguf", slash ? (int)(slash - argv0 + 1) : 0, argv0);
    fprintf(stderr, "%s: writing the default model %s (random weights) with %s synth ...\n", prog,
            RECUR_DEFAULT_MODEL, tool);
    mkdir("models", 0755);
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_UNBLOCK, &all, NULL);   /* recur-server blocks SIGINT/SIGTERM for sigwait */
        execl(tool, tool, "synth", "--arch", "qwen3", "--preset", "qwen3-tiny", "--type", "Q8_0", "-o",
              RECUR_DEFAULT_MODEL, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: could not write %s (is recur-gguf built next to %s?)\n", prog, RECUR_DEFAULT_MODEL,
                prog);
        return 1;
    }
    return 0;
}
