/* srv_info.c — the GET endpoints: /health, /v1/models, /props, /slots, /metrics, with the
 * fields llama-server gives (server-context.cpp; Prometheus names llamacpp:*). */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

const char *srv_model_name(const srv_server *s) {
    if (s->o.alias) return s->o.alias;
    const char *p = s->o.model_path ? s->o.model_path : "model";
    const char *slash = strrchr(p, '/');
    return slash ? slash + 1 : p;
}

int srv_h_health(srv_req *r) { return srv_reply_json(r, 200, json_pack("{s:s}", "status", "ok")); }

/* n_ctx per slot and the slot count, 0 after shutdown */
static void sched_shape(srv_server *s, int32_t *n_ctx, int32_t *n_slots) {
    *n_ctx = *n_slots = 0;
    pthread_rwlock_rdlock(&s->life);
    if (s->sched) {
        *n_ctx = sched_params_of(s->sched)->n_ctx_slot;
        *n_slots = sched_params_of(s->sched)->n_slots;
    }
    pthread_rwlock_unlock(&s->life);
}

int srv_h_models(srv_req *r) {
    srv_server *s = r->s;
    const recur_model *m = s->model;
    int32_t n_ctx, n_slots;
    sched_shape(s, &n_ctx, &n_slots);
    const char *name = srv_model_name(s);
    json_t *meta = json_pack("{s:i, s:i, s:i, s:i, s:i, s:I, s:I}", "vocab_type", vocab_kind_of(s->vocab) == VOCAB_SPM ? 1 : 2,
                             "n_vocab", recur_model_n_vocab(m), "n_ctx", (int)n_ctx, "n_ctx_train", recur_model_n_ctx_train(m),
                             "n_embd", recur_model_n_embd(m), "n_params", (json_int_t)recur_model_n_params(m),
                             "size", (json_int_t)recur_model_size_bytes(m));
    json_t *data = json_pack("[{s:s, s:[s], s:[], s:s, s:I, s:s, s:o}]", "id", name, "aliases", name, "tags",
                             "object", "model", "created", (json_int_t)s->created, "owned_by", "llamacpp", "meta", meta);
    json_t *models = json_pack("[{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:[s], s:[s], s:s, s:{s:s, s:s, s:s, s:[s], s:s, s:s}}]",
                               "name", name, "model", name, "modified_at", "", "size", "", "digest", "", "type", "model",
                               "description", "", "tags", "", "capabilities", "completion", "parameters", "",
                               "details", "parent_model", "", "format", "gguf", "family", "", "families", "",
                               "parameter_size", "", "quantization_level", "");
    return srv_reply_json(r, 200, json_pack("{s:o, s:s, s:o}", "models", models, "object", "list", "data", data));
}

static json_t *token_text(const srv_server *s, recur_token t) {
    size_t n = 0;
    const char *p = t >= 0 ? vocab_token_text(s->vocab, t, &n) : NULL;
    return srv_json_str(p ? p : "", p ? n : 0);
}

int srv_h_props(srv_req *r) {
    srv_server *s = r->s;
    int32_t n_ctx, n_slots;
    sched_shape(s, &n_ctx, &n_slots);
    const recur_sampler_params *sp = &s->o.sampling;
    json_t *params = json_pack("{s:I, s:f, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f, s:i, s:i, s:b, s:b}",
                               "seed", s->o.seed_random ? (json_int_t)0xffffffff : (json_int_t)sp->seed,
                               "temperature", (double)sp->temp, "top_k", (int)sp->top_k, "top_p", (double)sp->top_p,
                               "min_p", (double)sp->min_p, "typical_p", (double)sp->typical_p,
                               "repeat_last_n", (int)sp->penalty_last_n, "repeat_penalty", (double)sp->penalty_repeat,
                               "presence_penalty", (double)sp->penalty_present, "frequency_penalty", (double)sp->penalty_freq,
                               "n_predict", (int)s->o.n_predict, "max_tokens", (int)s->o.n_predict, "stream", 0, "ignore_eos", 0);
    json_t *j = json_pack("{s:{s:o, s:i}, s:i, s:s, s:s, s:o, s:{s:b, s:b}, s:{s:b, s:b}, s:s, s:s, s:b, s:o, s:o}",
                          "default_generation_settings", "params", params, "n_ctx", (int)n_ctx,
                          "total_slots", (int)n_slots, "model_alias", srv_model_name(s),
                          "model_path", s->o.model_path ? s->o.model_path : "",
                          "chat_template", srv_json_str(s->tmpl_src, s->tmpl_src ? strlen(s->tmpl_src) : 0),
                          "chat_template_caps", "supports_tools", s->tmpl_src && strstr(s->tmpl_src, "tools") != NULL,
                          "supports_system_role", s->tmpl_src && strstr(s->tmpl_src, "system") != NULL,
                          "modalities", "vision", 0, "audio", 0, "media_marker", "<__media__>",
                          "build_info", SRV_BUILD_INFO, "is_sleeping", 0,
                          "bos_token", token_text(s, vocab_bos(s->vocab)), "eos_token", token_text(s, vocab_eos(s->vocab)));
    return srv_reply_json(r, 200, j);
}

int srv_h_slots(srv_req *r) {
    srv_server *s = r->s;
    if (!s->o.slots)
        return srv_reply_error(r, 501, "This server does not support slots endpoint. Start it with `--slots`");
    sched_slot_info info[256];
    int32_t n = 0;
    pthread_rwlock_rdlock(&s->life);
    if (s->sched) n = sched_slot_info_get(s->sched, info, 256);
    pthread_rwlock_unlock(&s->life);
    if (n > 256) n = 256;
    json_t *arr = json_array();
    int idle = 0;
    for (int32_t i = 0; i < n; i++) {
        const sched_slot_info *si = &info[i];
        idle += !si->is_processing;
        json_array_append_new(arr, json_pack("{s:i, s:I, s:i, s:b, s:b, s:i, s:i, s:i, s:i, s:[{s:b, s:i}]}",
            "id", (int)si->id, "id_task", (json_int_t)si->id_task, "n_ctx", (int)si->n_ctx, "speculative", 0,
            "is_processing", si->is_processing, "n_prompt_tokens", (int)si->n_prompt_tokens,
            "n_prompt_tokens_processed", (int)si->n_prompt_tokens_processed,
            "n_prompt_tokens_cache", (int)si->n_prompt_tokens_cache, "n_tokens_cached", (int)si->n_tokens_cached,
            "next_token", "has_next_token", si->is_processing, "n_decoded", (int)si->n_decoded));
    }
    const char *fail = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    if (fail && *fail && idle == 0) {
        json_decref(arr);
        return srv_reply_error(r, 503, "no slot available");
    }
    return srv_reply_json(r, 200, arr);
}

typedef struct metric {
    const char *name, *help;
    double      value;
} metric;

/* Prometheus text: llama-server's metrics under "llamacpp:", recur's own under "recur:". */
static void add_metrics(char *buf, size_t cap, size_t *len, const char *ns, const char *type, const metric *m,
                        size_t n) {
    for (size_t i = 0; i < n && *len < cap; i++)
        *len += (size_t)snprintf(buf + *len, cap - *len, "# HELP %s:%s %s\n# TYPE %s:%s %s\n%s:%s %.17g\n", ns,
                                 m[i].name, m[i].help, ns, m[i].name, type, ns, m[i].name, m[i].value);
}

int srv_h_metrics(srv_req *r) {
    srv_server *s = r->s;
    if (!s->o.metrics)
        return srv_reply_error(r, 501, "This server does not support metrics endpoint. Start it with `--metrics`");
    sched_metrics m = {0};
    pthread_rwlock_rdlock(&s->life);
    if (s->sched) sched_get_metrics(s->sched, &m);
    pthread_rwlock_unlock(&s->life);
    const metric counters[] = {
        { "prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", (double)m.prompt_tokens_total },
        { "prompt_seconds_total", "Total time spent processing prompts", m.prompt_seconds_total },
        { "tokens_predicted_total", "Number of generation tokens processed", (double)m.tokens_predicted_total },
        { "tokens_predicted_seconds_total", "Total time spent generating tokens", m.predicted_seconds_total },
        { "n_decode_total", "Total number of decode calls", (double)m.n_decode_total },
        { "n_tokens_max", "Largest observed sequence length (prompt + generation)", (double)m.n_tokens_max },
    };
    const metric gauges[] = {
        { "prompt_tokens_seconds", "Average prompt throughput in tokens/s",
          m.prompt_seconds_total > 0 ? (double)m.prompt_tokens_total / m.prompt_seconds_total : 0 },
        { "predicted_tokens_seconds", "Average generation throughput in tokens/s",
          m.predicted_seconds_total > 0 ? (double)m.tokens_predicted_total / m.predicted_seconds_total : 0 },
        { "requests_processing", "Number of requests processing", (double)m.requests_processing },
        { "requests_deferred", "Number of requests deferred", (double)m.requests_deferred },
        { "n_busy_slots_per_decode", "Average number of busy slots per decode call",
          m.n_decode_total ? (double)m.n_busy_slots_total / (double)m.n_decode_total : 0 },
    };
    const metric cache_counters[] = {
        { "cache_tokens_reused_total", "Prompt tokens restored from a slot or the prompt cache instead of evaluated",
          (double)m.cache_tokens_reused_total },
        { "checkpoints_created_total", "Prompt-cache checkpoints created", (double)m.ckpt_created_total },
        { "checkpoints_restored_total", "Prompt-cache checkpoints restored", (double)m.ckpt_restored_total },
        { "checkpoints_evicted_total", "Prompt-cache checkpoints evicted", (double)m.ckpt_evicted_total },
        { "reply_checks_total", "Chat replies whose re-rendering by the client was checked (when idle)",
          (double)m.reply_checks_total },
        { "reply_checkpoints_total", "Checkpoints derived where a reply re-renders differently from its tokens",
          (double)m.reply_ckpts_total },
        { "reply_tokens_evaluated_total", "Tokens evaluated while idle to derive them", (double)m.reply_tokens_total },
    };
    const metric cache_gauges[] = {
        { "cache_bytes", "Bytes held by the prompt cache", (double)m.cache_bytes },
        { "cache_budget_bytes", "The prompt cache's budget (--cache-ram; -1 unlimited, 0 off)", (double)m.cache_budget_bytes },
        { "cache_tokens", "Token rows held by the prompt cache", (double)m.cache_tokens },
        { "cache_checkpoints", "Checkpoints held by the prompt cache", (double)m.cache_checkpoints },
    };
    char buf[12288];
    size_t len = 0;
    add_metrics(buf, sizeof buf, &len, "llamacpp", "counter", counters, sizeof counters / sizeof counters[0]);
    add_metrics(buf, sizeof buf, &len, "llamacpp", "gauge", gauges, sizeof gauges / sizeof gauges[0]);
    add_metrics(buf, sizeof buf, &len, "recur", "counter", cache_counters, sizeof cache_counters / sizeof cache_counters[0]);
    add_metrics(buf, sizeof buf, &len, "recur", "gauge", cache_gauges, sizeof cache_gauges / sizeof cache_gauges[0]);
    return srv_reply_text(r, 200, "text/plain; version=0.0.4", buf, len < sizeof buf ? len : sizeof buf - 1);
}
