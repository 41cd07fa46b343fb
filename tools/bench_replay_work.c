/* bench_replay_work.c — the workloads of `recur-bench replay`, one function each, and the
 * deterministic text they send (a fixed word list and a fixed-seed generator, so that two runs
 * send the same requests; with temperature 0 and a fixed seed they get the same replies).
 *
 * Each conversation starts with the shared system prompt; a turn appends a user message, sends
 * the messages, and appends the reply as a chat client does (rp_turn). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_replay.h"

static const char *const WORDS[] = {
    "river", "lantern", "copper", "meadow", "signal", "harbor", "quiet", "engine", "orchard", "velvet",
    "summit", "pattern", "garden", "thunder", "mirror", "canvas", "pocket", "silver", "window", "compass",
    "forest", "marble", "anchor", "ribbon", "candle", "valley", "whisper", "bridge", "feather", "island",
    "ladder", "puzzle", "rocket", "saddle", "tunnel", "violet", "winter", "yellow", "basket", "castle",
    "dragon", "empire", "falcon", "glacier", "hammer", "jungle", "kettle", "legend", "magnet", "needle",
    "oyster", "planet", "quartz", "rabbit", "shadow", "timber", "umbrella", "vessel", "walnut", "zephyr",
    "archive", "balance", "circuit", "desert",
};
#define N_WORDS ((uint64_t)(sizeof WORDS / sizeof WORDS[0]))

static uint64_t mix(uint64_t *s) {   /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *word(uint64_t *s) { return WORDS[mix(s) % N_WORDS]; }

/* n words as sentences of 12 words. */
static char *filler(int n_words) {
    size_t cap = (size_t)n_words * 12 + 64, len = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    uint64_t s = 0x5EED;
    len += (size_t)snprintf(t, cap, "You are a careful assistant. Reference notes follow.");
    for (int i = 0; i < n_words; i++)
        len += (size_t)snprintf(t + len, cap - len, "%s%s%s", i % 12 ? " " : i ? ". " : " ", word(&s), i + 1 == n_words ? "." : "");
    return t;
}

char *rp_system_text(rp_run *r, int n_tokens, char *err, size_t err_len) {
    for (int n_words = n_tokens;; n_words *= 2) {
        char *t = filler(n_words);
        if (!t) { snprintf(err, err_len, "out of memory"); return NULL; }
        long st;
        json_t *res = NULL, *req = json_pack("{s:s, s:b}", "content", t, "add_special", 0);
        int rc = rp_post_json(&r->srv, "/tokenize", req, &st, &res, err, err_len);
        json_decref(req);
        json_t *toks = json_object_get(res, "tokens");
        if (rc || (int)json_array_size(toks) < n_tokens) {
            json_decref(res);
            if (rc || n_words > 1 << 22) { free(t); return NULL; }
            free(t);
            continue;
        }
        /* the text of the first n_tokens tokens: about n_tokens tokens again in a prompt */
        free(t);
        json_t *ids = json_array();
        for (int i = 0; i < n_tokens; i++) json_array_append(ids, json_array_get(toks, (size_t)i));
        json_decref(res);
        req = json_pack("{s:o}", "tokens", ids);
        rc = rp_post_json(&r->srv, "/detokenize", req, &st, &res, err, err_len);
        json_decref(req);
        const char *c = json_string_value(json_object_get(res, "content"));
        t = !rc && c ? strdup(c) : NULL;
        json_decref(res);
        return t;
    }
}

char *rp_user_text(int agent, int k, int variant) {
    uint64_t s = 0xC0FFEEull * (uint64_t)(agent + 1) + 7919ull * (uint64_t)k;
    const char *w[6];
    for (int i = 0; i < 6; i++) w[i] = word(&s);
    char buf[512];
    if (variant == 2) {   /* a different message altogether */
        s ^= 0xABCDEF;
        snprintf(buf, sizeof buf, "Forget that. Describe a %s near a %s instead, in the voice of a %s.", word(&s), word(&s),
                 word(&s));
    } else {
        if (variant == 1) { s ^= 0x1234; for (int i = 3; i < 6; i++) w[i] = word(&s); }   /* the tail edited */
        snprintf(buf, sizeof buf, "Question %d: how does the %s relate to the %s and the %s? Compare the %s, the %s and the %s.",
                 k, w[0], w[1], w[2], w[3], w[4], w[5]);
    }
    return strdup(buf);
}

/* ---- conversation helpers ------------------------------------------------------------------- */

static json_t *conversation(const rp_run *r) {
    return json_pack("[{s:s, s:s}]", "role", "system", "content", r->system);
}

static void add_user(json_t *m, char *text) {
    json_array_append_new(m, json_pack("{s:s, s:s}", "role", "user", "content", text ? text : ""));
    free(text);
}

/* n normal turns, numbered from first; 0 or 1 as rp_turn. */
static int turns(rp_run *r, json_t *m, int agent, int first, int n, bool keep_reasoning) {
    for (int k = first; k < first + n; k++) {
        char step[48];
        snprintf(step, sizeof step, "turn %d", k);
        add_user(m, rp_user_text(agent, k, 0));
        if (rp_turn(r, m, step, keep_reasoning, NULL)) return 1;
    }
    return 0;
}

static void drop_last(json_t *m) { json_array_remove(m, json_array_size(m) - 1); }

/* ---- the workloads -------------------------------------------------------------------------- */

/* The chat loop: the system prompt, then --turns user turns, each after the previous reply. */
static int wl_append(rp_run *r) {
    json_t *m = conversation(r);
    int rc = turns(r, m, 0, 1, r->o->turns, false);
    json_decref(m);
    return rc;
}

/* Three turns, then the last reply is regenerated: the same messages again (minimum 0). */
static int wl_regenerate(rp_run *r) {
    json_t *m = conversation(r);
    int rc = turns(r, m, 0, 1, 3, false);
    if (!rc) { drop_last(m); rc = rp_turn(r, m, "regenerate 3", false, NULL); }
    if (!rc) rc = turns(r, m, 0, 4, 1, false);
    json_decref(m);
    return rc;
}

/* Three turns, then the last user message is edited (its second half) and sent again. */
static int wl_edit_last(rp_run *r) {
    json_t *m = conversation(r);
    int rc = turns(r, m, 0, 1, 3, false);
    if (!rc) {
        drop_last(m);   /* the reply to the message being edited */
        drop_last(m);
        add_user(m, rp_user_text(0, 3, 1));
        rc = rp_turn(r, m, "edit 3", false, NULL);
    }
    if (!rc) rc = turns(r, m, 0, 4, 1, false);
    json_decref(m);
    return rc;
}

/* Four turns, then user message 2 is replaced by another message (a message boundary) and the
 * conversation is sent again, its later messages unchanged. */
static int wl_edit_earlier(rp_run *r) {
    json_t *m = conversation(r);
    int rc = turns(r, m, 0, 1, 4, false);
    if (!rc) {
        drop_last(m);   /* the last reply: the edited conversation gets a new one */
        /* [system, u1, a1, u2, ...]: user message 2 is at 3 */
        char *t = rp_user_text(0, 2, 2);
        json_object_set_new(json_array_get(m, 3), "content", json_string(t));
        free(t);
        rc = rp_turn(r, m, "edit turn 2, resend", false, NULL);
    }
    if (!rc) rc = turns(r, m, 0, 5, 1, false);
    json_decref(m);
    return rc;
}

/* Whether the rendered prompt of m holds text. */
static int prompt_has(rp_run *r, json_t *m, const char *text) {
    long st;
    char err[256];
    json_t *res = NULL, *req = json_pack("{s:O}", "messages", m);
    int rc = rp_post_json(&r->srv, "/apply-template", req, &st, &res, err, sizeof err);
    const char *p = json_string_value(json_object_get(res, "prompt"));
    int has = rc || !p ? -1 : strstr(p, text) != NULL;
    json_decref(req);
    json_decref(res);
    return has;
}

/* Replies whose reasoning the template may drop on later turns (Qwen3-style). A reply the
 * server split (a template that opens <think>, or a model that writes one) goes back with its
 * reasoning_content. A reply with none (a random-weight model under ChatML) is sent back with
 * its text inside <think>...</think> in the content and a short answer after it, as a thinking
 * model's reply would read. Each row's note says which, and whether the template kept the
 * previous reply's reasoning in the next prompt. */
static int wl_strip_reasoning(rp_run *r) {
    json_t *m = conversation(r);
    int rc = 0;
    char *prev = NULL;   /* the previous reply's reasoning */
    for (int k = 1; k <= 4 && !rc; k++) {
        char step[48];
        snprintf(step, sizeof step, "turn %d", k);
        add_user(m, rp_user_text(0, k, 0));
        const int kept = prev ? prompt_has(r, m, prev) : -1;
        rp_reply rep;
        if ((rc = rp_turn(r, m, step, true, &rep))) break;
        if (kept >= 0) rp_note(r, "previous reasoning %s by the template", kept ? "kept" : "dropped");
        free(prev);
        json_t *last = json_array_get(m, json_array_size(m) - 1);
        if (rep.reasoning[0]) {
            prev = strdup(rep.reasoning);
            rp_note(r, "reasoning_content passed back");
        } else {
            const size_t len = strlen(rep.content) + 64;
            char *c = malloc(len);
            if (c) snprintf(c, len, "<think>\n%s\n</think>\n\nAnswer %d.", rep.content, k);
            if (c) json_object_set_new(last, "content", json_string(c));
            free(c);
            prev = strdup(rep.content);
            rp_note(r, "no reasoning: reply sent back inside <think>");
        }
        /* an empty reasoning cannot be looked for */
        if (prev && !prev[0]) { free(prev); prev = NULL; }
        rp_reply_free(&rep);
    }
    free(prev);
    json_decref(m);
    return rc;
}

/* Four agents with the same system prompt, one turn each in turn, three rounds, on 2 slots. */
static int wl_agents(rp_run *r) {
    json_t *m[4];
    int rc = 0;
    for (int a = 0; a < 4; a++) m[a] = conversation(r);
    for (int k = 1; k <= 3 && !rc; k++)
        for (int a = 0; a < 4 && !rc; a++) {
            char step[48];
            snprintf(step, sizeof step, "agent %d turn %d", a + 1, k);
            add_user(m[a], rp_user_text(a + 1, k, 0));
            rc = rp_turn(r, m[a], step, false, NULL);
        }
    for (int a = 0; a < 4; a++) json_decref(m[a]);
    return rc;
}

/* POST /slots/0?action=ACTION {"filename":"replay.bin"}: its answer as a row. */
static void slot_action(rp_run *r, const char *action) {
    long st;
    char err[256], path[64];
    json_t *res = NULL, *req = json_pack("{s:s}", "filename", "replay.bin");
    snprintf(path, sizeof path, "/slots/0?action=%s", action);
    int rc = rp_post_json(&r->srv, path, req, &st, &res, err, sizeof err);
    char *txt = res ? json_dumps(res, JSON_COMPACT) : NULL;
    if (!rc) rp_action(r, action, "%s: %.170s", action, txt ? txt : "HTTP 200");
    else rp_action(r, action, "%s: %s", action, err);
    free(txt);
    json_decref(req);
    json_decref(res);
}

/* Three turns, slot 0 saved, the server restarted, slot 0 restored, two more turns. The save
 * and restore answers are shown as they come (an error too: the endpoint may not exist yet). */
static int wl_restart(rp_run *r) {
    json_t *m = conversation(r);
    int rc = turns(r, m, 0, 1, 3, false);
    if (!rc) {
        slot_action(r, "save");
        rc = rp_restart(r);
    }
    if (!rc) {
        slot_action(r, "restore");
        rc = turns(r, m, 0, 4, 2, false);
    }
    json_decref(m);
    return rc;
}

const rp_workload rp_workloads[] = {
    { "append", 1, false, wl_append },
    { "regenerate", 1, false, wl_regenerate },
    { "edit-last", 1, false, wl_edit_last },
    { "edit-earlier", 1, false, wl_edit_earlier },
    { "strip-reasoning", 1, false, wl_strip_reasoning },
    { "agents", 2, false, wl_agents },
    { "restart", 1, true, wl_restart },
};
const int rp_n_workloads = (int)(sizeof rp_workloads / sizeof rp_workloads[0]);
