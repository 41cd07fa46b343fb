/* srv_slots.c — POST /slots/{id}?action=save|restore|erase (llama-server's slot persistence):
 * the file name comes from the body ({"filename": ...}) and lives in --slot-save-path; the work
 * runs on the scheduler thread (sched_slot_action). */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/sched.h"
#include "server/srv.h"

/* A plain file name: no path separators, no "." / "..", no control characters, <= 255 bytes. */
static bool filename_ok(const char *f) {
    const size_t n = strlen(f);
    if (n == 0 || n > 255 || !strcmp(f, ".") || !strcmp(f, "..")) return false;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)f[i];
        if (c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ':') return false;
    }
    return f[0] != ' ' && f[n - 1] != ' ' && f[n - 1] != '.';
}

static int parse_id(const char *t, int32_t *id) {
    char *end = NULL;
    const long v = strtol(t, &end, 10);
    if (!*t || *end || v < 0 || v > 1 << 20) return -1;
    *id = (int32_t)v;
    return 0;
}

/* RECUR_E_IO: a restore's file cannot be read (404); a save's cannot be written (disk full,
 * file-size limit, no permission: the server's fault, 500) */
static int reply_status(srv_req *r, sched_slot_op op, recur_status st, const char *err) {
    const unsigned code = st == RECUR_E_STATE ? 503
                        : st == RECUR_E_IO    ? (op == SCHED_SLOT_SAVE ? 500 : 404)
                        : st == RECUR_E_NOMEM ? 500 : 400;
    return srv_reply_error(r, code, err);
}

int srv_h_slot_action(srv_req *r, const char *id_text) {
    srv_server *s = r->s;
    if (!s->o.slot_save_path)
        return srv_reply_error_type(r, 501, "not_supported_error",
                                    "This server does not support slots action. Start it with `--slot-save-path`");
    int32_t id = -1;
    if (parse_id(id_text, &id)) return srv_reply_error(r, 400, "Invalid slot id");
    const char *action = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "action");
    sched_slot_op op = !action ? 0 : !strcmp(action, "save") ? SCHED_SLOT_SAVE : !strcmp(action, "restore") ? SCHED_SLOT_RESTORE
                     : !strcmp(action, "erase") ? SCHED_SLOT_ERASE : 0;
    if (!op) return srv_reply_error(r, 400, "Invalid action: expected ?action=save, restore or erase");
    json_t *body = NULL;
    const char *fname = NULL;
    char path[4096] = "";
    if (op != SCHED_SLOT_ERASE) {
        json_error_t je;
        body = r->body_len ? json_loadb(r->body, r->body_len, 0, &je) : NULL;
        fname = body ? json_string_value(json_object_get(body, "filename")) : NULL;
        if (!fname || !filename_ok(fname)) {
            json_decref(body);
            return srv_reply_error(r, 400, "Invalid filename: expected {\"filename\": NAME} with a plain file name");
        }
        snprintf(path, sizeof path, "%s/%s", s->o.slot_save_path, fname);
    }
    char err[512];
    sched_slot_result res = { 0 };
    pthread_rwlock_rdlock(&s->life);
    recur_status st = s->sched ? sched_slot_action(s->sched, id, op, op == SCHED_SLOT_ERASE ? NULL : path, &res, err, sizeof err)
                               : RECUR_E_STATE;
    if (!s->sched) snprintf(err, sizeof err, "the model is not loaded");
    pthread_rwlock_unlock(&s->life);
    json_t *j = NULL;
    if (!st && op == SCHED_SLOT_SAVE)
        j = json_pack("{s:i, s:s, s:i, s:I, s:{s:f}}", "id_slot", (int)id, "filename", fname, "n_saved", (int)res.n_tokens,
                      "n_written", (json_int_t)res.bytes, "timings", "save_ms", res.ms);
    else if (!st && op == SCHED_SLOT_RESTORE)
        j = json_pack("{s:i, s:s, s:i, s:I, s:{s:f}}", "id_slot", (int)id, "filename", fname, "n_restored",
                      (int)res.n_tokens, "n_read", (json_int_t)res.bytes, "timings", "restore_ms", res.ms);
    else if (!st)
        j = json_pack("{s:i, s:i}", "id_slot", (int)id, "n_erased", (int)res.n_tokens);
    json_decref(body);
    if (st) return reply_status(r, op, st, err);
    return j ? srv_reply_json(r, 200, j) : srv_reply_error(r, 500, "out of memory");
}
