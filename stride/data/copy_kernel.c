/* stride's window copy: a batch of windows as B block copies, and the price rows of their targets.
 *
 * A window of T rows x F features is one contiguous block of a row-major table, so a batch is B block
 * copies. Random 16 KiB blocks read from DRAM lose bandwidth at each block's start: the hardware
 * prefetchers stop at 4 KiB pages and must see a few misses before they stream. Measured in C on the
 * AMD EPYC development host (256 blocks of 16 KiB at random rows of a 256 MiB table against one 4 MiB
 * copy, both into the same destination): libc memcpy per block 0.58-0.80 of the contiguous copy (the
 * host's memory was shared, so the ratio moved with the load); prefetching the whole page's lines
 * of the next block's first pages 0.65-0.70. What works is a copy that reads ahead along the batch's
 * stream of blocks, crossing into the next window's block before this one ends (`dist` bytes ahead,
 * 2-4 KiB: 0.79-0.87), and with streaming (non-temporal) stores for batches larger than the L2 cache
 * (`nt`: the writes do not first read the destination's lines, 0.85-0.92).
 * Built by stride/data/native.py with -ffp-contract=off: the float32 form rounds (x - shift) and then
 * * scale separately, exactly as numpy's two in-place ops, bit for bit.
 */
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#define CHUNK 1024 /* bytes copied between read-ahead requests (16 cache lines) */
#define LINE 64

/* the address `off` bytes past the start of block b of the batch, continuing into the next blocks;
 * 0 past the last */
static inline const char *ahead(const char *base, int64_t row_bytes, const int64_t *starts, int64_t n, int64_t b,
                                int64_t block, int64_t off) {
    while (off >= block) {
        if (++b >= n) return 0;
        off -= block;
    }
    return base + starts[b] * row_bytes + off;
}

static inline void read_ahead(const char *p) {
    if (p)
        for (int l = 0; l < CHUNK; l += LINE) __builtin_prefetch(p + l);
}

static inline void copy_chunk(char *d, const char *s, int64_t len, int nt) {
#if defined(__AVX512F__)
    if (nt && ((uintptr_t)d & 63) == 0 && (len & 63) == 0) {
        for (int64_t i = 0; i < len; i += 64)
            _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
        return;
    }
#elif defined(__AVX__)
    if (nt && ((uintptr_t)d & 31) == 0 && (len & 31) == 0) {
        for (int64_t i = 0; i < len; i += 32)
            _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
        return;
    }
#endif
    (void)nt;
    memcpy(d, s, (size_t)len);
}

static inline void fence(int nt) {
#if defined(__AVX512F__) || defined(__AVX__)
    if (nt) _mm_sfence(); /* streaming stores are visible to other threads after the fence */
#endif
    (void)nt;
}

/* out[b] = the `block` bytes at base + starts[b] * row_bytes, for b < n; dist: bytes read ahead
 * along the batch (0: one memcpy a block); nt: streaming stores */
void stride_copy_windows(const char *base, int64_t row_bytes, const int64_t *starts, int64_t n, int64_t block,
                         char *out, int64_t dist, int nt) {
    for (int64_t b = 0; b < n; b++) {
        const char *s = base + starts[b] * row_bytes;
        char *d = out + b * block;
        if (dist <= 0 && !nt) {
            memcpy(d, s, (size_t)block);
            continue;
        }
        for (int64_t i = 0; i < block; i += CHUNK) {
            if (dist > 0) read_ahead(ahead(base, row_bytes, starts, n, b, block, i + dist));
            copy_chunk(d + i, s + i, block - i < CHUNK ? block - i : CHUNK, nt);
        }
    }
    fence(nt);
}

/* float32 windows [n, t, f] from float32 (src_bf16 = 0) or bfloat16 rows of f values: each value
 * upcast (bf16: its bits are the top half of a float32, exact), then x - shift[j] (if shift), then
 * x * scale[j] (if scale), each rounded to float32; dist as above */
void stride_windows_f32(const void *base, int src_bf16, const int64_t *starts, int64_t n, int64_t t, int64_t f,
                        const float *shift, const float *scale, float *out, int64_t dist) {
    const int64_t elem = src_bf16 ? 2 : 4, row_bytes = f * elem, win = t * f, block = win * elem;
    for (int64_t b = 0; b < n; b++) {
        float *o = out + b * win;
        const char *s = (const char *)base + starts[b] * row_bytes;
        for (int64_t r = 0; r < t; r++) {
            if (dist > 0 && (r * row_bytes) % CHUNK < row_bytes)
                read_ahead(ahead((const char *)base, row_bytes, starts, n, b, block, r * row_bytes + dist));
            float *x = o + r * f;
            if (src_bf16) {
                const uint16_t *h = (const uint16_t *)(s + r * row_bytes);
                for (int64_t j = 0; j < f; j++) {
                    uint32_t bits = (uint32_t)h[j] << 16;
                    memcpy(x + j, &bits, 4);
                }
            } else {
                memcpy(x, s + r * row_bytes, (size_t)(f * 4));
            }
            if (shift != 0)
                for (int64_t j = 0; j < f; j++) x[j] = x[j] - shift[j];
            if (scale != 0)
                for (int64_t j = 0; j < f; j++) x[j] = x[j] * scale[j];
        }
    }
}

/* out[i] = the float32 (src_bf16 = 0) or bfloat16 value at base + rows[i] * stride_bytes, as float64 */
void stride_pick_f64(const char *base, int src_bf16, int64_t stride_bytes, const int64_t *rows, int64_t n,
                     double *out) {
    for (int64_t i = 0; i < n; i++) {
        const char *p = base + rows[i] * stride_bytes;
        float v;
        if (src_bf16) {
            uint32_t bits = (uint32_t)(*(const uint16_t *)p) << 16;
            memcpy(&v, &bits, 4);
        } else {
            memcpy(&v, p, 4);
        }
        out[i] = (double)v;
    }
}
