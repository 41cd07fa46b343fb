/* vocab_pretok.c — BPE pre-tokenizers (PCRE2) and the UTF-8 helpers the tokenizers share.
 *
 * A pre-tokenizer is a chain of regexes (llama.cpp's regex_exprs): the first splits the text,
 * each next one splits every piece again; a match and the unmatched gap before it both become
 * pieces. Patterns are compiled with PCRE2_UTF | PCRE2_UCP (JIT when available) and are
 * read-only afterwards; each split allocates its own match data, so splitting is thread-safe.
 *
 * Two llama.cpp behaviours are reproduced exactly:
 *  - Text is decoded laxly first (overlong forms and surrogates accepted, an invalid byte
 *    becomes U+FFFD) and re-encoded; the words come from the re-encoded text.
 *  - "Whitespace" is the Unicode White_Space set (the table llama.cpp uses), written out
 *    below instead of \s, whose PCRE2 meaning differs slightly (U+180E).
 */
#include "vocab/vocab_internal.h"
#include "core/err.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 -------------------------------------------------------------------------------- */

size_t vocab_utf8_len(uint8_t lead) {
    static const uint8_t k_len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    return k_len[lead >> 4];
}

uint32_t vocab_utf8_decode_lax(const char *s, size_t n, size_t *adv) {
    const uint8_t *u = (const uint8_t *)s;
    *adv = 1;
    if (!(u[0] & 0x80)) return u[0];
    if (!(u[0] & 0x40)) return 0xFFFD;                         /* stray continuation byte */
    size_t need = !(u[0] & 0x20) ? 2 : !(u[0] & 0x10) ? 3 : !(u[0] & 0x08) ? 4 : 0;
    if (need == 0 || need > n) return 0xFFFD;
    uint32_t cpt = u[0] & (0x7f >> need);
    for (size_t i = 1; i < need; i++) {
        if ((u[i] & 0xc0) != 0x80) return 0xFFFD;
        cpt = (cpt << 6) | (u[i] & 0x3f);
    }
    *adv = need;
    return cpt;
}

size_t vocab_utf8_encode(uint32_t c, char out[4]) {
    if (c < 0x80) { out[0] = (char)c; return 1; }
    if (c < 0x800) { out[0] = (char)(0xc0 | (c >> 6)); out[1] = (char)(0x80 | (c & 0x3f)); return 2; }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | (c >> 12)); out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (c >> 18)); out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f)); out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* ---- the pre-tokenizer table -------------------------------------------------------------- */

/* Unicode White_Space, for use inside a character class. */
#define WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define S_  "[" WS "]"       /* \s */
#define NS_ "[^" WS "]"      /* \S */
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

static const char k_rx_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NS_ ")";
static const char k_rx_llama3[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+";
static const char k_rx_qwen2[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+";
static const char k_rx_qwen35[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+";

#define MAX_CHAIN 4
enum { RX_DEFAULT, RX_GPT2, RX_LLAMA3, RX_QWEN2, RX_QWEN35 };

/* llama.cpp's default BPE chain (used for pre "default" or no pre at all). */
static const char *const k_chains[][MAX_CHAIN + 1] = {
    [RX_DEFAULT] = { "[\\p{P}\\$\\+<=>\\^~\\|]+", k_rx_gpt2, "\\p{N}+", "[0-9][0-9][0-9]", NULL },
    [RX_GPT2]    = { k_rx_gpt2, NULL },
    [RX_LLAMA3]  = { k_rx_llama3, NULL },
    [RX_QWEN2]   = { k_rx_qwen2, NULL },
    [RX_QWEN35]  = { k_rx_qwen35, NULL },
};

static const vocab_pre_info k_pre[] = {
    /* name,        regexes,    ignore_merges, add_bos, clean_spaces */
    { "default",    RX_DEFAULT, false, false, true  },
    { "gpt-2",      RX_GPT2,    false, false, true  },
    { "llama3",     RX_LLAMA3,  true,  true,  true  },
    { "llama-v3",   RX_LLAMA3,  true,  true,  true  },
    { "llama-bpe",  RX_LLAMA3,  true,  true,  true  },
    { "lfm2",       RX_LLAMA3,  true,  true,  true  },
    { "qwen2",      RX_QWEN2,   false, false, false },
    { "qwen35",     RX_QWEN35,  false, false, false },
};

const vocab_pre_info *vocab_pre_lookup(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (strlen(k_pre[i].name) == len && memcmp(k_pre[i].name, name, len) == 0) return &k_pre[i];
    return NULL;
}

const char *vocab_pre_supported(void) {
    return "default, gpt-2, llama3, llama-v3, llama-bpe, lfm2, qwen2, qwen35";
}

struct vocab_pretok {
    int         n;
    pcre2_code *code[MAX_CHAIN];
};

recur_status vocab_pretok_new(const vocab_pre_info *pi, vocab_pretok **out, char *err, size_t err_len) {
    *out = NULL;
    vocab_pretok *p = calloc(1, sizeof *p);
    if (!p) return RECUR_E_NOMEM;
    for (const char *const *rx = k_chains[pi->regexes]; *rx; rx++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)*rx, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                      &ec, &eo, NULL);
        if (!c) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof msg);
            vocab_pretok_free(p);
            return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "pre-tokenizer '%s': regex error at %zu: %s",
                           pi->name, (size_t)eo, (const char *)msg);
        }
        pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);     /* best effort: the interpreter is the fallback */
        p->code[p->n++] = c;
    }
    *out = p;
    return RECUR_OK;
}

void vocab_pretok_free(vocab_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->code[i]);
    free(p);
}

/* ---- splitting ---------------------------------------------------------------------------- */

typedef struct spanvec { size_t *v; size_t n, cap; bool oom; } spanvec;

static void span_push(spanvec *s, size_t off, size_t len) {
    if (len == 0 || s->oom) return;
    if (s->n + 2 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        size_t *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv) { s->oom = true; return; }
        s->v = nv; s->cap = nc;
    }
    s->v[s->n++] = off;
    s->v[s->n++] = len;
}

/* Re-encodes text as llama.cpp sees it. *out is what the words are cut from; *subj is the
 * same bytes with surrogates (kept by the lax decoder, invalid for PCRE2) replaced by U+E000,
 * which has the same regex classes (neither letter, number nor space) and the same length.
 * *subj == *out when there were no surrogates. */
static recur_status sanitize(const char *text, size_t len, char **out, char **subj, size_t *out_len) {
    char *o = malloc(len * 3 + 1), *s = NULL;
    if (!o) return RECUR_E_NOMEM;
    size_t n = 0;
    bool surrogates = false;
    for (size_t i = 0; i < len;) {
        size_t adv;
        uint32_t c = vocab_utf8_decode_lax(text + i, len - i, &adv);
        i += adv;
        if (c > 0x10FFFF) c = 0xFFFD;
        if (c >= 0xD800 && c <= 0xDFFF) surrogates = true;
        n += vocab_utf8_encode(c, o + n);
    }
    if (surrogates) {
        if (!(s = malloc(n + 1))) { free(o); return RECUR_E_NOMEM; }
        memcpy(s, o, n);
        for (size_t i = 0; i + 2 < n; i++)
            if ((uint8_t)s[i] == 0xED && (uint8_t)s[i + 1] >= 0xA0) {
                s[i] = (char)0xEE; s[i + 1] = (char)0x80; s[i + 2] = (char)0x80;
                i += 2;
            }
    }
    *out = o;
    *subj = s ? s : o;
    *out_len = n;
    return RECUR_OK;
}

/* Splits subj[off, off+len) with one regex into dst (matches and gaps). */
static int split_piece(const pcre2_code *code, pcre2_match_data *md, const char *subj, size_t off,
                       size_t len, spanvec *dst) {
    size_t start = 0;
    while (start < len) {
        int rc = pcre2_match(code, (PCRE2_SPTR)(subj + off), len, start, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(code, (PCRE2_SPTR)(subj + off), len, start,
                             PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return rc;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {                          /* empty match: never from the patterns above */
            size_t step = vocab_utf8_len((uint8_t)subj[off + ms]);
            span_push(dst, off + start, ms + step - start);
            start = ms + step;
            continue;
        }
        span_push(dst, off + start, ms - start);  /* the gap before the match */
        span_push(dst, off + ms, me - ms);
        start = me;
    }
    span_push(dst, off + start, len - start);
    return 0;
}

recur_status vocab_pretok_split(const vocab_pretok *p, const char *text, size_t len,
                                char **words, size_t **spans, size_t *n_words) {
    char *out, *subj;
    size_t n;
    *words = NULL; *spans = NULL; *n_words = 0;
    recur_status rc = sanitize(text, len, &out, &subj, &n);
    if (rc) return rc;
    spanvec cur = { 0 }, next = { 0 };
    span_push(&cur, 0, n);
    pcre2_match_data *md = NULL;
    for (int r = 0; r < p->n && !cur.oom; r++) {
        pcre2_match_data_free(md);
        md = pcre2_match_data_create_from_pattern(p->code[r], NULL);
        if (!md) { cur.oom = true; break; }
        next.n = 0;
        for (size_t i = 0; i < cur.n && !next.oom; i += 2)
            if (split_piece(p->code[r], md, subj, cur.v[i], cur.v[i + 1], &next) < 0) next.oom = true;
        spanvec t = cur; cur = next; next = t;
    }
    pcre2_match_data_free(md);
    free(next.v);
    if (subj != out) free(subj);
    if (cur.oom) {
        free(cur.v); free(out);
        return RECUR_E_NOMEM;
    }
    *words = out;
    *spans = cur.v;
    *n_words = cur.n / 2;
    return RECUR_OK;
}
