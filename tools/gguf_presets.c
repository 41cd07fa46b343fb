/* gguf_presets.c — model presets and the stand-in SPM vocabulary for `recur-gguf synth`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_synth.h"

/* Shapes. The *-tiny presets mirror ../shared/testdata/models/pub-<arch>-*.gguf (tests/cli/synth.sh
 * compares them tensor by tensor and key by key); the others are the released models' HF
 * config.json as llama.cpp's converter turns it into keys:
 *   qwen3-0.6b          Qwen/Qwen3-0.6B
 *   llama3-8b           meta-llama/Meta-Llama-3-8B: 4096, 32 layers, 32/8 heads of 128, ff 14336
 *                       (rows longer than the 0.6b models' kernels meet), vocab 128256, rope
 *                       theta 500000, untied
 *   qwen35-{0.8b,2b,4b} Qwen/Qwen3.5-{0.8B,2B,4B} text_config: 24/24/32 layers, every 4th full
 *                       attention; gated attention 8/8/16 heads, 2/2/4 KV, head_dim 256, partial
 *                       rotary 0.25 (n_rot 64), mrope_section [11,11,10]; DeltaNet 16 k heads,
 *                       16/16/32 v heads of 128; tied embeddings; one MTP block (converted by
 *                       default: block_count = 25/25/33, nextn_predict_layers = 1)
 *   qwen35moe-35b-a3b   Qwen/Qwen3.5-35B-A3B: 40 layers, 2048, 16/2 heads, 256 experts top-8 of
 *                       512 + shared 512, untied, no intermediate_size (no feed_forward_length)
 *   qwen3next-80b-a3b   Qwen/Qwen3-Next-80B-A3B-Instruct: 48 layers, 512 experts top-10,
 *                       intermediate_size 5120, vocab 151936, no mrope; MTP block counted from
 *                       the checkpoint's mtp.layers.0
 *   mamba-130m          state-spaces/mamba-130m-hf: d_model 768, 24 layers, d_state 16,
 *                       dt_rank ceil(768/16) = 48, vocab 50280 (a multiple of 8), tied (the
 *                       Mamba-1 converter drops an lm_head equal to the embedding)
 *   mamba2-370m         state-spaces/mamba2-370m: d_model 1024, 48 layers, d_state 128, head
 *                       dim 64 (32 heads), 1 group, vocab 50277 padded to 50288; the mamba_ssm
 *                       checkpoint stores lm_head.weight and the Mamba-2 converter keeps it
 *   lfm2-{350m,1.2b}    LiquidAI/LFM2-{350M,1.2B}: 16 layers, attention at [2,5,8,10,12,14],
 *                       1024/2048 wide, 16/32 heads, 8 KV, ff = 256-rounded 2/3 of
 *                       block_ff_dim (6656 -> 4608, 12288 -> 8192), conv L_cache 3, tied */
#define QWEN35(n, E, L, ff, H, Hkv, nv) \
    {.name = n, .arch = "qwen35", .n_embd = E, .n_layer = L, .n_ff = ff, .n_vocab = 248320, .n_ctx = 262144, \
     .n_head = H, .n_head_kv = Hkv, .head_dim = 256, .rope_base = 1e7f, .eps = 1e-6f, .tied = true, .n_rot = 64, \
     .rope_sections = {11, 11, 10, 0}, .full_attn = 4, .n_nextn = 1, .ssm_conv = 4, .ssm_inner = (nv) * 128, \
     .ssm_state = 128, .ssm_dt_rank = nv, .ssm_groups = 16}
#define LFM2(n, E, ff, H) \
    {.name = n, .arch = "lfm2", .n_embd = E, .n_layer = 16, .n_ff = ff, .n_vocab = 65536, .n_ctx = 128000, \
     .n_head = H, .n_head_kv = 8, .head_dim = (E) / (H), .rope_base = 1e6f, .eps = 1e-5f, .tied = true, \
     .ssm_conv = 3, .attn_layers = 1u << 2 | 1u << 5 | 1u << 8 | 1u << 10 | 1u << 12 | 1u << 14}
static const synth_preset k_presets[] = {
    {.name = "llama-tiny", .arch = "llama", .n_embd = 256, .n_layer = 4, .n_ff = 512, .n_vocab = 512,
     .n_ctx = 4096, .n_head = 8, .n_head_kv = 4, .head_dim = 32, .rope_base = 10000.0f, .eps = 1e-5f},
    {.name = "qwen3-tiny", .arch = "qwen3", .n_embd = 256, .n_layer = 4, .n_ff = 256, .n_vocab = 512,
     .n_ctx = 4096, .n_head = 8, .n_head_kv = 2, .head_dim = 64, .rope_base = 1e6f, .eps = 1e-6f, .tied = true},
    {.name = "qwen35-tiny", .arch = "qwen35", .n_embd = 256, .n_layer = 4, .n_ff = 512, .n_vocab = 512,
     .n_ctx = 4096, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .rope_base = 1e7f, .eps = 1e-6f, .tied = true,
     .n_rot = 16, .rope_sections = {3, 3, 2, 0}, .full_attn = 4, .ssm_conv = 4, .ssm_inner = 256,
     .ssm_state = 128, .ssm_dt_rank = 2, .ssm_groups = 2},
    {.name = "qwen35moe-tiny", .arch = "qwen35moe", .n_embd = 256, .n_layer = 2, .n_vocab = 512,
     .n_ctx = 4096, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .rope_base = 1e7f, .eps = 1e-6f, .tied = true,
     .n_rot = 16, .rope_sections = {3, 3, 2, 0}, .full_attn = 2, .ssm_conv = 4, .ssm_inner = 256,
     .ssm_state = 128, .ssm_dt_rank = 2, .ssm_groups = 1, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256,
     .n_ff_shexp = 256},
    {.name = "qwen3next-tiny", .arch = "qwen3next", .n_embd = 256, .n_layer = 2, .n_ff = 512, .n_vocab = 512,
     .n_ctx = 4096, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .rope_base = 1e7f, .eps = 1e-6f,
     .n_rot = 16, .full_attn = 2, .ssm_conv = 4, .ssm_inner = 256, .ssm_state = 128, .ssm_dt_rank = 2,
     .ssm_groups = 1, .n_expert = 4, .n_expert_used = 2, .n_ff_exp = 256, .n_ff_shexp = 256},
    {.name = "mamba-tiny", .arch = "mamba", .n_embd = 256, .n_layer = 4, .n_vocab = 512, .n_ctx = 4096,
     .eps = 1e-5f, .tied = true, .ssm_conv = 4, .ssm_inner = 512, .ssm_state = 16, .ssm_dt_rank = 16},
    {.name = "mamba2-tiny", .arch = "mamba2", .n_embd = 256, .n_layer = 4, .n_vocab = 512, .n_ctx = 4096,
     .eps = 1e-5f, .tied = true, .ssm_conv = 4, .ssm_inner = 512, .ssm_state = 128, .ssm_dt_rank = 8,
     .ssm_groups = 1},
    {.name = "lfm2-tiny", .arch = "lfm2", .n_embd = 256, .n_layer = 4, .n_ff = 512, .n_vocab = 512, .n_ctx = 4096,
     .n_head = 8, .n_head_kv = 2, .head_dim = 32, .rope_base = 1e6f, .eps = 1e-5f, .tied = true, .ssm_conv = 3,
     .attn_layers = 1u << 1 | 1u << 3},
    {.name = "qwen3-0.6b", .arch = "qwen3", .n_embd = 1024, .n_layer = 28, .n_ff = 3072, .n_vocab = 151936,
     .n_ctx = 40960, .n_head = 16, .n_head_kv = 8, .head_dim = 128, .rope_base = 1e6f, .eps = 1e-6f, .tied = true},
    {.name = "llama3-8b", .arch = "llama", .n_embd = 4096, .n_layer = 32, .n_ff = 14336, .n_vocab = 128256,
     .n_ctx = 8192, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .rope_base = 500000.0f, .eps = 1e-5f},
    QWEN35("qwen35-0.8b", 1024, 24, 3584, 8, 2, 16),
    QWEN35("qwen35-2b", 2048, 24, 6144, 8, 2, 16),
    QWEN35("qwen35-4b", 2560, 32, 9216, 16, 4, 32),
    {.name = "qwen35moe-35b-a3b", .arch = "qwen35moe", .n_embd = 2048, .n_layer = 40, .n_vocab = 248320,
     .n_ctx = 262144, .n_head = 16, .n_head_kv = 2, .head_dim = 256, .rope_base = 1e7f, .eps = 1e-6f, .n_rot = 64,
     .rope_sections = {11, 11, 10, 0}, .full_attn = 4, .n_nextn = 1, .ssm_conv = 4, .ssm_inner = 4096,
     .ssm_state = 128, .ssm_dt_rank = 32, .ssm_groups = 16, .n_expert = 256, .n_expert_used = 8,
     .n_ff_exp = 512, .n_ff_shexp = 512, .large = true},
    {.name = "qwen3next-80b-a3b", .arch = "qwen3next", .n_embd = 2048, .n_layer = 48, .n_ff = 5120,
     .n_vocab = 151936, .n_ctx = 262144, .n_head = 16, .n_head_kv = 2, .head_dim = 256, .rope_base = 1e7f,
     .eps = 1e-6f, .n_rot = 64, .full_attn = 4, .n_nextn = 1, .ssm_conv = 4, .ssm_inner = 4096, .ssm_state = 128,
     .ssm_dt_rank = 32, .ssm_groups = 16, .n_expert = 512, .n_expert_used = 10, .n_ff_exp = 512,
     .n_ff_shexp = 512, .large = true},
    {.name = "mamba-130m", .arch = "mamba", .n_embd = 768, .n_layer = 24, .n_vocab = 50280, .n_ctx = 1 << 20,
     .eps = 1e-5f, .tied = true, .ssm_conv = 4, .ssm_inner = 1536, .ssm_state = 16, .ssm_dt_rank = 48},
    {.name = "mamba2-370m", .arch = "mamba2", .n_embd = 1024, .n_layer = 48, .n_vocab = 50288, .n_ctx = 1 << 20,
     .eps = 1e-5f, .ssm_conv = 4, .ssm_inner = 2048, .ssm_state = 128, .ssm_dt_rank = 32, .ssm_groups = 1},
    LFM2("lfm2-350m", 1024, 4608, 16),
    LFM2("lfm2-1.2b", 2048, 8192, 32),
};
#undef QWEN35
#undef LFM2

const synth_preset *synth_preset_find(const char *name) {
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++)
        if (!strcmp(k_presets[i].name, name)) return &k_presets[i];
    return NULL;
}

const synth_preset *synth_preset_at(int i) {
    return i >= 0 && (size_t)i < sizeof k_presets / sizeof k_presets[0] ? &k_presets[i] : NULL;
}

/* ---- vocabulary --------------------------------------------------------------------------- */

/* Frequent English words, most frequent first: each becomes "▁word". */
static const char *const k_words[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are",
    "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by",
    "not", "word", "but", "what", "some", "we", "can", "out", "other", "were", "all", "there",
    "when", "up", "use", "your", "how", "said", "an", "each", "she", "which", "do", "their", "time",
    "if", "will", "way", "about", "many", "then", "them", "write", "would", "like", "so", "these",
    "her", "long", "make", "thing", "see", "him", "two", "has", "look", "more", "day", "could", "go",
    "come", "did", "number", "sound", "no", "most", "people", "my", "over", "know", "water", "than",
    "call", "first", "who", "may", "down", "side", "been", "now", "find", "any", "new", "work",
    "part", "take", "get", "place", "made", "live", "where", "after", "back", "little", "only",
    "round", "man", "year", "came", "show", "every", "good", "me", "give", "our", "under", "name",
    "very", "through", "just", "form", "sentence", "great", "think", "say", "help", "low", "line",
    "differ", "turn", "cause", "much", "mean", "before", "move", "right", "boy", "old", "too",
    "same", "tell", "does", "set", "three", "want", "air", "well", "also", "play", "small", "end",
    "put", "home", "read", "hand", "port", "large", "spell", "add", "even", "land", "here", "must",
    "big", "high", "such", "follow", "act", "why", "ask", "men", "change", "went", "light", "kind",
    "off", "need", "house", "picture", "try", "us", "again", "animal", "point", "mother", "world",
    "near", "build", "self", "earth", "father", "head", "stand", "own", "page", "should", "country",
    "found", "answer", "school", "grow", "study", "still", "learn", "plant", "cover", "food", "sun",
    "four", "between", "state", "keep", "eye", "never", "last", "let", "thought", "city", "tree",
    "cross", "farm", "hard", "start", "might", "story", "saw", "far", "sea", "draw", "left", "late",
    "run", "while", "press", "close", "night", "real", "life", "few", "north", "open", "seem",
    "together", "next", "white", "children", "begin", "got", "walk", "example", "ease", "paper",
    "group", "always", "music", "those", "both", "mark", "often", "letter", "until", "mile",
    "river", "car", "feet", "care", "second", "book", "carry", "took", "science", "eat", "room",
    "friend", "began", "idea", "fish", "mountain", "stop", "once", "base", "hear", "horse", "cut",
    "sure", "watch", "color", "face", "wood", "main", "enough", "plain", "girl", "usual", "young",
    "ready", "above", "ever", "red", "list", "though", "feel", "talk", "bird", "soon", "body", "dog",
    "family", "direct", "pose", "leave", "song", "measure", "door", "product", "black", "short",
    "numeral", "class", "wind", "question", "happen", "complete", "ship", "area", "half", "rock",
    "order", "fire", "south", "problem", "piece", "told", "knew", "pass", "since", "top", "whole",
    "king", "space", "heard", "best", "hour", "better", "true", "during", "hundred", "five",
    "remember", "step", "early", "hold", "west", "ground", "interest", "reach", "fast", "verb",
    "sing", "listen", "six", "table", "travel", "less", "morning", "ten", "simple", "several",
    "Once", "upon", "There", "The", "She", "He", "It", "They", "Lily", "Tom", "happy", "named",
};

/* Word-internal fragments (no "▁"). */
static const char *const k_fragments[] = {
    "s", "ed", "ing", "er", "ly", "es", "tion", "al", "en", "est", "ment", "ness", "ful", "able",
    "ous", "ive", "ity", "less", "ers", "ies",
};

static const char *const k_singles[] = {
    "\xe2\x96\x81", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p",
    "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "0", "1", "2", "3", "4", "5", "6", "7", "8",
    "9", ".", ",", "!", "?", "'", "\"", "-", ":", ";", "(", ")",
};

/* Appends piece unless present; false when out of room or memory (*oom set on the latter). */
static bool add_piece(synth_vocab *v, uint64_t first, uint64_t limit, const char *s, size_t len, bool *oom) {
    for (uint64_t i = first; i < v->n; i++)
        if (strlen(v->text[i]) == len && !memcmp(v->text[i], s, len)) return true;
    if (v->n >= limit) return false;
    char *p = malloc(len + 1);
    if (!p) { *oom = true; return false; }
    memcpy(p, s, len);
    p[len] = 0;
    v->text[v->n] = p;
    v->score[v->n] = -(float)(v->n - first);
    v->type[v->n] = 1;
    v->n++;
    return true;
}

/* Adds every prefix of s (at UTF-8 character boundaries) and s itself. */
static bool add_with_prefixes(synth_vocab *v, uint64_t first, uint64_t limit, const char *s, bool *oom) {
    size_t len = strlen(s);
    /* all prefixes must fit, or none is added: a word must be reachable by merges */
    uint64_t missing = 0;
    for (size_t k = 1; k <= len; k++) {
        if (k < len && ((unsigned char)s[k] & 0xC0) == 0x80) continue;
        bool found = false;
        for (uint64_t i = first; i < v->n && !found; i++)
            found = strlen(v->text[i]) == k && !memcmp(v->text[i], s, k);
        missing += !found;
    }
    if (v->n + missing > limit) return false;
    for (size_t k = 1; k <= len; k++) {
        if (k < len && ((unsigned char)s[k] & 0xC0) == 0x80) continue;
        if (!add_piece(v, first, limit, s, k, oom)) return false;
    }
    return true;
}

static bool set_special(synth_vocab *v, const char *text, float score, int32_t type) {
    v->text[v->n] = strdup(text);
    v->score[v->n] = score;
    v->type[v->n] = type;
    return v->text[v->n++] != NULL;
}

bool synth_vocab_build(synth_vocab *v, uint64_t n_vocab) {
    memset(v, 0, sizeof *v);
    if (n_vocab < 259) return false;
    v->text = calloc(n_vocab, sizeof *v->text);
    v->score = calloc(n_vocab, sizeof *v->score);
    v->type = calloc(n_vocab, sizeof *v->type);
    if (!v->text || !v->score || !v->type) return false;
    bool ok = set_special(v, "<unk>", 0, 2) && set_special(v, "<s>", 0, 3) && set_special(v, "</s>", 0, 3);
    char buf[32];
    for (int b = 0; b < 256 && ok; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        ok = set_special(v, buf, 0, 6);
    }
    if (!ok) return false;
    uint64_t first = v->n;
    bool oom = false;
    for (size_t i = 0; i < sizeof k_singles / sizeof k_singles[0]; i++)
        add_piece(v, first, n_vocab, k_singles[i], strlen(k_singles[i]), &oom);
    for (size_t i = 0; i < sizeof k_words / sizeof k_words[0] && !oom; i++) {
        snprintf(buf, sizeof buf, "\xe2\x96\x81%s", k_words[i]);
        add_with_prefixes(v, first, n_vocab, buf, &oom);
        if (i < sizeof k_fragments / sizeof k_fragments[0])   /* interleave the fragments early */
            add_with_prefixes(v, first, n_vocab, k_fragments[i], &oom);
    }
    for (uint64_t u = 0; v->n < n_vocab && !oom; u++) {
        snprintf(buf, sizeof buf, "<unused_%llu>", (unsigned long long)u);
        oom = !set_special(v, buf, 0, 5);
    }
    return !oom;
}

void synth_vocab_free(synth_vocab *v) {
    for (uint64_t i = 0; v->text && i < v->n; i++) free(v->text[i]);
    free(v->text);
    free(v->score);
    free(v->type);
    memset(v, 0, sizeof *v);
}
