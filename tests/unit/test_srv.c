/* test_srv.c — the HTTP side's pure parts, without a socket:
 * 1. request fields into task params (srv_params_parse): defaults, aliases, clamps, type errors,
 *    the three logit_bias formats, stop strings, logprobs forms;
 * 2. streamed reasoning/content deltas (srv_chat_split_deltas): fed byte by byte, they add up to
 *    the final split and never send what a later byte would retract;
 * 3. JSON strings of invalid UTF-8 (srv_json_str). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "chat/chat.h"
#include "model/model.h"
#include "server/srv.h"

#define MODEL RECUR_TESTDATA "/models/pub-qwen35-Q8_0.gguf"

typedef struct fixture {
    recur_model *m;
    srv_server   s;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    char err[256];
    if (!f || recur_model_load(MODEL, NULL, &f->m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
    f->s.model = f->m;
    f->s.vocab = f->m->vocab;
    f->s.o.sampling = recur_sampler_default_params();
    f->s.o.n_predict = -1;
    f->s.o.seed_random = true;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    recur_model_free(f->m);
    free(f);
    return 0;
}

/* parses body into a fresh task; returns the status, *t and *g for inspection */
static recur_status parse(fixture *f, const char *body, srv_fmt fmt, srv_task **t, srv_gen_opts *g, char *err) {
    json_error_t je;
    json_t *b = json_loads(body, 0, &je);
    assert_non_null(b);
    *t = srv_task_new(1);
    *g = (srv_gen_opts){ .fmt = fmt };
    recur_status st = srv_params_parse(&f->s, b, *t, g, err, 256);
    json_decref(b);
    return st;
}

static void done(srv_task *t, srv_gen_opts *g) {
    srv_task_unref(t);
    srv_gen_opts_free(g);
}

static void test_params_defaults_and_aliases(void **state) {
    fixture *f = *state;
    srv_task *t;
    srv_gen_opts g;
    char err[256];
    assert_int_equal(parse(f, "{}", SRV_FMT_NATIVE, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_predict, -1);
    assert_true(t->params.cache_prompt);
    assert_int_equal(t->params.id_slot, -1);
    assert_true(fabsf(t->params.sampling.temp - 0.8f) < 1e-6f);
    assert_true(t->params.sampling.seed <= 0xffffffffu);
    assert_non_null(g.settings);   /* native responses carry generation_settings */
    done(t, &g);
    /* null means absent; max_tokens is an alias of n_predict; soft limits clamp */
    assert_int_equal(parse(f, "{\"max_tokens\":7,\"temperature\":-3,\"top_p\":5,\"top_k\":-2,\"seed\":42,"
                              "\"min_p\":null,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                           SRV_FMT_OAI_CMPL, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_predict, 7);
    assert_true(t->params.sampling.temp == 0.0f);
    assert_true(t->params.sampling.top_p == 1.0f);
    assert_int_equal(t->params.sampling.top_k, 0);
    assert_int_equal(t->params.sampling.seed, 42);
    assert_true(fabsf(t->params.sampling.min_p - 0.05f) < 1e-6f);
    assert_true(g.stream && g.include_usage);
    assert_null(g.settings);
    done(t, &g);
    /* n_predict wins over its aliases */
    assert_int_equal(parse(f, "{\"n_predict\":3,\"max_tokens\":9}", SRV_FMT_NATIVE, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_predict, 3);
    done(t, &g);
}

static void test_params_type_errors(void **state) {
    fixture *f = *state;
    const char *bad[] = {
        "{\"temperature\":\"hot\"}", "{\"stream\":1}", "{\"n_predict\":true}", "{\"stop\":5}", "{\"stop\":[\"a\",3]}",
        "{\"logit_bias\":7}", "{\"n_predict\":-2}", "{\"seed\":\"1\"}", "{\"reasoning_format\":\"weird\"}",
        "{\"stream_options\":{\"include_usage\":\"yes\"}}", "{\"repeat_last_n\":-5}", "{\"id_slot\":-3}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_task *t;
        srv_gen_opts g;
        char err[256] = "";
        recur_status st = parse(f, bad[i], SRV_FMT_NATIVE, &t, &g, err);
        if (st != RECUR_E_INVALID) fprintf(stderr, "accepted: %s\n", bad[i]);
        assert_int_equal(st, RECUR_E_INVALID);
        assert_true(strlen(err) > 0);
        done(t, &g);
    }
    srv_task *t;
    srv_gen_opts g;
    char err[256];
    assert_int_equal(parse(f, "{\"n\":2}", SRV_FMT_OAI_CHAT, &t, &g, err), RECUR_E_UNSUPPORTED);
    done(t, &g);
    /* chat: top_logprobs needs logprobs */
    assert_int_equal(parse(f, "{\"top_logprobs\":2}", SRV_FMT_OAI_CHAT, &t, &g, err), RECUR_E_INVALID);
    done(t, &g);
}

static void test_params_stop_and_probs(void **state) {
    fixture *f = *state;
    srv_task *t;
    srv_gen_opts g;
    char err[256];
    assert_int_equal(parse(f, "{\"stop\":[\"\\n\\n\",\"\",\"END\"]}", SRV_FMT_NATIVE, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_stop, 2);   /* empty words are dropped */
    assert_string_equal(t->params.stop[0], "\n\n");
    assert_string_equal(t->params.stop[1], "END");
    done(t, &g);
    assert_int_equal(parse(f, "{\"stop\":\"x\"}", SRV_FMT_NATIVE, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_stop, 1);
    done(t, &g);
    assert_int_equal(parse(f, "{\"logprobs\":true,\"top_logprobs\":4}", SRV_FMT_OAI_CHAT, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_probs, 4);
    done(t, &g);
    assert_int_equal(parse(f, "{\"logprobs\":true}", SRV_FMT_OAI_CHAT, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_probs, 20);
    done(t, &g);
    assert_int_equal(parse(f, "{\"logprobs\":3}", SRV_FMT_OAI_CMPL, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_probs, 3);
    done(t, &g);
    assert_int_equal(parse(f, "{\"n_probs\":5}", SRV_FMT_NATIVE, &t, &g, err), RECUR_OK);
    assert_int_equal(t->params.n_probs, 5);
    done(t, &g);
}

/* the limits of one request (400 beyond them, the boundary accepted): stop strings (count and
 * length), n_probs in its three spellings, logit_bias entries (at most one per token) */
static char *repeat_body(const char *head, const char *item, int n, const char *tail) {
    size_t len = strlen(head) + (size_t)n * (strlen(item) + 1) + strlen(tail) + 1;
    char *b = malloc(len), *p = b;
    p += sprintf(p, "%s", head);
    for (int i = 0; i < n; i++) p += sprintf(p, "%s%s", i ? "," : "", item);
    sprintf(p, "%s", tail);
    return b;
}

static void expect(fixture *f, const char *body, srv_fmt fmt, recur_status want) {
    srv_task *t;
    srv_gen_opts g;
    char err[256] = "";
    recur_status st = parse(f, body, fmt, &t, &g, err);
    if (st != want) fprintf(stderr, "%.80s...: status %d (%s)\n", body, st, err);
    assert_int_equal(st, want);
    if (st) assert_true(strlen(err) > 0);
    done(t, &g);
}

static void test_params_limits(void **state) {
    fixture *f = *state;
    const int n_vocab = vocab_n_tokens(f->s.vocab);
    char *b = repeat_body("{\"stop\":[", "\"ab\"", 256, "]}");
    expect(f, b, SRV_FMT_NATIVE, RECUR_OK);
    free(b);
    b = repeat_body("{\"stop\":[", "\"ab\"", 257, "]}");
    expect(f, b, SRV_FMT_NATIVE, RECUR_E_INVALID);
    free(b);
    char word[300];
    memset(word, 'w', sizeof word);
    word[256] = 0;
    char body[400];
    snprintf(body, sizeof body, "{\"stop\":[\"%s\"]}", word);
    expect(f, body, SRV_FMT_NATIVE, RECUR_OK);
    snprintf(body, sizeof body, "{\"stop\":\"w%s\"}", word);
    expect(f, body, SRV_FMT_NATIVE, RECUR_E_INVALID);
    expect(f, "{\"n_probs\":100}", SRV_FMT_NATIVE, RECUR_OK);
    expect(f, "{\"n_probs\":101}", SRV_FMT_NATIVE, RECUR_E_INVALID);
    expect(f, "{\"n_probs\":2147483647}", SRV_FMT_NATIVE, RECUR_E_INVALID);
    expect(f, "{\"logprobs\":1000}", SRV_FMT_OAI_CMPL, RECUR_E_INVALID);
    expect(f, "{\"logprobs\":true,\"top_logprobs\":101}", SRV_FMT_OAI_CHAT, RECUR_E_INVALID);
    b = repeat_body("{\"logit_bias\":[", "[3,-1]", n_vocab, "]}");
    expect(f, b, SRV_FMT_NATIVE, RECUR_OK);
    free(b);
    b = repeat_body("{\"logit_bias\":[", "[3,-1]", n_vocab + 1, "]}");
    expect(f, b, SRV_FMT_NATIVE, RECUR_E_INVALID);
    free(b);
}

static void test_params_logit_bias(void **state) {
    fixture *f = *state;
    srv_task *t;
    srv_gen_opts g;
    char err[256];
    /* pairs (id or text), with false = ban; out-of-range ids and bad entries are skipped */
    assert_int_equal(parse(f, "{\"logit_bias\":[[5,false],[7,2.5],[99999,1],[\"x\"],[\"Hello\",-1]]}", SRV_FMT_NATIVE, &t,
                           &g, err), RECUR_OK);
    const recur_sampler_params *sp = &t->params.sampling;
    recur_token hello[16];
    int n_hello = vocab_tokenize(f->s.vocab, "Hello", 5, hello, 16, false, false);
    assert_true(n_hello > 0);
    assert_int_equal(sp->n_logit_bias, 2 + n_hello);
    assert_int_equal(sp->logit_bias[0].token, 5);
    assert_true(isinf(sp->logit_bias[0].bias) && sp->logit_bias[0].bias < 0);
    assert_int_equal(sp->logit_bias[1].token, 7);
    assert_true(sp->logit_bias[1].bias == 2.5f);
    for (int i = 0; i < n_hello; i++) {
        assert_int_equal(sp->logit_bias[2 + i].token, hello[i]);
        assert_true(sp->logit_bias[2 + i].bias == -1.0f);
    }
    done(t, &g);
    /* the OAI object: keys are ids or text */
    assert_int_equal(parse(f, "{\"logit_bias\":{\"12\":-100,\"13\":false,\"Hello\":3}}", SRV_FMT_OAI_CHAT, &t, &g, err),
                     RECUR_OK);
    sp = &t->params.sampling;
    assert_int_equal(sp->n_logit_bias, 2 + n_hello);
    assert_int_equal(sp->logit_bias[0].token, 12);
    assert_true(sp->logit_bias[0].bias == -100.0f);
    assert_true(isinf(sp->logit_bias[1].bias));
    done(t, &g);
}

/* ---- streamed reasoning deltas ------------------------------------------------------------- */

static void feed(const char *text, bool think_open, srv_reasoning mode) {
    srv_gen_opts g = { .fmt = SRV_FMT_OAI_CHAT, .reasoning = mode, .think_open = think_open };
    srv_split_state st = {0};
    size_t len = strlen(text);
    char reasoning[512] = "", content[512] = "";
    for (size_t i = 0; i <= len; i++) {
        char *r = NULL, *c = NULL;
        srv_chat_split_deltas(&g, &st, text, i, i == len, &r, &c);
        if (r) strcat(reasoning, r);
        if (c) strcat(content, c);
        free(r);
        free(c);
        /* nothing sent may be retracted: what was sent is a prefix of the final answer */
        json_t *m = srv_chat_message(&g, text, len);
        const char *fr = json_string_value(json_object_get(m, "reasoning_content"));
        const char *fc = json_string_value(json_object_get(m, "content"));
        assert_memory_equal(reasoning, fr ? fr : "", strlen(reasoning));
        assert_memory_equal(content, fc, strlen(content));
        if (i == len) {
            assert_string_equal(reasoning, fr ? fr : "");
            assert_string_equal(content, fc);
        }
        json_decref(m);
    }
}

static void test_split_deltas(void **state) {
    (void)state;
    const char *texts[] = {
        "<think>I should greet.</think>Hello there!", "  <think>\nabc </think>\n\ndef", "<thi", "<think>never closed",
        "plain text with </think> inside", "< think> not a tag", "", "<think></think>", "x<think>y</think>z",
        "<think>a</thinking>b</think>c", "Hello </",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        feed(texts[i], false, SRV_REASONING_AUTO);
        feed(texts[i], true, SRV_REASONING_AUTO);
        feed(texts[i], false, SRV_REASONING_NONE);
    }
}

static void test_json_str(void **state) {
    (void)state;
    json_t *j = srv_json_str("a\xff" "b\xe2\x82", 5);
    assert_non_null(j);
    assert_string_equal(json_string_value(j), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
    json_decref(j);
    j = srv_json_str("h\xc3\xa9", 3);
    assert_string_equal(json_string_value(j), "h\xc3\xa9");
    json_decref(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params_defaults_and_aliases),
        cmocka_unit_test(test_params_type_errors),
        cmocka_unit_test(test_params_stop_and_probs),
        cmocka_unit_test(test_params_limits),
        cmocka_unit_test(test_params_logit_bias),
        cmocka_unit_test(test_split_deltas),
        cmocka_unit_test(test_json_str),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
