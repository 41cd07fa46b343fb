/* recur-server — llama-server's HTTP API over librecur, with parallel slots.
 *
 *   recur-server -m model.gguf --port 8080 -np 4 -c 4096
 *
 * HTTP starts first (every endpoint answers 503 "Loading model" until the model, the chat
 * template and the scheduler are ready); SIGINT / SIGTERM stop it cleanly: the scheduler ends
 * every task, connections close, the model is freed, exit status 0. With no -m it serves the
 * default model (models/default.gguf, random weights), writing it with recur-gguf synth first. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "default_model.h"
#include "server.h"
#include "server/srv_load.h"

static void banner(const srv_server *s, const server_args *a, const sched_params *sp) {
    char desc[256], name[256] = "";
    recur_model_desc(s->model, desc, sizeof desc);
    recur_model_meta_str(s->model, "general.name", name, sizeof name);
    fprintf(stderr, "recur-server: %s | %s | cpu %s\n", a->model, desc, recur_cpu_isa());
    fprintf(stderr, "recur-server: %d slots x %d tokens, batch %d, ubatch %d, q8 order %s\n", sp->n_slots,
            sp->n_ctx_slot, sp->n_batch, sp->n_ubatch, recur_q8_order_name(sp->q8_order));
    if (sp->cache_bytes != 0 && sp->cache_prompt)
        fprintf(stderr, "recur-server: prompt cache %s%lld MiB, %d checkpoints per path, interval %d\n",
                sp->cache_bytes < 0 ? "unlimited (" : "", (long long)(sp->cache_bytes < 0 ? -1 : sp->cache_bytes >> 20),
                sp->ctx_checkpoints, sp->ckpt_interval);
    else
        fprintf(stderr, "recur-server: prompt cache off\n");
    if (strstr(name, "random weights"))
        fprintf(stderr,
                "recur-server: NOTE: this model has RANDOM weights (written by recur-gguf synth): its text is noise.\n"
                "recur-server: Pass a real GGUF to get real text:  recur-server -m path/to/model.gguf\n");
}

static void server_init(srv_server *s, const server_args *a) {
    memset(s, 0, sizeof *s);
    s->o = (srv_opts){ .host = a->host, .port = a->port, .api_keys = a->api_keys, .n_api_keys = a->n_api_keys,
                       .metrics = a->metrics, .slots = a->slots, .jinja = a->jinja, .timeout_s = a->timeout_s,
                       .max_body = 32u << 20, .alias = a->alias, .model_path = a->model, .sampling = a->sampling,
                       .seed_random = a->seed < 0, .n_predict = a->n_predict, .reasoning = (srv_reasoning)a->reasoning,
                       .slot_save_path = a->slot_save_path,
                       .ban_strings = a->ban_strings, .n_ban_strings = a->n_ban_strings, .banned_n = a->banned_n };
    if (a->seed >= 0) s->o.sampling.seed = (uint64_t)a->seed;
    atomic_init(&s->ready, false);
    atomic_init(&s->next_id, 1);
    pthread_rwlock_init(&s->life, NULL);
    s->created = time(NULL);
}

int main(int argc, char **argv) {
    server_args a;
    int rc = server_args_parse(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    const bool default_model = !a.model;
    if (default_model) a.model = RECUR_DEFAULT_MODEL;
    /* the signals are taken by sigwait below; every thread started from here on blocks them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* a file-size limit (RLIMIT_FSIZE) must fail the write (EFBIG: an error reply for a slot
     * save, a log line for --cache-dir) rather than kill the server and every open request */
    signal(SIGXFSZ, SIG_IGN);
    /* prompt-cache entries (checkpoints, logits, rows) come and go within --cache-ram: a fixed
     * mmap threshold gives the freed ones back to the system instead of leaving holes in the heap
     * (glibc would raise the threshold after the first free and keep them) */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    recur_init();
    json_object_seed(0);

    srv_server s;
    server_init(&s, &a);
    char err[512];
    if (srv_http_start(&s, err, sizeof err)) {
        fprintf(stderr, "recur-server: %s\n", err);
        return 1;
    }
    fprintf(stderr, "recur-server: listening on http://%s:%d\n", a.host, srv_http_port(&s));
    /* a test hook: a slow load, to observe the 503 "Loading model" answers */
    const char *delay = getenv("RECUR_SERVER_LOAD_DELAY_MS");
    if (delay) usleep((useconds_t)atoi(delay) * 1000u);
    sched_params sp = sched_default_params();
    sp.n_slots = a.n_slots;
    sp.n_ctx_slot = a.n_ctx;
    sp.n_batch = a.n_batch;
    sp.n_ubatch = a.n_ubatch < a.n_batch ? a.n_ubatch : a.n_batch;
    sp.n_threads = a.n_threads;
    sp.q8_order = a.q8_order;
    sp.cache_prompt = a.cache_prompt;
    sp.cache_bytes = a.cache_ram_mib < 0 ? -1 : (int64_t)a.cache_ram_mib << 20;
    sp.ctx_checkpoints = a.ctx_checkpoints;
    sp.ckpt_interval = a.ctx_checkpoints_interval;
    sp.cache_dir = a.cache_dir;
    rc = 0;
    if (default_model && tool_default_model(argv[0], "recur-server")) {
        rc = 1;
    } else if (srv_load(&s, a.model, a.chat_template_file, &sp, err, sizeof err)) {
        fprintf(stderr, "recur-server: %s\n", err);
        rc = 1;
    } else {
        banner(&s, &a, &sp);
        atomic_store(&s.ready, true);
        fprintf(stderr, "recur-server: ready\n");
        int sig = 0;
        sigwait(&sigs, &sig);
        fprintf(stderr, "recur-server: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    srv_http_stop(&s);
    srv_unload(&s);
    pthread_rwlock_destroy(&s.life);
    server_args_free(&a);
    return rc;
}
