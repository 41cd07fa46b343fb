/* gguf_tool.h — the subcommands of recur-gguf (tools/gguf.c dispatches to them).
 * Each takes the arguments after the subcommand name (argv[0] is the subcommand) and returns
 * the process exit status: 0 ok, 1 failure (message on stderr), 2 usage error. */
#ifndef RECUR_TOOLS_GGUF_TOOL_H
#define RECUR_TOOLS_GGUF_TOOL_H

int cmd_info(int argc, char **argv);    /* tools/gguf_info.c */
int cmd_synth(int argc, char **argv);   /* tools/gguf_synth.c */
int cmd_render(int argc, char **argv);       /* tools/gguf_chat.c */
int cmd_tokenize(int argc, char **argv);     /* tools/gguf_chat.c */
int cmd_detokenize(int argc, char **argv);   /* tools/gguf_chat.c */

#endif
