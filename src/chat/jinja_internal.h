/* jinja_internal.h — what the files of the Jinja engine share.
 *
 *   jinja_lex.c      source -> tokens (whitespace control, trim/lstrip_blocks, raw blocks)
 *   jinja_parse.c    tokens -> statements;  jinja_expr.c: tokens -> expressions (the AST)
 *   jinja_value.c    the value type: refcounts, strings, lists, dicts, equality, order
 *   jinja_print.c    values as text: Python str()/repr(), json.dumps, JSON input
 *   jinja_eval.c     expressions: operators, lookups, calls
 *   jinja_exec.c     statements, scopes, macros, jinja_render
 *   jinja_filters.c  filters;  jinja_tests.c: tests;  jinja_methods.c: str/dict methods, globals
 *
 * Errors while rendering are sticky: the first one is written into the render state (jrs) and
 * every later step sees jrs.failed and unwinds. Functions that return bool return false once
 * the state has failed.
 *
 * Memory: template memory (nodes, names, literal strings) lives in the template's arena;
 * strings in it are immortal (rc == 0: never counted, never freed), so a template can be
 * shared across threads. Render-time values are reference counted; lists and dicts are never
 * changed after they are built, so sharing them is safe. Namespaces are mutable and may form
 * cycles; the render state lists them all and empties them at the end.
 */
#ifndef RECUR_CHAT_JINJA_INTERNAL_H
#define RECUR_CHAT_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/jinja.h"
#include "core/err.h"

#define JMAX_ARGS   16     /* arguments of one call, filter or test */
#define JMAX_NEST   256    /* nesting of the parsed source (brackets, blocks) */
#define JMAX_EVAL_NEST 1500   /* nested evaluations (expressions + bodies, across macro calls):
                                 bounds the C stack a render uses */

/* ---- arena ---------------------------------------------------------------------------- */

typedef struct jarena_blk jarena_blk;
typedef struct jarena { jarena_blk *head; } jarena;

void *jarena_alloc(jarena *a, size_t n);   /* zeroed, 16-aligned; NULL when out of memory */
void  jarena_free(jarena *a);

/* ---- values --------------------------------------------------------------------------- */

typedef enum jv_type {
    JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS,
    JV_MACRO, JV_FUNC
} jv_type;

typedef struct jstr {
    uint32_t rc;         /* 0: immortal (template memory) */
    size_t   len;
    char     s[];        /* len bytes + NUL */
} jstr;

struct jv;
#define JMAX_VALUE_DEPTH 512   /* nesting of lists/dicts (printing and freeing recurse) */
#define JMAX_NAMESPACES  4096

typedef struct jlist {
    uint32_t   rc;
    uint32_t   depth;    /* 1 + the deepest item's depth */
    bool       tuple;    /* prints as (a, b) */
    size_t     n, cap;
    struct jv *items;
} jlist;

/* A dict keeps insertion order; keys are any value (strings in practice). Namespaces use the
 * same struct (JV_NS) and are the only dicts changed after construction. */
typedef struct jdict {
    uint32_t   rc;
    uint32_t   depth;
    size_t     n, cap;
    struct jv *keys;
    struct jv *vals;
} jdict;

struct jnode;
typedef struct jv {
    jv_type t;
    union {
        bool                b;
        int64_t             i;
        double              f;
        jstr               *s;
        jlist              *l;
        jdict              *d;
        const struct jnode *m;    /* JV_MACRO: the macro's node */
        int                 fn;   /* JV_FUNC: a global function (JFN_*) */
    } u;
} jv;

enum { JFN_RANGE = 1, JFN_NAMESPACE, JFN_RAISE, JFN_STRFTIME, JFN_DICT };

/* ---- AST ------------------------------------------------------------------------------ */

typedef enum jn_kind {
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER,
    JN_TEST, JN_NEG, JN_POS, JN_BINOP, JN_COMPARE, JN_AND, JN_OR, JN_NOT, JN_COND,
    /* statements */
    JN_BODY, JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_BREAK,
    JN_CONTINUE, JN_DO, JN_FILTER_BLOCK
} jn_kind;

/* binary and comparison operators (jnode.op / jnode.ops) */
enum { JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
       JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN };

/* Node layout by kind (kid = child nodes; names = per-child names):
 *   LIT       lit                          NAME     name
 *   LIST/TUPLE kid[0..n)                   DICT     kid = key0, val0, key1, val1, ...
 *   ATTR      kid[0] . name                ITEM     kid[0] [ kid[1] ]
 *   SLICE     kid[0] [kid[1] : kid[2] : kid[3]] (absent parts NULL)
 *   CALL      kid[0] ( kid[1..] ), names[i] = keyword of kid[i] or NULL
 *   FILTER    kid[0] | name ( kid[1..] )   TEST kid[0] is [not] name (kid[1..]); neg
 *   NEG/POS/NOT kid[0]                     BINOP kid[0] op kid[1]
 *   COMPARE   kid[0] ops[0] kid[1] ops[1] kid[2] ...   AND/OR kid[0], kid[1]
 *   COND      kid[0] if kid[1] else kid[2] (kid[2] may be NULL)
 *   BODY      kid[0..n) statements         TEXT     text, text_len
 *   OUTPUT    kid[0]                       IF       kid[0] cond, kid[1] body, kid[2] else|NULL
 *   FOR       names[0..n_targets) targets, kid[0] iter, kid[1] filter|NULL, kid[2] body,
 *             kid[3] else|NULL
 *   SET       target names[0..n_targets) or kid[1] (an ATTR: ns.x); kid[0] value
 *   SET_BLOCK names[0] target, kid[0] body, kid[1] a FILTER node applied to the body (operand
 *             NULL) or NULL
 *   MACRO     name; names[i] parameter i, kid[i] its default or NULL; body = kid[n_params]
 *   DO        kid[0]                       FILTER_BLOCK kid[0] body, kid[1] filter (as above)
 */
typedef struct jnode {
    jn_kind        kind;
    int            op;
    bool           neg;
    int            line, col;
    jstr          *name;
    const char    *text;
    size_t         text_len;
    jv             lit;
    int            n_kid;
    struct jnode **kid;
    jstr         **names;
    int            n_targets;
    int           *ops;
} jnode;

struct jinja_template {
    jarena arena;
    char  *src;       /* the normalised source (\r\n -> \n); TEXT nodes point into it */
    jnode *root;      /* a BODY */
};

/* ---- lexer ---------------------------------------------------------------------------- */

typedef enum jtok_type {
    JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_NAME, JT_STRING,
    JT_INT, JT_FLOAT, JT_OP, JT_EOF
} jtok_type;

/* operator tokens: the character itself, or one of these for two-character operators */
enum { JTO_EQ = 256, JTO_NE, JTO_LE, JTO_GE, JTO_FLOORDIV, JTO_POW };

typedef struct jtok {
    jtok_type   t;
    int         op;         /* JT_OP */
    int         line, col;
    const char *s;          /* JT_TEXT / JT_NAME: into the source; JT_STRING: decoded (arena) */
    size_t      len;
    int64_t     i;
    double      f;
} jtok;

typedef struct jtoks {
    jtok  *v;
    size_t n, cap;
} jtoks;

/* Tokenises the normalised source src (NUL-terminated) into toks (ending with JT_EOF);
 * decoded string literals go to the arena. On failure writes "line L, column C: ..." and
 * returns RECUR_E_INVALID (or RECUR_E_NOMEM). */
recur_status jlex(const char *src, size_t len, jarena *a, jtoks *toks, char *err, size_t err_len);

/* ---- parser --------------------------------------------------------------------------- */

typedef struct jparser {
    const jtok *t;
    size_t      pos, n;
    jarena     *a;
    int         depth;
    int         loops;      /* enclosing for-loops (break/continue need one) */
    char       *err;
    size_t      err_len;
    bool        failed;
    recur_status st;
} jparser;

bool   jp_fail(jparser *p, const jtok *at, const char *fmt, ...) RC_PRINTF(3, 4);
bool   jp_nomem(jparser *p);
const jtok *jp_peek(const jparser *p);
const jtok *jp_next(jparser *p);
bool   jp_is_op(const jparser *p, int op);
bool   jp_is_name(const jparser *p, const char *name);
bool   jp_expect_op(jparser *p, int op);
jnode *jp_node(jparser *p, jn_kind k, const jtok *at, int n_kid);
jstr  *jp_str(jparser *p, const char *s, size_t len);   /* an immortal string */
/* expression parsers (jinja_expr.c) */
jnode *jp_expr(jparser *p);                  /* a full expression (conditional) */
jnode *jp_expr_noif(jparser *p);             /* without `x if c else y` (for-loop iterables) */
jnode *jp_tuple(jparser *p, bool allow_cond);   /* a, b, ... as a TUPLE; one item as itself */
/* | name(args) | ...; bare_first: the first filter has no '|' (the filter tag) */
jnode *jp_filter_chain(jparser *p, jnode *operand, bool bare_first);

/* ---- render state --------------------------------------------------------------------- */

typedef struct jbuf {
    char  *p;
    size_t n, cap;
} jbuf;

typedef struct jscope_ent {
    jstr *name;
    jv    v;
} jscope_ent;

typedef struct jscope {
    struct jscope *parent;
    jscope_ent    *e;
    size_t         n, cap;
} jscope;

typedef struct jrs {
    char        *err;
    size_t       err_len;
    bool         failed;
    recur_status st;
    size_t       max_str;
    uint64_t     iters, max_iters;
    uint64_t     work, max_work;
    int          depth, max_depth;   /* macro calls */
    int          nest;               /* jeval + jexec_body frames (JMAX_EVAL_NEST) */
    struct tm    now;
    jscope      *root;
    jscope      *cur;
    jbuf        *out;
    jdict      **ns_all;       /* every namespace made (cleared at the end: cycles) */
    size_t       n_ns, cap_ns;
    int          loop_ctl;     /* JN_BREAK / JN_CONTINUE pending, else 0 */
} jrs;

bool jrs_fail(jrs *r, const jnode *at, recur_status st, const char *fmt, ...) RC_PRINTF(4, 5);
bool jrs_nomem(jrs *r);
bool jrs_work(jrs *r, const jnode *at, uint64_t n);   /* charges the work budget */

/* ---- values (jinja_value.c) ------------------------------------------------------------- */

static inline jv jv_undef(void) { jv v = {0}; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.t = JV_BOOL; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.u.f = f; return v; }

jv   jv_ref(jv v);
void jv_drop(jv v);
const char *jv_type_name(jv v);          /* Python's name: "str", "NoneType", ... */
bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
/* a < b: -1, 0, 1 in *out; false (a type error, recorded at `at`) for unordered types. */
bool jv_compare(jrs *r, const jnode *at, jv a, jv b, int *out);
bool jv_is_number(jv v);                 /* int, float or bool */
double jv_num(jv v);

jv   jv_str(jrs *r, const char *s, size_t len);   /* JV_UNDEF (and r failed) on error */
jv   jv_cstr(jrs *r, const char *s);
jv   jv_str_buf(jrs *r, jbuf *b);                 /* takes b's bytes (b is emptied) */
jstr *jstr_immortal(jarena *a, const char *s, size_t len);
jv   jv_list(jrs *r, size_t cap);
bool jlist_push(jrs *r, jv list, jv item);        /* steals item */
jv   jv_dict(jrs *r);
jv   jv_namespace(jrs *r);
bool jdict_set(jrs *r, jv dict, jv key, jv val);  /* steals key and val */
const jv *jdict_get(const jdict *d, jv key);
const jv *jdict_get_str(const jdict *d, const char *s, size_t len);
void jrs_clear_namespaces(jrs *r);

/* UTF-8: code points in s[0, len); byte offset of code point i (len when past the end) */
size_t jutf8_count(const char *s, size_t len);
size_t jutf8_offset(const char *s, size_t len, size_t cp);
size_t jutf8_decode(const char *s, size_t len, uint32_t *cp);   /* bytes used (>= 1) */
size_t jutf8_encode(uint32_t cp, char out[4]);
bool   jis_pyspace(uint32_t cp);    /* Python's str.isspace() */

/* ---- buffers and printing (jinja_print.c) ------------------------------------------------ */

bool jbuf_add(jrs *r, jbuf *b, const char *s, size_t n);   /* bounded by r->max_str */
bool jbuf_addc(jrs *r, jbuf *b, char c);
bool jbuf_addf(jrs *r, jbuf *b, const char *fmt, ...) RC_PRINTF(3, 4);
void jbuf_free(jbuf *b);
bool jv_write_str(jrs *r, jbuf *b, jv v);      /* Python str(v); undefined -> "" */
bool jv_write_repr(jrs *r, jbuf *b, jv v);     /* Python repr(v) */
jv   jv_to_str(jrs *r, jv v);                  /* str(v) as a JV_STR */
/* json.dumps(v, ensure_ascii=False, indent=indent (< 0: none), sort_keys) */
bool jv_write_json(jrs *r, const jnode *at, jbuf *b, jv v, int indent, bool sort_keys);
bool jfloat_repr(double f, char *buf, size_t n);   /* Python's repr of a float */
jv   jv_from_json(jrs *r, const json_t *j, int depth);

/* ---- evaluation (jinja_eval.c, jinja_exec.c) --------------------------------------------- */

typedef struct jargs {
    jv    pos[JMAX_ARGS];
    int   n_pos;
    jstr *kw_name[JMAX_ARGS];
    jv    kw[JMAX_ARGS];
    int   n_kw;
} jargs;

bool jeval(jrs *r, const jnode *n, jv *out);
bool jeval_args(jrs *r, const jnode *n, int first, jargs *a);   /* kid[first..] of a call */
void jargs_free(jargs *a);
/* Argument `name` at position pos (pos < 0: keyword only); NULL when not given. */
const jv *jargs_get(const jargs *a, int pos, const char *name);
bool jeval_getattr(jrs *r, const jnode *at, jv obj, const char *name, size_t len, jv *out);
bool jeval_getitem(jrs *r, const jnode *at, jv obj, jv key, jv *out);
bool jcall_value(jrs *r, const jnode *at, jv callee, jargs *a, jv *out);
bool jcall_macro(jrs *r, const jnode *at, const jnode *macro, jargs *a, jv *out);
bool jexec_body(jrs *r, const jnode *body);
bool jscope_set(jrs *r, jscope *s, jstr *name, jv v);       /* steals v */
const jv *jscope_lookup(const jrs *r, const char *name, size_t len);
/* Iterating a value: a list of its items (list, tuple, dict keys, string characters). */
bool jv_iter_list(jrs *r, const jnode *at, jv v, jv *out);

/* ---- filters, tests, methods, globals (jinja_filters.c, jinja_tests.c, jinja_methods.c) -- */

enum { JCASE_LOWER, JCASE_UPPER, JCASE_TITLE, JCASE_CAPITALIZE };
/* Python's strip (mode 1 left, 2 right, 3 both; chars NULL = whitespace) */
jv jstr_strip(jrs *r, const jstr *s, const jstr *chars, int mode);
jv jstr_case(jrs *r, const jstr *s, int how);
jv jstr_replace(jrs *r, const jnode *at, const jstr *s, const jstr *old, const jstr *rep, int64_t count);
/* Python's printf-style `fmt % args` (args: a tuple/list of values, or one value):
 * %s %r %d %i %f %F %e %E %g %G %x %X %o %% with flags, width and precision (< 1000). */
jv jstr_percent(jrs *r, const jnode *at, const jstr *fmt, jv args);

bool jfilter_apply(jrs *r, const jnode *at, const char *name, jv in, jargs *a, jv *out);
bool jtest_apply(jrs *r, const jnode *at, const char *name, jv in, jargs *a, bool *out);
/* A method of a str/dict/list receiver; *found = false when there is none of that name. */
bool jmethod_call(jrs *r, const jnode *at, jv self, const char *name, jargs *a, jv *out,
                  bool *found);
bool jglobal_call(jrs *r, const jnode *at, int fn, jargs *a, jv *out);
int  jglobal_find(const char *name, size_t len);   /* JFN_* or 0 */

#endif
