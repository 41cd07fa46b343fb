/* jinja.h — a Jinja2 subset for chat templates, with Hugging Face's settings.
 *
 * What a template sees is what transformers' apply_chat_template gives it: trim_blocks and
 * lstrip_blocks on, one trailing newline of the source dropped, `{%- -%}` / `{{- -}}`
 * whitespace control, the loop controls (break/continue), `{% generation %}` rendered as its
 * body, and the globals raise_exception(msg), strftime_now(fmt), range, namespace and dict.
 * `tojson` is json.dumps(x, ensure_ascii=False) (", " / ": " separators, key order kept);
 * values print as Python prints them (None, True, 1.0, ['a']). Lists and dicts are immutable
 * (as in the sandbox HF uses); namespaces are the only mutable objects.
 *
 * Invariants:
 *  1. A jinja_template is immutable after jinja_parse: one template may be rendered from many
 *     threads at once.
 *  2. Rendering never crashes, aborts or hangs on any template or input: recursion depth,
 *     loop iterations, string and output size and the total work are bounded (see
 *     jinja_render_opts) and exceeding a bound is an error with a message.
 *  3. Every error message starts with "line L, column C: " (1-based, of the template source).
 *  4. Nothing is printed; errors go to the caller's buffer.
 */
#ifndef RECUR_CHAT_JINJA_H
#define RECUR_CHAT_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "recur.h"

#define JINJA_DEFAULT_MAX_OUTPUT   (16u << 20)   /* bytes of output, and of any one string */
#define JINJA_DEFAULT_MAX_ITERS    (1u << 20)    /* loop iterations + macro calls + range sizes */
#define JINJA_DEFAULT_MAX_DEPTH    200           /* nested macro calls */
#define JINJA_DEFAULT_MAX_WORK     (1ull << 30)  /* bytes of strings built, in all */

typedef struct jinja_template jinja_template;

typedef struct jinja_render_opts {
    const struct tm *now;      /* what strftime_now formats; NULL = the current local time */
    size_t   max_output;       /* 0 = JINJA_DEFAULT_MAX_OUTPUT */
    uint64_t max_iterations;   /* 0 = JINJA_DEFAULT_MAX_ITERS */
    int      max_depth;        /* 0 = JINJA_DEFAULT_MAX_DEPTH */
    uint64_t max_work;         /* 0 = JINJA_DEFAULT_MAX_WORK */
} jinja_render_opts;

/* Parses a template (src need not be NUL-terminated; it is copied). On a syntax error returns
 * NULL with "line L, column C: ..." in err; NULL with "out of memory" when allocation fails. */
jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t err_len);
void jinja_free(jinja_template *t);

/* Renders t with the members of the JSON object `context` as top-level variables (NULL: none).
 * On success *out is a malloc'd NUL-terminated string of *out_len bytes (free() it).
 * Returns RECUR_E_INVALID for a runtime error (raise_exception, a type error, an undefined
 * value used, ...), RECUR_E_FULL when a bound of o was exceeded, RECUR_E_NOMEM; *out is then
 * NULL and err holds the message. o may be NULL (defaults). */
recur_status jinja_render(const jinja_template *t, const json_t *context, const jinja_render_opts *o,
                          char **out, size_t *out_len, char *err, size_t err_len);

#endif
