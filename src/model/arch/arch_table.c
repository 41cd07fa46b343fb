/* arch_table.c — the one table of supported architectures. */
#include <string.h>

#include "model/model.h"

extern const model_arch model_arch_llama;
extern const model_arch model_arch_qwen3;
extern const model_arch model_arch_lfm2;
extern const model_arch model_arch_mamba;
extern const model_arch model_arch_mamba2;
extern const model_arch model_arch_qwen35;
extern const model_arch model_arch_qwen35moe;
extern const model_arch model_arch_qwen3next;

static const model_arch *const ARCHES[] = { &model_arch_llama, &model_arch_qwen3, &model_arch_lfm2, &model_arch_mamba,
                                            &model_arch_mamba2, &model_arch_qwen35, &model_arch_qwen35moe,
                                            &model_arch_qwen3next };

const model_arch *model_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHES / sizeof ARCHES[0]; i++)
        if (strcmp(ARCHES[i]->name, name) == 0) return ARCHES[i];
    return NULL;
}

const char *model_arch_list(void) { return "llama, qwen3, lfm2, mamba, mamba2, qwen35, qwen35moe, qwen3next"; }
