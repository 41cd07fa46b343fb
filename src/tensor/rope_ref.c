/* rope_ref.c — rotary position embedding of one head, the scalar reference (tensor.h rope_f32).
 *
 * ggml's compiled rope (GCC, -ffp-contract=fast) fuses the first product of each output:
 * x0*c - x1*s as fmaf(x0, c, -(x1*s)) and x0*s + x1*c as fmaf(x0, s, x1*c). Every table
 * performs exactly these operations, so every table gives these bits. */
#include "tensor/tensor_impl.h"

#include <math.h>

void rt_rope_f32(float *head, const float *cos_sin, int n_rot, bool neox) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = head[a], x1 = head[b];
        head[a] = fmaf(x0, c, -(x1 * s));
        head[b] = fmaf(x0, s, x1 * c);
    }
}
