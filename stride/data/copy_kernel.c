/* stride's window copy: a batch of windows as B block copies, with the price rows of their targets.
 *
 * A window of T rows x F features is one contiguous block of a row-major table, so a batch is B block
 * copies. Random 16 KiB blocks read from DRAM lose bandwidth at each block's start. Measured in C on
 * the AMD EPYC 2-core host (benchmarks/data_gather_ab.c; docs/data.md has the table, three runs):
 * 4 MiB as random blocks of 4 / 16 / 64 / 256 KiB copies at 0.34-0.44 / 0.51-0.66 / 0.80-0.87 /
 * 1.04-1.07 of one contiguous copy, a fixed cost of about 0.7 us a block (about one DRAM latency per
 * 4 KiB page: the prefetchers restart at each page and a random block's pages are cold). What
 * recovers it: (1) hint the first two lines of every page of the window `ahead` on (prefetcht1, into
 * L2), so its pages stream when the copy reaches them: 0.60-0.77; (2) `lines`: copy pages as 12
 * interleaved streams (a line of each in turn, as glibc's large memcpy interleaves 4) while every line
 * of the next windows is hinted into L2: with 4 streams +25-35% over (1) alone (C, 2 runs of 150
 * shuffled rounds; from Python, hot destination, +33% twice: 8.4 -> 11.2 and 11.3 -> 15.1 GB/s), and
 * 12 streams take a further 16-17% (16 KiB windows) and 11-12% (8 KiB) off a batch's gather against 4
 * (from Python, 2 runs of 40 shuffled rounds, load 2-2.8; 8 and 16 streams close behind, 32 slower
 * than 4). Not kept: every line of the next window with a T0 hint (0.44-0.57: it holds L1's
 * miss slots), 4 whole windows copied interleaved 1 KiB at a time (0.41-0.42), huge pages for the
 * source (+8-11% over a store written in small pieces,
 * nothing over one written in large writes as stride's are, probably because the page cache then holds
 * it in large, physically contiguous folios whose TLB entries the core coalesces; and it costs a second
 * copy of the table). Streaming stores (`nt`) are a probe choice; into huge-page batch buffers they
 * took 6% (bf16) and 13% (float32) off a loader's batch here, a destination in cache included.
 * Built by stride/data/native.py with -ffp-contract=off: the float32 form rounds (x - shift) and then
 * * scale separately, exactly as numpy's two in-place ops, bit for bit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#define PAGE 4096
#define LINE 64
#define MAX_STREAMS 16 /* the most page streams `lines` may ask for (see copy_group_lines) */

static inline double value_f64(const char *p, int bf16) {
    float v;
    if (bf16) {
        uint32_t bits = (uint32_t)(*(const uint16_t *)p) << 16;
        memcpy(&v, &bits, 4);
    } else {
        memcpy(&v, p, 4);
    }
    return (double)v;
}

/* The targets' rows of a window, read right after its copy (its last row is then in cache): with logp,
 * the targets themselves, y[j] = (float)(logp[start + offs[j + 1]] - logp[start + offs[0]]) * scale[j],
 * j < m - 1 (logp: the price column's log, float64, made by numpy's log: the same bits as numpy's
 * targets); without, the prices as float64, o[j] = the float32 or bf16 value at
 * pbase + (start + offs[j]) * pstride, j < m, for numpy's log */
typedef struct {
    const char *pbase;
    int64_t pstride, m;
    const int64_t *offs;
    int bf16;
    const double *logp;
    const float *scale;
} picks_t;

static inline void pick(const picks_t *pk, int64_t start, void *out, int64_t b) {
    if (pk->logp) {
        float *y = (float *)out + b * (pk->m - 1);
        const double *l = pk->logp + start;
        for (int64_t j = 0; j + 1 < pk->m; j++) y[j] = (float)(l[pk->offs[j + 1]] - l[pk->offs[0]]) * pk->scale[j];
        return;
    }
    double *o = (double *)out + b * pk->m;
    for (int64_t j = 0; j < pk->m; j++) o[j] = value_f64(pk->pbase + (start + pk->offs[j]) * pk->pstride, pk->bf16);
}

/* hint the first two lines of every 4 KiB page of the `block` bytes at p (read, into L2) */
static inline void prefetch_heads(const char *p, int64_t block) {
    const char *e = p + block;
    for (const char *q = p; q < e; q = (const char *)(((uintptr_t)q + PAGE) & ~(uintptr_t)(PAGE - 1))) {
        __builtin_prefetch(q, 0, 2);
        if (q + LINE < e) __builtin_prefetch(q + LINE, 0, 2);
    }
}

/* the page heads of window w and its price rows (pk may be 0). The log-price column: one T1 hint, of its
 * last pick's line. Why not a T0 hint of each pick's line, as before: from a store past L3 (bf16, 1 GiB,
 * Intel Xeon KVM) that cost the loader 1.4x at 3 or 4 windows ahead (360-391 us a batch against 257-288
 * at 2 or 6; 0.59-0.60 of the copy ceiling), in every run, and moved to 2 ahead when the hints were T1;
 * with none it did not happen at any distance. One T1 hint: level with the old hints where they did no
 * harm (2 ahead, 0.998x; 256 MiB, 0.96-0.99x), and no distance slow (benchmarks/data_loader.py's store,
 * old and new kernels alternated in one process, 8-12 rounds of 100 batches). */
static inline void prefetch_window(const char *base, int64_t row_bytes, int64_t start, int64_t block,
                                   const picks_t *pk) {
    prefetch_heads(base + start * row_bytes, block);
    if (pk && pk->logp)
        __builtin_prefetch(pk->logp + start + pk->offs[pk->m - 1], 0, 2);
    else if (pk)
        for (int64_t j = 0; j < pk->m; j++) __builtin_prefetch(pk->pbase + (start + pk->offs[j]) * pk->pstride, 0, 3);
}

/* before window b: window b + ahead (and at the start, the first `ahead` windows) */
static inline void prefetch_ahead(const char *base, int64_t row_bytes, const int64_t *starts, int64_t n, int64_t b,
                                  int64_t block, int64_t ahead, const picks_t *pk) {
    if (ahead <= 0) return;
    if (b == 0)
        for (int64_t j = 0; j < ahead && j < n; j++) prefetch_window(base, row_bytes, starts[j], block, pk);
    if (b + ahead < n) prefetch_window(base, row_bytes, starts[b + ahead], block, pk);
}

/* one 64-byte line, with a streaming store where asked (and the destination is aligned) */
static inline void line(char *d, const char *s, int nt) {
#if defined(__AVX512F__)
    if (nt) {
        _mm512_stream_si512((void *)d, _mm512_loadu_si512((const void *)s));
        return;
    }
#endif
    (void)nt;
    memcpy(d, s, LINE);
}

/* the train normalisation in the copy: value k of a window (a float32 row-major block) is feature k % f;
 * esh[i] = shift[i % f], esc[i] = scale[i % f] for i < f + 16 (0: not applied), so the 16 values of any
 * 64-byte line whose first is feature j0 take esh[j0 .. j0 + 15] */
typedef struct {
    const float *esh, *esc;
    int64_t f;
} norm_t;

/* 16 float32 values: (x - esh[j0 + k]) then * esc[j0 + k], each rounded to float32 (numpy's two ops) */
static inline void line_norm(float *d, const float *s, const norm_t *nm, int64_t j0, int nt) {
#if defined(__AVX512F__)
    __m512 v = _mm512_loadu_ps(s);
    if (nm->esh) v = _mm512_sub_ps(v, _mm512_loadu_ps(nm->esh + j0));
    if (nm->esc) v = _mm512_mul_ps(v, _mm512_loadu_ps(nm->esc + j0));
    if (nt) _mm512_stream_ps(d, v); else _mm512_storeu_ps(d, v);
#else
    (void)nt;
    for (int k = 0; k < 16; k++) {
        float x = s[k];
        if (nm->esh) x = x - nm->esh[j0 + k];
        if (nm->esc) x = x * nm->esc[j0 + k];
        d[k] = x;
    }
#endif
}

/* windows b .. b+g-1 (g <= streams) copied together as up to `streams` pages 4 KiB apart, a line
 * of each in turn, while the same lines of the next g windows (b+g ..; those past n skipped) are hinted
 * into L2. Why: the hardware prefetchers stop at every 4 KiB page and a random window's pages are cold,
 * so one page at a time waits at each page start; many pages in flight at once with the next windows'
 * lines already requested keep the memory busy. A window of `streams` pages or more is its own group
 * (its pages `streams` at a time); shorter ones go in groups of streams / pages (at 12 streams, 16 KiB
 * windows in threes, 8 KiB in sixes). 4 streams, as glibc's large memcpy, left 16-17% (16 KiB) and
 * 11-12% (8 KiB windows) on the table here against 12 (the header). The part of a window past its last
 * whole 4 KiB (all of a window under 4 KiB) is one memcpy. prefetcht1: a T0 hint of every line held
 * L1's miss slots and was slower. */
static inline void copy_group_lines(char *out, const char *base, int64_t row_bytes, const int64_t *starts,
                                    int64_t b, int64_t g, int64_t n, int64_t block, int nt, int64_t streams,
                                    const norm_t *nm) {
    const char *s[MAX_STREAMS], *nx[MAX_STREAMS];
    char *d[MAX_STREAMS];
    int64_t jj[MAX_STREAMS]; /* with nm: the feature of the next line's first value, per page of a pass */
    const int64_t full = block / PAGE; /* whole pages a window */
    for (int64_t j = 0; j < g; j++) {
        s[j] = base + starts[b + j] * row_bytes;
        nx[j] = b + g + j < n ? base + starts[b + g + j] * row_bytes : 0;
        d[j] = out + (b + j) * block;
        nt = nt && ((uintptr_t)d[j] & 63) == 0;
    }
    const int64_t per = streams / g; /* pages of each window in a pass */
    for (int64_t p0 = 0; p0 < full; p0 += per) {
        const int64_t k = full - p0 < per ? full - p0 : per; /* pages of each window in this pass */
        if (nm)
            for (int64_t p = 0; p < k; p++) jj[p] = (p0 + p) * (PAGE / 4) % nm->f;
        for (int64_t i = 0; i < PAGE; i += LINE) {
            for (int64_t j = 0; j < g; j++)
                for (int64_t p = 0; p < k; p++) {
                    const int64_t o = (p0 + p) * PAGE + i;
                    if (nx[j]) __builtin_prefetch(nx[j] + o, 0, 2);
                    if (nm)
                        line_norm((float *)(d[j] + o), (const float *)(s[j] + o), nm, jj[p], nt);
                    else
                        line(d[j] + o, s[j] + o, nt);
                }
            if (nm)
                for (int64_t p = 0; p < k; p++)
                    for (jj[p] += LINE / 4; jj[p] >= nm->f;) jj[p] -= nm->f;
        }
    }
    for (int64_t j = 0; j < g; j++) /* the last part of a page */
        if (full * PAGE < block) {
            if (nx[j])
                for (int64_t i = full * PAGE; i < block; i += LINE) __builtin_prefetch(nx[j] + i, 0, 2);
            memcpy(d[j] + full * PAGE, s[j] + full * PAGE, (size_t)(block - full * PAGE));
            if (nm) {
                float *x = (float *)(d[j] + full * PAGE);
                for (int64_t e = 0, c = full * (PAGE / 4) % nm->f; e < (block - full * PAGE) / 4; e++) {
                    if (nm->esh) x[e] = x[e] - nm->esh[c];
                    if (nm->esc) x[e] = x[e] * nm->esc[c];
                    if (++c == nm->f) c = 0;
                }
            }
        }
}

static inline void copy_block(char *d, const char *s, int64_t len, int nt) {
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

/* the first b whose start is outside [0, max_start], or -1 */
static inline int64_t outside(const int64_t *starts, int64_t n, int64_t max_start) {
    for (int64_t b = 0; b < n; b++)
        if (starts[b] < 0 || starts[b] > max_start) return b;
    return -1;
}

/* the windows as stride_copy_windows (starts already checked), normalised in the copy where nm is given
 * (float32 rows; lines > 0) */
static void copy_windows(const char *base, int64_t row_bytes, const int64_t *starts, int64_t n, int64_t block,
                         char *out, int64_t ahead, int nt, const picks_t *pk, void *picks, int lines,
                         const norm_t *nm) {
    const int64_t streams = lines < 0 ? 0 : lines < MAX_STREAMS ? lines : MAX_STREAMS, full = block / PAGE;
    const int64_t group = streams > 0 && full > 0 && full < streams ? streams / full : 1;
    for (int64_t b = 0; b < n; b += group) {
        const int64_t g = n - b < group ? n - b : group;
        for (int64_t j = 0; j < g; j++) prefetch_ahead(base, row_bytes, starts, n, b + j, block, ahead, pk);
        if (streams > 0)
            copy_group_lines(out, base, row_bytes, starts, b, g, n, block, nt, streams, nm);
        else
            copy_block(out + b * block, base + starts[b] * row_bytes, block, nt);
        if (pk)
            for (int64_t j = 0; j < g; j++) pick(pk, starts[b + j], picks, b + j);
    }
    fence(nt);
}

/* out[b] = the `block` bytes at base + starts[b] * row_bytes, for b < n, if every start is in
 * [0, max_start] (else nothing is copied: returns the first b outside, otherwise -1); ahead: windows
 * whose page heads are hinted ahead (0: none); nt: streaming stores; pk (may be 0): the targets'
 * rows (picks_t), into picks; lines: pages copied at once as interleaved streams, every line of the next
 * windows hinted into L2 meanwhile (0: one window after another; at most MAX_STREAMS) */
int64_t stride_copy_windows(const char *base, int64_t row_bytes, const int64_t *starts, int64_t n, int64_t max_start,
                            int64_t block, char *out, int64_t ahead, int nt, const picks_t *pk, void *picks,
                            int lines) {
    int64_t bad = outside(starts, n, max_start);
    if (bad >= 0) return bad;
    copy_windows(base, row_bytes, starts, n, block, out, ahead, nt, pk, picks, lines, 0);
    return -1;
}

/* float32 windows [n, t, f] from float32 (src_bf16 = 0) or bfloat16 rows of f values: each value
 * upcast (bf16: its bits are the top half of a float32, exact), then x - shift[j] (if shift), then
 * x * scale[j] (if scale), each rounded to float32; max_start, ahead, pk, picks and the result as above;
 * lines: float32 rows are copied as stride_copy_windows copies them (page streams, nt: streaming stores)
 * and normalised line by line in the copy; bf16 rows (or lines 0) row by row, the next window's rows
 * hinted into L2 as each row copies (any lines > 0). Why: row by row with the next window's rows hinted
 * the normalised float32 batch took 1.35x the CPU of the plain copy; in the page-stream copy with
 * streaming stores 17% less than row by row, 1.12x the plain copy (371 -> 307 us a batch of 256 x 128
 * x 32, from Python, 30 shuffled rounds, load 3.4). Without streaming stores the line form was 13%
 * slower than row by row, and normalising each group in place after its copy 18% slower. */
int64_t stride_windows_f32(const void *base, int src_bf16, const int64_t *starts, int64_t n, int64_t max_start,
                           int64_t t, int64_t f, const float *shift, const float *scale, float *out, int64_t ahead,
                           const picks_t *pk, void *picks, int lines, int nt) {
    const int64_t elem = src_bf16 ? 2 : 4, row_bytes = f * elem, win = t * f;
    int64_t bad = outside(starts, n, max_start);
    if (bad >= 0) return bad;
    if (!src_bf16 && lines > 0) { /* float32 rows: the page-stream copy, normalised line by line */
        float *ext = malloc(sizeof(float) * 2 * (size_t)(f + 16));
        if (ext) {
            for (int64_t i = 0; i < f + 16; i++) {
                ext[i] = shift ? shift[i % f] : 0.0f;
                ext[f + 16 + i] = scale ? scale[i % f] : 1.0f;
            }
            const norm_t nm = {shift ? ext : 0, scale ? ext + f + 16 : 0, f};
            copy_windows((const char *)base, row_bytes, starts, n, t * row_bytes, (char *)out, ahead, nt, pk,
                         picks, lines, &nm);
            free(ext);
            return -1;
        }
    }
    for (int64_t b = 0; b < n; b++) {
        prefetch_ahead((const char *)base, row_bytes, starts, n, b, t * row_bytes, ahead, pk);
        float *o = out + b * win;
        const char *s = (const char *)base + starts[b] * row_bytes;
        const char *next = lines && b + 1 < n ? (const char *)base + starts[b + 1] * row_bytes : 0;
        for (int64_t r = 0; r < t; r++) {
            float *x = o + r * f;
            if (next) /* the next window's row r, into L2 (as copy_group_lines) */
                for (int64_t l = 0; l < row_bytes; l += LINE) __builtin_prefetch(next + r * row_bytes + l, 0, 2);
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
        if (pk) pick(pk, starts[b], picks, b);
    }
    return -1;
}

/* y[i, j] = (float)(logp[i, j + 1] - logp[i, 0]) * scale[j] for i < n, j < m - 1: the targets from the
 * log prices, rounded as numpy's (p[:, 1:] - p[:, :1]).astype(float32) * scale rounds them */
void stride_log_returns(const double *logp, int64_t n, int64_t m, const float *scale, float *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j + 1 < m; j++) y[i * (m - 1) + j] = (float)(logp[i * m + j + 1] - logp[i * m]) * scale[j];
}

/* starts[i] = the first row of window ids[i] over k ranges of end rows (range r: ends lo[r] ..,
 * window ids cum[r] .. cum[r + 1] - 1), i.e. lo[r] + ids[i] - cum[r] - (t - 1); returns the first
 * i whose id is outside [0, cum[k]), or -1 */
int64_t stride_window_starts(const int64_t *ids, int64_t n, const int64_t *lo, const int64_t *cum, int64_t k,
                             int64_t t, int64_t *starts) {
    for (int64_t i = 0; i < n; i++) {
        int64_t id = ids[i];
        if (id < 0 || id >= cum[k]) return i;
        int64_t a = 0, z = k; /* the last r with cum[r] <= id (searchsorted(cum, id, 'right') - 1) */
        while (z - a > 1) {
            int64_t mid = (a + z) / 2;
            if (cum[mid] <= id) a = mid; else z = mid;
        }
        starts[i] = lo[a] + (id - cum[a]) - (t - 1);
    }
    return -1;
}

/* out[i] = the float32 (src_bf16 = 0) or bfloat16 value at base + rows[i] * stride_bytes, as float64 */
void stride_pick_f64(const char *base, int src_bf16, int64_t stride_bytes, const int64_t *rows, int64_t n,
                     double *out) {
    for (int64_t i = 0; i < n; i++) out[i] = value_f64(base + rows[i] * stride_bytes, src_bf16);
}

/* One batch in one call: what RowWindows.gather did in three (window ids -> first rows, the copy with the
 * targets, and Python between them). Why: each Python step after a 2-4 MiB copy finds its code and data
 * evicted from L2, so the few microseconds it takes warm become tens: the bf16 batch (256 x 128 x 32)
 * spent 52 us of Python around a 182 us copy (Intel Xeon, KVM, 40 shuffled rounds). */
typedef struct {
    const char *base;       /* the table's rows */
    int64_t row_bytes, max_start, t, f;
    int64_t ahead, stream, lines, l2; /* stream < 0: streaming stores for batches of at least l2 bytes */
    int64_t convert, src_bf16;        /* convert: float32 windows (stride_windows_f32) */
    const float *shift, *scale;       /* with convert (0: not applied) */
    const int64_t *lo, *cum;          /* k ranges of end rows and their first window ids (stride_window_starts) */
    int64_t k;
    const picks_t *pk;                /* the targets' rows (0: none) */
} gather_t;

/* windows ids[a .. z) of a batch of n into their rows of out (and of picks), as stride_copy_windows, or
 * stride_windows_f32 with convert; returns the first i in [a, z) whose id is outside [0, cum[k]) or whose
 * window leaves the table (nothing copied), -2 if memory ran out, or -1 */
int64_t stride_gather_ids(const gather_t *g, const int64_t *ids, int64_t n, int64_t a, int64_t z, char *out,
                          char *picks) {
    const int64_t m = z - a, out_elem = g->convert ? 4 : (g->src_bf16 ? 2 : 4), win_out = g->t * g->f * out_elem;
    int64_t stack[512];
    int64_t *starts = m <= 512 ? stack : malloc(sizeof(int64_t) * (size_t)m);
    if (!starts) return -2;
    int64_t r = stride_window_starts(ids + a, m, g->lo, g->cum, g->k, g->t, starts);
    if (r < 0) {
        const int nt = g->stream >= 0 ? (int)g->stream : n * win_out >= g->l2;
        char *o = out + a * win_out, *p = 0;
        if (g->pk && picks)
            p = picks + a * (g->pk->logp ? (g->pk->m - 1) * (int64_t)sizeof(float) : g->pk->m * (int64_t)sizeof(double));
        const picks_t *pk = p ? g->pk : 0;
        r = g->convert ? stride_windows_f32(g->base, (int)g->src_bf16, starts, m, g->max_start, g->t, g->f, g->shift,
                                            g->scale, (float *)o, g->ahead, pk, p, (int)g->lines, nt)
                       : stride_copy_windows(g->base, g->row_bytes, starts, m, g->max_start, g->t * g->row_bytes, o,
                                             g->ahead, nt, pk, p, (int)g->lines);
    }
    if (starts != stack) free(starts);
    return r >= 0 ? a + r : r;
}
