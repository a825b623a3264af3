/* softmax over the last dimension of a bf16 tensor, in place, computed in fp32 and rounded once to
 * bf16 (round to nearest even), as ATen's CPU kernel computes it. AVX-512 with AVX512_BF16.
 *
 * Built and loaded by vitlab/model/softmax.py, which says when it runs and why. Each row takes three
 * passes through a stack buffer of fp32 values: the maximum, then exp(x - max) and their sum, then
 * the products with 1 / sum, rounded to bf16. A row's last len % 16 elements take the same vector
 * code under a mask (ATen's kernel computes them one at a time).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define MAX_COLS 16384 /* the fp32 row buffer, 64 KiB of a thread's stack; softmax.py keeps to it */

/* exp(x) for x <= 0 (the caller passes x - max): 2^n p(r) with n = round(x / ln 2), r = x - n ln 2
 * (ln 2 in two parts), p Cephes' degree-6 polynomial of expf (about 2e-7 relative, far below a bf16
 * rounding); below -104 the result is 0 (scalef underflows), and a NaN stays NaN (vmaxps returns its
 * second operand when either is NaN). */
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* 16 bf16 values (those under the mask; the others 0) widened to fp32, exactly. */
static inline __m512 load_bf16(const uint16_t *src, __mmask16 mask) {
    __m256i half = _mm256_maskz_loadu_epi16(mask, src);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

static void softmax_row(uint16_t *row, int64_t cols, float *buffer) {
    const int64_t full = cols - cols % 16;
    const __mmask16 tail = (__mmask16)((1u << (cols - full)) - 1u);
    __m512 largest = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < full; j += 16) {
        __m512 x = load_bf16(row + j, 0xFFFF);
        largest = _mm512_max_ps(largest, x);
        _mm512_storeu_ps(buffer + j, x);
    }
    if (tail) {
        __m512 x = _mm512_mask_blend_ps(tail, _mm512_set1_ps(-INFINITY), load_bf16(row + full, tail));
        largest = _mm512_max_ps(largest, x);
        _mm512_storeu_ps(buffer + full, x);
    }
    const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(largest));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < full; j += 16) {
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(buffer + j), max));
        sum = _mm512_add_ps(sum, e);
        _mm512_storeu_ps(buffer + j, e);
    }
    if (tail) {
        __m512 e = _mm512_maskz_mov_ps(tail, exp_ps(_mm512_sub_ps(_mm512_loadu_ps(buffer + full), max)));
        sum = _mm512_add_ps(sum, e);
        _mm512_storeu_ps(buffer + full, e);
    }
    const __m512 scale = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int64_t j = 0; j < full; j += 16) {
        __m256bh y = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(buffer + j), scale));
        _mm256_storeu_si256((__m256i *)(row + j), (__m256i)y);
    }
    if (tail) {
        __m256bh y = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(buffer + full), scale));
        _mm256_mask_storeu_epi16(row + full, tail, (__m256i)y);
    }
}

/* data: rows x cols bf16 values, contiguous; 1 <= cols <= MAX_COLS. Rows are split evenly among
 * `threads` threads of the OpenMP runtime torch runs its own loops in. Returns 0, or -1 for a row
 * length it does not take (nothing written). */
int vitlab_softmax_bf16(uint16_t *data, int64_t rows, int64_t cols, int threads) {
    if (cols < 1 || cols > MAX_COLS) {
        return -1;
    }
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float buffer[MAX_COLS + 16] __attribute__((aligned(64)));
#pragma omp for schedule(static)
        for (int64_t i = 0; i < rows; i++) {
            softmax_row(data + i * cols, cols, buffer);
        }
    }
    return 0;
}
