/* default_model.h — the random-weight model recur-cli and recur-server run when no -m is given. */
#ifndef RECUR_TOOLS_DEFAULT_MODEL_H
#define RECUR_TOOLS_DEFAULT_MODEL_H

#define RECUR_DEFAULT_MODEL "models/default.gguf"

/* Writes RECUR_DEFAULT_MODEL (relative to the working folder) with the recur-gguf next to argv0
 * (`synth --preset qwen3-tiny --type Q8_0`) unless it exists. prog names the caller in the
 * messages. Returns 0 when the file is there, 1 (with a message on stderr) otherwise. */
int tool_default_model(const char *argv0, const char *prog);

#endif
