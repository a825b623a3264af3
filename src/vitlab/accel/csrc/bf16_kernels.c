/* vitlab's own bf16 CPU kernels (AVX-512 with AVX512_BF16), for eager inference: each computes in
 * fp32 and rounds once to bf16 (round to nearest even), as ATen's kernel for the same op does.
 *
 * Built and loaded by vitlab/accel/native.py; accel/softmax.py says when its kernel runs and why. A
 * row's values go through a stack buffer of fp32 values, 16 at a time; the last len % 16 take the
 * same vector code under a mask (ATen's kernel takes them one at a time).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define MAX_COLS 16384 /* the fp32 row buffer, 64 KiB of a thread's stack; native.py keeps to it */

/* The mask of the row's values from j on, at most 16. */
static inline __mmask16 lanes(int64_t cols, int64_t j) {
    return cols - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - j)) - 1u);
}

/* 16 bf16 values (those under the mask; the others 0) widened to fp32, exactly. */
static inline __m512 load_bf16(const uint16_t *src, __mmask16 mask) {
    __m256i half = _mm256_maskz_loadu_epi16(mask, src);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

static inline void store_bf16(uint16_t *dst, __mmask16 mask, __m512 x) {
    _mm256_mask_storeu_epi16(dst, mask, (__m256i)_mm512_cvtneps_pbh(x));
}

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

/* softmax(row) in place: the maximum, then exp(x - max) and their sum, then the products with 1 / sum. */
static void softmax_row(uint16_t *row, int64_t cols, float *buffer) {
    __m512 largest = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < cols; j += 16) {
        __mmask16 mask = lanes(cols, j);
        __m512 x = _mm512_mask_blend_ps(mask, _mm512_set1_ps(-INFINITY), load_bf16(row + j, mask));
        largest = _mm512_max_ps(largest, x);
        _mm512_storeu_ps(buffer + j, x);
    }
    const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(largest));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols; j += 16) {
        __m512 e = _mm512_maskz_mov_ps(lanes(cols, j), exp_ps(_mm512_sub_ps(_mm512_loadu_ps(buffer + j), max)));
        sum = _mm512_add_ps(sum, e);
        _mm512_storeu_ps(buffer + j, e);
    }
    const __m512 scale = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int64_t j = 0; j < cols; j += 16) {
        store_bf16(row + j, lanes(cols, j), _mm512_mul_ps(_mm512_loadu_ps(buffer + j), scale));
    }
}

/* data: rows x cols contiguous bf16 values, 1 <= cols <= MAX_COLS; the rows are split evenly among
 * `threads` threads of the OpenMP runtime torch runs its own loops in. Returns 0, or -1 for a row length
 * it does not take (nothing written). */
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
