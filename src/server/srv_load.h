/* srv_load.h — loading the model, chat template and scheduler into a srv_server. */
#ifndef RECUR_SERVER_SRV_LOAD_H
#define RECUR_SERVER_SRV_LOAD_H

#include "server/srv.h"

/* Loads the model, the template (tmpl_file, else the model's, else ChatML) and starts the
 * scheduler with sp (sp->n_ctx_slot <= 0: the model's training context, at most 4096; written
 * back). The caller sets s->ready afterwards. On failure what was loaded stays in s for
 * srv_unload. */
recur_status srv_load(srv_server *s, const char *model_path, const char *tmpl_file, sched_params *sp, char *err,
                      size_t err_len);
/* Frees the template and the model (after srv_http_stop, which frees the scheduler). */
void srv_unload(srv_server *s);

#endif
