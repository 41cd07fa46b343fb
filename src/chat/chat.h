/* chat.h — chat prompts: a chat template applied to messages, tokenized as llama-server does,
 * with the token span of every message; and the reasoning split of generated text.
 *
 * The template sees what transformers' apply_chat_template gives it: `messages`, `tools`
 * (None when absent or empty), `documents` (None), `add_generation_prompt`, `bos_token` and
 * `eos_token` (the vocab's token texts, "" when it has none) and any extra variables
 * (`enable_thinking`, ...), which may override the others.
 *
 * Invariants of a chat_prompt filled by chat_apply:
 *  1. text[0, text_len) is the rendered prompt; tokens are its tokenization with
 *     parse_special = true and add_special = true, where — as llama.cpp does — a BOS (EOS)
 *     text the template already wrote at the start (end) is removed first when the vocab adds
 *     BOS (EOS) itself, so there is never a doubled BOS.
 *  2. Message i covers the bytes msg_text[i] and the tokens msg_tokens[i]; the spans are
 *     consecutive and in order: msg_tokens[0].begin == 0, msg_tokens[i].end ==
 *     msg_tokens[i + 1].begin, and gen_prompt (the tokens after the last message) ends at
 *     n_tokens. Message i ends where the rendering of messages[0..i] (without a generation
 *     prompt) ends within the full rendering: where they stop agreeing, or — when a template
 *     renders a message differently once more follow (Qwen3 drops old reasoning) — where the
 *     end of that rendering (its end-of-turn text) first reappears after message i's start,
 *     and no later than the end of message i + 1 when the rendering of messages[0..i + 1]
 *     agrees with the full one. A trailing EOS text that the rendering of messages[0..i] has
 *     and the full one lacks there (Phi-3 ends a conversation with EOS) is not part of message i.
 *     Anything a template writes before the first message (a BOS, a system block, tools)
 *     belongs to message 0.
 *  3. Spans hold whole tokens: a token belongs to the message where it starts, and msg_text
 *     is moved to token boundaries, so the pieces of msg_tokens[i] concatenate to exactly
 *     msg_text[i] when spans_exact — every token's piece was found in the text (always, for
 *     byte-level BPE; an SPM vocab's added leading space is accounted for).
 *  4. A prefix rendering that fails (a template that rejects a lone system message, say) merges
 *     that message into the next one's span.
 */
#ifndef RECUR_CHAT_CHAT_H
#define RECUR_CHAT_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "chat/jinja.h"
#include "gguf/gguf.h"
#include "recur.h"
#include "vocab/vocab.h"

typedef struct chat_params {
    const json_t    *messages;               /* array of {role, content, ...}: required */
    const json_t    *tools;                  /* array or NULL */
    const json_t    *kwargs;                 /* object of extra template variables, or NULL */
    bool             add_generation_prompt;
    const struct tm *now;                    /* strftime_now's time; NULL = the local time */
} chat_params;

typedef struct chat_span {
    int32_t begin, end;     /* tokens [begin, end) */
} chat_span;

typedef struct chat_text_span {
    size_t begin, end;      /* bytes [begin, end) of chat_prompt.text */
} chat_text_span;

typedef struct chat_prompt {
    char           *text;
    size_t          text_len;
    recur_token    *tokens;
    int32_t         n_tokens;
    int32_t         n_messages;
    chat_span      *msg_tokens;      /* [n_messages] */
    chat_text_span *msg_text;        /* [n_messages] */
    int32_t        *msg_content;     /* [n_messages] token where the message's content starts (the
                                      * token holding its first byte; msg_tokens[i].begin when the
                                      * content is not found verbatim in the span) */
    chat_span       gen_prompt;      /* the tokens after the last message */
    int32_t         gen_reply;       /* the first token of gen_prompt that a reply, rendered later
                                      * as history, may not reproduce: a template that opens
                                      * <think> here but drops it from past replies diverges
                                      * there (n_tokens: never; -1: unknown) */
    size_t          reply_split_byte;   /* (the byte of it; internal) */
    bool            spans_exact;
    bool            think_open;      /* the prompt ends inside an open <think> block */
} chat_prompt;

/* A copy (malloc'd, NUL-terminated) of the template a GGUF file carries: the key
 * tokenizer.chat_template, or tokenizer.chat_template.<name> when name is not NULL.
 * NULL when absent (or out of memory). */
char *chat_template_from_gguf(const gguf_file *g, const char *name);

/* Renders t with `context` (a JSON object of template variables) completed with bos_token and
 * eos_token from v when it lacks them (v may be NULL). *out is malloc'd (free()). Same
 * statuses as jinja_render. */
recur_status chat_render_context(const jinja_template *t, const vocab *v, const json_t *context,
                                 const struct tm *now, char **out, size_t *out_len, char *err, size_t err_len);

/* Renders p's messages with t and tokenizes the result with v into *out (see the invariants
 * above). On failure *out is zeroed and err holds the reason: RECUR_E_INVALID for bad params
 * or a template error, RECUR_E_FULL when a render bound was exceeded, RECUR_E_NOMEM. Cost: one
 * render per message plus one (prefix renders find the spans). */
recur_status chat_apply(const jinja_template *t, const vocab *v, const chat_params *p, chat_prompt *out,
                        char *err, size_t err_len);
void chat_prompt_free(chat_prompt *p);   /* frees the members; p itself is the caller's */

/* How a client that sends a reply back will render it: p's messages, then `reply` (an assistant
 * message object: content, maybe reasoning_content) and a placeholder user message, rendered
 * without a generation prompt (as chat_prompt.gen_reply does) and tokenized as chat_apply
 * tokenizes (invariant 1), into *out (malloc'd, *n_out tokens). The tokens agree with the next
 * real prompt up to the placeholder's content. Statuses as chat_apply. */
recur_status chat_reply_tokens(const jinja_template *t, const vocab *v, const chat_params *p, const json_t *reply,
                               recur_token **out, int32_t *n_out, char *err, size_t err_len);

/* A leading <think>...</think> block of generated text, as llama-server's reasoning parser
 * splits it. Leading whitespace before <think> is skipped; reasoning and content are trimmed of
 * surrounding whitespace. With think_open (the prompt ended inside <think>, see
 * chat_prompt.think_open) the text is reasoning up to </think> without an opening tag. When
 * the block is never closed, everything after the opening is reasoning (closed = false).
 * Without a block, content is the whole text (untrimmed) and reasoning is empty. The results
 * point into text. */
typedef struct chat_reasoning {
    const char *reasoning;
    size_t      reasoning_len;
    const char *content;
    size_t      content_len;
    bool        found;       /* a reasoning block was present */
    bool        closed;      /* ... and it was closed by </think> */
} chat_reasoning;

chat_reasoning chat_split_reasoning(const char *text, size_t len, bool think_open);

#endif
