/* fuzz_jinja.c — libFuzzer target for the Jinja engine: parse any input as a template and
 * render it with a fixed chat-shaped context, under tight bounds. Any crash, leak, UB report,
 * or a render past the bounds (a hang) is a bug.
 *
 * Build and run (clang only):
 *   CC=clang cmake -S . -B /tmp/build-fuzz -DRECUR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
 *   cmake --build /tmp/build-fuzz --target fuzz_jinja
 *   mkdir -p /tmp/jinja-corpus
 *   /tmp/build-fuzz/fuzz_jinja /tmp/jinja-corpus /tmp/build-fuzz/fuzz_corpus/jinja \
 *       -dict=tests/fuzz/jinja.dict -max_len=20000 -timeout=10 -rss_limit_mb=2048
 * (fuzz_corpus/jinja holds the 13 shared templates and tests/fuzz/seeds/jinja, copied there
 * by CMake.)
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "chat/jinja.h"

static const char k_context[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"sys\"},"
    "{\"role\": \"user\", \"content\": \"Hi \\u00e9 <think>x</think>\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>r</think>ok\", \"reasoning_content\": \"r\","
    " \"tool_calls\": [{\"id\": \"call00001\", \"type\": \"function\", \"function\": {\"name\": \"f\","
    " \"arguments\": {\"a\": 1, \"b\": [true, null, 2.5, \"s\"]}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call00001\", \"content\": \"{\\\"t\\\": 1}\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t\"}, {\"type\": \"image\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}},"
    " \"required\": [\"a\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *ctx;
    if (!ctx) ctx = json_loads(k_context, 0, NULL);
    char err[256];
    jinja_template *t = jinja_parse((const char *)data, size, err, sizeof err);
    if (!t) return 0;
    struct tm now = {.tm_year = 125, .tm_mon = 2, .tm_mday = 14, .tm_hour = 9};
    jinja_render_opts o = {.now = &now, .max_output = 1 << 20, .max_iterations = 1 << 16,
                           .max_depth = 64, .max_work = 64u << 20};
    char *out = NULL;
    if (jinja_render(t, ctx, &o, &out, NULL, err, sizeof err) == RECUR_OK && !out) abort();
    free(out);
    jinja_free(t);
    return 0;
}
